//! The simulator's Adyen side refuses what Adyen's Checkout API v71 refuses (each rule, with Adyen's error
//! object), plays out the test scenarios, and sends notifications that the intake's verifier
//! (`webhook_signatures::adyen::verify`) accepts, with Basic auth, in batches, duplicated and retried.

use psp_simulator::adyen::ledger::{AdyenLedger, Handled, Notice, RETURN_URL_MISSING};
use psp_simulator::adyen::notify::{self, Endpoint};
use psp_simulator::adyen::AdyenSimulator;
use psp_simulator::delivery::DeliveryOptions;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use webhook_signatures::adyen::{verify, HmacKey, Item, Mode};

const API_KEY: &str = "AQE_test_adyen_key";
const ACCOUNT: &str = "TestMerchantECOM";
/// The published vector's key (Adyen's Python library tests).
const HMAC: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

fn ledger() -> AdyenLedger {
    AdyenLedger::new(API_KEY, ACCOUNT)
}

fn key() -> HmacKey {
    HmacKey::from_hex(Mode::Test, HMAC).expect("key")
}

/// The items of a notification body, read as the intake reads them
/// (`{"notificationItems": [{"NotificationRequestItem": {...}}]}`).
fn items(body: &Value) -> Vec<Item> {
    let wrapped = body["notificationItems"].as_array().expect("notificationItems");
    wrapped
        .iter()
        .map(|w| serde_json::from_value(w["NotificationRequestItem"].clone()).expect("an item"))
        .collect()
}

/// A payment as our client sends it: a plain test card, authorised.
fn payment(reference: &str) -> Value {
    json!({
        "amount": { "value": 1130, "currency": "EUR" },
        "merchantAccount": ACCOUNT,
        "reference": reference,
        "paymentMethod": { "type": "scheme", "encryptedCardNumber": "test_4111111111111111" },
        "returnUrl": "https://shop.example/back",
    })
}

fn post(l: &AdyenLedger, path: &str, key: Option<&str>, body: &Value) -> Handled {
    l.handle("POST", path, Some(API_KEY), key, body.to_string().as_bytes())
}

fn refused(h: &Handled, status: u16, kind: &str, code: &str) {
    let b = &h.answer.body;
    assert_eq!(
        (
            h.answer.status,
            b["status"].as_u64(),
            b["errorType"].as_str(),
            b["errorCode"].as_str()
        ),
        (status, Some(u64::from(status)), Some(kind), Some(code)),
        "{h:?}"
    );
    assert!(b["message"].as_str().is_some_and(|m| !m.is_empty()), "{h:?}");
    assert!(h.notices.is_empty(), "a refused request notifies nothing: {h:?}");
}

fn events(h: &Handled) -> Vec<(&'static str, bool)> {
    h.notices.iter().map(|n| (n.event_code, n.success)).collect()
}

/// An authorised payment's pspReference.
fn authorised(l: &AdyenLedger, reference: &str, holder: Option<&str>) -> String {
    let mut body = payment(reference);
    if let Some(holder) = holder {
        body["paymentMethod"]["holderName"] = json!(holder);
    }
    let h = post(l, "/v71/payments", None, &body);
    assert_eq!(h.answer.body["resultCode"], "Authorised", "{h:?}");
    h.answer.body["pspReference"].as_str().expect("pspReference").to_owned()
}

#[test]
fn the_api_key_is_required_and_checked() {
    let l = ledger();
    let body = payment("order-1").to_string();
    for key in [None, Some("AQE_wrong")] {
        let h = l.handle("POST", "/v71/payments", key, None, body.as_bytes());
        refused(&h, 401, "security", "000");
        assert!(h.answer.body.get("pspReference").is_none(), "{h:?}");
    }
    let mut other = payment("order-1");
    other["merchantAccount"] = json!("SomeoneElsesAccount");
    refused(&post(&l, "/v71/payments", None, &other), 403, "security", "901");
}

