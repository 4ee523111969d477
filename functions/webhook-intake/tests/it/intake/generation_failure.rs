//! Events Stripe never made: the simulator fails to generate a payment's events and sends Stripe's thin
//! `v2.core.health.event_generation_failure.resolved` instead; the intake (same endpoint, same
//! `Stripe-Signature`) hands it to recovery, whose next run reads Stripe's failure event and the object it
//! names once and applies it, open payment or not.

use super::{result, stripe, TestIntake, STRIPE_NEW};
use integration_tests::{Fault, FaultInjector, TestContext};
use psp::{ApiKey, ChargeRequest, StripeApi, StripeClient, StripeSettings};
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use recovery::{Recovery, RecoverySettings};
use shared::{
    CorrelationId, Currency, EventKind, Money, NewPayment, OrderId, PaymentId, PaymentStatus, PspReference,
    RefundStatus, SigningSecret,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const KEY: &str = "sk_test_generation_failure";

struct World {
    intake: TestIntake,
    sim: Arc<Simulator>,
    psp: StripeClient,
    recovery: Recovery<StripeClient>,
}

impl World {
    async fn new() -> Self {
        Self::on(TestContext::new().await).await
    }

    /// The world on `ctx` (one with faults, say).
    async fn on(ctx: TestContext) -> Self {
        Self::with(ctx, RecoverySettings::default()).await
    }

    /// The world on `ctx`, its recovery run with `settings`.
    async fn with(ctx: TestContext, settings: RecoverySettings) -> Self {
        let sim = Arc::new(Simulator {
            ledger: Ledger::new(KEY, Timings::default(), None),
            // Nothing listens there: the test hands each failure event to the intake itself.
            webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
            secret: SigningSecret::parse(STRIPE_NEW).unwrap(),
            delivery: DeliveryOptions {
                max_attempts: 1,
                ..DeliveryOptions::default()
            },
            client: HttpClient::default(),
            storm_rate: 0.0,
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(sim.clone().serve(listener));
        let psp = StripeClient::new(&StripeSettings::local(&url, KEY).unwrap(), ApiKey::parse(KEY).unwrap()).unwrap();
        let intake = TestIntake::with(ctx);
        let recovery = Recovery::new(
            &intake.ctx.client_for("reconciler"),
            &intake.ctx.config(),
            psp.clone(),
            settings,
        );
        Self {
            intake,
            sim,
            psp,
            recovery,
        }
    }

    /// A charge of 10.00 EUR with `method` that succeeds at Stripe, and our payment for it, still `pending`.
    async fn charged(&self, method: &str) -> (PaymentId, PspReference) {
        self.charged_for(method, shared::PspName::Stripe, true).await
    }

    /// [`World::charged`], the payment recorded as `provider`'s, bound to its PaymentIntent's id or not (the
    /// merchant's page confirmed a PaymentIntent carrying our `metadata.payment_id`; nothing bound it yet).
    async fn charged_for(&self, method: &str, provider: shared::PspName, bound: bool) -> (PaymentId, PspReference) {
        let (id, order, money, reference) = self.charged_at_stripe(method).await;
        let new = NewPayment {
            id: id.clone(),
            order_id: order,
            money,
            provider,
            psp_reference: bound.then(|| reference.clone()),
            metadata: Default::default(),
            correlation_id: CorrelationId::parse("corr-setup").unwrap(),
            trace_context: None,
            now_ms: shared::clock::now_ms(),
        };
        self.intake.ctx.uncounted_store().create(new).await.unwrap();
        (id, reference)
    }

    /// A charge of 10.00 EUR with `method` at Stripe for a new payment id (with our marker in its metadata),
    /// of which no payment is written: its id, order, money and PaymentIntent.
    async fn charged_at_stripe(&self, method: &str) -> (PaymentId, OrderId, Money, PspReference) {
        let id = PaymentId::parse(format!("pay_gen_{}", uuid::Uuid::new_v4().simple())).unwrap();
        let order = OrderId::parse(format!("order-{id}")).unwrap();
        let money = Money::new(1000, Currency::parse("EUR").unwrap()).unwrap();
        let request = ChargeRequest {
            payment_id: &id,
            order_id: &order,
            money: &money,
            payment_method: method,
        };
        let pi = self.psp.charge(&format!("{id}:charge"), &request).await.unwrap();
        let reference = PspReference::parse(pi.id.as_str()).unwrap();
        (id, order, money, reference)
    }

    /// Every failure event the simulator made, each delivered to the intake (signed now): their answers.
    async fn deliver_failures(&self) -> Vec<String> {
        let mut answers = Vec::new();
        for thin in self.sim.ledger.generation_failures() {
            let answer = self.intake.send(stripe(&thin, STRIPE_NEW)).await;
            assert_eq!(answer.status, 200, "{:?}", answer.body);
            answers.push(result(&answer).to_owned());
        }
        answers
    }

    /// How many requests the simulator received for `path`.
    fn reads(&self, path: &str) -> usize {
        self.sim
            .ledger
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path)
            .count()
    }

    async fn run(&self) -> recovery::RecoveryReport {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        self.recovery.run(deadline).await.unwrap()
    }
}

#[tokio::test]
async fn a_payment_intent_whose_event_stripe_never_made_is_read_once_and_applied() {
    let w = World::new().await;
    w.sim.ledger.fail_event_generation(&["payment_intent.succeeded"]);
    let (id, reference) = w.charged("pm_succeeded").await;
    assert!(
        w.sim.ledger.events_of_type("payment_intent.succeeded").is_empty(),
        "the event was never made: not listed"
    );
    assert_eq!(w.deliver_failures().await, ["queued"]);
    assert_eq!(
        w.deliver_failures().await,
        ["duplicate"],
        "Stripe's retry of the same failure event"
    );
    let report = w.run().await;
    assert_eq!((report.rechecked, report.rechecks_unread, report.errors), (1, 0, 0));
    let payment = w.intake.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        payment.status,
        PaymentStatus::Captured,
        "read at once, not after the payment's 5 minutes"
    );
    let failure = w.sim.ledger.generation_failures()[0]["id"].as_str().unwrap().to_owned();
    let intent = format!("/v1/payment_intents/{reference}");
    assert_eq!(
        (w.reads(&format!("/v2/core/events/{failure}")), w.reads(&intent)),
        (1, 1)
    );
    // Done with: the next run reads nothing again.
    let again = w.run().await;
    assert_eq!(again.rechecked, 0);
    assert_eq!(
        (w.reads(&format!("/v2/core/events/{failure}")), w.reads(&intent)),
        (1, 1)
    );
}

#[tokio::test]
async fn a_captured_payments_refund_whose_events_stripe_never_made_is_read_once_and_applied() {
    let w = World::new().await;
    let (id, reference) = w.charged("pm_refund_fails").await;
    w.recovery
        .reconcile(&id, CorrelationId::parse("corr-capture").unwrap())
        .await
        .unwrap();
    let captured = w.intake.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(captured.status, PaymentStatus::Captured);
    // Refunded at Stripe (from the Dashboard, say); its refund.created, .updated and .failed never made.
    w.sim
        .ledger
        .fail_event_generation(&["refund.created", "refund.updated", "refund.failed"]);
    let refund = w.psp.refund("dashboard-refund", &reference, None).await.unwrap();
    assert_eq!(w.deliver_failures().await, ["queued", "queued", "queued"]);
    let report = w.run().await;
    assert_eq!((report.rechecked, report.rechecks_unread, report.errors), (3, 0, 0));
    assert_eq!(
        w.reads(&format!("/v1/refunds/{}", refund.id)),
        1,
        "one refund named thrice is read once"
    );
    let payment = w.intake.ctx.store.get(&id).await.unwrap().unwrap();
    let entry = payment
        .refunds
        .iter()
        .find(|r| r.refund_id == refund.id)
        .expect("the refund is applied");
    assert_eq!((entry.amount_minor, entry.status), (1000, RefundStatus::Failed));
    let kinds: Vec<EventKind> = w
        .intake
        .ctx
        .events(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.contains(&EventKind::RefundFailed), "{kinds:?}");
    assert_eq!(w.run().await.rechecked, 0, "done with");
    assert_eq!(w.reads(&format!("/v1/refunds/{}", refund.id)), 1);
}

#[tokio::test]
async fn a_captured_payments_dispute_whose_events_stripe_never_made_is_read_once_and_applied() {
    let w = World::new().await;
    let (id, reference) = w.charged("pm_succeeded").await;
    w.recovery
        .reconcile(&id, CorrelationId::parse("corr-capture").unwrap())
        .await
        .unwrap();
    let charge = match w.psp.retrieve(&reference).await.unwrap().latest_charge {
        Some(psp::stripe::LatestCharge::Expanded(charge)) => charge.id,
        other => panic!("{other:?}"),
    };
    w.sim
        .ledger
        .fail_event_generation(&["charge.dispute.created", "charge.dispute.funds_withdrawn"]);
    let (dispute, events) = w.sim.ledger.dispute(&charge, "needs_response").unwrap();
    w.sim.send_webhooks(events);
    assert_eq!(w.deliver_failures().await, ["queued", "queued"]);
    let report = w.run().await;
    assert_eq!((report.rechecked, report.rechecks_unread, report.errors), (2, 0, 0));
    let dispute_id = dispute["id"].as_str().unwrap();
    assert_eq!(
        w.reads(&format!("/v1/disputes/{dispute_id}")),
        2,
        "one dispute named by two event types is read for each: each reports its own fact"
    );
    let payment = w.intake.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        payment.status,
        PaymentStatus::Captured,
        "a dispute leaves the payment captured"
    );
    let held = payment.dispute.expect("the dispute is applied");
    assert_eq!(held.id.as_str(), dispute_id);
    assert!(
        held.funds_withdrawn,
        "the funds withdrawn are a fact of their own, kept beside the dispute's opening: {held:?}"
    );
    let kinds: Vec<EventKind> = w
        .intake
        .ctx
        .events(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.contains(&EventKind::DisputeOpened), "{kinds:?}");
}

