//! The deadlines of the review's gaps (issue 25 items 1 and 4): `stock_reserved` and `cancelling_payment` past
//! theirs, a search Stripe refuses for good a day after the charge, a saga whose every resume is cut or
//! deferred past its deadline, and a deployment fault that outlasts the charge's deadline. Each ends, or is
//! set aside after exactly one escalation, instead of being deferred without end.

use super::{ahead, cancelled_after_capture, escalations_of};
use crate::support::*;
use checkout_saga::runner::{Runner, Settings};
use checkout_saga::saga::{Saga, SagaStatus, Started};
use checkout_saga::{inventory, orders, sweeper};
use integration_tests::TestContext;
use psp::Psps;
use shared::clock::WallClock;
use shared::{EventKind, OrderId, PaymentStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// A deadline a sweep reaches: its resumes of a hanging PSP call are cut there.
fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(2)
}

/// A saga saved in `stock_reserved` whose invocation then crashed (before the payment was created).
async fn reserved_then_crashed(w: &World, id: &OrderId) {
    let sagas = w.runner().sagas;
    let now = shared::clock::now_ms();
    let (saga, event) = Saga::<Started>::begin(id.clone(), w.checkout("pm_succeeded", 1), now, 120_000);
    let create = orders::create(&w.ctx.table, id, now).unwrap();
    sagas.save(&saga, &event, vec![create]).await.expect("started");
    let (saga, event) = saga.stock_reserved(now);
    let reserve = inventory::reserve(&w.ctx.table, &w.sku, 1).unwrap();
    sagas.save(&saga, &event, vec![reserve]).await.expect("reserved");
}

