//! The payments API over its HTTP handler, against DynamoDB Local.

use integration_tests::{BeforeCall, TestContext};
use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request};
use payments_api::{handle, App};
use payments_core::fixtures;
use rand::Rng;
use serde_json::{json, Value};
use shared::{Outcome, PaymentId, PaymentStatus, PspName};
use std::time::Duration;

/// A typed client for the handler, on a fresh table.
struct TestApi {
    ctx: TestContext,
    app: App,
}

struct Answer {
    status: StatusCode,
    body: Value,
}

const SECRET: &str = "pi_123_secret_RACEsecret";
const REDIRECT: &str = "https://bank.example/3ds/RACEtoken";
const RETRY: &str = "retry_RACEtoken";

impl Answer {
    fn carries_secret(&self) -> bool {
        let text = self.body.to_string();
        ["client_secret", "redirect_url", "retry_token", SECRET, REDIRECT, RETRY]
            .iter()
            .any(|s| text.contains(s))
    }
    fn id(&self) -> PaymentId {
        PaymentId::parse(self.body["payment_id"].as_str().expect("payment_id")).unwrap()
    }
    fn version(&self) -> u64 {
        self.body["version"].as_u64().expect("version")
    }
}

impl TestApi {
    async fn new() -> Self {
        let ctx = TestContext::new().await;
        let settings = payments_api::Settings {
            config: ctx.config(),
            providers: shared::KnownPsps::default(),
            guard: shared::http::CallerGuard::open(),
        };
        let app = App::build(&settings, ctx.clients_for("payments-api")).await.unwrap();
        Self { ctx, app }
    }

    async fn call(&self, method: Method, path: &str, headers: &[(&str, &str)], body: Option<Value>) -> Answer {
        call(&self.app, method, path, headers, body).await
    }

    async fn create(&self, key: &str, body: Value) -> Answer {
        self.call(Method::POST, "/payments", &[("idempotency-key", key)], Some(body))
            .await
    }

    async fn create_default(&self) -> PaymentId {
        let answer = self.create(&uuid::Uuid::new_v4().to_string(), order(1000)).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
        answer.id()
    }

    async fn sync(&self, id: &PaymentId, body: Value) -> Answer {
        self.call(Method::POST, &format!("/payments/{id}/sync-result"), &[], Some(body))
            .await
    }
}

