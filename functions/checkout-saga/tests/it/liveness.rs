//! Every wait ends: a saga whose projection never hears of the payment's outcome reads the payment itself
//! past its deadline, and items that cannot be resolved in one shard of the open-items index never hide the
//! others from recovery.

use crate::support::*;
use checkout_saga::runner::RunError;
use checkout_saga::runner::{Runner, Settings};
use checkout_saga::saga::{SagaRecord, SagaStatus};
use checkout_saga::{orders, sweeper};
use integration_tests::TestContext;
use psp::{BreakerSettings, GuardedStripe, StripeApi};
use shared::store::open_index::{shard_of, OpenKind, OpenShards};
use shared::{CorrelationId, OrderId, PaymentStatus, PspReference};
use shared::{NewPayment, PaymentId};
use std::time::Duration;

#[tokio::test]
async fn a_lost_projection_event_cannot_hold_a_saga_past_its_deadline() {
    let w = world().await;
    // Before the deadline the saga waits for the queue (which, here, never delivers).
    let waiting = w
        .runner()
        .start(order(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    assert_eq!(w.payment_status(&waiting).await, PaymentStatus::Captured);
    // Past it, the payment item itself settles the wait.
    let runner = w.runner_past_deadline();
    let id = order();
    let done = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(done.status, SagaStatus::Completed, "no event was delivered");
    assert_eq!(w.log(&id).await, HAPPY);
}

/// Past its payment's deadline a waiting saga no event moved is resumed by the sweeper, which hands the
/// payment to recovery: it takes the payment's lease, asks the PSP (behind the breaker), finalizes the
/// payment and releases the lease.
#[tokio::test]
async fn the_sweeper_hands_a_payment_past_its_deadline_to_recovery() {
    let w = world().await;
    // The deadline is set at the start: long enough that the API's start surely waits within it.
    let timeout = Duration::from_secs(2);
    let past_deadline = || Settings {
        payment_timeout: timeout,
        ..settings()
    };
    let api_psp = w.guarded_for("checkout-api", w.psp(), BreakerSettings::default());
    let id = order();
    let waiting = w
        .runner_as("checkout-api", api_psp, past_deadline())
        .start(id.clone(), w.checkout("pm_silent", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    assert!(!waiting.recovery_requested, "{waiting:?}");
    assert_eq!(w.payment_status(&waiting).await, PaymentStatus::Processing);
    tokio::time::sleep(timeout + Duration::from_millis(100)).await;
    let psp = w.guarded_for("checkout-sweeper", w.psp(), BreakerSettings::default());
    let runner = w.runner_as("checkout-sweeper", psp, past_deadline());
    let report = sweeper::sweep(&runner, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    assert_eq!(report.resumed, 1, "{report:?}");
    let resumed = w.saga(&id).await;
    assert!(resumed.recovery_requested, "{resumed:?}");
    assert!(w.log(&id).await.contains(&(K::RecoveryRequested, S::AwaitPayment)));
    assert_eq!(
        w.payment_status(&resumed).await,
        PaymentStatus::Captured,
        "recovery applied the PSP's answer"
    );
    let payment = resumed.payment_id.as_ref().expect("payment");
    assert!(
        w.ctx
            .leases
            .acquire(&w.ctx.read(payment).await)
            .await
            .expect("lease")
            .is_some(),
        "recovery released the payment's lease"
    );
}

fn payment_in_shard(shard: u64, n: usize) -> PaymentId {
    (0..)
        .map(|i| format!("pay_s{shard}_{n}_{i}"))
        .find(|id| shard_of(OpenKind::Payment, id, OpenShards::DEFAULT) == format!("PAYMENT#{shard}"))
        .and_then(|id| PaymentId::parse(id).ok())
        .expect("an id in the shard")
}

/// A payment created an hour ago.
fn new_payment(id: PaymentId, reference: Option<PspReference>) -> NewPayment {
    NewPayment {
        order_id: OrderId::parse(format!("order-{id}")).unwrap(),
        id,
        money: fixture_money(),
        provider: shared::PspName::Stripe,
        psp_reference: reference,
        metadata: Default::default(),
        correlation_id: CorrelationId::parse("corr-setup").unwrap(),
        trace_context: None,
        now_ms: shared::clock::now_ms() - 3_600_000,
    }
}

#[tokio::test]
async fn two_hundred_unresolvable_payments_in_one_shard_do_not_hide_a_resolvable_one_in_another() {
    let w = world().await;
    // 200 open payments in shard 0 that recovery cannot resolve (no PSP reference, ever).
    for n in 0..200 {
        w.ctx
            .store
            .create(new_payment(payment_in_shard(0, n), None))
            .await
            .expect("create");
    }
    // One in the last shard whose money was taken at the PSP, silently.
    let last = OpenShards::DEFAULT.get() - 1;
    let id = payment_in_shard(last, 0);
    let (order_id, money) = (OrderId::parse("order-shard").unwrap(), fixture_money());
    let request = psp::ChargeRequest {
        payment_id: &id,
        order_id: &order_id,
        money: &money,
        payment_method: "pm_silent",
    };
    let intent = w.psp().charge("shard:charge", &request).await.expect("charged");
    let reference = PspReference::parse(intent.id.as_str()).unwrap();
    w.ctx
        .store
        .create(new_payment(id.clone(), Some(reference)))
        .await
        .expect("create");

    let runner = w.runner_for("reconciler");
    let mut recovery = runner.recovery;
    recovery.settings.batch_limit = 200;
    // Open for an hour, asked about after a minute: the ones it cannot resolve are due again minutes later.
    recovery.settings.stale_after = Duration::from_secs(60);
    let report = recovery.run(later()).await.expect("run");
    assert_eq!(report.applied, 1, "{report:?}");
    // Shard 0 takes the shares the empty shards leave (issue 25 item 2), never the last shard's own.
    assert_eq!(
        (report.found, report.no_reference),
        (200, 199),
        "shard 0 got what the others left: {report:?}"
    );
    assert_eq!(
        w.ctx.store.get(&id).await.unwrap().unwrap().status,
        PaymentStatus::Captured
    );
    // The ones it looked at and could not resolve backed off: they are not due again at once, so the next
    // run looks at others.
    let looked_at = report.no_reference as usize;
    assert!(looked_at > 0);
    let due_now = shared::store::open_index::open_since(
        &w.ctx.client,
        &w.ctx.table,
        OpenShards::DEFAULT,
        OpenKind::Payment,
        shared::clock::now_ms(),
        200 * OpenShards::DEFAULT.get() as usize,
    )
    .await
    .expect("index");
    assert_eq!(due_now.len(), 200 - looked_at, "deferred: {looked_at}");
    let next = recovery.run(later()).await.expect("second run");
    assert_eq!(
        next.no_reference as usize,
        200 - looked_at,
        "the rest of shard 0: {next:?}"
    );
    let due_after = shared::store::open_index::open_since(
        &w.ctx.client,
        &w.ctx.table,
        OpenShards::DEFAULT,
        OpenKind::Payment,
        shared::clock::now_ms(),
        200 * OpenShards::DEFAULT.get() as usize,
    )
    .await
    .expect("index");
    assert_eq!(due_after.len(), 0, "none looked at twice");
}

/// Compensated after the payment took no money: the charge's compensation, then the stock.
const CANCELLED_BEFORE_CAPTURE: [(K, S); 7] = [
    (K::SagaStarted, S::ReserveStock),
    (K::StockReserved, S::ReserveStock),
    (K::PaymentCreated, S::Charge),
    (K::PaymentRequested, S::Charge),
    (K::StepFailed, S::AwaitPayment),
    (K::StepCompensated, S::Charge),
    (K::StockReleased, S::ReserveStock),
];

/// `function`'s runner (as [`World::runner_for`]) with checkouts abandoned after `abandon_after`.
fn abandoning_runner(w: &World, function: &str, abandon_after: Duration) -> Runner<GuardedStripe> {
    let psp = w.guarded_for(function, w.psp(), BreakerSettings::default());
    w.runner_as(
        function,
        psp,
        Settings {
            abandon_after,
            ..settings()
        },
    )
}

/// The PaymentIntent of this saga's payment, as the simulator holds it.
fn intent_status(w: &World, record: &SagaRecord) -> String {
    let id = record.payment_id.as_ref().expect("payment");
    let intents = w.sim.ledger.intents_for(id.as_str());
    assert_eq!(intents.len(), 1, "{intents:?}");
    intents[0]["status"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_abandoned_3ds_checkout_ends_compensated_with_the_payment_intent_canceled() {
    let w = world().await;
    let runner = abandoning_runner(&w, "checkout-api", Duration::from_secs(3));
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_abandoned_action", 1))
        .await
        .expect("start");
    assert_eq!(
        waiting.status,
        SagaStatus::PaymentPending,
        "the customer has time until the deadline"
    );
    tokio::time::sleep(Duration::from_millis(3100)).await;
    // The sweeper's run cancels the PaymentIntent (behind its breaker) and releases the stock.
    let sweeper_runner = abandoning_runner(&w, "checkout-sweeper", Duration::from_secs(3));
    sweeper::sweep(&sweeper_runner, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.log(&id).await, CANCELLED_BEFORE_CAPTURE);
    assert_eq!(intent_status(&w, &done), "canceled");
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Failed);
    assert_eq!(w.stock().await, STOCK);
}

#[tokio::test]
async fn a_customer_who_cancels_during_the_challenge_is_never_charged() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_abandoned_action", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.expect("cancel");
    let done = runner.cancel_by_customer(&id).await.expect("cancel").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.log(&id).await, CANCELLED_BEFORE_CAPTURE);
    assert_eq!(
        intent_status(&w, &waiting),
        "canceled",
        "canceled, not charged and refunded"
    );
    w.assert_charged_once(&waiting, 0);
    assert_eq!(w.stock().await, STOCK);
}

#[tokio::test]
async fn a_success_that_races_the_cancel_continues_from_the_capture() {
    let w = world().await;
    // The customer cancels; the challenge had succeeded at the PSP a moment before (its webhook not yet in).
    let runner = w.runner();
    let cancelled = order();
    let first = runner
        .start(cancelled.clone(), w.checkout("pm_slow_action", 1))
        .await
        .expect("start");
    tokio::time::sleep(SLOW + Duration::from_millis(100)).await;
    orders::cancel(&w.ctx.client, &w.ctx.table, &cancelled)
        .await
        .expect("cancel");
    let done = runner
        .cancel_by_customer(&cancelled)
        .await
        .expect("cancel")
        .expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated);
    let log = w.log(&cancelled).await;
    assert_eq!(
        log.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        vec![
            K::SagaStarted,
            K::StockReserved,
            K::PaymentCreated,
            K::PaymentRequested,
            K::StepFailed,
            K::PaymentCaptured,
            K::StepFailed,
            K::PaymentRefunded,
            K::StockReleased
        ],
        "the cancel was refused, the capture continued, the cancelled order refunded"
    );
    w.assert_charged_once(&first, 2500);

    // Abandoned at the deadline, but the customer completed the challenge just before: the order is kept.
    // The deadline falls well after the success at the PSP (SLOW), so the cancel always meets a success.
    let runner = abandoning_runner(&w, "checkout-api", SLOW * 2);
    let kept = order();
    let second = runner
        .start(kept.clone(), w.checkout("pm_slow_action", 1))
        .await
        .expect("start");
    tokio::time::sleep(SLOW * 2 + Duration::from_millis(100)).await;
    let sweeper_runner = abandoning_runner(&w, "checkout-sweeper", SLOW * 2);
    sweeper::sweep(&sweeper_runner, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    assert_eq!(w.saga(&kept).await.status, SagaStatus::Completed);
    w.assert_charged_once(&second, 0);
    assert_eq!(w.stock().await, STOCK - 1);
}

/// The charge's answers are lost until the saga is escalated; the sweeper resumes it 25 hours later (clock
/// moved ahead), when the PSP has forgotten the idempotency key and our own key record of the payment would
/// have expired. The saga still charges the payment it saved, and finds the first PaymentIntent instead of
/// creating a second one: the customer is charged once.
#[tokio::test]
async fn a_charge_retried_after_25_hours_reuses_the_first_payment_and_charge() {
    let w = world().await;
    // The checkout API's start, whose charge answers are lost: the API escalates the saga.
    let lossy = Quirky(w.psp(), Quirk::ChargeAnswersLost);
    let lossy = w.runner_as(
        "checkout-api",
        w.guarded_for("checkout-api", lossy, BreakerSettings::default()),
        settings(),
    );
    let id = order();
    let escalated = lossy.start(id.clone(), w.checkout("pm_succeeded", 1)).await;
    assert!(matches!(escalated, Err(RunError::Escalated { .. })), "{escalated:?}");
    let stuck = w.saga(&id).await;
    assert_eq!(
        stuck.status,
        SagaStatus::Charging,
        "the payment is saved before the PSP is asked"
    );
    let first_payment = stuck.payment_id.clone().expect("saved payment");
    assert_eq!(
        w.sim.ledger.intents_for(first_payment.as_str()).len(),
        1,
        "the PSP did charge"
    );

    let day = Duration::from_secs(25 * 3600);
    w.sim.ledger.age_keys(day);
    let later = w.runner_with(
        w.ctx.client.clone(),
        w.psp(),
        Settings {
            clock: shared::clock::WallClock::ahead(day),
            ..settings()
        },
    );
    let resumed = later.resume(&id).await.expect("resume").expect("saga");
    assert_eq!(resumed.payment_id.as_ref(), Some(&first_payment));
    // A day past its deadline, the saga reads the payment itself (captured from the first PaymentIntent).
    assert_eq!(resumed.status, SagaStatus::Completed);
    let done = w.saga(&id).await;
    w.assert_charged_once(&done, 0);
    let created = w.log(&id).await.iter().filter(|(k, _)| *k == K::PaymentCreated).count();
    assert_eq!(created, 1, "one payment for the order");
}

/// The inbox and the sweeper never run past their invocation's deadline: a resume stuck in a slow PSP call
/// is cut there, the saga stays where its last completed step left it, and the next resume finishes it
/// without charging twice.
#[tokio::test]
async fn a_resume_is_cut_at_the_invocations_deadline_and_the_next_one_finishes_it() {
    let w = world().await;
    let id = order();
    // The start is cut while its charge waits for the slow PSP: the saga stays at `charging`.
    let slow = w.runner_over(Quirky(w.psp(), Quirk::SlowCharges(Duration::from_secs(30))));
    let started = tokio::time::timeout(
        Duration::from_secs(5),
        slow.start(id.clone(), w.checkout("pm_succeeded", 1)),
    )
    .await;
    assert!(started.is_err(), "cut while the PSP is slow");
    assert_eq!(w.saga(&id).await.status, SagaStatus::Charging);
    let cut = slow
        .resume_within(&id, tokio::time::Instant::now() + Duration::from_millis(300))
        .await;
    assert!(matches!(cut, Err(RunError::OutOfTime)), "{cut:?}");
    assert_eq!(w.saga(&id).await.status, SagaStatus::Charging);
    // The sweeper's next run, with a PSP that answers.
    let runner = w.runner();
    let report = sweeper::sweep(&runner, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    assert_eq!((report.resumed, report.left), (1, 0), "{report:?}");
    let charged = w.saga(&id).await;
    assert_eq!(charged.status, SagaStatus::PaymentPending);
    w.deliver(&runner, &charged).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Completed);
    w.assert_charged_once(&done, 0);
    // A run whose deadline has passed resumes nothing and says so.
    let other = order();
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        slow.start(other.clone(), w.checkout("pm_succeeded", 1)),
    )
    .await;
    let report = sweeper::sweep(&runner, Duration::ZERO, 100, tokio::time::Instant::now())
        .await
        .expect("sweep");
    assert_eq!((report.resumed, report.left), (0, 1), "{report:?}");
    assert_eq!(w.saga(&other).await.status, SagaStatus::Charging);
}

/// The customer cancels while the payment is processing, which Stripe cannot cancel: the saga does not
/// declare "no money taken" (the money may still come); it waits, and when the capture comes it continues
/// from there: the cancelled order is refunded, never kept.
#[tokio::test]
async fn a_cancel_while_processing_waits_for_the_outcome_and_refunds_the_capture() {
    // Processing lasts long enough that the cancel surely comes while it does, even on a busy machine.
    let processing = Duration::from_secs(4);
    let w = world_with_slow(TestContext::new().await, processing).await;
    let runner = w.runner();
    let id = order();
    let started = runner
        .start(id.clone(), w.checkout("pm_slow_processing", 1))
        .await
        .expect("start");
    assert_eq!(w.payment_status(&started).await, PaymentStatus::Processing);
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.expect("cancel");
    let waiting = runner.cancel_by_customer(&id).await.expect("cancel").expect("saga");
    assert_eq!(waiting.status, SagaStatus::CancellingPayment, "waits for the PSP");
    assert_eq!(
        w.payment_status(&waiting).await,
        PaymentStatus::Processing,
        "not failed while open"
    );
    // The processing ends in a capture; the next resume (the sweeper's) continues from it.
    tokio::time::sleep(processing + Duration::from_millis(100)).await;
    let done = runner.resume(&id).await.expect("resume").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated);
    assert!(done.captured && done.refunded_minor == 2500, "{done:?}");
    let kinds: Vec<K> = w.log(&id).await.iter().map(|(k, _)| *k).collect();
    assert!(
        kinds.ends_with(&[K::PaymentCaptured, K::StepFailed, K::PaymentRefunded, K::StockReleased]),
        "{kinds:?}"
    );
    w.assert_charged_once(&done, 2500);
    assert_eq!(w.stock().await, STOCK);
}

/// An order id at the API's limit (128 characters: `checkout-<order>` would be too long for a correlation
/// id) runs like any other; a saga whose stored record no longer loads is escalated once and then set aside
/// by the sweeper instead of failing the same way on every run, and the other sagas are still resumed.
#[tokio::test]
async fn a_saga_that_cannot_be_loaded_is_escalated_once_and_set_aside() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let w = world().await;
    let runner = w.runner_for("checkout-api");
    let longest = OrderId::parse(format!("o{}", "x".repeat(127))).expect("128 characters");
    let waiting = runner
        .start(longest.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    assert_eq!(w.payment_status(&waiting).await, PaymentStatus::Captured);

    let broken = order();
    runner
        .start(broken.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    w.ctx
        .client
        .update_item()
        .table_name(&w.ctx.table)
        .set_key(Some(checkout_saga::saga::saga_key(&broken)))
        .update_expression("SET #s = :bad")
        .expression_attribute_names("#s", "status")
        .expression_attribute_values(":bad", AttributeValue::S("teleported".into()))
        .send()
        .await
        .expect("break the stored saga");

    // The sweeper escalates it (its own client and queue grant).
    let runner = w.runner_for("checkout-sweeper");
    let first = sweeper::sweep(&runner, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    assert_eq!((first.found, first.escalated), (2, 1), "{first:?}");
    assert_eq!(first.resumed, 1, "the other saga is resumed: {first:?}");
    let escalated = w.escalations().await;
    assert_eq!(escalated.len(), 1, "{escalated:?}");
    assert_eq!(escalated[0]["order_id"], broken.as_str());
    assert_eq!(escalated[0]["action"], "resume");

    let second = sweeper::sweep(&runner, Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    assert_eq!((second.escalated, second.errors), (0, 0), "escalated once: {second:?}");
    assert!(w.escalations().await.len() <= 1, "no second escalation message");
}

/// Found by the protocol model: the refund's answers are lost, and a day later the PSP has forgotten the
/// refund's key, so a retry under it would ask again for "all that is left". Since issue 33 the step reads the
/// PaymentIntent's refunds before it refunds again: the retry in the same resume finds the refund whose
/// answer was lost, records it and ends the compensation; a resume 25 hours later makes no second refund.
#[tokio::test]
async fn a_refund_retried_after_its_key_expired_reads_back_and_the_saga_ends() {
    let w = world().await;
    let lossy = w.runner_over(Quirky(w.psp(), Quirk::RefundAnswersLost));
    let id = order();
    let waiting = lossy
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.expect("cancel");
    let resumed = lossy.resume_within(&id, later()).await;
    w.deliver(&lossy, &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated, "{resumed:?}");
    w.assert_charged_once(&done, 2500);
    assert_eq!(w.stock().await, STOCK);
    let intent = done.psp_reference.clone().expect("a PaymentIntent");
    assert_eq!(
        w.sim.ledger.refunds_of(intent.as_str()).len(),
        1,
        "the lost answer's refund, found"
    );
    w.sim.ledger.age_keys(Duration::from_secs(25 * 3600));
    w.runner().resume(&id).await.expect("resume");
    assert_eq!(w.saga(&id).await.status, SagaStatus::Compensated);
    assert_eq!(w.sim.ledger.refunds_of(intent.as_str()).len(), 1, "no second refund");
}
