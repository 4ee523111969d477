//! The simulator refuses what Stripe refuses (each rule, with Stripe's error object), and what our client does
//! against each rule: it stays inside it, or (a rolled key) reports the refusal as a key problem.

use crate::support::{params, served, KEY};
use psp::{ChargeRequest, IntentStatus, PspError, StripeApi};
use psp_simulator::ledger::{Answer, Effects, Ledger, Timings, RETURN_URL_REQUIRED};
use shared::{Currency, Money, OrderId, PaymentId};
use std::collections::BTreeMap;
use std::time::Duration;

const AUTH: Option<&str> = Some("Bearer sk_test_rules");

fn ledger() -> Ledger {
    Ledger::new(KEY, Timings { slow: Duration::ZERO }, None)
}

/// A charge as our client sends it (no redirects).
fn charge(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut p = params(&[
        ("amount", "1000"),
        ("currency", "eur"),
        ("confirm", "true"),
        ("payment_method", "pm_succeeded"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
    ]);
    p.extend(params(extra));
    p
}

fn post(l: &Ledger, key: &str, p: &BTreeMap<String, String>) -> Answer {
    let effects: Effects = l.handle("POST", "/v1/payment_intents", AUTH, Some(key), p);
    effects.answer.expect("an answer")
}

fn refused(a: &Answer, status: u16, code: Option<&str>, param: Option<&str>) {
    let e = &a.body["error"];
    assert_eq!(
        (a.status, e["type"].as_str(), e["code"].as_str(), e["param"].as_str()),
        (status, Some("invalid_request_error"), code, param),
        "{a:?}"
    );
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{a:?}");
}

fn ids(payment: &str, order: &str) -> (PaymentId, OrderId) {
    (PaymentId::parse(payment).unwrap(), OrderId::parse(order).unwrap())
}

#[test]
fn a_confirm_that_may_redirect_needs_a_return_url() {
    let l = ledger();
    let mut bare = charge(&[]);
    bare.retain(|k, _| !k.starts_with("automatic_payment_methods"));
    let a = post(&l, "k1", &bare);
    refused(&a, 400, None, Some("return_url"));
    assert_eq!(a.body["error"]["message"].as_str(), Some(RETURN_URL_REQUIRED));
    // Redirects allowed explicitly: still refused.
    let mut always = bare.clone();
    always.insert("automatic_payment_methods[enabled]".into(), "true".into());
    always.insert("automatic_payment_methods[allow_redirects]".into(), "always".into());
    refused(&post(&l, "k2", &always), 400, None, Some("return_url"));
    // Each way out Stripe offers is accepted.
    let mut with_url = always.clone();
    with_url.insert("return_url".into(), "https://shop.example/back".into());
    let mut with_types = bare.clone();
    with_types.insert("payment_method_types[]".into(), "card".into());
    for (n, ok) in [charge(&[]), with_url, with_types].iter().enumerate() {
        let a = post(&l, &format!("ok{n}"), ok);
        assert_eq!(a.status, 200, "{a:?}");
    }
    // A refusal by validation is not remembered under its key: the corrected request goes through.
    assert_eq!(post(&l, "k1", &charge(&[])).status, 200);
}

#[test]
fn unknown_and_mistyped_parameters_are_refused_as_stripe_does() {
    let l = ledger();
    refused(
        &post(&l, "k1", &charge(&[("colour", "red")])),
        400,
        Some("parameter_unknown"),
        Some("colour"),
    );
    refused(
        &post(&l, "k2", &charge(&[("automatic_payment_methods[colour]", "red")])),
        400,
        Some("parameter_unknown"),
        Some("automatic_payment_methods[colour]"),
    );
    refused(
        &post(&l, "k3", &charge(&[("amount", "10.50")])),
        400,
        Some("parameter_invalid_integer"),
        Some("amount"),
    );
    let search = l.handle("GET", "/v1/payment_intents/search", AUTH, None, &params(&[("q", "x")]));
    refused(&search.answer.unwrap(), 400, Some("parameter_unknown"), Some("q"));
    let cancel = l.handle(
        "POST",
        "/v1/payment_intents/pi_x/cancel",
        AUTH,
        Some("k4"),
        &params(&[("cancellation_reason", "bored")]),
    );
    refused(
        &cancel.answer.unwrap(),
        400,
        Some("parameter_invalid"),
        Some("cancellation_reason"),
    );
}

#[test]
fn metadata_is_limited_to_50_keys_of_40_and_values_of_500_characters() {
    let l = ledger();
    let at_limits: Vec<(String, String)> = (0..50)
        .map(|n| (format!("metadata[{n:0>40}]"), "v".repeat(500)))
        .collect();
    let mut p = charge(&[]);
    p.extend(at_limits.iter().cloned());
    assert_eq!(post(&l, "full", &p).status, 200, "at the limits");
    let mut too_many = p.clone();
    too_many.insert("metadata[one_more]".into(), "v".into());
    refused(&post(&l, "k1", &too_many), 400, None, Some("metadata"));
    let long_key = format!("metadata[{}]", "k".repeat(41));
    refused(
        &post(&l, "k2", &charge(&[(&long_key, "v")])),
        400,
        None,
        Some("metadata"),
    );
    let long_value = "v".repeat(501);
    refused(
        &post(&l, "k3", &charge(&[("metadata[payment_id]", &long_value)])),
        400,
        None,
        Some("metadata"),
    );
}

#[test]
fn an_idempotency_key_is_1_to_255_characters() {
    let l = ledger();
    assert_eq!(post(&l, &"k".repeat(255), &charge(&[])).status, 200);
    let a = post(&l, &"k".repeat(256), &charge(&[]));
    assert_eq!(a.status, 400, "{a:?}");
    assert!(a.body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Idempotent key length is 256"));
    assert_eq!(post(&l, "", &charge(&[])).status, 400);
}

#[test]
fn a_rolled_key_is_expired_after_its_grace_and_an_unknown_key_is_invalid() {
    let l = ledger();
    let get = |l: &Ledger, auth: &str| {
        l.handle("GET", "/v1/payment_intents/pi_none", Some(auth), None, &params(&[]))
            .answer
            .unwrap()
    };
    assert_eq!(
        get(&l, "Bearer sk_test_rules").status,
        404,
        "the key works: the intent is unknown"
    );
    l.roll_key("sk_test_new", Duration::from_secs(3600));
    assert_eq!(
        get(&l, "Bearer sk_test_rules").status,
        404,
        "old key in its grace period"
    );
    assert_eq!(get(&l, "Bearer sk_test_new").status, 404);
    l.roll_key("sk_test_newer", Duration::ZERO);
    let expired = get(&l, "Bearer sk_test_rules");
    assert_eq!(
        (expired.status, expired.body["error"]["code"].as_str()),
        (401, Some("api_key_expired"))
    );
    assert_eq!(get(&l, "Bearer sk_test_new").status, 401, "rolled at once");
    let unknown = get(&l, "Bearer sk_test_never_issued");
    assert_eq!((unknown.status, unknown.body["error"]["code"].as_str()), (401, None));
    let message = unknown.body["error"]["message"].as_str().unwrap();
    assert!(!message.contains("never_issued"), "the key is redacted: {message}");
    assert_eq!(l.auth_counts(), (3, 3));
}

#[tokio::test]
async fn our_client_charges_with_the_rules_on_within_every_limit() {
    let s = served().await;
    let client = s.client(KEY);
    // The longest ids our types allow, and a key longer than any the saga or recovery derives from them.
    let (payment, order) = ids(&"p".repeat(64), &"o".repeat(128));
    let money = Money::new(2500, Currency::parse("EUR").unwrap()).unwrap();
    let request = ChargeRequest {
        payment_id: &payment,
        order_id: &order,
        money: &money,
        payment_method: "pm_succeeded",
    };
    let key = format!("{order}:cancel:requires_payment_method");
    let intent = client.charge(&key, &request).await.expect("accepted");
    assert_eq!(intent.status, IntentStatus::Succeeded);
    let logged = s.sim.ledger.requests();
    let sent = &logged.last().unwrap().params;
    let metadata: Vec<(&String, &String)> = sent.iter().filter(|(k, _)| k.starts_with("metadata[")).collect();
    assert!(!metadata.is_empty() && metadata.len() <= 50, "{metadata:?}");
    assert!(metadata
        .iter()
        .all(|(k, v)| k.len() - "metadata[]".len() <= 40 && v.len() <= 500));
    // The return URL rule: our client chose no redirects, so Stripe needs no return URL.
    assert_eq!(
        sent.get("automatic_payment_methods[allow_redirects]")
            .map(String::as_str),
        Some("never")
    );
}

#[tokio::test]
async fn a_rolled_key_reaches_our_client_as_stripes_401() {
    let s = served().await;
    let client = s.client(KEY);
    let (payment, _) = ids("pay_rolled", "order_rolled");
    assert!(client.find_for_payment(&payment).await.expect("works").is_none());
    // The operator rolls the key the way the simulator's admin route does it (no grace).
    let rolled = psp_simulator::client::HttpClient::default()
        .send(
            "POST",
            &format!("{}/_sim/keys/roll", s.url),
            &[],
            b"key=sk_test_rolled_in".to_vec(),
        )
        .await
        .expect("roll");
    assert_eq!(rolled.0, 200);
    let refused = client.find_for_payment(&payment).await.expect_err("old key");
    assert_auth_failure(&refused);
    assert!(s.client("sk_test_rolled_in").find_for_payment(&payment).await.is_ok());
}

/// What our client makes of Stripe's 401 for a rolled key: a key problem, 401, `api_key_expired`.
fn assert_auth_failure(e: &PspError) {
    match e {
        PspError::AuthFailed { status, error } => {
            assert_eq!((*status, error.code.as_deref()), (401, Some("api_key_expired")));
        }
        other => panic!("a rolled key must be reported as an auth failure, got {other:?}"),
    }
}

/// Stripe's lock timeout, as Stripe answers it: 429, `invalid_request_error`, code `lock_timeout`, its message
/// and `doc_url`, with `Stripe-Should-Retry: true` (Stripe advises retrying it; its libraries follow the
/// header). Only requests on the locked PaymentIntent find it locked, and only `count` of them.
#[tokio::test]
async fn a_locked_payment_intent_answers_stripes_lock_timeout() {
    let s = served().await;
    let client = s.client(KEY);
    let (payment, order) = ids("pay_locked", "order_locked");
    let money = Money::new(2500, Currency::parse("EUR").unwrap()).unwrap();
    let request = ChargeRequest {
        payment_id: &payment,
        order_id: &order,
        money: &money,
        payment_method: "pm_succeeded",
    };
    let (locked, other) = (
        client.charge("order_locked:charge", &request).await.expect("charged"),
        client.charge("order_other:charge", &request).await.expect("charged"),
    );
    s.sim.ledger.lock(&locked.id, 1);
    let (head, body) = raw_read(&s.url, &other.id).await;
    assert!(head.starts_with("http/1.1 200"), "another intent is not locked: {head}");
    assert_eq!(body["id"], other.id.as_str());
    let (head, body) = raw_read(&s.url, &locked.id).await;
    assert!(head.starts_with("http/1.1 429"), "{head}");
    assert!(head.contains("\r\nstripe-should-retry: true"), "{head}");
    let e = &body["error"];
    assert_eq!(
        (e["type"].as_str(), e["code"].as_str()),
        (Some("invalid_request_error"), Some("lock_timeout"))
    );
    assert!(e["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("This object cannot be accessed right now")));
    assert_eq!(e["doc_url"], "https://stripe.com/docs/error-codes/lock-timeout");
    let (head, _) = raw_read(&s.url, &locked.id).await;
    assert!(
        head.starts_with("http/1.1 200"),
        "the lock was released after one request: {head}"
    );
}

/// `GET /v1/payment_intents/{id}` as raw HTTP/1.1 (our client hides the headers): the head, lowercased, and
/// the JSON body.
async fn raw_read(url: &str, id: &str) -> (String, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!(
        "GET /v1/payment_intents/{id} HTTP/1.1\r\nHost: sim\r\nAuthorization: Bearer {KEY}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (head.to_ascii_lowercase(), serde_json::from_str(body).unwrap())
}
