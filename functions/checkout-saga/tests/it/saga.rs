//! The checkout saga against DynamoDB Local, the SQS emulator (escalations) and the PSP simulator (charges,
//! refunds, status queries over HTTP). Payment events reach the saga through the consumer library exactly as
//! SQS hands them over (the queue transport itself is tested by the outbox tests and the local-stack demo).

use crate::support::*;
use checkout_saga::runner::Settings;
use checkout_saga::saga::SagaStatus;
use checkout_saga::{inventory, orders, sweeper};
use integration_tests::{dying_client, Fault, FaultInjector, TestContext};
use psp::BreakerSettings;
use psp_simulator::ledger::WebhookEvent;
use recovery::Reconciled;
use shared::retry::Backoff;
use shared::{
    Channel, CorrelationId, DisputeFact, DisputeId, DisputeReport, DisputeStatus, Observation, OrderId, Outcome,
    PaymentId, PaymentStatus, PspEventId, PspReference,
};
use std::sync::Arc;
use std::time::Duration;
#[tokio::test]
async fn the_happy_path_reserves_charges_waits_for_the_event_and_confirms() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 2))
        .await
        .expect("start");
    assert_eq!(
        waiting.status,
        SagaStatus::PaymentPending,
        "waits for the outcome event"
    );
    assert_eq!(w.stock().await, STOCK - 2);
    w.deliver(&runner, &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(w.log(&id).await, HAPPY);
    assert_eq!(w.stock().await, STOCK - 2);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Captured);
    let order_state = orders::status(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    assert_eq!(order_state, Some(("confirmed".into(), Some("completed".into()))));
    w.assert_charged_once(&done, 0);
    // Delivering the same events again changes nothing.
    w.deliver(&runner, &done).await;
    assert_eq!(w.log(&id).await.len(), HAPPY.len());
}

/// What a happy checkout costs in DynamoDB calls (counted by the harness's SDK interceptor): the start up to
/// the wait, and the outcome event's delivery (consumer and resume) up to the confirmation.
#[tokio::test]
async fn a_happy_checkout_reads_each_saga_state_once_at_most() {
    let w = world().await;
    let runner = w.runner();
    w.ctx.calls.reset();
    let waiting = runner
        .start(order(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    let start = w.ctx.calls.by_operation();
    println!("start: {start:?}");
    // Saga put (with the order), reservation, payment create (with the saga's move that saves its id), the
    // request: transactions; the finalize of the sync answer: one put of the payment (its own outbox); the
    // payment read before the charge (it tells whether the PSP already answered for it) and the projection
    // read that finds no outcome yet. No read of a saga this process has just written.
    assert_eq!(start.get("TransactWriteItems"), Some(&4));
    assert_eq!(start.get("PutItem"), Some(&1), "the finalize");
    assert_eq!(start.get("GetItem"), Some(&2), "the payment and the projection");
    w.ctx.calls.reset();
    w.deliver(&runner, &waiting).await;
    let delivery = w.ctx.calls.by_operation();
    println!("delivery: {delivery:?}");
    // The saga is read once when the event resumes it, then moves twice without reading itself again.
    assert_eq!(delivery.get("GetItem"), Some(&2), "the saga once, the projection once");
}

#[tokio::test]
async fn a_failed_payment_releases_the_stock() {
    let w = world().await;
    // As in AWS: the checkout API starts the saga, the inbox (checkout-events) compensates it.
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_failed", 3))
        .await
        .expect("start");
    assert_eq!(w.stock().await, STOCK - 3);
    w.inbox_deliver(&w.runner_for("checkout-events"), &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.log(&id).await, PAYMENT_FAILED);
    assert_eq!(w.stock().await, STOCK, "stock back");
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Failed);
    w.assert_charged_once(&done, 0);
}

#[tokio::test]
async fn a_failure_after_capture_refunds_then_releases_in_reverse_order() {
    let w = world().await;
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    // The customer cancels while the payment is in flight: the order can no longer be confirmed.
    assert_eq!(
        orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap(),
        orders::Cancel::Cancelled
    );
    // The inbox refunds at the PSP (behind checkout-events' breaker) and releases the stock.
    w.inbox_deliver(&w.runner_for("checkout-events"), &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.log(&id).await, FAILED_AFTER_CAPTURE);
    assert_eq!((done.captured, done.refunded_minor), (true, 2500));
    assert_eq!(w.stock().await, STOCK);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Refunded);
    w.assert_charged_once(&done, 2500);
}