#[test]
fn a_payment_needs_every_required_field() {
    let l = ledger();
    for (field, pointer) in [
        ("amount", "/amount"),
        ("amount.value", "/amount/value"),
        ("amount.currency", "/amount/currency"),
        ("merchantAccount", "/merchantAccount"),
        ("reference", "/reference"),
        ("paymentMethod", "/paymentMethod"),
    ] {
        let mut body = payment("order-1");
        let (parent, last) = pointer.rsplit_once('/').expect("pointer");
        let parent = if parent.is_empty() {
            &mut body
        } else {
            body.pointer_mut(parent).expect("parent")
        };
        parent.as_object_mut().expect("object").remove(last);
        let h = post(&l, "/v71/payments", None, &body);
        refused(&h, 422, "validation", "14_006");
        assert_eq!(
            h.answer.body["message"],
            format!("Required field '{field}' is not provided.")
        );
        assert!(h.answer.body["pspReference"].is_string(), "{h:?}");
    }
    let mut no_return = payment("order-1");
    no_return.as_object_mut().expect("object").remove("returnUrl");
    let h = post(&l, "/v71/payments", None, &no_return);
    refused(&h, 422, "validation", "14_030");
    assert_eq!(h.answer.body["message"], RETURN_URL_MISSING);
}

#[test]
fn mistyped_fields_and_bodies_are_refused() {
    let l = ledger();
    let mut long = payment(&"r".repeat(81));
    refused(&post(&l, "/v71/payments", None, &long), 422, "validation", "14_019");
    long["reference"] = json!("r".repeat(80));
    assert_eq!(post(&l, "/v71/payments", None, &long).answer.status, 200);
    for (pointer, bad) in [
        ("/amount/value", json!("1130")),
        ("/amount/value", json!(-1)),
        ("/amount/currency", json!("eur")),
    ] {
        let mut body = payment("order-2");
        *body.pointer_mut(pointer).expect("field") = bad;
        let h = post(&l, "/v71/payments", None, &body);
        assert_eq!(
            (h.answer.status, h.answer.body["errorType"].as_str()),
            (422, Some("validation")),
            "{h:?}"
        );
    }
    let h = l.handle("POST", "/v71/payments", Some(API_KEY), None, b"{not json");
    refused(&h, 400, "validation", "702");
    let h = l.handle("POST", "/v71/payments", Some(API_KEY), None, b"[]");
    refused(&h, 400, "validation", "702");
}

#[test]
fn idempotency_keys_are_bounded_replayed_and_tied_to_their_request() {
    let l = ledger();
    let body = payment("order-1");
    let long = "k".repeat(65);
    refused(&post(&l, "/v71/payments", Some(&long), &body), 422, "validation", "702");
    let key = "k".repeat(64);
    let first = post(&l, "/v71/payments", Some(&key), &body);
    assert_eq!(
        (first.answer.status, first.replayed, first.notices.len()),
        (200, false, 1)
    );
    let again = post(&l, "/v71/payments", Some(&key), &body);
    assert_eq!((&again.answer, again.replayed), (&first.answer, true));
    assert!(again.notices.is_empty(), "a replay does nothing again");
    // The same key with another request (another body, another endpoint) is refused, never applied.
    refused(
        &post(&l, "/v71/payments", Some(&key), &payment("order-2")),
        422,
        "validation",
        "704",
    );
    let capture = json!({ "merchantAccount": ACCOUNT, "amount": { "value": 1130, "currency": "EUR" } });
    let psp = first.answer.body["pspReference"].as_str().expect("psp");
    refused(
        &post(&l, &format!("/v71/payments/{psp}/captures"), Some(&key), &capture),
        422,
        "validation",
        "704",
    );
    // A refusal by validation is not kept: the corrected request goes through under the same key.
    let mut broken = payment("order-3");
    broken.as_object_mut().expect("object").remove("returnUrl");
    refused(
        &post(&l, "/v71/payments", Some("k3"), &broken),
        422,
        "validation",
        "14_030",
    );
    assert_eq!(
        post(&l, "/v71/payments", Some("k3"), &payment("order-3")).answer.status,
        200
    );
}

