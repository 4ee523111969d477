//! A refund Stripe reports failed (issue 23 item 7): recovery gives the money back again with a new key per
//! failure, `<payment>:refund-failure-<n>`, records the answer as the report answering that give-back, and
//! never refunds twice for one failure, also when an earlier run crashed after its refund call. And the saga's
//! own refund is a compensation only once Stripe says `succeeded`.

use crate::support::*;
use checkout_saga::orders;
use checkout_saga::saga::{SagaRecord, SagaStatus};
use checkout_saga::sweeper;
use psp::StripeApi;
use recovery::Reconciled;
use shared::{
    Channel, CorrelationId, EventKind, GiveBack, Observation, Outcome, PaymentStatus, RefundEntry, RefundReport,
    RefundStatus,
};
use std::time::Duration;

/// A refund report for `refund_id` as a `refund.failed` webhook brings it.
fn failed_refund(refund_id: &str, amount_minor: u64, event: &str) -> Observation {
    let report = RefundReport {
        refund: RefundEntry {
            refund_id: refund_id.into(),
            amount_minor,
            status: RefundStatus::Failed,
        },
        failure_reason: Some("expired_or_canceled_card".into()),
        answers_give_back: None,
    };
    let correlation = CorrelationId::parse("corr-refund-failed").unwrap();
    Observation::new(Channel::Webhook, Outcome::Refund(report), correlation)
        .with_event(shared::PspEventId::parse(event).unwrap(), shared::clock::now_ms())
}

/// A checkout whose charge succeeded at the PSP and that recovery recorded captured.
async fn captured(w: &World) -> SagaRecord {
    let runner = w.runner();
    let record = runner.start(order(), w.checkout("pm_silent", 1)).await.expect("start");
    let id = record.payment_id.clone().expect("payment");
    let reconciled = runner
        .recovery
        .reconcile(&id, CorrelationId::parse("corr-recovery").unwrap())
        .await
        .expect("reconcile");
    assert_eq!(reconciled, Reconciled::Applied(EventKind::PaymentCaptured));
    record
}

#[tokio::test]
async fn a_failed_refund_is_given_back_once_under_its_failures_key_even_after_a_crash() {
    let w = world().await;
    let runner = w.runner();
    let record = captured(&w).await;
    let id = record.payment_id.clone().expect("payment");
    let reference = record.psp_reference.clone().expect("a PaymentIntent");
    let amount = fixture_money().amount_minor();
    // A refund made in the Dashboard fails: the money is ours again, to give back.
    let outcome = w
        .ctx
        .store
        .finalize(&id, &failed_refund("re_dashboard", amount, "evt_rf_1"), None)
        .await
        .expect("finalize");
    assert_eq!(outcome.result, shared::FinalizeResult::Applied(EventKind::RefundFailed));
    assert_eq!(
        outcome.payment.give_back,
        Some(GiveBack {
            failure: 1,
            amount_minor: amount
        })
    );
    // A recovery run made the refund and crashed before recording the answer.
    let key = format!("{id}:refund-failure-1");
    let made = w.psp().refund(&key, &reference, Some(amount)).await.expect("refund");

    let correlation = || CorrelationId::parse("corr-recovery").unwrap();
    assert_eq!(
        runner.recovery.reconcile(&id, correlation()).await.expect("reconcile"),
        Reconciled::Applied(EventKind::PaymentRefunded)
    );
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.refunded_minor, p.give_back, p.refund_failures),
        (PaymentStatus::Refunded, amount, None, 1)
    );
    assert!(
        p.refunds
            .iter()
            .any(|r| r.refund_id == made.id && r.status == RefundStatus::Succeeded),
        "the crashed run's refund, answered again under the same key: {:?}",
        p.refunds
    );
    assert_eq!(
        runner.recovery.reconcile(&id, correlation()).await.expect("again"),
        Reconciled::NotOpen
    );
    let intents = w.sim.ledger.intents_for(id.as_str());
    assert_eq!(
        intents[0]["latest_charge"]["amount_refunded"].as_u64(),
        Some(amount),
        "given back once"
    );
    let events = w.ctx.events(&id).await.expect("events");
    let last = events.last().expect("events");
    assert_eq!((last.kind, last.path), (EventKind::PaymentRefunded, Channel::Recovery));
    assert_eq!(last.refund.as_ref().map(|r| r.amount_minor), Some(amount));
}

