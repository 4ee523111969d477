//! The Stripe client against recorded Stripe answers: a server on 127.0.0.1 that records each request and
//! replays, in order, answers as Stripe sends them (the objects of Stripe's published fixtures, Stripe's error
//! objects for each error type, 429s and 5xx with and without `Stripe-Should-Retry`, an answer that never
//! comes). No fake of Stripe's behaviour: only its answers, byte for byte.

use integration_tests::http_stub::{self, StubRequest, StubResponse};
use psp::stripe::Redirects;
use psp::{ApiKey, ChargeRequest, PspError, StripeApi, StripeClient, StripeSettings};
use shared::retry::Backoff;
use shared::{Currency, Money, OrderId, PaymentId, PspReference};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

const KEY: &str = "sk_test_recorded_1234";

fn ok(body: String) -> StubResponse {
    StubResponse::json(200, body)
}

fn error(status: u16, kind: &str, code: Option<&str>, extra: serde_json::Value) -> StubResponse {
    let mut error = serde_json::json!({ "type": kind, "message": "recorded message", "code": code });
    if let (Some(e), Some(x)) = (error.as_object_mut(), extra.as_object()) {
        e.extend(x.clone());
    }
    StubResponse::json(status, serde_json::json!({ "error": error }).to_string())
}

struct Server {
    url: String,
    seen: Arc<Mutex<Vec<StubRequest>>>,
}

/// Replays `answers` in order and records each request.
async fn serve(answers: Vec<StubResponse>) -> Server {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let queue = Arc::new(Mutex::new(VecDeque::from(answers)));
    let record = seen.clone();
    let url = http_stub::serve(move |request| {
        record.lock().unwrap().push(request);
        let answer = queue.lock().unwrap().pop_front();
        async move { answer.map(|a| a.header("request-id", "req_recorded")) }
    })
    .await;
    Server { url, seen }
}

fn client(url: &str) -> StripeClient {
    let mut settings = StripeSettings::local(url, KEY).expect("PSP settings");
    settings.retries = Backoff::new(3, Duration::from_millis(1), Duration::from_millis(5));
    settings.request_timeout = Duration::from_millis(300);
    settings.redirects = Redirects::ReturnTo("https://shop.example/return".into());
    StripeClient::new(&settings, ApiKey::parse(KEY).unwrap()).unwrap()
}

fn fixture(name: &str) -> serde_json::Value {
    let all: serde_json::Value = serde_json::from_str(include_str!("../../fixtures/stripe-fixtures.json")).unwrap();
    all[name].clone()
}

fn reference() -> PspReference {
    PspReference::parse("pi_1PgafyB7WZ01zgkWSjxsAJo3").unwrap()
}

async fn charge(c: &StripeClient) -> Result<psp::PaymentIntent, PspError> {
    let money = Money::new(1099, Currency::parse("USD").unwrap()).unwrap();
    let (payment, order) = (PaymentId::parse("pay_1").unwrap(), OrderId::parse("order-1").unwrap());
    let request = ChargeRequest {
        payment_id: &payment,
        order_id: &order,
        money: &money,
        payment_method: "pm_card_visa",
    };
    c.charge("order-1:charge", &request).await
}

#[tokio::test]
async fn a_charge_is_a_form_encoded_confirmed_payment_intent_with_key_version_and_idempotency_key() {
    let server = serve(vec![ok(fixture("payment_intent").to_string())]).await;
    let pi = charge(&client(&server.url)).await.expect("charged");
    assert_eq!(pi.id, "pi_1PgafyB7WZ01zgkWSjxsAJo3");
    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.request_line(), "POST /v1/payment_intents HTTP/1.1");
    assert_eq!(
        seen.header("authorization").as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(seen.header("idempotency-key").as_deref(), Some("order-1:charge"));
    assert_eq!(
        seen.header("stripe-version").as_deref(),
        Some(psp::stripe::STRIPE_API_VERSION)
    );
    assert_eq!(
        seen.header("content-type").as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    let form: Vec<(String, String)> = serde_urlencoded::from_str(&seen.body).unwrap();
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("amount"), Some("1099"));
    assert_eq!(get("currency"), Some("usd"), "Stripe's lowercase currency");
    assert_eq!(get("confirm"), Some("true"));
    assert_eq!(get("payment_method"), Some("pm_card_visa"));
    assert_eq!(get("metadata[payment_id]"), Some("pay_1"));
    assert_eq!(get("metadata[order_id]"), Some("order-1"));
    // The marker the intake tells our objects by (`webhook_intake::psp_event::STAGE_MARKER` is this key).
    let marker = format!("metadata[{}]", psp::STAGE_MARKER);
    assert_eq!(get(&marker), Some(shared::metrics::stage()));
    assert_eq!(get("return_url"), Some("https://shop.example/return"));
    assert_eq!(get("automatic_payment_methods[allow_redirects]"), None);
}