#[test]
fn refusals_carry_the_reason_in_the_answer_and_the_notification() {
    let l = ledger();
    let mut body = payment("order-1");
    body["paymentMethod"]["holderName"] = json!("NOT_ENOUGH_BALANCE");
    let h = post(&l, "/v71/payments", None, &body);
    let b = &h.answer.body;
    assert_eq!(
        (
            h.answer.status,
            b["resultCode"].as_str(),
            b["refusalReason"].as_str(),
            b["refusalReasonCode"].as_str()
        ),
        (200, Some("Refused"), Some("Not enough balance"), Some("12"))
    );
    let n = &h.notices[0];
    assert_eq!(
        (n.event_code, n.success, n.reason.as_deref(), n.psp_reference.as_str()),
        (
            "AUTHORISATION",
            false,
            Some("Not enough balance"),
            b["pspReference"].as_str().expect("psp")
        )
    );
    let ok = post(&l, "/v71/payments", None, &payment("order-2"));
    assert_eq!(events(&ok), vec![("AUTHORISATION", true)]);
    assert_eq!(ok.notices[0].merchant_reference, "order-2");
}

#[test]
fn a_challenge_redirects_the_shopper_and_details_decide_it() {
    let l = ledger();
    for (holder, result) in [(None, "Authorised"), (Some("CARD_EXPIRED"), "Refused")] {
        let mut body = payment("order-3ds");
        body["paymentMethod"]["encryptedCardNumber"] = json!("test_4917610000000000");
        if let Some(holder) = holder {
            body["paymentMethod"]["holderName"] = json!(holder);
        }
        let h = post(&l, "/v71/payments", None, &body);
        let action = &h.answer.body["action"];
        assert_eq!(
            (h.answer.body["resultCode"].as_str(), action["type"].as_str()),
            (Some("RedirectShopper"), Some("redirect"))
        );
        assert!(h.notices.is_empty(), "nothing is decided before the shopper is back");
        // Adyen's PaymentResponse: the pspReference of a payment waiting for the shopper comes with
        // /payments/details (or the notification), not with this answer.
        assert_eq!(h.answer.body.get("pspReference"), None, "{:?}", h.answer.body);
        let url = action["url"].as_str().expect("url");
        let token = url.split_once("redirectResult=").expect("redirectResult").1;
        assert!(url.starts_with("https://shop.example/back?"), "{url}");
        let details = json!({ "details": { "redirectResult": token } });
        let done = post(&l, "/v71/payments/details", None, &details);
        assert_eq!(done.answer.body["resultCode"], result, "{done:?}");
        let reference = done.answer.body["pspReference"]
            .as_str()
            .expect("pspReference with the details");
        assert_eq!(
            done.notices[0].psp_reference, reference,
            "the notification's, the payment's"
        );
        assert_eq!(events(&done), vec![("AUTHORISATION", result == "Authorised")]);
        // A redirect result is used once.
        refused(
            &post(&l, "/v71/payments/details", None, &details),
            422,
            "validation",
            "14_018",
        );
    }
    refused(
        &post(&l, "/v71/payments/details", None, &json!({ "details": {} })),
        422,
        "validation",
        "14_006",
    );
}