/// A give-back Stripe would refuse (`amount_too_large`: all of the charge was refunded elsewhere, its webhooks
/// lost): recovery reads the PaymentIntent's refunds before it gives back, records the one it missed, and the
/// payment is refunded; no refund is asked for, nothing is left open.
#[tokio::test]
async fn a_give_back_of_money_refunded_elsewhere_records_that_refund_instead() {
    let w = world().await;
    let runner = w.runner();
    let record = captured(&w).await;
    let id = record.payment_id.clone().expect("payment");
    let reference = record.psp_reference.clone().expect("a PaymentIntent");
    let amount = fixture_money().amount_minor();
    w.psp().refund("elsewhere", &reference, None).await.expect("refund");
    w.ctx
        .store
        .finalize(&id, &failed_refund("re_other", amount, "evt_rf_2"), None)
        .await
        .expect("finalize");
    let correlation = CorrelationId::parse("corr-recovery").unwrap();
    assert_eq!(
        runner.recovery.reconcile(&id, correlation).await.expect("reconcile"),
        Reconciled::Applied(EventKind::PaymentRefunded)
    );
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert!(!p.is_open() && p.give_back.is_none(), "{p:?}");
    assert_eq!(
        w.sim.ledger.refunds_of(reference.as_str()).len(),
        1,
        "no give-back asked"
    );
}

/// A give-back Stripe refuses for good (`charge_disputed`): each refusal is recorded as that give-back's
/// failed attempt (`refused:<key>`), the next failure's key follows, and past MAX_GIVE_BACKS the payment waits
/// for a person (`ForOperator`, open): a bounded number of refund calls, never the same refused call on every
/// look.
#[tokio::test]
async fn a_give_back_the_psp_refuses_ends_with_an_operator_after_the_bound_without_a_loop() {
    let w = world().await;
    let runner = w.runner();
    let record = captured(&w).await;
    let id = record.payment_id.clone().expect("payment");
    let amount = fixture_money().amount_minor();
    let charge = w.sim.ledger.intents_for(id.as_str())[0]["latest_charge"]["id"]
        .as_str()
        .expect("charge")
        .to_owned();
    w.sim.ledger.dispute(&charge, "needs_response").expect("dispute");
    w.ctx
        .store
        .finalize(&id, &failed_refund("re_other", amount, "evt_rf_3"), None)
        .await
        .expect("finalize");
    let look = || async {
        let correlation = CorrelationId::parse("corr-recovery").unwrap();
        runner.recovery.reconcile(&id, correlation).await.expect("reconcile")
    };
    let mut looks = Vec::new();
    for _ in 0..8 {
        looks.push(look().await);
    }
    let refund_calls = |w: &World| {
        w.sim
            .ledger
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path == "/v1/refunds")
            .count()
    };
    assert_eq!(
        refund_calls(&w),
        payments_core::refund::MAX_GIVE_BACKS as usize,
        "one refused call per give-back: {looks:?}"
    );
    assert_eq!(looks.last(), Some(&Reconciled::ForOperator), "{looks:?}");
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert!(p.refund_for_operator() && p.is_open(), "{p:?}");
    look().await;
    assert_eq!(
        refund_calls(&w),
        payments_core::refund::MAX_GIVE_BACKS as usize,
        "no loop"
    );
}

/// A checkout whose order was cancelled after its capture, so the saga refunds, over `runner`.
async fn refunding<P: StripeApi>(w: &World, runner: &checkout_saga::runner::Runner<P>) -> SagaRecord {
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    w.deliver(runner, &waiting).await;
    w.saga(&id).await
}

/// The webhook's report of `refund` in `status`.
fn refund_webhook(refund: &RefundEntry, status: RefundStatus, event: &str) -> Observation {
    let mut o = failed_refund(&refund.refund_id, refund.amount_minor, event);
    if let Outcome::Refund(r) = &mut o.outcome {
        r.refund.status = status;
        r.failure_reason = None;
    }
    o
}

