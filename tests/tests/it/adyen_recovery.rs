//! Recovery of Adyen payments (issue 26 item 4): Adyen has no status read, so recovery never asks it; an
//! Adyen payment waits for its notifications, past the expiry age is ended at Adyen by reference (a
//! reversal of its pspReference, or a cancel by our payment id when the pspReference never reached us), key
//! `<payment>:expire`, and stays open for the notification; if none comes within a day it expires here.
//! Against DynamoDB Local and the simulator's Adyen side, through the multi-PSP set.

use integration_tests::TestContext;
use psp::adyen::{AdyenClient, AdyenSettings};
use psp::set::{guarded, ADYEN_BREAKER};
use psp::{ChargeRequest, GuardedAdyen, PspSet, StripeClient};
use psp_simulator::adyen::ledger::AdyenLedger;
use psp_simulator::adyen::notify::{self, Endpoint};
use psp_simulator::adyen::{self as sim_adyen, AdyenSimulator};
use psp_simulator::delivery::DeliveryOptions;
use recovery::{Recovery, RecoverySettings};
use serde_json::{json, Value};
use shared::{
    Channel, CorrelationId, Currency, EventKind, Money, NewPayment, Observation, OrderId, Outcome, PaymentId,
    PaymentStatus, PspName, PspReference, RefundStatus,
};
use std::sync::Arc;
use std::time::Duration;
use webhook_intake::providers::Providers;
use webhook_intake::{App, IntakeSettings};
use webhook_signatures::adyen::{HmacKey, Mode};

const KEY: &str = sim_adyen::DEV_API_KEY;
const ACCOUNT: &str = sim_adyen::DEV_MERCHANT_ACCOUNT;
const HMAC: &str = sim_adyen::DEV_HMAC_KEY;
const DAY_MS: i64 = 24 * 3600 * 1000;

struct World {
    ctx: TestContext,
    sim: Arc<AdyenSimulator>,
    url: String,
}