/// `stock_reserved` past its deadline (an hour) is compensated: the stock goes back and no payment is
/// created (so nothing is charged), without an escalation.
#[tokio::test]
async fn stock_reserved_past_its_deadline_releases_the_stock_and_creates_no_payment() {
    let w = world().await;
    let id = order();
    reserved_then_crashed(&w, &id).await;
    assert_eq!(w.stock().await, STOCK - 1);
    let hour_later = ahead(&w, w.psp(), HOUR + MINUTE);
    sweeper::sweep(&hour_later, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert!(
        done.payment_id.is_none(),
        "no payment created past the deadline: {done:?}"
    );
    let failure = done.failure.expect("the reason is kept");
    assert!(failure.reason.contains("no payment created"), "{failure:?}");
    assert_eq!(w.stock().await, STOCK);
    assert_eq!(
        w.log(&id).await,
        [
            (K::SagaStarted, S::ReserveStock),
            (K::StockReserved, S::ReserveStock),
            (K::StepFailed, S::Charge),
            (K::StockReleased, S::ReserveStock),
        ]
    );
    assert_eq!(escalations_of(&w, &id).await, 0, "compensated, not escalated");
}

/// A cancel that cannot be made (the PaymentIntent is `processing`, which Stripe cannot cancel) waits; past
/// the compensation deadline (a day) a person is told once and the saga set aside: later sweeps and resumes
/// escalate no more, and the stock stays reserved while the money may still be taken.
#[tokio::test]
async fn cancelling_payment_past_its_deadline_is_escalated_once_and_set_aside() {
    let w = world_with_slow(TestContext::new().await, Duration::from_secs(3600)).await;
    let id = order();
    let waiting = w
        .runner()
        .start(id.clone(), w.checkout("pm_slow_processing", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending, "{waiting:?}");
    let cancelling = w.runner().cancel_by_customer(&id).await.expect("cancel").expect("saga");
    assert_eq!(cancelling.status, SagaStatus::CancellingPayment, "{cancelling:?}");
    assert_eq!(escalations_of(&w, &id).await, 0, "waiting is not failing");

    let day_later = ahead(&w, w.psp(), 25 * HOUR);
    for _ in 0..2 {
        sweeper::sweep(&day_later, Duration::ZERO, 100, later())
            .await
            .expect("sweep");
        let still = day_later.resume(&id).await.expect("resume").expect("saga");
        assert_eq!(still.status, SagaStatus::CancellingPayment);
    }
    assert_eq!(escalations_of(&w, &id).await, 1, "escalated once past the deadline");
    let aside = w.saga(&id).await;
    assert!(aside.set_aside.is_some(), "{aside:?}");
    assert!(w.log(&id).await.contains(&(K::SagaSetAside, S::Charge)));
    assert_eq!(
        w.stock().await,
        STOCK - 1,
        "the stock waits while the money may be taken"
    );
}

/// A charge whose answer never came (the PaymentIntent was made), then a day of silence: Stripe has forgotten
/// the charge's key, and its search for the first PaymentIntent is refused for good. An hour of sweeps a
/// minute apart: the refusal is escalated once and the saga set aside, searched again only on the set-aside
/// schedule (5, 10, 20, 40 minutes after), never on every sweep. The world and the order, for more sweeps.
async fn a_search_refused_a_day_later(charge_deadline: Duration) -> (World, OrderId) {
    let w = world().await;
    let id = order();
    let hang = w.runner_over(Quirky(w.psp(), Quirk::ChargeAnswersHang));
    let cut = tokio::time::timeout(
        Duration::from_secs(2),
        hang.start(id.clone(), w.checkout("pm_succeeded", 1)),
    )
    .await;
    assert!(cut.is_err(), "cut while the charge's answer hangs");
    let stuck = w.saga(&id).await;
    assert_eq!(stuck.status, SagaStatus::Charging);
    let payment = stuck.payment_id.expect("payment");
    assert_eq!(
        w.sim.ledger.intents_for(payment.as_str()).len(),
        1,
        "the PSP did charge"
    );
    let day = 25 * HOUR;
    w.sim.ledger.age_keys(day);

    let searches = Arc::new(AtomicUsize::new(0));
    for minute in 0..=60 {
        sweep_refusing_search(&w, day + minute * MINUTE, charge_deadline, &searches).await;
    }
    assert_eq!(escalations_of(&w, &id).await, 1, "the refusal is escalated once");
    let aside = w.saga(&id).await;
    assert!(aside.set_aside.is_some(), "{aside:?}");
    let calls = searches.load(Ordering::SeqCst);
    assert!(
        (1..=8).contains(&calls),
        "{calls} searches in an hour: the set-aside schedule's, not one a sweep"
    );
    (w, id)
}

/// One sweep `after` from now by a runner whose every search is refused for good (counted in `searches`).
async fn sweep_refusing_search(w: &World, after: Duration, charge_deadline: Duration, searches: &Arc<AtomicUsize>) {
    let refusing = Quirky(w.psp(), Quirk::SearchRefused(searches.clone()));
    let settings = Settings {
        clock: WallClock::ahead(after),
        charge_deadline,
        ..settings()
    };
    let runner = w.runner_with(w.ctx.client.clone(), refusing, settings);
    sweeper::sweep(&runner, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
}

/// The charge given up at its deadline (10 minutes): the cancel's search for what it made is refused.
#[tokio::test]
async fn a_search_refused_a_day_later_by_the_cancel_is_escalated_once_then_set_aside() {
    a_search_refused_a_day_later(Settings::default().charge_deadline).await;
}

/// A charge deadline longer than Stripe's key (two days): the charge's own search comes first, refused.
#[tokio::test]
async fn a_search_refused_a_day_later_by_the_charge_is_escalated_once_then_set_aside() {
    a_search_refused_a_day_later(48 * HOUR).await;
}

/// The charge's own search refused for good (escalated once, set aside), then the charge's deadline passes
/// on a later look: the charge is given up and the cancel's search is refused again. Giving up at a deadline
/// is no news that healed anything, so the saga stays set aside: one escalation in all, not one per step
/// (the protocol model's finding, `a_refused_search_is_escalated_once_...`).
#[tokio::test]
async fn a_refused_search_then_the_charge_deadline_is_escalated_once() {
    let charge_deadline = 48 * HOUR;
    let (w, id) = a_search_refused_a_day_later(charge_deadline).await;
    let past_the_charge = 25 * HOUR + charge_deadline;
    let searches = Arc::new(AtomicUsize::new(0));
    for hours in [1, 2, 4, 8, 30] {
        sweep_refusing_search(&w, past_the_charge + hours * HOUR, charge_deadline, &searches).await;
    }
    let aside = w.saga(&id).await;
    assert_eq!(aside.status, SagaStatus::CancellingPayment, "given up: {aside:?}");
    let failure = aside.failure.clone().expect("the reason is kept");
    assert!(failure.reason.contains("no answer to the charge"), "{failure:?}");
    assert!(searches.load(Ordering::SeqCst) >= 1, "the cancel searched");
    assert_eq!(escalations_of(&w, &id).await, 0, "no escalation after the first");
    assert!(aside.set_aside.is_some(), "still set aside: {aside:?}");
    let set_aside = w
        .log(&id)
        .await
        .iter()
        .filter(|(kind, _)| *kind == K::SagaSetAside)
        .count();
    assert_eq!(set_aside, 1, "set aside once");
}

/// Sweeps 25, 26 and 30 hours later (past a day's compensation deadline, then on), each by the runner
/// `at` makes for that time and until the deadline `until` gives.
async fn sweeps_past_the_compensation_deadline<P: Psps>(
    at: impl Fn(Duration) -> Runner<P>,
    until: fn() -> tokio::time::Instant,
) {
    for hours in [25, 26, 30] {
        sweeper::sweep(&at(hours * HOUR), Duration::ZERO, 100, until())
            .await
            .expect("sweep");
    }
}

/// A refund that never answers: every resume is cut at the invocation's deadline. Past the compensation
/// deadline (a day) the sweeper must act on it (one escalation, set aside), not defer it on every run.
#[tokio::test]
async fn a_saga_cut_on_every_resume_past_its_deadline_is_escalated_once() {
    let w = world().await;
    let id = cancelled_after_capture(&w).await;
    let hanging = |after: Duration| ahead(&w, Quirky(w.psp(), Quirk::RefundsHang), after);
    // Past the payment's deadline the saga reads the capture and refunds; the refund hangs.
    sweeper::sweep(&hanging(10 * MINUTE), Duration::ZERO, 100, soon())
        .await
        .expect("sweep");
    assert_eq!(w.saga(&id).await.status, SagaStatus::RefundingPayment);
    assert_eq!(escalations_of(&w, &id).await, 0, "cut is not failing");
    sweeps_past_the_compensation_deadline(hanging, soon).await;
    assert_eq!(escalations_of(&w, &id).await, 1, "acted on once past its deadline");
    let aside = w.saga(&id).await;
    assert_eq!(aside.status, SagaStatus::RefundingPayment);
    assert!(aside.set_aside.is_some(), "{aside:?}");
}

/// Our API key refused (a deployment fault) while the saga refunds: it waits (never taken for the PSP's
/// refusal), but past the compensation deadline a person is told once and the saga set aside; once the key
/// is right, an operator's retry finishes it.
#[tokio::test]
async fn a_saga_deferred_by_a_refused_key_past_its_deadline_is_escalated_once() {
    let w = world().await;
    let id = cancelled_after_capture(&w).await;
    let rolled = |after: Duration| ahead(&w, w.psp_with_rolled_key(), after);
    let waiting = rolled(10 * MINUTE).resume(&id).await.expect("resume").expect("saga");
    assert_eq!(waiting.status, SagaStatus::RefundingPayment, "{waiting:?}");
    assert_eq!(escalations_of(&w, &id).await, 0, "a key problem defers");
    sweeps_past_the_compensation_deadline(rolled, later).await;
    assert_eq!(escalations_of(&w, &id).await, 1, "acted on once past its deadline");
    assert!(w.saga(&id).await.set_aside.is_some());
    let done = ahead(&w, w.psp(), 31 * HOUR)
        .resume(&id)
        .await
        .expect("retry")
        .expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    w.assert_charged_once(&done, 2500);
}

/// Our API key refused from the first charge on, for longer than the charge's deadline (10 minutes): the
/// checkout is given up (nothing was made at the PSP, so that is safe for money), recorded as a deployment
/// fault and not as the customer's decline, on the saga and on its failed payment, and alarmed once (one
/// escalation). Its cancel waits for the key; once it is right the checkout is compensated.
#[tokio::test]
async fn a_deployment_fault_past_the_charge_deadline_is_recorded_as_ours_and_alarmed_once() {
    let w = world().await;
    let id = order();
    let rolled = |after: Duration| ahead(&w, w.psp_with_rolled_key(), after);
    let waiting = rolled(Duration::ZERO)
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::Charging, "deferred, not refused");
    for minutes in [11, 20, 40] {
        sweeper::sweep(&rolled(minutes * MINUTE), Duration::ZERO, 100, later())
            .await
            .expect("sweep");
    }
    let given_up = w.saga(&id).await;
    assert_eq!(given_up.status, SagaStatus::CancellingPayment, "{given_up:?}");
    let reason = given_up.failure.expect("reason").reason;
    assert!(
        reason.contains("deployment fault") && reason.contains("not the customer's decline"),
        "{reason}"
    );
    assert!(!reason.contains("sk_test"), "no key in the reason: {reason}");
    assert_eq!(escalations_of(&w, &id).await, 1, "alarmed once");

    let done = ahead(&w, w.psp(), HOUR)
        .resume(&id)
        .await
        .expect("retry")
        .expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Failed);
    let payment = done.payment_id.as_ref().expect("payment");
    assert!(w.sim.ledger.intents_for(payment.as_str()).is_empty(), "never charged");
    let events = w.ctx.events(payment).await.expect("events");
    let failed = events
        .iter()
        .find(|e| e.kind == EventKind::PaymentFailed)
        .expect("failed");
    let why = failed.reason.as_deref().unwrap_or_default();
    assert!(why.contains("deployment fault"), "{why}");
    assert_eq!(w.stock().await, STOCK);
    assert_eq!(escalations_of(&w, &id).await, 0, "no second escalation");
}