#[tokio::test]
async fn the_saga_compensates_a_charge_only_once_its_refund_succeeded() {
    let w = world().await;
    let pending = w.runner_over(Quirky(w.psp(), Quirk::RefundsPending));
    let waiting = refunding(&w, &pending).await;
    let id = waiting.payment_id.clone().expect("payment");
    // Stripe answered `pending`: recorded as pending, the saga waits with the stock reserved.
    assert_eq!(
        waiting.status,
        SagaStatus::RefundingPayment,
        "not compensated on a pending refund"
    );
    assert_eq!(w.stock().await, STOCK - 1);
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Captured, 0));
    let refund = p.pending_refunds().next().expect("the refund, pending").clone();
    // Resumed while still pending (the PSP replays `pending` for the key): still waiting.
    let report = sweeper::sweep(&pending, Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    assert!(report.resumed >= 1, "{report:?}");
    assert_eq!(w.saga(&waiting.order_id).await.status, SagaStatus::RefundingPayment);
    // `refund.updated` says succeeded: the next resume (the sweeper's, once the saga is due again) finishes
    // the compensation.
    let succeeded = refund_webhook(&refund, RefundStatus::Succeeded, "evt_rs_1");
    w.ctx.store.finalize(&id, &succeeded, None).await.expect("webhook");
    pending.resume(&waiting.order_id).await.expect("resume");
    let done = w.saga(&waiting.order_id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.stock().await, STOCK);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Refunded);
    w.assert_charged_once(&done, 2500);
}

#[tokio::test]
async fn a_refund_that_fails_after_pending_is_not_a_compensation_and_recovery_gives_the_money_back() {
    let w = world().await;
    let pending = w.runner_over(Quirky(w.psp(), Quirk::RefundsPending));
    let waiting = refunding(&w, &pending).await;
    let id = waiting.payment_id.clone().expect("payment");
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    let refund = p.pending_refunds().next().expect("the refund, pending").clone();
    let failed = refund_webhook(&refund, RefundStatus::Failed, "evt_rs_2");
    let outcome = w.ctx.store.finalize(&id, &failed, None).await.expect("webhook");
    assert_eq!(outcome.result, shared::FinalizeResult::Applied(EventKind::RefundFailed));
    // The saga does not call it compensated (it retries, then escalates); recovery owns the give-back.
    let resumed = pending.resume(&waiting.order_id).await;
    assert!(resumed.is_err(), "{resumed:?}");
    let saga = w.saga(&waiting.order_id).await;
    assert_eq!(saga.status, SagaStatus::RefundingPayment);
    assert_eq!(
        w.stock().await,
        STOCK - 1,
        "the stock stays reserved while the money is not back"
    );
    assert_eq!(
        w.ctx
            .store
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .give_back
            .map(|g| g.failure),
        Some(1)
    );
    // Recovery gives the money back under `<payment>:refund-failure-1`: a new refund, which Stripe answers
    // `pending`, then reports succeeded. (Its webhooks stand for it here: the simulator already took all of
    // the charge back for the saga's refund, so it would refuse the give-back.) The saga's own refund stays
    // `failed`; the money question is settled once the give-back succeeded, and only then.
    let give_back = RefundEntry {
        refund_id: "re_give_back_1".into(),
        amount_minor: refund.amount_minor,
        status: RefundStatus::Pending,
    };
    let answered = refund_webhook(&give_back, RefundStatus::Pending, "evt_rs_3");
    w.ctx
        .store
        .finalize(&id, &answered, None)
        .await
        .expect("give-back pending");
    // Escalated once, the saga is set aside: the sweeper looks at it on its schedule (5, 10, ... minutes
    // after the escalation), here with its clock moved ahead.
    let minutes_later = |minutes: u64| {
        w.runner_with(
            w.ctx.client.clone(),
            Quirky(w.psp(), Quirk::RefundsPending),
            checkout_saga::runner::Settings {
                clock: shared::clock::WallClock::ahead(Duration::from_secs(minutes * 60)),
                ..settings()
            },
        )
    };
    let report = sweeper::sweep(&minutes_later(6), Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    assert!(report.errors >= 1, "still not done, as before: {report:?}");
    assert_eq!(w.escalations().await.len(), 1, "the first escalation only");
    assert_eq!(w.saga(&waiting.order_id).await.status, SagaStatus::RefundingPayment);
    assert_eq!(w.stock().await, STOCK - 1, "not compensated on a pending give-back");
    let succeeded = refund_webhook(&give_back, RefundStatus::Succeeded, "evt_rs_4");
    let outcome = w
        .ctx
        .store
        .finalize(&id, &succeeded, None)
        .await
        .expect("give-back succeeded");
    assert_eq!(
        outcome.result,
        shared::FinalizeResult::Applied(EventKind::PaymentRefunded)
    );
    let report = sweeper::sweep(&minutes_later(11), Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    assert!(report.resumed >= 1, "{report:?}");
    let done = w.saga(&waiting.order_id).await;
    assert_eq!(done.status, SagaStatus::Compensated, "every wait ends");
    assert_eq!(w.stock().await, STOCK, "the stock is released once the money is back");
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.refunded_minor),
        (PaymentStatus::Refunded, refund.amount_minor)
    );
    assert!(
        p.refunds
            .iter()
            .any(|r| r.refund_id == refund.refund_id && r.status == RefundStatus::Failed),
        "the saga's own refund stays failed: {:?}",
        p.refunds
    );
}