#[tokio::test]
async fn out_of_stock_fails_the_first_step_and_charges_nothing() {
    let w = world().await;
    let id = order();
    let done = w
        .runner()
        .start(id.clone(), w.checkout("pm_succeeded", 11))
        .await
        .expect("start");
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(
        w.log(&id).await,
        [(K::SagaStarted, S::ReserveStock), (K::StepFailed, S::ReserveStock)]
    );
    assert_eq!((done.payment_id, w.stock().await), (None, STOCK));
}

/// Runs one checkout with a process that dies after `calls` DynamoDB calls, then a restarted process.
/// Returns whether the kill fired (false: the run needed fewer calls).
async fn killed_then_resumed(w: &World, calls: usize, method: &str, cancel: bool) -> (bool, OrderId) {
    let id = order();
    let (dying, switch) = dying_client(calls);
    let doomed = w.runner_with(
        dying,
        w.psp(),
        Settings {
            backoff: Backoff::new(1, Duration::ZERO, Duration::ZERO),
            ..Settings::default()
        },
    );
    let cancel_order = || async {
        if cancel {
            let _ = orders::cancel(&w.ctx.client, &w.ctx.table, &id).await;
        }
    };
    // The doomed process: start, the customer's cancel, the outcome events.
    if let Ok(record) = doomed.start(id.clone(), w.checkout(method, 1)).await {
        cancel_order().await;
        w.deliver(&doomed, &record).await;
    }
    // The restarted process: start again (answers the existing saga), the cancel, the events, the sweeper.
    let runner = w.runner();
    let record = runner.start(id.clone(), w.checkout(method, 1)).await.expect("restart");
    cancel_order().await;
    w.deliver(&runner, &record).await;
    sweeper::sweep(&runner, Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    (switch.fired(), id)
}

#[tokio::test]
async fn a_process_killed_between_any_two_calls_resumes_and_completes_or_compensates() {
    let w = world().await;
    inventory::put_stock(&w.ctx.client, &w.ctx.table, &w.sku, 1000)
        .await
        .unwrap();
    for (method, cancel, expected, refunded) in [
        ("pm_succeeded", false, &HAPPY[..], 0),
        ("pm_failed", false, &PAYMENT_FAILED[..], 0),
        ("pm_succeeded", true, &FAILED_AFTER_CAPTURE[..], 2500),
    ] {
        let mut kills = 0;
        for calls in 0.. {
            let stock_before = w.stock().await;
            let (fired, id) = killed_then_resumed(&w, calls, method, cancel).await;
            let record = w.saga(&id).await;
            let kept = u64::from(record.status == SagaStatus::Completed);
            assert_eq!(
                w.stock().await,
                stock_before - kept,
                "stock moved exactly once each way"
            );
            assert_eq!(
                w.log(&id).await,
                expected,
                "{method} cancel={cancel} killed after {calls} calls"
            );
            assert!(record.status.is_terminal());
            w.assert_charged_once(&record, refunded);
            if !fired {
                break;
            }
            kills += 1;
        }
        assert!(kills >= 8, "{method}: killed at {kills} points");
        println!("{method} cancel={cancel}: killed at each of {kills} points, every run resumed");
    }
}

#[tokio::test]
async fn a_compensation_that_keeps_failing_is_escalated_to_the_dlq_and_resumed_later() {
    let w = world().await;
    // The inbox (checkout-events) whose refunds keep failing escalates; the sweeper finishes later.
    let refunds_down = Quirky(w.psp(), Quirk::RefundsDown);
    let broken = w.runner_as(
        "checkout-events",
        w.guarded_for("checkout-events", refunds_down, BreakerSettings::default()),
        settings(),
    );
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    w.inbox_deliver(&broken, &waiting).await;
    let stuck = w.saga(&id).await;
    assert_eq!(stuck.status, SagaStatus::RefundingPayment, "not dropped, not skipped");
    assert_eq!(
        w.stock().await,
        STOCK - 1,
        "stock stays reserved until the money is back"
    );
    let escalated = w.escalations().await;
    assert_eq!(escalated.len(), 1, "{escalated:?}");
    assert_eq!(escalated[0]["order_id"], id.as_str());
    assert_eq!(escalated[0]["action"], "refund_payment");
    assert_eq!(escalated[0]["attempts"], 3);
    // Set aside after its one escalation: the next sweep leaves it alone.
    let report = sweeper::sweep(&w.runner_for("checkout-sweeper"), Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    assert_eq!((report.found, report.resumed), (0, 0), "{report:?}");
    // The refund API is back: the sweeper's look on the set-aside schedule (minutes later) finishes the
    // compensations.
    let minutes_later = Settings {
        clock: shared::clock::WallClock::ahead(Duration::from_secs(6 * 60)),
        ..settings()
    };
    let psp = w.guarded_for("checkout-sweeper", w.psp(), BreakerSettings::default());
    let sweeper_later = w.runner_as("checkout-sweeper", psp, minutes_later);
    let report = sweeper::sweep(&sweeper_later, Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    assert!(report.resumed >= 1, "{report:?}");
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    let mut expected = FAILED_AFTER_CAPTURE.to_vec();
    expected.insert(6, (K::SagaSetAside, S::Charge));
    assert_eq!(w.log(&id).await, expected, "set aside once, then compensated");
    assert_eq!(w.stock().await, STOCK);
    w.assert_charged_once(&done, 2500);
}

#[tokio::test]
async fn recovery_resolves_a_payment_whose_webhook_never_came() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_silent", 1))
        .await
        .expect("start");
    assert_eq!(w.payment_status(&waiting).await, PaymentStatus::Processing);
    // The reconciler's scheduled run: found through the sparse index, asked at the PSP, finalized.
    let report = runner.recovery.run(later()).await.expect("recovery run");
    assert_eq!((report.found, report.applied), (1, 1), "{report:?}");
    let payment_id = waiting.payment_id.clone().expect("payment");
    let events = w.ctx.events(&payment_id).await.unwrap();
    let last = events.last().expect("events");
    assert_eq!((last.path, last.status), (Channel::Recovery, PaymentStatus::Captured));
    // Terminal now: no longer in the index, so the next run finds nothing.
    assert_eq!(runner.recovery.run(later()).await.unwrap().found, 0);
    w.deliver(&runner, &waiting).await;
    assert_eq!(w.saga(&id).await.status, SagaStatus::Completed);
}

#[tokio::test]
async fn a_payment_past_its_deadline_is_handed_to_recovery_by_the_saga() {
    let w = world().await;
    // The checkout API's start, past the deadline at once: it takes the payment's lease for recovery.
    let past_deadline = Settings {
        payment_timeout: Duration::ZERO,
        ..settings()
    };
    let guarded = w.guarded_for("checkout-api", w.psp(), BreakerSettings::default());
    let runner = w.runner_as("checkout-api", guarded, past_deadline);
    let id = order();
    let record = runner
        .start(id.clone(), w.checkout("pm_silent", 1))
        .await
        .expect("start");
    assert!(record.recovery_requested);
    assert_eq!(
        w.payment_status(&record).await,
        PaymentStatus::Captured,
        "recovery applied the PSP's answer"
    );
    w.inbox_deliver(&w.runner_for("checkout-events"), &record).await;
    let log = w.log(&id).await;
    assert_eq!(log[4], (K::RecoveryRequested, S::AwaitPayment));
    assert_eq!(log.last(), Some(&(K::OrderConfirmed, S::ConfirmOrder)));
}

#[tokio::test]
async fn recovery_and_webhook_intake_never_work_on_one_payment_at_once() {
    let w = world().await;
    let runner = w.runner();
    let waiting = runner.start(order(), w.checkout("pm_silent", 1)).await.expect("start");
    let payment_id = waiting.payment_id.clone().expect("payment");
    let correlation = CorrelationId::parse("corr-recovery").unwrap();

    // Intake holds the payment's lease (it is finalizing a webhook): recovery skips the payment.
    let intake_lease = w
        .ctx
        .leases
        .acquire(&w.ctx.read(&payment_id).await)
        .await
        .unwrap()
        .expect("intake takes the lease");
    let before = w.ctx.store.get(&payment_id).await.unwrap().unwrap().version;
    let skipped = runner
        .recovery
        .reconcile(&payment_id, correlation.clone())
        .await
        .unwrap();
    assert_eq!(skipped, Reconciled::Busy);
    assert_eq!(
        w.ctx.store.get(&payment_id).await.unwrap().unwrap().version,
        before,
        "nothing written"
    );
    w.ctx.leases.release(&intake_lease).await.unwrap();

    // Recovery holds the lease: intake's acquisition (the one its handler makes) is refused meanwhile.
    let (intake_leases, intake_store) = (w.ctx.leases.clone(), w.ctx.store.clone());
    let id = payment_id.clone();
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = refused.clone();
    let hooked = w.runner_with(
        w.ctx.client.clone(),
        Quirky(
            w.psp(),
            Quirk::DuringRetrieve(Arc::new(move || {
                let (leases, store, id, seen) = (intake_leases.clone(), intake_store.clone(), id.clone(), seen.clone());
                Box::pin(async move {
                    // As the intake does: the payment read, then its lease at the version read.
                    let current = store.get(&id).await.expect("read").expect("payment");
                    let lease = leases.acquire(&current).await.expect("lease call");
                    seen.store(lease.is_none(), std::sync::atomic::Ordering::SeqCst);
                })
            })),
        ),
        Settings::default(),
    );
    let applied = hooked.recovery.reconcile(&payment_id, correlation).await.unwrap();
    assert_eq!(applied, Reconciled::Applied(shared::EventKind::PaymentCaptured));
    assert!(
        refused.load(std::sync::atomic::Ordering::SeqCst),
        "intake could not take the lease during recovery"
    );
    // Freed by the write (the version moved past the lease's): intake can work on the payment right after.
    let after = w.ctx.leases.acquire(&w.ctx.read(&payment_id).await).await.unwrap();
    assert!(after.is_some(), "lease freed by the write");
}

#[tokio::test]
async fn transaction_conflicts_throttling_and_a_lost_answer_are_retried_without_running_a_step_twice() {
    let faults = FaultInjector::new();
    let w = world_with(TestContext::with_faults(faults.clone()).await).await;
    let runner = w.runner();
    faults
        .fail_next("TransactWriteItems", Fault::TransactionConflict, 1)
        .fail_next("GetItem", Fault::Throttling, 2);
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 2))
        .await
        .expect("start");
    faults.fail_next("TransactWriteItems", Fault::ResponseLostAfterCommit, 2);
    w.deliver(&runner, &waiting).await;
    assert_eq!(faults.pending(), 0, "every fault was injected");
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(w.log(&id).await, HAPPY, "no step ran twice");
    assert_eq!(w.stock().await, STOCK - 2, "stock taken once");
    w.assert_charged_once(&done, 0);
}