#[test]
fn modifications_are_received_and_their_outcome_is_notified() {
    let l = ledger();
    let psp = authorised(&l, "order-1", None);
    let money = |value: u64| json!({ "merchantAccount": ACCOUNT, "amount": { "value": value, "currency": "EUR" }, "reference": "cap-1" });
    let too_much = post(&l, &format!("/v71/payments/{psp}/captures"), None, &money(1131));
    assert_eq!(
        (too_much.answer.status, events(&too_much)),
        (201, vec![("CAPTURE", false)])
    );
    let h = post(&l, &format!("/v71/payments/{psp}/captures"), None, &money(1130));
    let b = &h.answer.body;
    assert_eq!(
        (
            h.answer.status,
            b["status"].as_str(),
            b["paymentPspReference"].as_str(),
            b["reference"].as_str()
        ),
        (201, Some("received"), Some(psp.as_str()), Some("cap-1"))
    );
    let n: &Notice = &h.notices[0];
    assert_eq!(
        (n.event_code, n.success, n.original_reference.as_deref()),
        ("CAPTURE", true, Some(psp.as_str()))
    );
    assert_eq!(
        Some(n.psp_reference.as_str()),
        b["pspReference"].as_str(),
        "a modification has its own reference"
    );
    assert_ne!(n.psp_reference, psp);
    assert_eq!(n.merchant_reference, "order-1", "the payment's reference");
    let cancel = json!({ "merchantAccount": ACCOUNT });
    let late = post(&l, &format!("/v71/payments/{psp}/cancels"), None, &cancel);
    assert_eq!(
        (late.answer.status, events(&late)),
        (201, vec![("CANCELLATION", false)])
    );
    let refund = post(&l, &format!("/v71/payments/{psp}/refunds"), None, &money(500));
    assert_eq!(events(&refund), vec![("REFUND", true)]);
    let reversal = post(&l, &format!("/v71/payments/{psp}/reversals"), None, &cancel);
    assert_eq!(
        (events(&reversal), reversal.notices[0].value),
        (vec![("CANCEL_OR_REFUND", true)], 630)
    );
    assert_eq!(
        events(&post(&l, &format!("/v71/payments/{psp}/refunds"), None, &money(1))),
        vec![("REFUND", false)]
    );
    // Captures and refunds need an amount; every modification the merchant account; a payment Adyen knows.
    refused(
        &post(&l, &format!("/v71/payments/{psp}/refunds"), None, &cancel),
        422,
        "validation",
        "14_006",
    );
    refused(
        &post(&l, &format!("/v71/payments/{psp}/cancels"), None, &json!({})),
        422,
        "validation",
        "14_006",
    );
    refused(
        &post(&l, "/v71/payments/NOSUCHPAYMENT000/cancels", None, &cancel),
        422,
        "validation",
        "167",
    );
}

#[test]
fn captures_and_refunds_can_fail_after_they_were_received() {
    let l = ledger();
    let money = json!({ "merchantAccount": ACCOUNT, "amount": { "value": 1130, "currency": "EUR" } });
    let psp = authorised(&l, "order-cf", Some("CAPTURE_FAILED"));
    let h = post(&l, &format!("/v71/payments/{psp}/captures"), None, &money);
    assert_eq!(
        (h.answer.body["status"].as_str(), events(&h)),
        (Some("received"), vec![("CAPTURE", true), ("CAPTURE_FAILED", true)]),
        "Adyen reports the capture's failure as an event that happened"
    );
    assert_eq!(h.notices[1].reason.as_deref(), Some("Capture failed"));
    assert_eq!(
        h.notices[0].psp_reference, h.notices[1].psp_reference,
        "both about the one capture"
    );
    let psp = authorised(&l, "order-rf", Some("REFUND_FAILED"));
    post(&l, &format!("/v71/payments/{psp}/captures"), None, &money);
    let h = post(&l, &format!("/v71/payments/{psp}/refunds"), None, &money);
    assert_eq!(
        events(&h),
        vec![("REFUND", true), ("REFUND_FAILED", true)],
        "Adyen reports the failure as an event that happened"
    );
}

#[test]
fn a_payment_is_cancelled_by_our_own_reference() {
    let l = ledger();
    let psp = authorised(&l, "order-1", None);
    let body = json!({ "merchantAccount": ACCOUNT, "paymentReference": "order-1", "reference": "cancel-1" });
    let h = post(&l, "/v71/cancels", None, &body);
    let b = &h.answer.body;
    assert_eq!(
        (h.answer.status, b["status"].as_str(), b["paymentReference"].as_str()),
        (201, Some("received"), Some("order-1"))
    );
    let n = &h.notices[0];
    assert_eq!(
        (n.event_code, n.success, n.original_reference.as_deref()),
        ("TECHNICAL_CANCEL", true, Some(psp.as_str()))
    );
    // A challenge never completed is cancelled too, and its redirect result is dead.
    let mut challenged = payment("order-2");
    challenged["paymentMethod"]["type"] = json!("ideal");
    let started = post(&l, "/v71/payments", None, &challenged);
    let url = started.answer.body["action"]["url"].as_str().expect("url").to_owned();
    let cancel = post(
        &l,
        "/v71/cancels",
        None,
        &json!({ "merchantAccount": ACCOUNT, "paymentReference": "order-2" }),
    );
    assert_eq!(events(&cancel), vec![("TECHNICAL_CANCEL", true)]);
    let token = url.split_once("redirectResult=").expect("token").1;
    refused(
        &post(
            &l,
            "/v71/payments/details",
            None,
            &json!({ "details": { "redirectResult": token } }),
        ),
        422,
        "validation",
        "14_018",
    );
    // A reference Adyen has no payment for is received, and notified as failed.
    let none = post(
        &l,
        "/v71/cancels",
        None,
        &json!({ "merchantAccount": ACCOUNT, "paymentReference": "never-paid" }),
    );
    assert_eq!(
        (none.answer.status, events(&none)),
        (201, vec![("TECHNICAL_CANCEL", false)])
    );
    refused(
        &post(&l, "/v71/cancels", None, &json!({ "merchantAccount": ACCOUNT })),
        422,
        "validation",
        "14_006",
    );
}

