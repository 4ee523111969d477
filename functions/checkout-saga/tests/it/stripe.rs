//! The saga and recovery end to end against the Stripe-speaking simulator, one test per scenario: a 3-D
//! Secure challenge that lasts or is abandoned, a decline retried by the customer, a long processing, a lost
//! answer, a cancel refused because the payment succeeded, refunds made at the PSP, and a 5xx storm that opens
//! the circuit breaker.

use crate::support::*;
use checkout_saga::runner::Runner;
use checkout_saga::saga::{SagaRecord, SagaStatus};
use checkout_saga::sweeper;
use psp::breaker::BreakerState;
use psp::{BreakerSettings, CircuitBreaker, IntentStatus};
use psp::{ChargeRequest, PspError, StripeApi};
use recovery::Reconciled;
use shared::{Channel, CorrelationId, PaymentStatus, PspReference};
use shared::{EventKind, Observation, Payment};
use std::time::Duration;

impl World {
    async fn payment(&self, record: &SagaRecord) -> Payment {
        let id = record.payment_id.as_ref().expect("payment");
        self.ctx.store.get(id).await.expect("read").expect("payment")
    }

    async fn reconcile<P: StripeApi>(&self, runner: &Runner<P>, record: &SagaRecord) -> Reconciled {
        let id = record.payment_id.as_ref().expect("payment");
        runner
            .recovery
            .reconcile(id, CorrelationId::parse("corr-recovery").unwrap())
            .await
            .expect("reconcile")
    }

    /// Once the simulator's slow scenario is over, recovery (the webhook here goes nowhere) captures the
    /// payment, and its event completes the checkout, charged once.
    async fn recovery_completes_after_the_slow_scenario<P: StripeApi>(&self, runner: &Runner<P>, waiting: &SagaRecord) {
        tokio::time::sleep(SLOW + Duration::from_millis(100)).await;
        assert_eq!(
            self.reconcile(runner, waiting).await,
            Reconciled::Applied(EventKind::PaymentCaptured)
        );
        self.deliver(runner, waiting).await;
        assert_eq!(self.saga(&waiting.order_id).await.status, SagaStatus::Completed);
        self.assert_charged_once(waiting, 0);
    }

    /// The PaymentIntent's id of this saga's payment.
    fn intent_id(&self, record: &SagaRecord) -> PspReference {
        record.psp_reference.clone().expect("a PaymentIntent")
    }
}

fn shows_secret(p: &Payment) -> bool {
    let view = serde_json::to_value(shared::ClientView::from(p)).unwrap();
    view.get("client_secret").is_some() && view.get("redirect_url").is_some()
}

#[tokio::test]
async fn a_lasting_3ds_challenge_keeps_its_action_through_recovery_and_the_checkout_completes() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_slow_action", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    let before = w.payment(&waiting).await;
    assert_eq!(before.status, PaymentStatus::RequiresAction);
    // Recovery asks while the customer is in the challenge: nothing changes, the secret stays.
    assert_eq!(w.reconcile(&runner, &waiting).await, Reconciled::Unchanged);
    let during = w.payment(&waiting).await;
    assert_eq!(
        (during.status, during.version),
        (PaymentStatus::RequiresAction, before.version)
    );
    assert!(shows_secret(&during), "the customer still needs the challenge");
    // The customer completes it.
    w.recovery_completes_after_the_slow_scenario(&runner, &waiting).await;
}

#[tokio::test]
async fn an_abandoned_challenge_keeps_the_customers_action_however_often_recovery_asks() {
    let w = world().await;
    let runner = w.runner();
    let waiting = runner
        .start(order(), w.checkout("pm_abandoned_action", 1))
        .await
        .expect("start");
    for _ in 0..3 {
        assert_eq!(w.reconcile(&runner, &waiting).await, Reconciled::Unchanged);
    }
    let payment = w.payment(&waiting).await;
    assert_eq!(payment.status, PaymentStatus::RequiresAction);
    assert!(shows_secret(&payment));
    assert_eq!(w.saga(&waiting.order_id).await.status, SagaStatus::PaymentPending);
}

