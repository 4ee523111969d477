//! Checkouts with the longest ids our types allow, against the simulator with Stripe's limits on (metadata
//! keys and values, `Idempotency-Key` length, unknown parameters, the `return_url` rule): the keys and
//! metadata the saga derives from them stay inside Stripe's limits, so Stripe takes the charge and the refund.

use crate::support::*;
use checkout_saga::saga::SagaStatus;
use shared::{OrderId, PaymentStatus};

/// An order id of the maximum length (128 characters), unique per test.
fn longest_order() -> OrderId {
    let id = format!("order-{}-", uuid::Uuid::new_v4().simple());
    OrderId::parse(format!("{id:x<128}")).unwrap()
}

#[tokio::test]
async fn a_checkout_with_the_longest_order_id_is_charged_and_completed() {
    let w = world().await;
    let runner = w.runner_for("checkout-api");
    let id = longest_order();
    assert_eq!(id.as_str().len(), 128);
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending, "Stripe took the charge");
    w.inbox_deliver(&w.runner_for("checkout-events"), &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Captured);
    w.assert_charged_once(&done, 0);
}

#[tokio::test]
async fn a_checkout_with_the_longest_order_id_is_refunded_when_cancelled_after_capture() {
    let w = world().await;
    let id = longest_order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(
        checkout_saga::orders::cancel(&w.ctx.client, &w.ctx.table, &id)
            .await
            .unwrap(),
        checkout_saga::orders::Cancel::Cancelled
    );
    w.inbox_deliver(&w.runner_for("checkout-events"), &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated, "the refund was accepted");
    assert_eq!((done.captured, done.refunded_minor), (true, 2500));
    w.assert_charged_once(&done, 2500);
}