#[test]
fn the_signer_is_the_intakes_and_matches_the_published_vector() {
    let notice = Notice {
        event_code: "AUTHORISATION",
        psp_reference: "7914073381342284".into(),
        original_reference: None,
        merchant_reference: "TestPayment-1407325143704".into(),
        value: 1130,
        currency: "EUR".into(),
        success: true,
        reason: None,
    };
    let item = notify::item(&notice, "TestMerchant");
    let signed = notify::signed(&item, &key(), 0);
    assert_eq!(
        signed["additionalData"]["hmacSignature"],
        "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="
    );
    assert!(
        signed.get("originalReference").is_none(),
        "absent, as Adyen sends it: {signed}"
    );
}

/// What a test endpoint received: each request's Authorization header and body.
type Received = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// An endpoint on 127.0.0.1 that answers 500 to its first `fail_first` requests, then `[accepted]`.
async fn endpoint(fail_first: usize) -> (String, Received) {
    use http_body_util::{BodyExt, Full};
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/webhooks/adyen", listener.local_addr().expect("addr"));
    let log = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let log = log.clone();
                async move {
                    let auth = req
                        .headers()
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let body = req.into_body().collect().await?.to_bytes();
                    let mut log = log.lock().expect("log");
                    log.push((auth, serde_json::from_slice(&body).unwrap_or(Value::Null)));
                    let status = if log.len() <= fail_first { 500 } else { 200 };
                    let mut answer = hyper::Response::new(Full::new(bytes::Bytes::from_static(b"[accepted]")));
                    *answer.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
                    Ok::<_, hyper::Error>(answer)
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
        }
    });
    (url, received)
}

/// A simulator notifying `url` (Basic `adyen:a long password`) with `delivery`'s faults.
fn notifying(url: String, delivery: DeliveryOptions) -> Arc<AdyenSimulator> {
    let endpoint = Endpoint {
        url,
        username: "adyen".into(),
        password: "a long password".into(),
    };
    AdyenSimulator::new(ledger(), key(), Some(endpoint), delivery)
}