/// The payment a checkout creates, and what the saga applies to it, carry the checkout's trace (kept with
/// the saga): the payment's events continue the checkout's request through the relay to the consumers.
#[tokio::test]
async fn the_checkouts_payment_carries_the_checkouts_trace() {
    use tracing::Instrument;
    use tracing_subscriber::layer::SubscriberExt;
    const TRACE: &str = "5759e988bd862e3fe1be46a994272793";
    let provider = shared::telemetry::tracer_provider();
    // One process per test (nextest): this subscriber is the process's.
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(shared::telemetry::otel_layer(&provider)),
    )
    .unwrap();
    let w = world().await;
    let runner = w.runner();
    let caller = format!("00-{TRACE}-53995c3f42cd8ad8-01");
    let request = shared::telemetry::span_with_parent("checkout", "corr-trace", Some(&caller));
    let waiting = runner
        .start(order(), w.checkout("pm_succeeded", 1))
        .instrument(request)
        .await
        .expect("start");
    let checkout = waiting
        .trace_context
        .clone()
        .expect("the saga keeps the checkout's trace");
    assert_eq!(&checkout[3..35], TRACE, "{checkout}");
    let payment = waiting.payment_id.clone().expect("a payment");
    let events = w.ctx.events(&payment).await.unwrap();
    assert!(events.len() >= 2, "created, then the charge's answer: {events:?}");
    for e in &events {
        assert_eq!(e.trace_context.as_deref(), Some(checkout.as_str()), "{:?}", e.kind);
    }
}

