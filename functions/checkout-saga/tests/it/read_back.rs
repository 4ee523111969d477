//! The refund step's read-back (the core's `payments_core::saga::read_back`, which the protocol model runs
//! too): what the PaymentIntent says after a refused refund is recorded on the payment whatever the saga
//! decides, so the person the impossibility is escalated to reads the PSP's truth on it.

use crate::support::*;
use checkout_saga::orders;
use checkout_saga::runner::Settings;
use checkout_saga::saga::SagaStatus;
use psp::StripeApi;
use shared::clock::WallClock;
use std::time::Duration;

/// Part of the charge was refunded at the PSP (the dashboard), the customer cancels, and the saga's refund of
/// the rest is refused for good: the compensation ends as "refund impossible", and the payment records the
/// part the read-back shows refunded.
#[tokio::test]
async fn a_refused_refund_records_what_its_read_back_shows_before_it_ends_impossible() {
    let w = world().await;
    let id = order();
    let captured = w
        .runner()
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    let payment_id = captured.payment_id.clone().expect("payment");
    let reference = captured.psp_reference.clone().expect("reference");
    let amount = captured.checkout.money.amount_minor();
    let part = amount / 2;
    w.psp()
        .refund("dashboard-refund", &reference, Some(part))
        .await
        .expect("a partial refund at the PSP");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.expect("cancel");
    let runner = w.runner_with(
        w.ctx.client.clone(),
        Quirky(w.psp(), Quirk::RefundsRefused("charge_not_refundable")),
        Settings {
            clock: WallClock::ahead(Duration::from_secs(600)),
            ..settings()
        },
    );
    let done = runner.resume(&id).await.expect("resume").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(
        done.refund_impossible.as_deref(),
        Some("refund impossible: refused by the PSP")
    );
    let payment = w.ctx.store.get(&payment_id).await.expect("read").expect("payment");
    assert_eq!(payment.refunded_minor, part, "the read-back is recorded: {payment:?}");
}