impl World {
    async fn new() -> Self {
        let key = HmacKey::from_hex(Mode::Test, HMAC).unwrap();
        let sim = AdyenSimulator::new(AdyenLedger::new(KEY, ACCOUNT), key, None, DeliveryOptions::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(sim.clone().serve(listener));
        Self {
            ctx: TestContext::new().await,
            sim,
            url,
        }
    }

    fn adyen(&self) -> GuardedAdyen {
        let client = AdyenClient::new(&AdyenSettings::local(&self.url, KEY, ACCOUNT).unwrap()).unwrap();
        guarded(client, self.ctx.client.clone(), &self.ctx.table, ADYEN_BREAKER)
    }

    /// Recovery with Adyen's client only (no Stripe in this deployment), expiring after `expire_after_days`.
    fn recovery(&self, expire_after_days: u64) -> Recovery<PspSet<StripeClient>> {
        let settings = RecoverySettings {
            stale_after: Duration::ZERO,
            expire_after: Duration::from_secs(expire_after_days * 24 * 3600),
            ..RecoverySettings::default()
        };
        let psp = PspSet::new(None, Some(self.adyen()));
        Recovery::new(&self.ctx.client_for("reconciler"), &self.ctx.config(), psp, settings)
    }

    /// A payment of 11.30 EUR authorised at Adyen under our id `pay_<name>_...`: its pspReference.
    async fn authorised(&self, id: &PaymentId) -> PspReference {
        self.authorised_for(id, "J. Smith").await
    }

    /// [`World::authorised`] with the card holder `holder` (the simulator's scenario, e.g. `REFUND_FAILED`).
    async fn authorised_for(&self, id: &PaymentId, holder: &str) -> PspReference {
        let (order, money) = (OrderId::parse("order-adyen").unwrap(), money());
        let method = json!({ "type": "scheme", "encryptedCardNumber": "test_4111111111111111", "holderName": holder })
            .to_string();
        let request = ChargeRequest {
            payment_id: id,
            order_id: &order,
            money: &money,
            payment_method: &method,
        };
        self.adyen()
            .authorise(&format!("{id}:charge"), &request)
            .await
            .unwrap()
            .psp_reference
            .unwrap()
    }

    /// Our Adyen payment created `age_ms` ago, bound to `reference` (then `processing`) or not.
    async fn payment(&self, id: &PaymentId, reference: Option<&PspReference>, age_ms: i64) {
        let new = NewPayment {
            id: id.clone(),
            order_id: OrderId::parse("order-adyen").unwrap(),
            money: money(),
            provider: PspName::Adyen,
            psp_reference: reference.cloned(),
            metadata: Default::default(),
            correlation_id: CorrelationId::parse("corr-setup").unwrap(),
            trace_context: None,
            now_ms: shared::clock::now_ms() - age_ms,
        };
        self.ctx.store.create(new).await.unwrap();
        if reference.is_some() {
            let processing = Observation::new(Channel::Sync, Outcome::Processing, CorrelationId::parse("c").unwrap());
            self.ctx.store.finalize(id, &processing, None).await.unwrap();
        }
    }

    /// The notifications the simulator sent: (eventCode, originalReference or our reference).
    fn notified(&self) -> Vec<(String, String)> {
        let text = |v: &Value, f: &str| v[f].as_str().unwrap_or_default().to_owned();
        self.sim
            .outbox
            .sent()
            .iter()
            .map(|i| (text(i, "eventCode"), text(i, "originalReference")))
            .collect()
    }

    /// Hands the notifications the simulator sent from the `from`th on to the intake's `/webhooks/adyen`,
    /// signed and authenticated as Adyen sends them; the intake must accept them.
    async fn deliver(&self, from: usize) {
        self.deliver_items(&self.sim.outbox.sent()[from..]).await;
    }

    /// Hands `items` (notifications the simulator sent) to the intake in one batch.
    async fn deliver_items(&self, items: &[Value]) {
        let spec = r#"[{"name":"adyen","scheme":"adyen","livemode":false}]"#;
        let secrets = json!({ "adyen": [
            format!("hmac:test:{HMAC}"),
            format!("basic:{}:{}", sim_adyen::DEV_WEBHOOK_USERNAME, sim_adyen::DEV_WEBHOOK_PASSWORD),
        ] });
        let providers = Providers::from_json(spec, &secrets.to_string()).unwrap();
        let (client, config) = (self.ctx.client_for("webhook-intake"), self.ctx.config());
        let intake = App::new(client, &config, providers.into(), IntakeSettings::default());
        let endpoint = Endpoint {
            url: String::new(),
            username: sim_adyen::DEV_WEBHOOK_USERNAME.into(),
            password: sim_adyen::DEV_WEBHOOK_PASSWORD.into(),
        };
        let headers = json!({ "content-type": "application/json", "authorization": endpoint.authorization() });
        let body = notify::notification(items).to_string();
        let event = webhook_signatures::samples::apigw_event(
            "/webhooks/adyen",
            headers.as_object().unwrap(),
            body.as_bytes(),
            false,
        );
        let request = lambda_http::request::from_str(&event.to_string()).unwrap();
        let (response, metrics) = webhook_intake::process(&intake, request).await;
        assert_eq!(response.status(), 200, "{metrics:?}");
    }

    /// Hands the notifications the simulator sent from the `from`th to before the `to`th to the intake.
    async fn deliver_some(&self, from: usize, to: usize) {
        self.deliver_items(&self.sim.outbox.sent()[from..to]).await;
    }

    /// Makes `id` due now (its back-off over).
    async fn due_now(&self, id: &PaymentId) {
        shared::store::open_index::defer(&self.ctx.client, &self.ctx.table, shared::keys::payment(id), 0)
            .await
            .unwrap();
    }
}

fn money() -> Money {
    Money::new(1130, Currency::parse("EUR").unwrap()).unwrap()
}

fn id(name: &str) -> PaymentId {
    PaymentId::parse(format!("pay_{name}_{}", uuid::Uuid::new_v4().simple())).unwrap()
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(30)
}

#[tokio::test]
async fn an_adyen_payment_without_a_notification_is_ended_at_adyen_by_reference_after_its_deadline() {
    let w = World::new().await;
    let (bound, unbound, young) = (id("bound"), id("unbound"), id("young"));
    let reference = w.authorised(&bound).await;
    // Authorised at Adyen, but its pspReference never reached us (the answer lost).
    let unbound_reference = w.authorised(&unbound).await;
    let young_reference = w.authorised(&young).await;
    w.payment(&bound, Some(&reference), 7 * DAY_MS + 3_600_000).await;
    w.payment(&unbound, None, 7 * DAY_MS + 3_600_000).await;
    w.payment(&young, Some(&young_reference), DAY_MS).await;
    let opened = w.ctx.due_key(&bound).await.unwrap();
    let authorisations = w.notified().len();

    let report = w.recovery(7).run(deadline()).await.unwrap();

    assert_eq!(
        (report.found, report.end_requested, report.expired, report.errors),
        (3, 2, 0, 0),
        "{report:?}"
    );
    let mut ends = w.notified()[authorisations..].to_vec();
    ends.sort();
    assert_eq!(
        ends,
        [
            ("CANCEL_OR_REFUND".to_owned(), reference.as_str().to_owned()),
            ("TECHNICAL_CANCEL".to_owned(), unbound_reference.as_str().to_owned()),
        ],
        "a reversal of the bound one, a cancel by our id of the other; nothing about the young one"
    );
    for id in [&bound, &unbound, &young] {
        assert!(
            w.ctx.store.get(id).await.unwrap().unwrap().is_open(),
            "{id}: its notification tells"
        );
    }
    assert!(w.ctx.due_key(&bound).await.unwrap() > opened, "backed off meanwhile");

    // No notification came (the intake was down): sent again under the same key, which Adyen answers by
    // replay, so nothing is cancelled twice.
    w.due_now(&bound).await;
    let again = w.recovery(7).run(deadline()).await.unwrap();
    assert_eq!((again.found, again.end_requested), (1, 1), "{again:?}");
    assert_eq!(
        w.notified().len(),
        authorisations + 2,
        "the same key: replayed, not done again"
    );

    // The notifications arrive: the intake records each end, and the payments leave recovery's index.
    w.deliver(authorisations).await;
    for id in [&bound, &unbound] {
        let p = w.ctx.store.get(id).await.unwrap().unwrap();
        assert_eq!(p.status, PaymentStatus::Failed, "{id}: {:?}", p.reason);
        assert_eq!(w.ctx.due_key(id).await, None, "{id}: the loop has ended");
    }
    let last = w.recovery(7).run(deadline()).await.unwrap();
    assert_eq!(last.end_requested, 0, "{last:?}");
}

#[tokio::test]
async fn an_adyen_payment_whose_end_is_never_notified_expires_here_a_day_later() {
    let w = World::new().await;
    let silent = id("silent");
    let reference = w.authorised(&silent).await;
    w.payment(&silent, Some(&reference), 8 * DAY_MS + 3_600_000).await;
    let authorisations = w.notified().len();

    let report = w.recovery(7).run(deadline()).await.unwrap();

    assert_eq!(
        (report.found, report.expired, report.end_requested),
        (1, 1, 0),
        "{report:?}"
    );
    let p = w.ctx.store.get(&silent).await.unwrap().unwrap();
    assert_eq!(p.status, PaymentStatus::Failed);
    let reason = p.reason.unwrap_or_default();
    assert!(
        reason.starts_with("expired: no notification of the cancel requested at its PSP (adyen)"),
        "{reason}"
    );
    let events = w.ctx.events(&silent).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!((last.kind, last.path), (EventKind::PaymentFailed, Channel::Recovery));
    assert_eq!(
        w.ctx.due_key(&silent).await,
        None,
        "out of the index: the loop has ended"
    );
    assert_eq!(
        w.notified().len(),
        authorisations,
        "Adyen is not called once the wait is over"
    );
}

/// Adyen's rate limit (HTTP 429 Too Many Requests: the request may succeed later) is throttling, not an
/// outage: retried with back-off like a 5xx, but never counted by Adyen's breaker. As many throttled
/// authorisations as open it under a 5xx storm leave it closed, and one throttled twice then answered succeeds.
#[tokio::test]
async fn adyens_429_is_retried_and_not_counted_by_its_breaker() {
    let w = World::new().await;
    let breaker = w.adyen();
    // Four authorisations of three attempts each (`PSP_MAX_RETRIES` 2), every attempt throttled.
    w.sim.ledger.storm(429, 12);
    let (order, money) = (OrderId::parse("order-adyen").unwrap(), money());
    let method = json!({ "type": "scheme", "encryptedCardNumber": "test_4111111111111111" }).to_string();
    for n in 0..4 {
        let id = PaymentId::parse(format!("pay_throttled_{n}")).unwrap();
        let request = ChargeRequest {
            payment_id: &id,
            order_id: &order,
            money: &money,
            payment_method: &method,
        };
        let throttled = breaker.authorise(&format!("{id}:charge"), &request).await;
        assert!(matches!(&throttled, Err(e) if e.is_transient()), "{throttled:?}");
    }
    assert_eq!(
        breaker.state().await.unwrap(),
        psp::breaker::BreakerState::Closed,
        "throttling is not an outage"
    );
    let id = PaymentId::parse("pay_throttled_ok").unwrap();
    w.sim.ledger.storm(429, 2);
    let request = ChargeRequest {
        payment_id: &id,
        order_id: &order,
        money: &money,
        payment_method: &method,
    };
    let paid = breaker.authorise(&format!("{id}:charge"), &request).await;
    assert!(paid.is_ok(), "retried after the 429s: {paid:?}");
}

/// The simulator's notifications with `code` (`REFUND`, ...): how many modifications Adyen made of that kind.
fn count(notified: &[(String, String)], code: &str) -> usize {
    notified.iter().filter(|(c, _)| c == code).count()
}

#[tokio::test]
async fn an_adyen_refund_failed_is_given_back_once_per_failure_and_alarmed_after_the_last() {
    let w = World::new().await;
    let paid = id("refundfails");
    // Every refund of this card fails after it was received (`REFUND`, then `REFUND_FAILED`).
    let reference = w.authorised_for(&paid, "REFUND_FAILED").await;
    w.payment(&paid, Some(&reference), 3_600_000).await;
    w.adyen()
        .capture(&format!("{paid}:capture"), &reference, &money())
        .await
        .unwrap();
    // The saga's refund, which Adyen then reports failed: the money is ours again.
    w.adyen()
        .refund("order-adyen:refund", &reference, &money())
        .await
        .unwrap();
    w.deliver(0).await;
    let failed = w.ctx.store.get(&paid).await.unwrap().unwrap();
    assert_eq!(
        (
            failed.status,
            failed.refund_failures,
            failed.give_back.map(|g| g.amount_minor)
        ),
        (PaymentStatus::Captured, 1, Some(1130))
    );

    for failure in 1..=payments_core::refund::MAX_GIVE_BACKS as usize {
        let before = w.notified().len();
        let report = w.recovery(7).run(deadline()).await.unwrap();
        assert_eq!((report.found, report.applied, report.errors), (1, 1, 0), "{report:?}");
        assert_eq!(
            count(&w.notified(), "REFUND"),
            1 + failure,
            "give-back {failure} refunded once"
        );
        let given = w.ctx.store.get(&paid).await.unwrap().unwrap();
        assert_eq!(given.give_back, None, "answered: pending, its notification tells");
        // Run again before the notification: nothing is refunded twice.
        w.due_now(&paid).await;
        let again = w.recovery(7).run(deadline()).await.unwrap();
        assert_eq!((again.found, again.applied), (1, 0), "{again:?}");
        assert_eq!(
            count(&w.notified(), "REFUND"),
            1 + failure,
            "no second refund of give-back {failure}"
        );
        w.deliver(before).await;
        w.due_now(&paid).await;
    }

    let last = w.ctx.store.get(&paid).await.unwrap().unwrap();
    assert_eq!((last.refund_failures, last.give_back), (4, None), "{last:?}");
    let events = w.ctx.events(&paid).await.unwrap();
    let alarm = events.last().unwrap();
    assert_eq!(alarm.kind, EventKind::RefundFailed);
    assert!(
        alarm
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("not given back again, for an operator"),
        "{:?}",
        alarm.reason
    );
    // Past the bound the payment stays open for a person (the money is still ours): recovery asks Adyen
    // nothing, counts it (`RefundsForOperator`, alarmed) on every look, and refunds nothing.
    assert!(last.refund_for_operator() && last.is_open(), "{last:?}");
    for _ in 0..2 {
        w.due_now(&paid).await;
        let report = w.recovery(7).run(deadline()).await.unwrap();
        assert_eq!(
            (report.found, report.for_operator, report.applied),
            (1, 1, 0),
            "{report:?}"
        );
    }
    assert_eq!(
        count(&w.notified(), "REFUND"),
        1 + payments_core::refund::MAX_GIVE_BACKS as usize,
        "past the bound: no refund, only the alarm"
    );
}

/// Adyen reports a capture the card scheme rejected after it was received as `CAPTURE_FAILED` with
/// `success: true` (the event happened; the why in `reason`), days after the `CAPTURE` that made the payment
/// `captured` and the order confirmed. The payment says so (`capture_failed`, a `CaptureFailed` event the
/// order projection shows), stays open, and recovery counts it (`CapturesFailed`, alarmed) until Adyen's
/// re-capture (a `CAPTURE` under the same pspReference, reason `Transaction Recaptured`) clears it.
#[tokio::test]
async fn a_capture_failed_at_the_scheme_flags_the_payment_until_adyen_captures_again() {
    let w = World::new().await;
    let paid = id("recaptured");
    let reference = w.authorised_for(&paid, "CAPTURE_RECAPTURED").await;
    w.payment(&paid, Some(&reference), 0).await;
    w.adyen()
        .capture(&format!("{paid}:capture"), &reference, &money())
        .await
        .unwrap();
    let codes: Vec<String> = w.notified().into_iter().map(|(code, _)| code).collect();
    assert_eq!(codes[1..], ["CAPTURE", "CAPTURE_FAILED", "CAPTURE"], "{codes:?}");
    w.deliver_some(1, 3).await;
    let p = w.ctx.store.get(&paid).await.unwrap().unwrap();
    assert_eq!(p.status, PaymentStatus::Captured, "{p:?}");
    let failed = p.capture_failed.clone().expect("the payment says its capture failed");
    assert!(failed.contains("failed at the card scheme"), "{failed}");
    assert!(p.capture_lost() && p.is_open(), "open for an operator: {p:?}");
    let last = w.ctx.events(&paid).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.kind, last.capture_failed.as_deref()),
        (EventKind::CaptureFailed, Some(failed.as_str()))
    );
    let report = w.recovery(7).run(deadline()).await.unwrap();
    assert_eq!(
        (report.found, report.captures_lost, report.applied),
        (1, 1, 0),
        "{report:?}"
    );
    let record = recovery::emf(&report, shared::clock::now_ms());
    assert_eq!(
        record["CapturesFailed"].as_u64(),
        Some(1),
        "the alarmed metric: {record}"
    );

    w.deliver_some(3, 4).await;
    let p = w.ctx.store.get(&paid).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.capture_failed.as_deref()),
        (PaymentStatus::Captured, None),
        "{p:?}"
    );
    assert!(!p.is_open(), "the money comes after all: {p:?}");
    let last = w.ctx.events(&paid).await.unwrap().pop().unwrap();
    assert_eq!((last.kind, last.capture_failed), (EventKind::PaymentCaptured, None));
}