/// Records the simulator's dispute webhooks on the payment as the webhook intake records them: one
/// observation per event (the dispute's id, status and amount, the fact its type names), deduplicated by the
/// event id. (The intake's parsing of these events is tested in webhook-intake's suite.)
async fn record_dispute(w: &World, payment: &PaymentId, webhooks: &[WebhookEvent]) {
    for hook in webhooks {
        let object = &hook.body["data"]["object"];
        let fact = match hook.kind {
            "charge.dispute.created" => DisputeFact::Created,
            "charge.dispute.funds_withdrawn" => DisputeFact::FundsWithdrawn,
            "charge.dispute.funds_reinstated" => DisputeFact::FundsReinstated,
            "charge.dispute.closed" => DisputeFact::Closed,
            _ => DisputeFact::Updated,
        };
        let report = DisputeReport {
            id: DisputeId::parse(object["id"].as_str().unwrap()).unwrap(),
            status: DisputeStatus::parse(object["status"].as_str().unwrap()).unwrap(),
            amount_minor: object["amount"].as_u64().unwrap(),
            fact,
        };
        let mut observation = Observation::new(
            Channel::Webhook,
            Outcome::Dispute(report),
            CorrelationId::parse("corr-dispute").unwrap(),
        )
        .with_event(PspEventId::parse(hook.id.as_str()).unwrap(), shared::clock::now_ms());
        observation.psp_reference = Some(PspReference::parse(object["payment_intent"].as_str().unwrap()).unwrap());
        w.ctx
            .store
            .finalize(payment, &observation, None)
            .await
            .expect("dispute recorded");
    }
}