#[tokio::test]
async fn an_object_stripe_will_not_tell_about_is_escalated_once_and_a_thin_event_of_another_mode_is_quarantined() {
    let w = World::new().await;
    // A failure event Stripe does not know (another account's, say): one escalation, then nothing more.
    let unknown = serde_json::json!({ "id": "evt_test_unknown", "object": "v2.core.event",
        "type": "v2.core.health.event_generation_failure.resolved", "livemode": false,
        "created": "2026-12-04T18:00:00.000Z" });
    assert_eq!(result(&w.intake.send(stripe(&unknown, STRIPE_NEW)).await), "queued");
    let report = w.run().await;
    assert_eq!((report.rechecked, report.rechecks_unread), (0, 1));
    assert_eq!(w.run().await.rechecks_unread, 0, "escalated once");
    assert_eq!(w.reads("/v2/core/events/evt_test_unknown"), 1);
    // A live-mode failure on this test-mode endpoint: quarantined, nothing queued.
    let mut live = unknown.clone();
    live["id"] = "evt_live_1".into();
    live["livemode"] = true.into();
    assert_eq!(result(&w.intake.send(stripe(&live, STRIPE_NEW)).await), "quarantined");
    assert_eq!(w.run().await.rechecks_unread, 0);
    assert_eq!(w.reads("/v2/core/events/evt_live_1"), 0);
}

