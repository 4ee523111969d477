//! The webhook intake over its HTTP handler, against DynamoDB Local: every answer, tampering, rotation,
//! base64 bodies, leases, and concurrent deliveries.

use integration_tests::{BeforeCall, Fault, FaultInjector, TestContext};
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request};
use payments_core::fixtures;
use serde_json::{json, Value};
use shared::store::ParkedKind;
use shared::{clock, Channel, EventKind, Outcome, PaymentId, PaymentStatus, SigningSecret};
use std::time::Duration;
use webhook_intake::metrics::RequestMetrics;
use webhook_intake::providers::Providers;
use webhook_intake::{process, App, IntakeSettings};
use webhook_signatures::{sign_standard, sign_stripe};

mod adyen;
mod disputes;
mod eventbridge;
mod generation_failure;
mod logs;
mod not_ours;
mod refunds;
mod small_ends;
mod versions;

const STRIPE_OLD: &str = "whsec_test_stripe_old_secret_0001";
const STRIPE_NEW: &str = "whsec_test_stripe_new_secret_0002";
const STANDARD: &str = "whsec_dGVzdC1zdGFuZGFyZC13ZWJob29rLXNlY3JldA==";
const CLIENT_SECRET: &str = "pi_test_secret_INTAKEsecret";

struct TestIntake {
    ctx: TestContext,
    app: App,
}

struct Answer {
    status: StatusCode,
    body: Value,
    retry_after: Option<String>,
    metrics: RequestMetrics,
}

fn providers() -> Providers {
    let spec = r#"[{"name":"stripe","scheme":"stripe","livemode":false},
                   {"name":"acme","scheme":"standard","connect":true,"account":"acct_acme"}]"#;
    let secrets = json!({ "stripe": [STRIPE_OLD, STRIPE_NEW], "acme": [STANDARD] }).to_string();
    Providers::from_json(spec, &secrets).unwrap()
}

impl TestIntake {
    async fn new() -> Self {
        Self::with(TestContext::new().await)
    }

    fn with(ctx: TestContext) -> Self {
        let settings = IntakeSettings {
            lease_max_wait: Duration::from_millis(20),
            ..IntakeSettings::default()
        };
        let app = App::new(
            ctx.client_for("webhook-intake"),
            &ctx.config(),
            providers().into(),
            settings,
        );
        Self { ctx, app }
    }

    async fn payment(&self, name: &str) -> PaymentId {
        self.payment_of(name, "stripe").await
    }

    /// A payment of 10.00 EUR that belongs to `provider` (only its endpoint's events change it).
    async fn payment_of(&self, name: &str, provider: &str) -> PaymentId {
        let mut new = fixtures::new_payment(name, 1000);
        new.provider = shared::PspName::parse(provider).unwrap();
        self.ctx.store.create(new).await.unwrap().id
    }

    async fn send(&self, req: Request) -> Answer {
        send(&self.app, req).await
    }

    /// The records in the table, leases left out (a write leaves its lease, a later holder's release or the
    /// TTL deletes it: they come and go with no record of a webhook).
    async fn item_count(&self) -> i32 {
        self.ctx
            .client
            .scan()
            .table_name(&self.ctx.table)
            .filter_expression("NOT begins_with(pk, :lease)")
            .expression_attribute_values(":lease", aws_sdk_dynamodb::types::AttributeValue::S("LEASE#".into()))
            .send()
            .await
            .unwrap()
            .count()
    }
}