/// A capture that fails for good (no re-capture), its `CAPTURE_FAILED` without `originalReference` (Adyen's
/// description does not require it): found by our merchant reference, flagged once however often Adyen
/// sends it.
#[tokio::test]
async fn a_capture_failed_without_its_original_reference_is_found_by_ours() {
    let w = World::new().await;
    let paid = id("capturefails");
    let reference = w.authorised_for(&paid, "CAPTURE_FAILED_NO_ORIGINAL").await;
    w.payment(&paid, Some(&reference), 0).await;
    w.adyen()
        .capture(&format!("{paid}:capture"), &reference, &money())
        .await
        .unwrap();
    let notified = w.notified();
    assert_eq!(
        notified.last().map(|(c, o)| (c.as_str(), o.as_str())),
        Some(("CAPTURE_FAILED", ""))
    );
    w.deliver(1).await;
    w.deliver(2).await;
    let p = w.ctx.store.get(&paid).await.unwrap().unwrap();
    assert!(p.capture_lost(), "{p:?}");
    let kinds: Vec<EventKind> = w
        .ctx
        .store
        .events(&paid)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == EventKind::CaptureFailed).count(),
        1,
        "{kinds:?}"
    );
}

/// `REFUNDED_REVERSED`: a refund Adyen made came back to the merchant's account (the refund is the
/// notification's own pspReference, the payment its `originalReference`, or, left out, our merchant
/// reference). The refund is recorded failed and the money is given back anew, as for `REFUND_FAILED`.
#[tokio::test]
async fn a_refund_adyen_reversed_is_recorded_failed_and_given_back_again() {
    for holder in ["REFUNDED_REVERSED", "REFUNDED_REVERSED_NO_ORIGINAL"] {
        let w = World::new().await;
        let paid = id("reversed");
        let reference = w.authorised_for(&paid, holder).await;
        w.payment(&paid, Some(&reference), 0).await;
        w.adyen()
            .capture(&format!("{paid}:capture"), &reference, &money())
            .await
            .unwrap();
        w.deliver(1).await;
        let before = w.notified().len();
        w.adyen()
            .refund(&format!("{paid}:refund"), &reference, &money())
            .await
            .unwrap();
        let codes: Vec<String> = w.notified()[before..].iter().map(|(c, _)| c.clone()).collect();
        assert_eq!(codes, ["REFUND", "REFUNDED_REVERSED"], "{holder}");
        w.deliver_some(before, before + 1).await;
        let refunded = w.ctx.store.get(&paid).await.unwrap().unwrap();
        assert_eq!(refunded.status, PaymentStatus::Refunded, "{holder}: {refunded:?}");
        w.deliver(before + 1).await;
        let p = w.ctx.store.get(&paid).await.unwrap().unwrap();
        let refund = p.refunds.first().expect("the refund");
        assert_eq!(refund.status, RefundStatus::Failed, "{holder}: reversed: {p:?}");
        assert!(
            p.give_back.is_some() && p.is_open(),
            "{holder}: the money to give back again: {p:?}"
        );
    }
}