#[tokio::test]
async fn a_charge_whose_refunds_fail_at_the_simulator_keeps_the_saga_refunding() {
    let w = world().await;
    let runner = w.runner_for("checkout-events");
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_refund_fails", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    w.inbox_deliver(&runner, &waiting).await;
    // The simulator answered the refund `pending` (its failure comes by webhook): not a compensation.
    let saga = w.saga(&id).await;
    assert_eq!(saga.status, SagaStatus::RefundingPayment);
    assert_eq!(w.stock().await, STOCK - 1);
    let payment = waiting.payment_id.clone().expect("payment");
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Captured, 0));
    assert_eq!(p.pending_refunds().count(), 1, "{:?}", p.refunds);
    let intents = w.sim.ledger.intents_for(payment.as_str());
    assert_eq!(intents[0]["latest_charge"]["amount_refunded"].as_u64(), Some(0));
}

/// The reconciler's recovery over `psp` as its function builds it (breaker included), its DynamoDB calls
/// recorded under its name.
fn reconciler<P: StripeApi + Clone>(w: &World, psp: P) -> recovery::Recovery<psp::CircuitBreaker<P>> {
    let guarded = w.guarded_for("reconciler", psp, psp::BreakerSettings::default());
    w.runner_as("reconciler", guarded, settings()).recovery
}

#[tokio::test]
async fn a_pending_give_back_read_back_failed_is_a_new_failure_given_back_under_the_next_key() {
    let w = world().await;
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_refund_fails", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    w.inbox_deliver(&w.runner_for("checkout-events"), &waiting).await;
    let payment = waiting.payment_id.clone().expect("payment");
    let reference = waiting.psp_reference.clone().expect("a PaymentIntent");
    let amount = fixture_money().amount_minor();
    // The saga's refund was answered `pending` and its failure webhooks went nowhere: recovery reads it
    // back by id, failed, which is failure 1, to give back.
    let recovery = reconciler(&w, w.psp());
    let correlation = || CorrelationId::parse("corr-recovery").unwrap();
    let (recovery, at) = (&recovery, &payment);
    let look = move || async move { recovery.reconcile(at, correlation()).await.expect("reconcile") };
    assert_eq!(look().await, Reconciled::Applied(EventKind::RefundFailed));
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    assert_eq!((p.refund_failures, p.give_back.map(|g| g.failure)), (1, Some(1)));
    // Give-back 1 is answered `pending` too: recorded, the give-back ended, the refund pending.
    look().await;
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    assert_eq!((p.give_back, p.pending_refunds().count()), (None, 1), "{:?}", p.refunds);
    let first_give_back = p.pending_refunds().next().expect("pending").refund_id.clone();
    // Read back: failed, a new failure (2), given back on the next look under its own key.
    assert_eq!(look().await, Reconciled::Applied(EventKind::RefundFailed));
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    assert_eq!((p.refund_failures, p.give_back.map(|g| g.failure)), (2, Some(2)));
    look().await;
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    let second_give_back = p
        .pending_refunds()
        .next()
        .expect("give-back 2, pending")
        .refund_id
        .clone();
    assert_ne!(
        second_give_back, first_give_back,
        "a new refund, not give-back 1's replayed"
    );
    let replayed = w
        .psp()
        .refund(&format!("{payment}:refund-failure-2"), &reference, Some(amount))
        .await
        .expect("the same key again");
    assert_eq!(replayed.id, second_give_back, "made under `<payment>:refund-failure-2`");
    // Failures go on until the bound; then nothing more is given back and the payment leaves the index
    // for an operator (the failures alarm). Never any money moved twice: every refund failed.
    for _ in 0..8 {
        look().await;
    }
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    assert_eq!(p.pending_refunds().count(), 0, "{:?}", p.refunds);
    assert_eq!(p.give_back, None);
    assert!(p.refund_failures > payments_core::refund::MAX_GIVE_BACKS, "{p:?}");
    assert_eq!(
        p.refunds.len(),
        1 + payments_core::refund::MAX_GIVE_BACKS as usize,
        "{:?}",
        p.refunds
    );
    assert!(
        p.refunds.iter().all(|r| r.status == RefundStatus::Failed),
        "{:?}",
        p.refunds
    );
    let intents = w.sim.ledger.intents_for(payment.as_str());
    assert_eq!(intents[0]["latest_charge"]["amount_refunded"].as_u64(), Some(0));
}