#[tokio::test]
async fn what_cannot_be_kept_or_read_now_is_retried_until_it_is() {
    let faults = FaultInjector::new();
    let w = World::on(TestContext::with_faults(faults.clone()).await).await;
    w.sim.ledger.fail_event_generation(&["payment_intent.succeeded"]);
    let (id, _) = w.charged("pm_succeeded").await;
    let thin = w.sim.ledger.generation_failures()[0].clone();
    let status = async || w.intake.ctx.store.get(&id).await.unwrap().unwrap().status;
    // DynamoDB keeps failing: a 503, nothing kept, and Stripe retries the delivery until it is.
    faults.fail_next("PutItem", Fault::Throttling, shared::aws::MAX_ATTEMPTS as usize);
    let refused = w.intake.send(stripe(&thin, STRIPE_NEW)).await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(w.run().await.rechecked, 0, "nothing was kept");
    assert_eq!(result(&w.intake.send(stripe(&thin, STRIPE_NEW)).await), "queued");
    // Stripe unavailable: an error, the object read again at the next run.
    w.sim.ledger.storm(503, 1000);
    let down = w.run().await;
    assert_eq!((down.rechecked, down.errors), (0, 1));
    w.sim.ledger.storm(503, 0);
    // The payment's lease held (the intake at work): read again at the next run.
    let held = w
        .intake
        .ctx
        .leases
        .acquire(&w.intake.ctx.read(&id).await)
        .await
        .unwrap()
        .unwrap();
    let busy = w.run().await;
    assert_eq!((busy.rechecked, busy.errors), (0, 0));
    assert_eq!(status().await, PaymentStatus::Pending);
    assert!(w.intake.ctx.leases.release(&held).await.unwrap());
    assert_eq!(w.run().await.rechecked, 1);
    assert_eq!(status().await, PaymentStatus::Captured);
}