#[tokio::test]
async fn money_adyen_took_after_the_payment_failed_is_refunded_by_recovery() {
    let w = World::new().await;
    let stray = id("stray");
    let reference = w.authorised(&stray).await;
    w.payment(&stray, Some(&reference), 3_600_000).await;
    let failed = Observation::new(
        Channel::Sync,
        Outcome::Failed {
            reason: "given up".into(),
        },
        CorrelationId::parse("c").unwrap(),
    );
    w.ctx.store.finalize(&stray, &failed, None).await.unwrap();
    // Captured at Adyen after we failed it (a capture sent before the failure, its answer lost).
    w.adyen()
        .capture(&format!("{stray}:capture"), &reference, &money())
        .await
        .unwrap();
    w.deliver(0).await;
    assert_eq!(w.ctx.store.get(&stray).await.unwrap().unwrap().refund_due(), Some(1));
    let before = w.notified().len();

    let report = w.recovery(7).run(deadline()).await.unwrap();

    assert_eq!((report.found, report.applied, report.errors), (1, 1, 0), "{report:?}");
    assert_eq!(
        count(&w.notified()[before..], "REFUND"),
        1,
        "all of it refunded at Adyen"
    );
    w.due_now(&stray).await;
    w.recovery(7).run(deadline()).await.unwrap();
    assert_eq!(
        count(&w.notified()[before..], "REFUND"),
        1,
        "not twice while its notification is due"
    );
    w.deliver(before).await;
    let p = w.ctx.store.get(&stray).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.refund_due(), p.refunded_minor),
        (PaymentStatus::Failed, None, 1130),
        "{p:?}"
    );
    assert_eq!(w.ctx.due_key(&stray).await, None, "the money question has ended");
}