#[tokio::test]
async fn a_pending_give_back_read_back_succeeded_ends_the_question() {
    let w = world().await;
    let record = captured(&w).await;
    let id = record.payment_id.clone().expect("payment");
    let amount = fixture_money().amount_minor();
    w.ctx
        .store
        .finalize(&id, &failed_refund("re_dashboard", amount, "evt_rf_3"), None)
        .await
        .expect("finalize");
    // Stripe answers the give-back `pending` (it takes days) and its webhooks are lost.
    let recovery = reconciler(&w, Quirky(w.psp(), Quirk::RefundsPending));
    let correlation = || CorrelationId::parse("corr-recovery").unwrap();
    recovery.reconcile(&id, correlation()).await.expect("give back");
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.give_back, p.pending_refunds().count()),
        (PaymentStatus::Captured, None, 1)
    );
    assert!(p.is_open(), "a pending refund keeps the payment open");
    // The next look reads it back by id: succeeded, the payment refunded and out of the index.
    assert_eq!(
        recovery.reconcile(&id, correlation()).await.expect("read back"),
        Reconciled::Applied(EventKind::PaymentRefunded)
    );
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.refunded_minor, p.give_back, p.refund_failures),
        (PaymentStatus::Refunded, amount, None, 1)
    );
    assert!(!p.is_open(), "{p:?}");
    assert_eq!(
        recovery.reconcile(&id, correlation()).await.expect("again"),
        Reconciled::NotOpen
    );
    let intents = w.sim.ledger.intents_for(id.as_str());
    assert_eq!(
        intents[0]["latest_charge"]["amount_refunded"].as_u64(),
        Some(amount),
        "given back once"
    );
}

#[tokio::test]
async fn a_pending_refund_stripe_does_not_know_is_skipped_and_the_look_goes_on() {
    let w = world().await;
    let record = captured(&w).await;
    let id = record.payment_id.clone().expect("payment");
    let unknown = RefundEntry {
        refund_id: "re_not_at_this_account".into(),
        amount_minor: 100,
        status: RefundStatus::Pending,
    };
    let report = refund_webhook(&unknown, RefundStatus::Pending, "evt_rp_1");
    w.ctx.store.finalize(&id, &report, None).await.expect("webhook");
    // The simulator answers 404 for it: recovery does not fail on it and still asks about the payment.
    let recovery = reconciler(&w, w.psp());
    let correlation = CorrelationId::parse("corr-recovery").unwrap();
    assert_eq!(
        recovery.reconcile(&id, correlation).await.expect("reconcile"),
        Reconciled::Unchanged
    );
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.pending_refunds().count()), (PaymentStatus::Captured, 1));
}