#[tokio::test]
async fn a_processing_payment_gets_back_the_action_stripe_asks_for() {
    let w = world().await;
    let runner = w.runner();
    let waiting = runner
        .start(order(), w.checkout("pm_abandoned_action", 1))
        .await
        .expect("start");
    // Our side heard `processing` since (a webhook); Stripe says the customer must act.
    let id = waiting.payment_id.clone().unwrap();
    let heard = Observation::new(
        Channel::Webhook,
        shared::Outcome::Processing,
        CorrelationId::parse("c").unwrap(),
    );
    w.ctx.store.finalize(&id, &heard, None).await.expect("processing");
    assert_eq!(w.payment(&waiting).await.status, PaymentStatus::Processing);
    assert_eq!(
        w.reconcile(&runner, &waiting).await,
        Reconciled::Applied(EventKind::ActionRequired)
    );
    let after = w.payment(&waiting).await;
    assert_eq!(after.status, PaymentStatus::RequiresAction);
    assert!(shows_secret(&after));
}

#[tokio::test]
async fn a_declined_card_retried_by_the_customer_completes_the_checkout() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_decline_then_retry", 1))
        .await
        .expect("start");
    assert_eq!(
        waiting.status,
        SagaStatus::PaymentPending,
        "a decline waits for the customer's retry"
    );
    let declined = w.payment(&waiting).await;
    assert_eq!(declined.status, PaymentStatus::AttemptFailed);
    assert_eq!(declined.reason.as_deref(), Some("insufficient_funds"));
    assert_eq!(
        w.reconcile(&runner, &waiting).await,
        Reconciled::Unchanged,
        "Stripe still says the same"
    );
    w.recovery_completes_after_the_slow_scenario(&runner, &waiting).await;
}

#[tokio::test]
async fn a_long_processing_payment_stays_processing_until_stripe_says_succeeded() {
    let w = world().await;
    let runner = w.runner();
    let waiting = runner
        .start(order(), w.checkout("pm_slow_processing", 1))
        .await
        .expect("start");
    assert_eq!(w.payment(&waiting).await.status, PaymentStatus::Processing);
    assert_eq!(w.reconcile(&runner, &waiting).await, Reconciled::Unchanged);
    tokio::time::sleep(SLOW + Duration::from_millis(100)).await;
    assert_eq!(
        w.reconcile(&runner, &waiting).await,
        Reconciled::Applied(EventKind::PaymentCaptured)
    );
}

#[tokio::test]
async fn a_charge_whose_answer_was_lost_is_retried_with_its_key_and_charged_once() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_lost_answer", 1))
        .await
        .expect("start");
    assert_eq!(
        w.payment(&waiting).await.status,
        PaymentStatus::Captured,
        "the replayed answer says succeeded"
    );
    assert_eq!(
        w.sim.ledger.auth_counts(),
        (2, 0),
        "the first answer was lost; the retry got it replayed"
    );
    w.deliver(&runner, &waiting).await;
    assert_eq!(w.saga(&id).await.status, SagaStatus::Completed);
    w.assert_charged_once(&waiting, 0);
}

#[tokio::test]
async fn a_cancel_refused_because_the_payment_succeeded_shows_the_succeeded_payment_intent() {
    let w = world().await;
    let runner = w.runner();
    let waiting = runner
        .start(order(), w.checkout("pm_slow_action", 1))
        .await
        .expect("start");
    tokio::time::sleep(SLOW + Duration::from_millis(100)).await;
    let refused = w
        .psp()
        .cancel("order:cancel", &w.intent_id(&waiting))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, PspError::Refused { status: 400, error }
        if error.code.as_deref() == Some("payment_intent_unexpected_state")),
        "{refused}"
    );
    assert_eq!(
        refused.payment_intent().map(|pi| pi.status),
        Some(IntentStatus::Succeeded)
    );
    // Before the success, the same cancel cancels, once per key.
    let open = runner
        .start(order(), w.checkout("pm_abandoned_action", 1))
        .await
        .expect("start");
    let canceled = w
        .psp()
        .cancel("open:cancel", &w.intent_id(&open))
        .await
        .expect("cancel");
    assert_eq!(canceled.status, IntentStatus::Canceled);
    let again = w
        .psp()
        .cancel("open:cancel", &w.intent_id(&open))
        .await
        .expect("replayed");
    assert_eq!(again.status, IntentStatus::Canceled);
    assert_eq!(
        w.reconcile(&runner, &open).await,
        Reconciled::Applied(EventKind::PaymentFailed)
    );
}