#[tokio::test]
async fn a_charge_without_redirects_says_so_and_sends_no_return_url() {
    let server = serve(vec![ok(fixture("payment_intent").to_string())]).await;
    let settings = StripeSettings::local(&server.url, KEY).expect("settings");
    assert_eq!(settings.redirects, Redirects::Never, "the tests' explicit choice");
    charge(&StripeClient::new(&settings, ApiKey::parse(KEY).unwrap()).unwrap())
        .await
        .expect("charged");
    let seen = server.seen.lock().unwrap()[0].clone();
    let form: Vec<(String, String)> = serde_urlencoded::from_str(&seen.body).unwrap();
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("automatic_payment_methods[enabled]"), Some("true"));
    assert_eq!(get("automatic_payment_methods[allow_redirects]"), Some("never"));
    assert_eq!(get("return_url"), None);
}

#[tokio::test]
async fn retrieve_expands_the_charge_and_refund_and_cancel_are_idempotent_posts() {
    let mut pi = fixture("payment_intent");
    pi["status"] = "succeeded".into();
    let mut charge = fixture("charge");
    charge["amount_refunded"] = 40.into();
    pi["latest_charge"] = charge;
    let mut canceled = fixture("payment_intent");
    canceled["status"] = "canceled".into();
    let server = serve(vec![
        ok(pi.to_string()),
        ok(fixture("refund").to_string()),
        ok(canceled.to_string()),
    ])
    .await;
    let c = client(&server.url);
    let got = c.retrieve(&reference()).await.unwrap();
    assert_eq!(got.amount_refunded(), Some(40));
    let refund = c.refund("order-1:refund", &reference(), Some(100)).await.unwrap();
    assert_eq!((refund.amount, refund.is_accepted()), (100, true));
    assert_eq!(
        c.cancel("order-1:cancel", &reference()).await.unwrap().status,
        psp::IntentStatus::Canceled
    );
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].request_line(),
        "GET /v1/payment_intents/pi_1PgafyB7WZ01zgkWSjxsAJo3?expand%5B%5D=latest_charge HTTP/1.1"
    );
    assert!(seen[0].header("idempotency-key").is_none(), "GETs carry no key");
    assert_eq!(seen[1].request_line(), "POST /v1/refunds HTTP/1.1");
    assert_eq!(seen[1].body, "payment_intent=pi_1PgafyB7WZ01zgkWSjxsAJo3&amount=100");
    assert_eq!(seen[1].header("idempotency-key").as_deref(), Some("order-1:refund"));
    assert_eq!(
        seen[2].request_line(),
        "POST /v1/payment_intents/pi_1PgafyB7WZ01zgkWSjxsAJo3/cancel HTTP/1.1"
    );
    assert_eq!(seen[2].header("idempotency-key").as_deref(), Some("order-1:cancel"));
    assert!(seen
        .iter()
        .all(|s| s.header("authorization").as_deref() == Some("Bearer sk_test_recorded_1234")));
}