async fn send(app: &App, req: Request) -> Answer {
    let (response, metrics) = process(app, req).await;
    let bytes = match response.body() {
        Body::Text(t) => t.as_bytes().to_vec(),
        Body::Binary(b) => b.clone(),
        _ => Vec::new(),
    };
    Answer {
        status: response.status(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        retry_after: response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        metrics,
    }
}

fn now() -> i64 {
    clock::now_ms() / 1000
}

fn intent_event(id: &str, kind: &str, payment: &PaymentId, created: i64) -> Value {
    json!({
        "id": id, "object": "event", "type": kind, "created": created, "livemode": false,
        "data": { "object": {
            "id": "pi_test_1", "object": "payment_intent", "amount": 1000, "currency": "eur",
            "metadata": { "payment_id": payment.as_str() }, "client_secret": CLIENT_SECRET,
            "next_action": { "type": "redirect_to_url", "redirect_to_url": { "url": "https://hooks.stripe.com/3ds/x" } }
        } }
    })
}

/// An API Gateway HTTP API (v2) event, parsed by lambda_http as Lambda would deliver it.
fn apigw(path: &str, headers: Value, body: &[u8], base64: bool) -> Request {
    let headers = headers.as_object().cloned().unwrap_or_default();
    let event = webhook_signatures::samples::apigw_event(path, &headers, body, base64);
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

fn stripe(body: &Value, secret: &str) -> Request {
    stripe_bytes(&body.to_string().into_bytes(), secret, false)
}

/// `bytes` signed now with `secret`, in an API Gateway event (base64-encoded body when `base64`).
fn stripe_bytes(bytes: &[u8], secret: &str, base64: bool) -> Request {
    let sig = sign_stripe(&SigningSecret::parse(secret).unwrap(), now(), bytes);
    apigw(
        "/webhooks/stripe",
        json!({ "content-type": "application/json", "stripe-signature": sig }),
        bytes,
        base64,
    )
}

fn standard(id: &str, body: &Value) -> Request {
    let bytes = body.to_string().into_bytes();
    let ts = now();
    let sig = sign_standard(&SigningSecret::parse(STANDARD).unwrap(), id, ts, &bytes).unwrap();
    let headers = json!({ "webhook-id": id, "webhook-timestamp": ts.to_string(), "webhook-signature": sig });
    apigw("/webhooks/acme", headers, &bytes, false)
}

fn result(a: &Answer) -> &str {
    a.body["result"].as_str().or(a.body["error"].as_str()).unwrap_or("?")
}

#[tokio::test]
async fn the_200_answers() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_w1").await;

    let a = t
        .send(stripe(
            &intent_event("evt_1", "payment_intent.succeeded", &id, now()),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!((a.status, result(&a)), (StatusCode::OK, "applied"), "{}", a.body);
    let a = t
        .send(stripe(
            &intent_event("evt_1", "payment_intent.succeeded", &id, now()),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(result(&a), "duplicate");
    let a = t
        .send(stripe(
            &intent_event("evt_2", "payment_intent.processing", &id, now()),
            STRIPE_OLD,
        ))
        .await;
    assert_eq!(
        result(&a),
        "stale",
        "late processing after captured; the old secret still verifies"
    );
    let a = t
        .send(stripe(
            &json!({ "id": "evt_3", "type": "customer.created", "created": now(), "data": { "object": {} } }),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(result(&a), "ignored");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.version), (PaymentStatus::Captured, 2));

    // Signed but unparseable: quarantined, stored redacted, counted.
    let garbage = json!({ "id": "evt_4", "type": "payment_intent.succeeded", "created": now(),
                          "data": { "object": { "client_secret": CLIENT_SECRET } } });
    let a = t.send(stripe(&garbage, STRIPE_NEW)).await;
    assert_eq!((result(&a), a.metrics.quarantines), ("quarantined", 1));
    let parked = t.ctx.store.parked(ParkedKind::Quarantined).await.unwrap();
    assert_eq!(parked.len(), 1);
    assert!(
        !parked[0].body.contains(CLIENT_SECRET) && parked[0].body.contains("evt_4"),
        "{}",
        parked[0].body
    );

    // Inconsistent with the payment (amount): an anomaly is recorded, nothing applied.
    let id2 = t.payment("pay_w2").await;
    let mut wrong = intent_event("evt_5", "payment_intent.succeeded", &id2, now());
    wrong["data"]["object"]["amount"] = json!(999_999);
    let a = t.send(stripe(&wrong, STRIPE_NEW)).await;
    assert_eq!((result(&a), a.metrics.anomalies), ("quarantined", 1));
    let p = t.ctx.store.get(&id2).await.unwrap().unwrap();
    assert_eq!((p.status, p.anomalies), (PaymentStatus::Pending, 1));
    let events = t.ctx.events(&id2).await.unwrap();
    assert_eq!(events.last().unwrap().kind, EventKind::AnomalyRecorded);
    // Live-mode event on a test endpoint: the same.
    let mut live = intent_event("evt_6", "payment_intent.succeeded", &id2, now());
    live["livemode"] = json!(true);
    assert_eq!(result(&t.send(stripe(&live, STRIPE_NEW)).await), "quarantined");
    // An event that does not say its mode, on an endpoint configured for one: the same (it proves nothing).
    let mut silent = intent_event("evt_6b", "payment_intent.succeeded", &id2, now());
    silent.as_object_mut().unwrap().remove("livemode");
    assert_eq!(result(&t.send(stripe(&silent, STRIPE_NEW)).await), "quarantined");
    assert_eq!(
        t.ctx.store.get(&id2).await.unwrap().unwrap().status,
        PaymentStatus::Pending
    );

    // Unknown payment: 503 while the event is young, then parked and acknowledged.
    let ghost = PaymentId::parse("pay_ghost").unwrap();
    let a = t
        .send(stripe(
            &intent_event("evt_7", "payment_intent.succeeded", &ghost, now()),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(
        (a.status, a.retry_after.is_some()),
        (StatusCode::SERVICE_UNAVAILABLE, true)
    );
    let old = now() - 16 * 60;
    let body = intent_event("evt_8", "payment_intent.succeeded", &ghost, old);
    // The signature is fresh (a PSP retry re-signs), the event itself is 16 minutes old.
    let a = t.send(stripe(&body, STRIPE_NEW)).await;
    assert_eq!((result(&a), a.metrics.unknown_payments), ("unknown_payment", 1));
    assert_eq!(t.ctx.store.parked(ParkedKind::UnknownPayment).await.unwrap().len(), 1);
}

#[tokio::test]
async fn standard_webhooks_and_the_psp_reference_lookup() {
    let t = TestIntake::new().await;
    let mut new = fixtures::new_payment("pay_s1", 1000);
    new.provider = shared::PspName::parse("acme").unwrap();
    new.psp_reference = Some(shared::PspReference::parse("psp_ref_1").unwrap());
    let id = t.ctx.store.create(new).await.unwrap().id;
    let event = |kind: &str, extra: Value| {
        let mut data = json!({ "psp_reference": "psp_ref_1", "amount_minor": 1000, "currency": "EUR" });
        data.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({ "type": kind, "created": now(), "account": "acct_acme", "data": data })
    };
    let a = t.send(standard("msg_1", &event("payment.succeeded", json!({})))).await;
    assert_eq!(result(&a), "applied", "{}", a.body);
    let a = t
        .send(standard(
            "msg_2",
            &event(
                "payment.refunded",
                json!({ "refunded_total_minor": 1000, "captured": true }),
            ),
        ))
        .await;
    assert_eq!(result(&a), "applied");
    assert_eq!(
        t.ctx.store.get(&id).await.unwrap().unwrap().status,
        PaymentStatus::Refunded
    );
    let mut other_account = event("payment.failed", json!({}));
    other_account["account"] = json!("acct_other");
    assert_eq!(result(&t.send(standard("msg_3", &other_account)).await), "quarantined");
    let mut no_account = event("payment.failed", json!({}));
    no_account.as_object_mut().unwrap().remove("account");
    assert_eq!(result(&t.send(standard("msg_4", &no_account)).await), "quarantined");
}

#[tokio::test]
async fn every_refusal_writes_nothing() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_r1").await;
    let before = t.item_count().await;
    let body = intent_event("evt_1", "payment_intent.succeeded", &id, now());
    let bytes = body.to_string().into_bytes();
    let good = sign_stripe(&SigningSecret::parse(STRIPE_NEW).unwrap(), now(), &bytes);
    let tampered_body = body.to_string().replace("1000", "1001").into_bytes();
    let stale_sig = sign_stripe(&SigningSecret::parse(STRIPE_NEW).unwrap(), now() - 301, &bytes);
    let wrong_secret = sign_stripe(&SigningSecret::parse("whsec_attacker").unwrap(), now(), &bytes);
    let moved_t = good.replacen("t=", "t=1", 1);
    let cases: Vec<(&str, Value, Vec<u8>, StatusCode)> = vec![
        ("/webhooks/stripe", json!({}), bytes.clone(), StatusCode::UNAUTHORIZED),
        (
            "/webhooks/stripe",
            json!({ "stripe-signature": good }),
            tampered_body,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/webhooks/stripe",
            json!({ "stripe-signature": moved_t }),
            bytes.clone(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/webhooks/stripe",
            json!({ "stripe-signature": stale_sig }),
            bytes.clone(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/webhooks/stripe",
            json!({ "stripe-signature": wrong_secret }),
            bytes.clone(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/webhooks/stripe",
            json!({ "stripe-signature": "t=1,v1=zz" }),
            bytes.clone(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/webhooks/adyen",
            json!({ "stripe-signature": good }),
            bytes.clone(),
            StatusCode::NOT_FOUND,
        ),
        (
            "/webhooks/stripe",
            json!({ "stripe-signature": good }),
            Vec::new(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "/webhooks/stripe",
            json!({ "stripe-signature": good }),
            vec![b' '; 256 * 1024 + 1],
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "/webhooks/acme",
            json!({ "webhook-id": "m", "webhook-timestamp": now().to_string() }),
            bytes.clone(),
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for (path, headers, body, status) in cases {
        let a = t.send(apigw(path, headers.clone(), &body, false)).await;
        assert_eq!(a.status, status, "{path} {headers}: {}", a.body);
        assert!(
            a.body["error"].is_string() && a.body["message"].is_string(),
            "{}",
            a.body
        );
        if status == StatusCode::UNAUTHORIZED {
            assert_eq!(a.metrics.unauthorized, 1);
        }
    }
    assert_eq!(t.item_count().await, before, "a 4xx writes nothing");
    assert_eq!(t.ctx.store.get(&id).await.unwrap().unwrap().version, 1);
}

/// A secret rotated in Secrets Manager reaches a warm instance at the first webhook it signs, end to end
/// against a local Secrets Manager (moto's): the intake loads the secret by its ARN as in AWS; a webhook
/// signed with the new secret is refused while only the old one is stored; after a new version of the
/// secret holds only the new one, the first such webhook fails the loaded secrets, re-reads the secret and
/// is applied; one signed with the old secret is then refused, and a forged one right after costs no second
/// read (at most one per 30 s).
#[tokio::test]
async fn a_secret_rotated_in_secrets_manager_is_used_from_the_first_webhook_it_signs() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    use webhook_intake::providers::{secrets_manager_loader, ProviderSource, SecretsLoader, DEFAULT_PROVIDERS};
    let mut t = TestIntake::new().await;
    let sdk = integration_tests::secrets_manager_sdk_config();
    let secrets = shared::aws::secrets_client(&sdk);
    let stored = |stripe: &str| json!({ "stripe": [stripe], "standard": [STANDARD] }).to_string();
    let created = secrets
        .create_secret()
        .name(format!("webhook-secrets-{}", uuid::Uuid::new_v4().simple()))
        .secret_string(stored(STRIPE_OLD))
        .send()
        .await
        .unwrap();
    let arn = created.arn().unwrap().to_owned();
    // Secrets Manager's own reads, counted: the loader is the intake's, on moto.
    let reads = Arc::new(AtomicUsize::new(0));
    let loader: SecretsLoader = {
        let (inner, reads) = (secrets_manager_loader(&sdk, &arn), reads.clone());
        Arc::new(move || {
            reads.fetch_add(1, Ordering::SeqCst);
            inner()
        })
    };
    // The cache's clock, moved past the 30-s limit on re-reads when a failed signature may re-read.
    let start = std::time::Instant::now();
    let elapsed = Arc::new(AtomicU64::new(0));
    let clock = {
        let elapsed = elapsed.clone();
        Arc::new(move || start + Duration::from_secs(elapsed.load(Ordering::SeqCst)))
    };
    t.app.providers = ProviderSource::load(DEFAULT_PROVIDERS, loader, clock).await.unwrap();
    let id = t.payment("pay_rot").await;

    let early = intent_event("evt_rot_0", "payment_intent.processing", &id, now());
    let answer = t.send(stripe(&early, STRIPE_NEW)).await;
    assert_eq!(
        answer.status,
        StatusCode::UNAUTHORIZED,
        "the old secret refuses the new one's signature"
    );
    assert_eq!(reads.load(Ordering::SeqCst), 1, "no re-read within 30 s of the load");

    elapsed.store(31, Ordering::SeqCst);
    secrets
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(stored(STRIPE_NEW))
        .send()
        .await
        .unwrap();
    let event = intent_event("evt_rot_1", "payment_intent.succeeded", &id, now());
    let answer = t.send(stripe(&event, STRIPE_NEW)).await;
    assert_eq!((answer.status, result(&answer)), (StatusCode::OK, "applied"));
    assert_eq!(
        reads.load(Ordering::SeqCst),
        2,
        "one re-read after the failed signature"
    );

    for (n, secret) in [(2, STRIPE_OLD), (3, "whsec_attacker_secret_0123456789")] {
        let late = intent_event(&format!("evt_rot_{n}"), "payment_intent.canceled", &id, now());
        let answer = t.send(stripe(&late, secret)).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "signed with {secret}");
    }
    assert_eq!(reads.load(Ordering::SeqCst), 2, "re-reads are rate-limited");
    assert_eq!(
        t.ctx.store.get(&id).await.unwrap().unwrap().status,
        PaymentStatus::Captured
    );
}

/// The event item a webhook writes carries the webhook's trace (the caller's `traceparent` here, else the
/// invocation's X-Ray trace): the relay and the consumer continue it, so one trace shows both.
#[tokio::test]
async fn the_event_item_carries_the_webhooks_trace() {
    shared::telemetry::init();
    let t = TestIntake::new().await;
    let id = t.payment("pay_trace").await;
    let trace = "5759e988bd862e3fe1be46a994272793";
    let body = intent_event("evt_trace_1", "payment_intent.succeeded", &id, now());
    let bytes = body.to_string().into_bytes();
    let sig = sign_stripe(&SigningSecret::parse(STRIPE_NEW).unwrap(), now(), &bytes);
    let req = apigw(
        "/webhooks/stripe",
        json!({ "stripe-signature": sig, "traceparent": format!("00-{trace}-53995c3f42cd8ad8-01") }),
        &bytes,
        false,
    );
    assert_eq!(result(&t.send(req).await), "applied");
    let events = t.ctx.events(&id).await.unwrap();
    let stored = events
        .last()
        .unwrap()
        .trace_context
        .clone()
        .expect("a trace context on the event");
    assert!(stored.starts_with(&format!("00-{trace}-")), "{stored}");
    assert!(
        !stored.contains("53995c3f42cd8ad8"),
        "the finalize span's own id, not the caller's: {stored}"
    );
}

#[tokio::test]
async fn base64_bodies_are_verified_on_the_decoded_bytes() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_b64").await;
    let bytes = intent_event("evt_1", "payment_intent.processing", &id, now())
        .to_string()
        .into_bytes();
    let a = t.send(stripe_bytes(&bytes, STRIPE_NEW, true)).await;
    assert_eq!(result(&a), "applied", "{}", a.body);
}

#[tokio::test]
async fn a_held_lease_defers_with_retry_after_and_dynamodb_outages_answer_503() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_l").await;
    let held = t.ctx.leases.acquire(&t.ctx.read(&id).await).await.unwrap().unwrap();
    let a = t
        .send(stripe(
            &intent_event("evt_1", "payment_intent.succeeded", &id, now()),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(
        (a.status, a.metrics.lease_deferrals),
        (StatusCode::SERVICE_UNAVAILABLE, 1)
    );
    assert_eq!(a.retry_after.as_deref(), Some("5"));
    assert!(t.ctx.leases.release(&held).await.unwrap());
    assert_eq!(t.ctx.store.get(&id).await.unwrap().unwrap().version, 1);

    let faults = FaultInjector::new();
    let t = TestIntake::with(TestContext::with_faults(faults.clone()).await);
    let id = t.payment("pay_outage").await;
    // The first PutItem is the lease's (the write is one too since the payment is its own outbox).
    faults.fail_next("PutItem", Fault::Throttling, shared::aws::MAX_ATTEMPTS as usize);
    let event = intent_event("evt_1", "payment_intent.succeeded", &id, now());
    let a = t.send(stripe(&event, STRIPE_NEW)).await;
    assert_eq!(
        (a.status, a.retry_after.is_some()),
        (StatusCode::SERVICE_UNAVAILABLE, true),
        "{}",
        a.body
    );
    assert_eq!(t.ctx.store.get(&id).await.unwrap().unwrap().version, 1);
    // The PSP retries: applied, and the lease left behind by the failed attempt does not block it long.
    let a = t.send(stripe(&event, STRIPE_NEW)).await;
    assert_eq!(result(&a), "applied", "{}", a.body);
}

/// A delivery meets the lease of a holder at work on the version it read: it waits, and each try after the
/// first reads the payment again, so once the holder has written it takes the lease its write freed and
/// decides on the payment as written (no stale read left for the versioned write to catch).
#[tokio::test]
async fn a_delivery_waiting_for_the_lease_reads_again_and_decides_on_the_holder_s_write() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_overlap").await;
    let prior = t.ctx.leases.acquire(&t.ctx.read(&id).await).await.unwrap().unwrap();
    let reads_before = t.ctx.calls.finished("GetItem");
    let mut app = t.app.clone();
    app.settings.lease_attempts = 20;
    app.settings.lease_max_wait = Duration::from_millis(30);
    let ours = tokio::spawn({
        let body = intent_event("evt_late", "payment_intent.processing", &id, now());
        async move { send(&app, stripe(&body, STRIPE_NEW)).await }
    });
    // Our read has answered (the lease after it is refused): the prior write comes after it.
    t.ctx.calls.wait_finished("GetItem", reads_before + 1).await;
    // The prior holder captures; its write moves the version past its lease.
    let prior_write = fixtures::webhook("evt_prior", 1, Outcome::Succeeded);
    t.ctx.store.finalize(&id, &prior_write, Some(&prior)).await.unwrap();
    let a = ours.await.unwrap();
    assert_eq!(result(&a), "stale", "{}", a.body);
    assert_eq!(
        a.metrics.version_conflicts, 0,
        "decided on a read after the prior write"
    );
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.version), (PaymentStatus::Captured, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_deliveries_keep_the_invariants() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_16").await;
    t.ctx
        .store
        .finalize(
            &id,
            &fixtures::observe(Channel::Sync, fixtures::requires_action()),
            None,
        )
        .await
        .unwrap();
    let kinds = [
        "payment_intent.succeeded",
        "payment_intent.processing",
        "payment_intent.canceled",
        "payment_intent.succeeded",
    ];
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let app = t.app.clone();
            // Pairs share an event id: the same event delivered twice at once.
            let body = intent_event(&format!("evt_{}", i / 2), kinds[(i / 2) % 4], &id, now());
            tokio::spawn(async move { send(&app, stripe(&body, STRIPE_NEW)).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    for a in &answers {
        assert!(
            a.status == StatusCode::OK || a.status == StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            a.body
        );
    }
    let events = t.ctx.events(&id).await.unwrap();
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        events.iter().map(|e| e.version).collect::<Vec<_>>(),
        (1..=p.version).collect::<Vec<_>>()
    );
    assert!(p.status.is_terminal() && p.action.is_none(), "{p:?}");
    let terminal = events
        .iter()
        .filter(|e| e.status.is_terminal() && !e.previous_status.is_some_and(|s| s.is_terminal()));
    assert_eq!(terminal.count(), 1);
    let mut ids: Vec<_> = events.iter().filter_map(|e| e.psp_event_id.clone()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "no PSP event id applied twice");
    let applied = answers.iter().filter(|a| result(a) == "applied").count();
    assert_eq!(applied, events.len() - 2, "every applied answer is one event");
}

/// The sample events (`events/payloads/`, signed by `sign-events`) are valid API Gateway v2 events that
/// the handler accepts with the dev secrets.
#[tokio::test]
async fn sample_events_sign_and_run_through_the_handler() {
    use webhook_intake::providers::{Scheme, DEFAULT_PROVIDERS};
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events");
    let dir = std::env::temp_dir().join(format!("events-{}", uuid_like()));
    for provider in ["stripe", "standard"] {
        let target = dir.join("payloads").join(provider);
        std::fs::create_dir_all(&target).unwrap();
        for entry in std::fs::read_dir(repo.join("payloads").join(provider)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, target.join(path.file_name().unwrap())).unwrap();
        }
    }
    let (stripe_secret, standard_secret) = (
        "whsec_local_dev_stripe_signing_secret",
        "whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA==",
    );
    let secrets = json!({ "stripe": [stripe_secret], "standard": [standard_secret] }).to_string();
    let mut t = TestIntake::new().await;
    t.app.providers = Providers::from_json(DEFAULT_PROVIDERS, &secrets).unwrap().into();
    let mut sample = fixtures::new_payment("pay_sample", 1000);
    sample.psp_reference = Some(shared::PspReference::parse("pi_3SampleIntent00001").unwrap());
    t.ctx.store.create(sample).await.unwrap();
    let mut sample = fixtures::new_payment("pay_sample_std", 1000);
    sample.provider = shared::PspName::parse("standard").unwrap();
    sample.psp_reference = Some(shared::PspReference::parse("psp_sample_1").unwrap());
    t.ctx.store.create(sample).await.unwrap();

    let mut results = Vec::new();
    for (provider, scheme, secret) in [
        ("stripe", Scheme::Stripe, stripe_secret),
        ("standard", Scheme::Standard, standard_secret),
    ] {
        let files = webhook_signatures::samples::sign_all(
            &dir,
            provider,
            scheme,
            &SigningSecret::parse(secret).unwrap(),
            now(),
        )
        .unwrap();
        assert_eq!(files.len(), 6, "{provider}");
        for file in files {
            let req = lambda_http::request::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            let a = t.send(req).await;
            assert_eq!(a.status, StatusCode::OK, "{}: {}", file.display(), a.body);
            results.push(result(&a).to_owned());
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(results.iter().any(|r| r == "applied"), "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| ["applied", "stale", "duplicate"].contains(&r.as_str())),
        "{results:?}"
    );
}

fn uuid_like() -> String {
    format!("{:x}", clock::now_ms()) + &format!("{:x}", std::process::id())
}

/// The intake's cost target: at most 3 DynamoDB calls per webhook on the happy path, counted by an SDK
/// interceptor: the read, then the lease at the version read (its condition needs that version, so the two
/// follow each other), then the write (which frees the lease: no fourth call, no delete in it).
#[tokio::test]
async fn a_webhook_costs_three_calls_one_after_another() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_cost").await;
    t.ctx.calls.reset();
    let a = t
        .send(stripe(
            &intent_event("evt_1", "payment_intent.succeeded", &id, now()),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(result(&a), "applied");
    let mut calls = t.ctx.calls.calls();
    calls.sort();
    assert_eq!(calls, vec!["GetItem", "PutItem", "PutItem"]);
    assert_eq!(t.ctx.calls.sequential_depth(), 3);
}

/// A redelivery (signed ten minutes after its event was created) of an event not applied yet reads the
/// payment first, then takes the lease and writes: three calls, one after another.
#[tokio::test]
async fn a_redelivered_event_not_applied_yet_is_read_then_leased_and_written() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_redelivered_new").await;
    t.ctx.calls.reset();
    let a = t
        .send(stripe(
            &intent_event("evt_r1", "payment_intent.succeeded", &id, now() - 600),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(result(&a), "applied");
    let mut calls = t.ctx.calls.calls();
    calls.sort();
    assert_eq!(calls, vec!["GetItem", "PutItem", "PutItem"]);
    assert_eq!(t.ctx.calls.sequential_depth(), 3);
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.version), (PaymentStatus::Captured, 2));
}

/// A redelivery of an event the payment already holds costs one read and nothing else (no lease, no
/// write): `duplicate`; one the payment has moved past, `stale`, the same way.
#[tokio::test]
async fn a_redelivered_event_already_applied_costs_one_read() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_redelivered").await;
    let event = intent_event("evt_r1", "payment_intent.succeeded", &id, now() - 600);
    assert_eq!(result(&t.send(stripe(&event, STRIPE_NEW)).await), "applied");
    let items = t.item_count().await;
    t.ctx.calls.reset();
    let again = t.send(stripe(&event, STRIPE_NEW)).await;
    assert_eq!((again.status, result(&again)), (StatusCode::OK, "duplicate"));
    assert_eq!(t.ctx.calls.calls(), vec!["GetItem"]);
    let older = intent_event("evt_r0", "payment_intent.processing", &id, now() - 900);
    t.ctx.calls.reset();
    let stale = t.send(stripe(&older, STRIPE_NEW)).await;
    assert_eq!((stale.status, result(&stale)), (StatusCode::OK, "stale"));
    assert_eq!(t.ctx.calls.calls(), vec!["GetItem"]);
    assert_eq!(t.item_count().await, items, "no lease, no event, no change");
}

/// A redelivery of an applied event is answered while another worker holds the payment's lease: no wait,
/// no 503, because answering it needs no lease.
#[tokio::test]
async fn a_redelivered_applied_event_is_answered_while_the_lease_is_held() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_redelivered_leased").await;
    let event = intent_event("evt_r3", "payment_intent.succeeded", &id, now() - 600);
    assert_eq!(result(&t.send(stripe(&event, STRIPE_NEW)).await), "applied");
    let _held = t.ctx.leases.acquire(&t.ctx.read(&id).await).await.unwrap().unwrap();
    let again = t.send(stripe(&event, STRIPE_NEW)).await;
    assert_eq!((again.status, result(&again)), (StatusCode::OK, "duplicate"));
    assert_eq!(again.metrics.lease_deferrals, 0);
}

/// A redelivery reuses its first read for the write: a sync write that lands between the two makes the
/// versioned write conflict, and the event is decided again from the payment that won.
#[tokio::test]
async fn a_write_between_a_redeliverys_read_and_its_write_is_caught_by_the_version() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_redelivered_race").await;
    let hook = BeforeCall::new();
    let racing = App {
        store: t.ctx.store_with_hook(hook.clone()),
        ..t.app.clone()
    };
    let (store, target) = (t.ctx.store.clone(), id.clone());
    hook.before_next("PutItem", move || async move {
        store
            .finalize(&target, &fixtures::observe(Channel::Sync, Outcome::Processing), None)
            .await
            .expect("sync write");
    });
    let event = intent_event("evt_r2", "payment_intent.succeeded", &id, now() - 600);
    let a = send(&racing, stripe(&event, STRIPE_NEW)).await;
    assert_eq!(result(&a), "applied", "{}", a.body);
    assert_eq!(a.metrics.version_conflicts, 1);
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.version), (PaymentStatus::Captured, 3));
}

/// The intake's own binary, started with a secrets JSON of the wrong shape (a string where a list belongs):
/// it refuses to start, saying what is wrong and where, and never prints the secret.
#[test]
fn a_wrong_shaped_secrets_json_fails_the_start_without_printing_the_secret() {
    let secret = "whsec_this_must_never_be_printed_0123456789";
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_webhook-intake"))
        .env("TABLE_NAME", "payments-start-test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env_remove("WEBHOOK_SECRETS_ARN")
        .env("WEBHOOK_SECRETS", format!(r#"{{"stripe": "{secret}"}}"#))
        .env("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9")
        .output()
        .expect("the binary runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "started with bad secrets: {printed}");
    assert!(
        printed.contains("BadSecrets") && printed.contains("expected a sequence"),
        "{printed}"
    );
    assert!(!printed.contains("this_must_never_be_printed"), "{printed}");
}