async fn call(app: &App, method: Method, path: &str, headers: &[(&str, &str)], body: Option<Value>) -> Answer {
    let mut builder = lambda_http::http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let body = body.map(|b| Body::from(b.to_string())).unwrap_or(Body::Empty);
    let req: Request = builder.body(body).unwrap();
    let response = handle(app, req).await.unwrap();
    let status = response.status();
    let bytes = match response.body() {
        Body::Text(t) => t.as_bytes().to_vec(),
        Body::Binary(b) => b.clone(),
        _ => Vec::new(),
    };
    Answer {
        status,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn order(amount: u64) -> Value {
    json!({ "order_id": "order-1", "amount_minor": amount, "currency": "EUR", "metadata": { "cart": "c-1" } })
}

fn requires_action() -> Value {
    json!({ "outcome": "requires_action", "client_secret": SECRET, "redirect_url": REDIRECT, "psp_reference": "pi_123" })
}

// ---- creation ----------------------------------------------------------------------------------------------

#[tokio::test]
async fn create_is_idempotent_per_key_and_body() {
    let api = TestApi::new().await;
    let first = api.create("key-1", order(1000)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(first.body["status"], "pending");
    assert_eq!(first.body["amount"], json!({ "amount_minor": 1000, "currency": "EUR" }));
    let replay = api.create("key-1", order(1000)).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.id(), first.id());
    let other = api.create("key-1", order(2000)).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(other.body["error"], "unprocessable");
}

#[tokio::test]
async fn a_payment_records_its_provider_and_takes_only_references_of_its_namespace() {
    let api = TestApi::new().await;
    let stripe = api.create_default().await;
    assert_eq!(
        api.ctx.store.get(&stripe).await.unwrap().unwrap().provider,
        PspName::Stripe
    );
    let body = json!({ "order_id": "o-std", "amount_minor": 1000, "currency": "EUR", "provider": "standard" });
    let standard = api.create("key-std", body).await;
    assert_eq!(standard.status, StatusCode::CREATED, "{}", standard.body);
    let standard = standard.id();
    let stored = api.ctx.store.get(&standard).await.unwrap().unwrap();
    assert_eq!(stored.provider.as_str(), "standard");

    // A Stripe payment cannot be bound to another PSP's id: 409, nothing written.
    let foreign = api
        .sync(
            &stripe,
            json!({ "outcome": "processing", "psp_reference": "psp_sample_1" }),
        )
        .await;
    assert_eq!(foreign.status, StatusCode::CONFLICT, "{}", foreign.body);
    assert!(
        foreign.body["message"]
            .as_str()
            .unwrap()
            .contains("not a stripe reference"),
        "{}",
        foreign.body
    );
    assert_eq!(api.ctx.store.get(&stripe).await.unwrap().unwrap().version, 1);
    // The Standard provider's own id is taken.
    let bound = api
        .sync(
            &standard,
            json!({ "outcome": "processing", "psp_reference": "psp_sample_1" }),
        )
        .await;
    assert_eq!(bound.status, StatusCode::OK, "{}", bound.body);
    let stored = api.ctx.store.get(&standard).await.unwrap().unwrap();
    assert_eq!(stored.psp_reference.unwrap().as_str(), "psp_sample_1");
}

/// Headers, body, the answer's status and a word its message must contain.
type BadRequest = (
    &'static [(&'static str, &'static str)],
    Option<Value>,
    StatusCode,
    &'static str,
);

#[tokio::test]
async fn bad_create_requests_are_refused_and_write_nothing() {
    let api = TestApi::new().await;
    let cases: Vec<BadRequest> = vec![
        (&[], Some(order(1000)), StatusCode::BAD_REQUEST, "Idempotency-Key"),
        (
            &[("idempotency-key", "k 1")],
            Some(order(1000)),
            StatusCode::BAD_REQUEST,
            "Idempotency-Key",
        ),
        (&[("idempotency-key", "k1")], None, StatusCode::BAD_REQUEST, "empty"),
        (
            &[("idempotency-key", "k2")],
            Some(json!("not an object")),
            StatusCode::BAD_REQUEST,
            "invalid request body",
        ),
        (
            &[("idempotency-key", "k3")],
            Some(order(0)),
            StatusCode::BAD_REQUEST,
            "positive",
        ),
        (
            &[("idempotency-key", "k4")],
            Some(json!({ "order_id": "o", "amount_minor": 5, "currency": "EURO" })),
            StatusCode::BAD_REQUEST,
            "ISO 4217",
        ),
        (
            &[("idempotency-key", "k5")],
            Some(json!({ "order_id": "o", "amount_minor": -5, "currency": "EUR" })),
            StatusCode::BAD_REQUEST,
            "invalid",
        ),
        (
            &[("idempotency-key", "k6")],
            Some(json!({ "order_id": "o", "amount_minor": 5, "currency": "EUR", "colour": "red" })),
            StatusCode::BAD_REQUEST,
            "colour",
        ),
        (
            &[("idempotency-key", "k7")],
            Some(json!({ "order_id": "o", "amount_minor": 5, "currency": "EUR", "provider": "paypal" })),
            StatusCode::BAD_REQUEST,
            "unknown provider \"paypal\"",
        ),
        (
            &[("idempotency-key", "k8")],
            Some(json!({ "order_id": "o", "amount_minor": 5, "currency": "EUR", "psp_reference": "psp_sample_1" })),
            StatusCode::BAD_REQUEST,
            "not a stripe reference",
        ),
    ];
    for (headers, body, status, needle) in cases {
        let answer = api.call(Method::POST, "/payments", headers, body.clone()).await;
        assert_eq!(answer.status, status, "{body:?} -> {}", answer.body);
        assert_eq!(answer.body["error"], "bad_request");
        assert!(
            answer.body["message"].as_str().unwrap().contains(needle),
            "{}",
            answer.body
        );
    }
    let items = api.ctx.client.scan().table_name(&api.ctx.table).send().await.unwrap();
    assert_eq!(items.count(), 0, "a 4xx writes nothing");
}

#[tokio::test]
async fn sixteen_concurrent_creates_with_one_key_make_one_payment() {
    let api = TestApi::new().await;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let app = api.app.clone();
            tokio::spawn(async move {
                call(
                    &app,
                    Method::POST,
                    "/payments",
                    &[("idempotency-key", "same-key")],
                    Some(order(1500)),
                )
                .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let created = answers.iter().filter(|a| a.status == StatusCode::CREATED).count();
    let replayed = answers.iter().filter(|a| a.status == StatusCode::OK).count();
    assert_eq!(
        (created, replayed),
        (1, 15),
        "{:?}",
        answers.iter().map(|a| &a.body).collect::<Vec<_>>()
    );
    let id = answers[0].id();
    assert!(answers.iter().all(|a| a.id() == id));
    let payments = api
        .ctx
        .client
        .scan()
        .table_name(&api.ctx.table)
        .filter_expression("entity = :p")
        .expression_attribute_values(":p", aws_sdk_dynamodb::types::AttributeValue::S("payment".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(payments.count(), 1);
}

// ---- the seed's table --------------------------------------------------------------------------------------

#[tokio::test]
async fn a_redirect_answer_hands_out_an_https_redirect_url_and_the_client_secret() {
    let api = TestApi::new().await;
    let id = api.create_default().await;
    let a = api.sync(&id, requires_action()).await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (StatusCode::OK, Some("requires_action"))
    );
    assert_eq!(a.body["redirect_url"], REDIRECT);
    assert!(a.body["redirect_url"].as_str().unwrap().starts_with("https://"));
    assert_eq!(a.body["client_secret"], SECRET);
}

#[tokio::test]
async fn a_success_answer_hands_out_no_secret_and_a_late_redirect_answer_only_the_outcome() {
    let api = TestApi::new().await;
    let id = api.create_default().await;
    api.sync(&id, requires_action()).await;
    let a = api
        .sync(&id, json!({ "outcome": "succeeded", "psp_reference": "pi_123" }))
        .await;
    assert_eq!(a.body["status"], "captured");
    assert!(!a.carries_secret(), "{}", a.body);
    let again = api.sync(&id, requires_action()).await;
    assert_eq!(
        again.body["status"], "captured",
        "a late redirect answer gets the outcome only"
    );
    assert!(!again.carries_secret(), "{}", again.body);
}

#[tokio::test]
async fn a_failure_answer_hands_out_the_reason_and_no_secret() {
    let api = TestApi::new().await;
    let id = api.create_default().await;
    api.sync(&id, requires_action()).await;
    let a = api
        .sync(&id, json!({ "outcome": "failed", "reason": "canceled" }))
        .await;
    assert_eq!(
        (a.body["status"].as_str(), a.body["failure_reason"].as_str()),
        (Some("failed"), Some("canceled"))
    );
    assert!(!a.carries_secret(), "{}", a.body);
}

/// Version conflict: the handler decides again from the current item (captured) and hands out no secret.
#[tokio::test]
async fn a_redirect_answer_that_loses_the_race_to_a_success_webhook_answers_captured_without_secret() {
    let api = TestApi::new().await;
    let id = api.create_default().await;
    let hook = BeforeCall::new();
    let racing = App {
        store: api.ctx.store_with_hook(hook.clone()),
        ..api.app.clone()
    };
    let (webhook_store, webhook_id) = (api.ctx.store.clone(), id.clone());
    hook.before_next("PutItem", move || async move {
        let obs = fixtures::webhook("evt_race", 1, Outcome::Succeeded);
        webhook_store.finalize(&webhook_id, &obs, None).await.unwrap();
    });
    let a = call(
        &racing,
        Method::POST,
        &format!("/payments/{id}/sync-result"),
        &[],
        Some(requires_action()),
    )
    .await;
    assert!(
        hook.done(),
        "the webhook committed between the handler's read and write"
    );
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (StatusCode::OK, Some("captured"))
    );
    assert!(!a.carries_secret(), "{}", a.body);
    // No relay runs here: archive the history as it would.
    api.ctx.events(&id).await.unwrap();
    let log = api
        .call(Method::GET, &format!("/payments/{id}/events"), &[], None)
        .await;
    let types: Vec<&str> = log.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        vec!["PaymentCreated", "PaymentCaptured"],
        "the stale redirect was never written"
    );
}

// ---- reads, errors -----------------------------------------------------------------------------------------

#[tokio::test]
async fn a_read_and_the_event_log_show_each_version_and_never_the_secret() {
    let api = TestApi::new().await;
    let id = api.create_default().await;
    api.sync(&id, requires_action()).await;
    api.sync(&id, json!({ "outcome": "processing" })).await;
    let view = api.call(Method::GET, &format!("/payments/{id}"), &[], None).await;
    assert_eq!(
        (view.status, view.body["status"].as_str(), view.version()),
        (StatusCode::OK, Some("processing"), 3)
    );
    assert!(!view.carries_secret(), "processing hands out nothing");

    // No relay runs here: archive the history as it would.
    api.ctx.events(&id).await.unwrap();
    let log = api
        .call(
            Method::GET,
            &format!("/payments/{id}/events"),
            &[("x-correlation-id", "corr-1")],
            None,
        )
        .await;
    let events = log.body["events"].as_array().unwrap();
    let versions: Vec<u64> = events.iter().map(|e| e["version"].as_u64().unwrap()).collect();
    assert_eq!(versions, vec![1, 2, 3]);
    assert_eq!(events[1]["type"], "ActionRequired");
    assert_eq!(events[1]["path"], "sync");
    assert!(events[0]["recorded_at"].as_str().unwrap().ends_with('Z'));
    assert!(!log.body.to_string().contains(SECRET), "the log never holds a secret");
}

#[tokio::test]
async fn errors_are_json_with_the_right_status() {
    let api = TestApi::new().await;
    let id = api.create_default().await;
    let cases = vec![
        (
            Method::GET,
            "/payments/pay_missing".to_string(),
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/payments/pay_missing/events".into(),
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::POST,
            "/payments/pay_missing/sync-result".into(),
            Some(json!({"outcome":"processing"})),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (Method::GET, "/nowhere".into(), None, StatusCode::NOT_FOUND, "not_found"),
        (
            Method::DELETE,
            format!("/payments/{id}"),
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::POST,
            format!("/payments/{id}/sync-result"),
            Some(json!({"outcome":"teleported"})),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            format!("/payments/{id}/sync-result"),
            Some(json!({"outcome":"succeeded","typo":1})),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            Method::POST,
            format!("/payments/{id}/sync-result"),
            Some(json!({"outcome":"requires_action","redirect_url":"http://evil.example"})),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let a = api.call(method.clone(), &path, &[], body).await;
        assert_eq!(
            (a.status, a.body["error"].as_str()),
            (status, Some(code)),
            "{method} {path}: {}",
            a.body
        );
        assert!(a.body["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // A sync result for another PSP payment than the one this payment is bound to: 409, nothing written.
    api.sync(&id, requires_action()).await;
    let a = api
        .sync(&id, json!({ "outcome": "succeeded", "psp_reference": "pi_other" }))
        .await;
    assert_eq!(
        (a.status, a.body["error"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );
    let view = api.call(Method::GET, &format!("/payments/{id}"), &[], None).await;
    assert_eq!(
        (view.body["status"].as_str(), view.version()),
        (Some("requires_action"), 2)
    );
}

// ---- the race, for real --------------------------------------------------------------------------------------

fn random_sync(rng: &mut impl Rng) -> Value {
    match rng.random_range(0..5) {
        0 | 1 => requires_action(),
        2 => json!({ "outcome": "processing" }),
        3 => json!({ "outcome": "succeeded" }),
        _ => json!({ "outcome": "attempt_failed", "decline_code": "card_declined", "retry_token": RETRY }),
    }
}

fn random_webhook(rng: &mut impl Rng, run: usize) -> shared::Observation {
    let outcome = match rng.random_range(0..4) {
        0 | 1 => Outcome::Succeeded,
        2 => fixtures::failed(),
        _ => Outcome::Processing,
    };
    fixtures::webhook(&format!("evt_{run}"), 1_000, outcome)
}

/// Webhook intake (lease, shared finalize) and sync finalize (through the handler) race on one payment,
/// 300 times with random delays and outcomes: no answer carries a secret for a payment that was terminal
/// when the answer was built, and no update is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_and_sync_race_without_stale_secrets_or_lost_updates() {
    let api = TestApi::new().await;
    let (mut leaks, mut lost, mut sync_first, mut webhook_first, mut answered_from_webhook) = (0, 0, 0, 0, 0);
    for run in 0..300 {
        let id = api.create_default().await;
        let (sync_body, webhook_obs, d1, d2) = {
            let mut rng = rand::rng();
            (
                random_sync(&mut rng),
                random_webhook(&mut rng, run),
                rng.random_range(0..12_000),
                rng.random_range(0..4_000),
            )
        };
        let sync = {
            let (app, path) = (api.app.clone(), format!("/payments/{id}/sync-result"));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(d1)).await;
                call(&app, Method::POST, &path, &[], Some(sync_body)).await
            })
        };
        let webhook = {
            let (store, leases, id) = (api.ctx.store.clone(), api.ctx.leases.clone(), id.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(d2)).await;
                // The intake's sequence: a read, the lease at its version (waited for), the one finalize.
                let current = store.get(&id).await.unwrap().expect("payment");
                let wait = shared::apply::LeaseWait::attempts(5, Duration::from_millis(20));
                match leases.hold_waiting(&store, current, wait).await.unwrap() {
                    Some((lease, read)) => shared::apply::finalize_leased(&store, lease, read, &webhook_obs)
                        .await
                        .unwrap(),
                    None => store.finalize(&id, &webhook_obs, None).await.unwrap(),
                }
            })
        };
        let (sync, webhook) = (sync.await.unwrap(), webhook.await.unwrap());
        assert_eq!(sync.status, StatusCode::OK, "{}", sync.body);

        let events = api.ctx.events(&id).await.unwrap();
        let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
        if versions != (1..=events.len() as u64).collect::<Vec<_>>() {
            lost += 1;
        }
        // The sync answer was built from the item at its version: that item must exist with that status.
        let at = &events[(sync.version() - 1) as usize];
        if at.status.as_str() != sync.body["status"].as_str().unwrap() {
            lost += 1;
        }
        // The webhook's write, when it reports one, is in the log.
        if let shared::FinalizeResult::Applied(kind) = webhook.result {
            if events[(webhook.payment.version - 1) as usize].kind != kind {
                lost += 1;
            }
        }
        if sync.carries_secret() && at.status.is_terminal() {
            leaks += 1;
        }
        if PaymentStatus::parse(sync.body["status"].as_str().unwrap())
            .unwrap()
            .is_terminal()
            && sync.carries_secret()
        {
            leaks += 1;
        }
        if at.path == shared::Channel::Webhook {
            answered_from_webhook += 1;
        }
        match events.get(1).map(|e| e.path) {
            Some(shared::Channel::Sync) => sync_first += 1,
            Some(shared::Channel::Webhook) => webhook_first += 1,
            _ => {}
        }
    }
    println!(
        "300 races: sync wrote first {sync_first}, webhook wrote first {webhook_first}, \
         sync answered from the webhook's item {answered_from_webhook}"
    );
    assert_eq!(leaks, 0, "answers with a secret for a terminal payment");
    assert_eq!(lost, 0, "lost updates");
    assert!(
        sync_first > 0 && webhook_first > 0,
        "both orders happened: {sync_first} / {webhook_first}"
    );
}

/// The sample API Gateway events in `events/` run through the handler as Lambda would deliver them.
#[tokio::test]
async fn sample_api_events_run_through_the_handler() {
    let api = TestApi::new().await;
    api.ctx
        .store
        .create(fixtures::new_payment("pay_sample", 1000))
        .await
        .unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events");
    let expect = [
        ("api-create-payment.json", StatusCode::CREATED, "pending"),
        (
            "api-sync-result-requires-action.json",
            StatusCode::OK,
            "requires_action",
        ),
        ("api-sync-result-succeeded.json", StatusCode::OK, "captured"),
        ("api-get-payment.json", StatusCode::OK, "captured"),
    ];
    for (file, status, payment_status) in expect {
        let req = lambda_http::request::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
        let response = handle(&api.app, req).await.unwrap();
        assert_eq!(response.status(), status, "{file}");
        let body: Value = match response.body() {
            Body::Binary(b) => serde_json::from_slice(b).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(body["status"], payment_status, "{file}: {body}");
    }
    let req =
        lambda_http::request::from_str(&std::fs::read_to_string(dir.join("api-get-payment-events.json")).unwrap())
            .unwrap();
    let response = handle(&api.app, req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}