#[tokio::test]
async fn each_stripe_error_type_maps_to_our_terms() {
    let mut declined_pi = fixture("payment_intent");
    declined_pi["last_payment_error"] =
        serde_json::json!({ "type": "card_error", "decline_code": "insufficient_funds" });
    let mut succeeded = fixture("payment_intent");
    succeeded["status"] = "succeeded".into();
    let server = serve(vec![
        error(
            402,
            "card_error",
            Some("card_declined"),
            serde_json::json!({ "decline_code": "insufficient_funds", "payment_intent": declined_pi }),
        ),
        error(400, "idempotency_error", None, serde_json::json!({})),
        error(
            400,
            "invalid_request_error",
            Some("payment_intent_unexpected_state"),
            serde_json::json!({ "payment_intent": succeeded }),
        ),
        error(401, "invalid_request_error", None, serde_json::json!({})),
        error(
            404,
            "invalid_request_error",
            Some("resource_missing"),
            serde_json::json!({ "param": "intent" }),
        ),
    ])
    .await;
    let c = client(&server.url);
    match charge(&c).await {
        Err(e @ PspError::Declined(_)) => {
            let PspError::Declined(ref d) = e else { unreachable!() };
            assert_eq!(d.decline_code.as_deref(), Some("insufficient_funds"));
            let pi = e.payment_intent().expect("the PaymentIntent comes with the decline");
            assert_eq!(pi.status, psp::IntentStatus::RequiresPaymentMethod);
            assert!(!e.is_transient());
        }
        other => panic!("a decline, got {other:?}"),
    }
    let idempotency = charge(&c).await.unwrap_err();
    assert!(
        matches!(&idempotency, PspError::Refused { status: 400, error } if error.kind == psp::stripe::ErrorType::IdempotencyError)
    );
    let cancel = c.cancel("k", &reference()).await.unwrap_err();
    assert_eq!(
        cancel.payment_intent().map(|p| p.status),
        Some(psp::IntentStatus::Succeeded)
    );
    let auth = c.retrieve(&reference()).await.unwrap_err();
    assert!(matches!(auth, PspError::AuthFailed { status: 401, .. }), "{auth}");
    assert!(
        auth.is_deferred() && !auth.is_transient(),
        "our key's fault: defer, never decline"
    );
    assert!(matches!(
        c.retrieve(&reference()).await.unwrap_err(),
        PspError::Refused { status: 404, .. }
    ));
    assert_eq!(server.seen.lock().unwrap().len(), 5, "permanent errors are not retried");
}

#[tokio::test]
async fn transient_answers_are_retried_with_the_same_key_and_stripe_should_retry_wins() {
    let retry_409 = error(
        409,
        "invalid_request_error",
        Some("lock_timeout"),
        serde_json::json!({}),
    )
    .header("stripe-should-retry", "true");
    let never_500 = error(500, "api_error", None, serde_json::json!({})).header("stripe-should-retry", "false");
    let server = serve(vec![
        // A charge: 429, 503, then the PaymentIntent (3 attempts).
        error(429, "invalid_request_error", Some("rate_limit"), serde_json::json!({})),
        error(503, "api_error", None, serde_json::json!({})),
        ok(fixture("payment_intent").to_string()),
        // A refund: 409 with Stripe-Should-Retry: true is retried, then the refund.
        retry_409,
        ok(fixture("refund").to_string()),
        // A status query: 500 with Stripe-Should-Retry: false is not retried.
        never_500,
        // api_error answers and storms that outlast the retries: transient.
        error(500, "api_error", None, serde_json::json!({})),
        error(502, "api_error", None, serde_json::json!({})),
        error(500, "api_error", None, serde_json::json!({})),
    ])
    .await;
    let c = client(&server.url);
    charge(&c).await.expect("third attempt answers");
    c.refund("order-1:refund", &reference(), None)
        .await
        .expect("retried after the 409");
    assert!(c.retrieve(&reference()).await.unwrap_err().is_transient());
    let storm = c.retrieve(&reference()).await.unwrap_err();
    assert!(storm.is_transient(), "{storm}");
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 9);
    assert!(seen[..3]
        .iter()
        .all(|s| s.header("idempotency-key").as_deref() == Some("order-1:charge")));
    assert_eq!(seen[3].body, seen[4].body, "the retry sends the same request");
}

#[tokio::test]
async fn an_answer_that_never_comes_is_a_timeout_retried_with_the_same_key() {
    let mut slow = ok(fixture("payment_intent").to_string());
    slow.delay = Duration::from_secs(2);
    let server = serve(vec![slow, ok(fixture("payment_intent").to_string())]).await;
    let c = client(&server.url);
    charge(&c).await.expect("the retry answers");
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].header("idempotency-key"), seen[1].header("idempotency-key"));
    assert_eq!(seen[0].body, seen[1].body);
    // Nobody listening: a connection error, transient.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let refused = client(&url).retrieve(&reference()).await.unwrap_err();
    assert!(refused.is_transient());
    // The log line names every cause down to the socket's, and not the URL.
    let chain = shared::telemetry::ErrorChain(&refused).to_string();
    assert!(
        chain.starts_with("PSP unavailable: no answer: connection failed: "),
        "{chain}"
    );
    assert!(
        chain.len() > "PSP unavailable: no answer: connection failed: ".len() + 10,
        "{chain}"
    );
    assert!(!chain.contains(&url), "{chain}");
}