#[tokio::test]
async fn a_refund_refused_because_the_charge_is_disputed_ends_compensated_with_one_escalation() {
    let w = world().await;
    let id = order();
    let waiting = w
        .runner_for("checkout-api")
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    let payment = waiting.payment_id.clone().expect("payment");
    // The cardholder's bank disputes the charge (Stripe withdraws the funds), and the webhooks reach us.
    let intent = w.sim.ledger.intents_for(payment.as_str()).remove(0);
    let charge = intent["latest_charge"]["id"].as_str().expect("charge").to_owned();
    let (_, webhooks) = w.sim.ledger.dispute(&charge, "needs_response").expect("disputed");
    record_dispute(&w, &payment, &webhooks).await;
    // The customer cancels: the order cannot be confirmed, so the saga must refund; Stripe refuses.
    assert_eq!(
        orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap(),
        orders::Cancel::Cancelled
    );
    w.inbox_deliver(&w.runner_for("checkout-events"), &waiting).await;
    let refunds = || {
        w.sim
            .ledger
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == "/v1/refunds")
            .count()
    };
    assert_eq!(refunds(), 1, "asked once: a refusal for good is not retried");
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(
        (done.captured, done.refunded_minor, done.refund_impossible.as_deref()),
        (true, 0, Some("refund impossible: disputed"))
    );
    let log = w.log(&id).await;
    assert_eq!(log[..6], FAILED_AFTER_CAPTURE[..6]);
    assert_eq!(
        log[6..],
        [(K::RefundImpossible, S::Charge), (K::StockReleased, S::ReserveStock)]
    );
    let events = w.runner().sagas.events(&id).await.expect("saga events");
    assert_eq!(events[6].detail.as_deref(), Some("refund impossible: disputed"));
    assert_eq!(w.stock().await, STOCK, "the stock goes back all the same");
    let escalated = w.escalations().await;
    assert_eq!(escalated.len(), 1, "{escalated:?}");
    assert_eq!(
        (&escalated[0]["order_id"], &escalated[0]["action"]),
        (&serde_json::json!(id.as_str()), &serde_json::json!("refund_payment"))
    );
    let error = escalated[0]["error"].as_str().expect("error");
    assert!(
        error.starts_with("refund impossible: disputed") && error.contains("charge_disputed"),
        "{error}"
    );
    // The money stays taken, and the payment shows why: its dispute, the funds withdrawn.
    let held = w.ctx.store.get(&payment).await.unwrap().expect("payment");
    assert_eq!(held.status, PaymentStatus::Captured);
    let dispute = held.dispute.expect("the payment holds the dispute");
    assert_eq!(
        (dispute.status, dispute.funds_withdrawn),
        (DisputeStatus::NeedsResponse, true)
    );
    // Terminal: the sweeper never resumes it; nothing more is asked of Stripe and no one is told again.
    let requests = w.sim.ledger.requests().len();
    let sweeper = w.runner_for("checkout-sweeper");
    for _ in 0..2 {
        sweeper::sweep(&sweeper, Duration::ZERO, 1000, later())
            .await
            .expect("sweep");
    }
    assert_eq!(w.sim.ledger.requests().len(), requests, "no PSP call");
    assert!(w.escalations().await.is_empty(), "no second escalation");
    // Its inbox may hear the payment's events again (the dispute's among them): still nothing moves.
    w.inbox_deliver(&w.runner_for("checkout-events"), &waiting).await;
    assert_eq!(w.saga(&id).await, done);
    assert_eq!(refunds(), 1);
}