#[tokio::test]
async fn a_refund_failing_for_two_days_creates_no_refund_beyond_the_give_back_bound() {
    let w = world().await;
    let runner = w.runner_for("checkout-events");
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_refund_fails", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    w.inbox_deliver(&runner, &waiting).await;
    let payment = waiting.payment_id.clone().expect("payment");
    let intent = w.sim.ledger.intents_for(payment.as_str())[0]["id"]
        .as_str()
        .expect("intent")
        .to_owned();
    assert_eq!(w.sim.ledger.refunds_of(&intent).len(), 1, "the saga's refund");
    let recovery = reconciler(&w, w.psp());
    // Two days, every 4 hours: the saga is resumed and recovery looks, while Stripe forgets each key 24 hours
    // after its first use (the simulator's key clock moved ahead; every refund of this card fails).
    for _ in 0..12 {
        w.sim.ledger.age_keys(Duration::from_secs(4 * 3600));
        let resumed = runner.resume(&id).await;
        assert!(resumed.is_err() || w.saga(&id).await.status == SagaStatus::RefundingPayment);
        recovery
            .reconcile(&payment, CorrelationId::parse("corr-recovery").unwrap())
            .await
            .expect("reconcile");
    }
    let refunds = w.sim.ledger.refunds_of(&intent);
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    assert_eq!(
        refunds.len(),
        1 + payments_core::refund::MAX_GIVE_BACKS as usize,
        "the saga's refund and one give-back per failure up to the bound, none beyond: {:?}",
        p.refunds
    );
    assert!(p.refund_failures > payments_core::refund::MAX_GIVE_BACKS, "{p:?}");
    assert_eq!(
        w.saga(&id).await.status,
        SagaStatus::RefundingPayment,
        "the stock stays held"
    );
}

/// One owner per refund across time: the saga's refund was made at Stripe and failed there, but its answer and
/// its webhooks were lost. The step reads the PaymentIntent's refunds (`GET /v1/refunds?payment_intent=`)
/// before it refunds again, records the failed one, and leaves the money to recovery's give-back under the
/// failure's key; a resume 25 hours later (Stripe has forgotten `<order>:refund`) makes no second refund.
#[tokio::test]
async fn a_resume_a_day_after_a_lost_failed_refund_records_it_and_creates_no_second_refund() {
    let w = world().await;
    let lossy = w.runner_over(Quirky(w.psp(), Quirk::RefundAnswersLost));
    let id = order();
    let waiting = lossy
        .start(id.clone(), w.checkout("pm_refund_fails", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.expect("cancel");
    w.deliver(&lossy, &waiting).await;
    let payment = waiting.payment_id.clone().expect("payment");
    let intent = w.sim.ledger.intents_for(payment.as_str())[0]["id"]
        .as_str()
        .expect("intent")
        .to_owned();
    assert_eq!(
        w.sim.ledger.refunds_of(&intent).len(),
        1,
        "made at Stripe, its answer lost"
    );
    w.sim.ledger.age_keys(Duration::from_secs(25 * 3600));
    let resumed = w.runner().resume(&id).await;
    assert_eq!(
        w.sim.ledger.refunds_of(&intent).len(),
        1,
        "no second refund under the saga's forgotten key: {resumed:?}"
    );
    assert!(resumed.is_err(), "recovery's now, not done: {resumed:?}");
    let p = w.ctx.store.get(&payment).await.unwrap().unwrap();
    assert_eq!(
        (p.refund_failures, p.give_back.map(|g| g.failure)),
        (1, Some(1)),
        "the failure recorded, for recovery to give back: {:?}",
        p.refunds
    );
    assert_eq!(w.saga(&id).await.status, SagaStatus::RefundingPayment);
    // Recovery gives it back once, under `<payment>:refund-failure-1`; the saga's next resume makes none.
    reconciler(&w, w.psp())
        .reconcile(&payment, CorrelationId::parse("corr-recovery").unwrap())
        .await
        .expect("give back");
    assert!(w.runner().resume(&id).await.is_err());
    assert_eq!(w.sim.ledger.refunds_of(&intent).len(), 2, "the saga's and give-back 1");
}