#[tokio::test]
async fn an_object_read_at_stripe_never_changes_a_payment_of_another_psp() {
    let w = World::new().await;
    w.sim.ledger.fail_event_generation(&["payment_intent.succeeded"]);
    // A payment recorded as Adyen's that holds the same reference (invariant 13: only its PSP speaks for it).
    let (id, _) = w.charged_for("pm_succeeded", shared::PspName::Adyen, true).await;
    assert_eq!(w.deliver_failures().await, ["queued"]);
    assert_eq!(w.run().await.rechecked, 1, "read, and left alone");
    let payment = w.intake.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((payment.status, payment.version), (PaymentStatus::Pending, 1));
}

#[tokio::test]
async fn a_payment_intent_carrying_our_payment_id_is_found_like_the_webhook_finds_it() {
    let w = World::new().await;
    w.sim.ledger.fail_event_generation(&["payment_intent.succeeded"]);
    // Created without the PaymentIntent's id: only its `metadata.payment_id` names our payment.
    let (id, _) = w.charged_for("pm_succeeded", shared::PspName::Stripe, false).await;
    assert_eq!(w.deliver_failures().await, ["queued"]);
    let report = w.run().await;
    assert_eq!((report.rechecked, report.rechecks_unread, report.errors), (1, 0, 0));
    let payment = w.intake.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        payment.status,
        PaymentStatus::Captured,
        "found by its metadata, as the webhook would have found it: never left to expire while Stripe holds the money"
    );
}

#[tokio::test]
async fn an_object_of_no_payment_found_waits_then_is_escalated_once() {
    let settings = RecoverySettings {
        stale_after: Duration::from_secs(2),
        ..RecoverySettings::default()
    };
    let w = World::with(TestContext::new().await, settings).await;
    w.sim.ledger.fail_event_generation(&["payment_intent.succeeded"]);
    // Charged at Stripe with our marker and payment id, but no payment of ours holds it (not written yet).
    w.charged_at_stripe("pm_succeeded").await;
    assert_eq!(w.deliver_failures().await, ["queued"]);
    let early = w.run().await;
    assert_eq!(
        (early.rechecked, early.rechecks_unread, early.errors),
        (0, 0, 0),
        "young: read again next run, not dropped as not ours"
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let late = w.run().await;
    assert_eq!(
        (late.rechecked, late.rechecks_unread),
        (0, 1),
        "escalated once its wait is over"
    );
    assert_eq!(w.run().await.rechecks_unread, 0, "once");
}