#[tokio::test]
async fn recovery_records_partial_and_full_refunds_made_at_the_psp() {
    let w = world().await;
    let runner = w.runner();
    let partial = runner.start(order(), w.checkout("pm_silent", 1)).await.expect("start");
    let full = runner.start(order(), w.checkout("pm_silent", 1)).await.expect("start");
    // At Stripe both succeeded (silently) and were refunded (say, from the dashboard): 10.00 of 25.00, and all.
    let psp = w.psp();
    let r = psp
        .refund("p1", &w.intent_id(&partial), Some(1000))
        .await
        .expect("partial refund");
    assert_eq!((r.amount, r.is_accepted()), (1000, true));
    psp.refund("f1", &w.intent_id(&full), None).await.expect("full refund");
    assert_eq!(
        w.reconcile(&runner, &partial).await,
        Reconciled::Applied(EventKind::RefundRecorded)
    );
    let p = w.payment(&partial).await;
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Captured, 1000));
    assert_eq!(
        w.reconcile(&runner, &full).await,
        Reconciled::Applied(EventKind::PaymentRefunded)
    );
    let f = w.payment(&full).await;
    assert_eq!((f.status, f.refunded_minor), (PaymentStatus::Refunded, 2500));
    w.assert_charged_once(&partial, 1000);
    w.assert_charged_once(&full, 2500);
}

/// A cool-down long enough that a busy test machine does not see it end between two steps of a test.
const COOL_DOWN: Duration = Duration::from_secs(2);