/// A key-refresh source whose secret the test sets, and a clock 31 s ahead, past the re-read's interval.
fn refreshable(first: &str, secret: Arc<Mutex<String>>) -> psp::key::CurrentKey {
    let loader: psp::key::KeyLoader = Arc::new(move || {
        let value = secret.lock().unwrap().clone();
        Box::pin(async move { Ok(ApiKey::parse(&value)?) })
    });
    let start = std::time::Instant::now();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // The first reading (at construction) is the cold start; every later one is 31 s on.
    let clock: shared::clock::MonotonicClock = Arc::new(move || {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        start + Duration::from_secs(31u64.saturating_mul(n as u64))
    });
    psp::key::CurrentKey::refreshable(ApiKey::parse(first).unwrap(), loader, clock)
}

fn rolled_key_answer() -> StubResponse {
    error(
        401,
        "invalid_request_error",
        None,
        serde_json::json!({ "message": "Invalid API Key provided: sk_test_****1234" }),
    )
}

#[tokio::test]
async fn a_refused_key_is_read_again_and_the_call_made_once_more_with_the_new_one() {
    let server = serve(vec![rolled_key_answer(), ok(fixture("payment_intent").to_string())]).await;
    let secret = Arc::new(Mutex::new("sk_test_new_5678".to_owned()));
    let settings = StripeSettings::local(&server.url, KEY).expect("settings");
    let c = StripeClient::with_key(&settings, refreshable(KEY, secret)).unwrap();
    charge(&c).await.expect("charged with the new key");
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let auth: Vec<_> = seen.iter().map(|s| s.header("authorization")).collect();
    assert_eq!(
        auth,
        [
            Some(format!("Bearer {KEY}")),
            Some("Bearer sk_test_new_5678".to_owned())
        ]
    );
    assert!(seen
        .iter()
        .all(|s| s.header("idempotency-key").as_deref() == Some("order-1:charge")));
}

#[tokio::test]
async fn a_key_still_refused_after_the_re_read_is_deferred_not_retried() {
    let server = serve(vec![rolled_key_answer(), rolled_key_answer()]).await;
    let secret = Arc::new(Mutex::new(KEY.to_owned()));
    let settings = StripeSettings::local(&server.url, KEY).expect("settings");
    let c = StripeClient::with_key(&settings, refreshable(KEY, secret)).unwrap();
    let e = charge(&c).await.unwrap_err();
    assert!(
        matches!(e, PspError::AuthFailed { status: 401, .. }) && e.is_deferred(),
        "{e}"
    );
    assert_eq!(
        server.seen.lock().unwrap().len(),
        1,
        "the secret holds the same key: no second call"
    );
}

#[tokio::test]
async fn a_refusal_is_logged_with_stripes_type_code_param_and_message_and_never_the_key_or_body() {
    use tracing_subscriber::layer::SubscriberExt;
    let server = serve(vec![
        error(
            400,
            "invalid_request_error",
            Some("parameter_missing"),
            serde_json::json!({ "param": "return_url", "message": "You must provide a `return_url` when confirming" }),
        ),
        rolled_key_answer(),
    ])
    .await;
    let capture = integration_tests::LogCapture::default();
    let sink = capture.clone();
    let subscriber = tracing_subscriber::registry()
        .with(shared::telemetry::layer(
            true,
            shared::telemetry::SpanCloses::Omitted,
            move || sink.clone(),
        ))
        .with(tracing_subscriber::EnvFilter::new("info"));
    let _guard = tracing::subscriber::set_default(subscriber);
    let c = client(&server.url);
    assert!(matches!(charge(&c).await, Err(PspError::Refused { status: 400, .. })));
    assert!(matches!(
        c.retrieve(&reference()).await,
        Err(PspError::AuthFailed { .. })
    ));
    let lines = capture.lines();
    let refused = lines
        .iter()
        .find(|l| l.contains("PSP refused the request"))
        .expect("the refusal's line");
    for part in [
        r#""error_type":"invalid_request_error""#,
        r#""code":"parameter_missing""#,
        r#""param":"return_url""#,
        "You must provide a `return_url` when confirming",
        r#""operation":"charge""#,
    ] {
        assert!(refused.contains(part), "{part} missing from {refused}");
    }
    let key_line = lines
        .iter()
        .find(|l| l.contains("PSP refused our API key"))
        .expect("the key's line");
    assert!(
        key_line.contains(r#""status":401"#) && key_line.contains("[redacted]"),
        "{key_line}"
    );
    for line in &lines {
        for secret in [KEY, "sk_test_****1234", "pm_card_visa"] {
            assert!(!line.contains(secret), "{secret} logged: {line}");
        }
    }
}