#[tokio::test]
async fn notifications_are_signed_batched_duplicated_retried_and_sent_with_basic_auth() {
    let (url, received) = endpoint(1).await;
    let delivery = DeliveryOptions {
        max_delay: Duration::from_millis(2),
        duplicate_rate: 1.0,
        reorder_rate: 0.0,
        failure_rate: 0.0,
        max_attempts: 4,
        eventbridge: None,
    };
    let sim = notifying(url, delivery);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let api = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(sim.clone().serve(listener));
    let client = psp_simulator::client::HttpClient::default();
    let headers = [
        ("x-api-key", API_KEY.to_owned()),
        ("idempotency-key", "pay-1".to_owned()),
    ];
    for n in 0..4 {
        let (status, answer) = client
            .json(
                "POST",
                &format!("{api}/v71/payments"),
                &headers[..1],
                &payment(&format!("order-{n}")),
            )
            .await
            .expect("pay");
        assert_eq!((status, answer["resultCode"].as_str()), (200, Some("Authorised")));
    }
    let (status, _) = client
        .json("POST", &format!("{api}/v71/payments"), &headers, &payment("order-9"))
        .await
        .expect("pay");
    assert_eq!(status, 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // 5 items, each sent twice; the first notification is answered 500 and sent again.
    let accepted = |log: &[(Option<String>, Value)]| -> usize {
        log.iter()
            .skip(1)
            .map(|(_, b)| b["notificationItems"].as_array().map_or(0, Vec::len))
            .sum()
    };
    while accepted(&received.lock().expect("log")) < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            received.lock().expect("log")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let received = received.lock().expect("log").clone();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for (n, (auth, body)) in received.iter().enumerate() {
        assert_eq!(
            auth.as_deref(),
            Some("Basic YWR5ZW46YSBsb25nIHBhc3N3b3Jk"),
            "adyen:a long password"
        );
        assert_eq!(body["live"], "false");
        let parsed = items(body);
        assert!((1..=notify::MAX_BATCH).contains(&parsed.len()), "{body}");
        for (i, item) in parsed.iter().enumerate() {
            assert_eq!(verify(i, item, &[key()]), Ok(Mode::Test), "{body}");
            let reference = item.merchant_reference.clone().expect("reference");
            // The first (failed) attempt's items are sent again: count only the accepted notifications.
            if n > 0 {
                *seen.entry(reference).or_default() += 1;
            }
        }
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(
        seen.values().all(|&copies| copies == 2),
        "each item once more as a duplicate: {seen:?}"
    );
    let sent = sim.outbox.sent();
    assert_eq!(sent.len(), 5);
    assert!(sent
        .iter()
        .all(|i| i["eventDate"].is_string() && i["merchantAccountCode"] == ACCOUNT));
}

/// Adyen's queue: one endpoint's notifications go in the order they were queued, and a notification the
/// endpoint refuses is sent again before anything behind it; the delivery counts what happened.
#[tokio::test]
async fn a_refused_notification_holds_up_the_queue_which_goes_in_order() {
    let (url, received) = endpoint(2).await;
    let delivery = DeliveryOptions {
        max_delay: Duration::from_millis(1),
        duplicate_rate: 0.0,
        reorder_rate: 0.0,
        failure_rate: 0.0,
        max_attempts: 5,
        eventbridge: None,
    };
    let sim = notifying(url, delivery);
    let l = &sim.ledger;
    for n in 0..6 {
        let h = post(l, "/v71/payments", None, &payment(&format!("order-{n}")));
        sim.notify(&h.notices);
    }
    assert!(!sim.outbox.idle(), "queued, not sent");
    sim.clone().notify_in_background();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !sim.outbox.idle() {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", sim.outbox.delivery());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let received = received.lock().expect("log").clone();
    let references: Vec<Vec<String>> = received
        .iter()
        .map(|(_, body)| {
            let items = items(body);
            items.into_iter().filter_map(|i| i.merchant_reference).collect()
        })
        .collect();
    assert_eq!(references[0], references[1], "the refused notification again");
    assert_eq!(references[1], references[2], "and again, until accepted");
    let order: Vec<String> = references[2..].concat();
    let queued: Vec<String> = (0..6).map(|n| format!("order-{n}")).collect();
    assert_eq!(order, queued, "nothing overtakes it, and the queue keeps its order");
    let d = sim.outbox.delivery();
    assert_eq!(
        (d.retries, d.items, d.notifications, d.undelivered, d.duplicates),
        (2, 6, received.len() - 2, 0, 0),
        "{d:?}"
    );
}

/// The admin read the demos check against (Adyen has no read): where a payment stands, by our reference.
#[tokio::test]
async fn the_admin_route_shows_where_a_payment_stands_by_our_reference() {
    let sim = AdyenSimulator::new(ledger(), key(), None, DeliveryOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let api = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(sim.clone().serve(listener));
    let psp = authorised(&sim.ledger, "pay_admin_1", None);
    let capture = json!({ "amount": { "value": 1130, "currency": "EUR" }, "merchantAccount": ACCOUNT });
    post(&sim.ledger, &format!("/v71/payments/{psp}/captures"), None, &capture);
    let client = psp_simulator::client::HttpClient::default();
    let get = |path: String| {
        let client = client.clone();
        async move { client.json("GET", &path, &[], &Value::Null).await.expect("get") }
    };
    let (status, view) = get(format!("{api}/_sim/references/pay_admin_1")).await;
    assert_eq!(
        (status, view),
        (200, json!({ "status": "authorised", "captured": 1130, "refunded": 0 }))
    );
    let (status, _) = get(format!("{api}/_sim/references/pay_unknown")).await;
    assert_eq!(status, 404);
}