fn breaker_settings() -> BreakerSettings {
    BreakerSettings {
        failure_threshold: 2,
        window: Duration::from_secs(30),
        cool_down: COOL_DOWN,
        cache_ttl: Duration::ZERO,
        probe_timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn a_5xx_storm_opens_the_breaker_sagas_and_recovery_defer_and_one_probe_closes_it() {
    let w = world().await;
    let guarded = || {
        CircuitBreaker::new(
            w.psp(),
            w.ctx.client.clone(),
            &w.ctx.table,
            "stripe",
            breaker_settings(),
        )
    };
    // The checkout API's runner, its breaker on its own client: the storm opens the shared item from there.
    let runner = w.runner_as(
        "checkout-api",
        w.guarded_for("checkout-api", w.psp(), breaker_settings()),
        settings(),
    );
    let silent = runner.start(order(), w.checkout("pm_silent", 1)).await.expect("start");

    w.sim.ledger.storm(503, 10_000);
    let id = order();
    let deferred = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start answers");
    assert_eq!(deferred.status, SagaStatus::Charging, "the charge waits for the PSP");
    assert!(matches!(runner.psps.state().await.unwrap(), BreakerState::Open { .. }));
    assert!(
        w.escalations().await.is_empty(),
        "a PSP outage is not escalated saga by saga"
    );
    // Every instance sees it open (one shared item): no call reaches the PSP.
    let (calls_before, _) = w.sim.ledger.auth_counts();
    let other_instance = guarded();
    assert!(matches!(
        other_instance.retrieve(&w.intent_id(&silent)).await,
        Err(PspError::CircuitOpen { .. })
    ));
    assert_eq!(w.reconcile(&runner, &silent).await, Reconciled::Deferred);
    assert_eq!(w.sim.ledger.auth_counts().0, calls_before, "no call while open");

    // The storm ends; after the cool-down the sweeper's run is the probe, which closes the breaker.
    w.sim.ledger.storm(503, 0);
    tokio::time::sleep(breaker_settings().cool_down + Duration::from_millis(100)).await;
    let sweeper_runner = w.runner_as(
        "checkout-sweeper",
        w.guarded_for("checkout-sweeper", w.psp(), breaker_settings()),
        settings(),
    );
    sweeper::sweep(&sweeper_runner, Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    assert_eq!(other_instance.state().await.unwrap(), BreakerState::Closed);
    let resumed = w.saga(&id).await;
    assert_eq!(resumed.status, SagaStatus::PaymentPending);
    w.inbox_deliver(&w.runner_for("checkout-events"), &resumed).await;
    assert_eq!(w.saga(&id).await.status, SagaStatus::Completed);
    w.assert_charged_once(&resumed, 0);
}

#[tokio::test]
async fn a_failed_probe_keeps_the_breaker_open_for_another_cool_down() {
    let w = world().await;
    // The reconciler's breaker opens the shared item; the inbox's (another function, the same item) probes.
    let breaker = w.guarded_for("reconciler", w.psp(), breaker_settings());
    let inbox = w.guarded_for("checkout-events", w.psp(), breaker_settings());
    let runner = w.runner();
    let waiting = runner.start(order(), w.checkout("pm_silent", 1)).await.expect("start");
    let reference = w.intent_id(&waiting);
    w.sim.ledger.storm(500, 10_000);
    // Each failed attempt counts (at most two per request): one call's three attempts reach the threshold of 2.
    assert!(breaker.retrieve(&reference).await.unwrap_err().is_transient());
    let BreakerState::Open { until_ms: first } = breaker.state().await.unwrap() else {
        panic!("open")
    };
    tokio::time::sleep(breaker_settings().cool_down + Duration::from_millis(100)).await;
    assert!(
        inbox.retrieve(&reference).await.unwrap_err().is_transient(),
        "the probe went through and failed"
    );
    let BreakerState::Open { until_ms: second } = breaker.state().await.unwrap() else {
        panic!("open again")
    };
    assert!(second > first);
    assert!(matches!(
        breaker.retrieve(&reference).await,
        Err(PspError::CircuitOpen { .. })
    ));
    let emf = psp::breaker::emf("stripe", 1);
    assert_eq!(emf["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Payments/Psp");
    // The template's alarm watches the metric by stage only.
    assert_eq!(
        emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        serde_json::json!([["Stage"]])
    );
    assert_eq!(emf["BreakerOpened"], 1);
}

/// A payment we hold as failed whose money the PSP took anyway (here: a careless client reported the charge
/// failed; at Stripe it succeeded). The success reaches us three times, by two webhooks and the sync path:
/// one anomaly; the reconciler refunds it once, records the refund with its reason, and lets the payment go.
#[tokio::test]
async fn money_taken_on_a_failed_payment_is_one_anomaly_and_refunded_once() {
    use shared::store::open_index::{open_since, OpenKind};
    let w = world().await;
    let runner = w.runner();
    let psp = w.psp();
    let order_id = order();
    let id = shared::PaymentId::generate(rand_id());
    let new = shared::NewPayment {
        id: id.clone(),
        order_id: order_id.clone(),
        money: fixture_money(),
        provider: shared::PspName::Stripe,
        psp_reference: None,
        metadata: Default::default(),
        correlation_id: CorrelationId::parse("corr-stray").unwrap(),
        trace_context: None,
        now_ms: shared::clock::now_ms(),
    };
    w.ctx.store.create(new).await.expect("payment");
    let request = ChargeRequest {
        payment_id: &id,
        order_id: &order_id,
        money: &fixture_money(),
        payment_method: "pm_succeeded",
    };
    let intent = psp
        .charge(&format!("{order_id}:charge"), &request)
        .await
        .expect("charge");
    assert_eq!(intent.status, IntentStatus::Succeeded);
    let failed = Observation::new(
        Channel::Sync,
        shared::Outcome::Failed {
            reason: "reported failed by the client".into(),
        },
        CorrelationId::parse("corr-careless").unwrap(),
    );
    w.ctx.store.finalize(&id, &failed, None).await.expect("fail it");

    let success = |path: Channel| {
        intent
            .observation(path, CorrelationId::parse("corr-success").unwrap())
            .expect("readable")
            .expect("an outcome")
    };
    let mut first = success(Channel::Webhook);
    first.psp_event_id = Some(shared::PspEventId::parse("evt_stray_1").unwrap());
    let mut second = success(Channel::Webhook);
    second.psp_event_id = Some(shared::PspEventId::parse("evt_stray_2").unwrap());
    let mut anomalies = 0;
    for observation in [first, second, success(Channel::Sync)] {
        let outcome = w.ctx.store.finalize(&id, &observation, None).await.expect("finalize");
        if outcome.result == shared::FinalizeResult::Applied(EventKind::AnomalyRecorded) {
            anomalies += 1;
        }
    }
    assert_eq!(anomalies, 1, "the same money is one anomaly");
    let held = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (held.status, held.refund_due()),
        (PaymentStatus::Failed, Some(held.anomalies))
    );
    let open = open_since(
        &w.ctx.client,
        &w.ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
        OpenKind::Payment,
        i64::MAX,
        800,
    )
    .await
    .expect("index");
    assert!(open.contains(&format!("PAYMENT#{id}")), "recovery must find it");

    let correlation = || CorrelationId::parse("corr-recovery").unwrap();
    assert_eq!(
        runner.recovery.reconcile(&id, correlation()).await.expect("reconcile"),
        Reconciled::Applied(EventKind::PaymentRefunded)
    );
    assert_eq!(
        runner.recovery.reconcile(&id, correlation()).await.expect("again"),
        Reconciled::NotOpen
    );
    let done = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.refunded_minor, done.refund_due()),
        (PaymentStatus::Failed, 2500, None)
    );
    let events = w.ctx.events(&id).await.expect("events");
    let refund = events.last().expect("events");
    assert_eq!(refund.kind, EventKind::PaymentRefunded);
    assert!(
        refund
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("after the payment failed"),
        "{refund:?}"
    );
    let intents = w.sim.ledger.intents_for(id.as_str());
    assert_eq!(intents.len(), 1);
    assert_eq!(
        intents[0]["latest_charge"]["amount_refunded"].as_u64(),
        Some(2500),
        "refunded once, in full"
    );
    // A late report of the same success changes nothing, and the payment left the index.
    let late = w
        .ctx
        .store
        .finalize(&id, &success(Channel::Recovery), None)
        .await
        .expect("late");
    assert!(matches!(late.result, shared::FinalizeResult::Ignored(_)));
    let open = open_since(
        &w.ctx.client,
        &w.ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
        OpenKind::Payment,
        i64::MAX,
        800,
    )
    .await
    .expect("index");
    assert!(!open.contains(&format!("PAYMENT#{id}")));
}

fn rand_id() -> u128 {
    uuid::Uuid::new_v4().as_u128()
}

/// A key Stripe refuses (the simulator answers 401 to any key but its account's, as Stripe answers a rolled or
/// revoked one) is a deployment fault, never the customer's refusal: the saga waits at its charge (nothing
/// compensated, no stock released, nothing escalated), recovery leaves an open payment open, and once the
/// functions have the right key the sweeper charges and recovery resolves.
#[tokio::test]
async fn a_refused_key_defers_the_saga_and_recovery_until_the_key_is_right() {
    let w = world().await;
    let good = w.runner();
    let open = good.start(order(), w.checkout("pm_silent", 1)).await.expect("start");
    let rolled = {
        let mut settings = psp::StripeSettings::local(&w.psp_url, "sk_test_rolled").expect("settings");
        settings.retries = fast_backoff();
        psp::StripeClient::new(&settings, psp::ApiKey::parse("sk_test_rolled").unwrap()).unwrap()
    };
    let refused = rolled.retrieve(&w.intent_id(&open)).await.unwrap_err();
    assert!(
        matches!(refused, PspError::AuthFailed { status: 401, .. }) && refused.is_deferred(),
        "{refused}"
    );
    let runner = w.runner_over(rolled);
    let stock = w.stock().await;
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start answers");
    assert_eq!(
        waiting.status,
        SagaStatus::Charging,
        "the charge waits for a key Stripe accepts"
    );
    assert_eq!(w.saga(&id).await.status, SagaStatus::Charging);
    assert_eq!(
        w.stock().await,
        stock - 1,
        "the stock stays reserved: nothing compensated"
    );
    assert!(
        w.escalations().await.is_empty(),
        "a key problem is alarmed once, not escalated saga by saga"
    );
    assert_eq!(w.reconcile(&runner, &open).await, Reconciled::Deferred);
    assert!(w.payment(&open).await.is_open(), "recovery leaves the payment open");

    // The right key: the sweeper charges the waiting checkout, recovery resolves the open payment.
    sweeper::sweep(&good, Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    let resumed = w.saga(&id).await;
    assert_eq!(resumed.status, SagaStatus::PaymentPending);
    w.assert_charged_once(&resumed, 0);
    assert_eq!(
        w.reconcile(&good, &open).await,
        Reconciled::Applied(EventKind::PaymentCaptured)
    );
}
