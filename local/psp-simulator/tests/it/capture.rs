//! Authorize now, capture later (`capture_method=manual`): the simulator authorizes, captures, cancels and
//! lets an authorization lapse as Stripe does, and refuses what Stripe refuses (each with Stripe's error).

use crate::support::{params, KEY};
use psp_simulator::ledger::{Answer, Ledger, Timings, AUTHORIZATION_VALIDITY};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const AUTH: Option<&str> = Some("Bearer sk_test_rules");

fn ledger() -> Ledger {
    Ledger::new(KEY, Timings { slow: Duration::ZERO }, None)
}

fn post(l: &Ledger, path: &str, key: &str, p: &BTreeMap<String, String>) -> Answer {
    l.handle("POST", path, AUTH, Some(key), p).answer.expect("an answer")
}

fn read(l: &Ledger, id: &str) -> Value {
    let p = params(&[("expand[]", "latest_charge")]);
    let a = l
        .handle("GET", &format!("/v1/payment_intents/{id}"), AUTH, None, &p)
        .answer
        .expect("an answer");
    assert_eq!(a.status, 200, "{a:?}");
    a.body
}

/// A confirmed card payment of 1000 with `capture_method=manual` (as our client sends a charge).
fn authorize(l: &Ledger, key: &str) -> Value {
    let p = params(&[
        ("amount", "1000"),
        ("currency", "eur"),
        ("confirm", "true"),
        ("payment_method", "pm_succeeded"),
        ("capture_method", "manual"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
    ]);
    let a = post(l, "/v1/payment_intents", key, &p);
    assert_eq!(a.status, 200, "{a:?}");
    a.body
}

fn capture(l: &Ledger, id: &str, key: &str, extra: &[(&str, &str)]) -> Answer {
    post(l, &format!("/v1/payment_intents/{id}/capture"), key, &params(extra))
}

fn cancel(l: &Ledger, id: &str, key: &str) -> Answer {
    post(l, &format!("/v1/payment_intents/{id}/cancel"), key, &params(&[]))
}

fn refused(a: &Answer, code: &str, message_starts: &str) {
    let e = &a.body["error"];
    assert_eq!(
        (a.status, e["type"].as_str(), e["code"].as_str()),
        (400, Some("invalid_request_error"), Some(code)),
        "{a:?}"
    );
    assert!(
        e["message"].as_str().is_some_and(|m| m.starts_with(message_starts)),
        "{a:?}"
    );
}

#[test]
fn a_manual_capture_confirm_authorizes_until_capture_before_and_the_capture_takes_the_money() {
    let l = ledger();
    let created = authorize(&l, "auth1");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (
            created["status"].as_str(),
            created["capture_method"].as_str(),
            created["amount_capturable"].as_u64(),
            created["amount_received"].as_u64()
        ),
        (Some("requires_capture"), Some("manual"), Some(1000), Some(0))
    );
    let charge = &read(&l, &id)["latest_charge"];
    assert_eq!(charge["captured"], false);
    let before = charge["payment_method_details"]["card"]["capture_before"]
        .as_i64()
        .unwrap();
    let validity = i64::try_from(AUTHORIZATION_VALIDITY.as_secs()).unwrap();
    assert!(
        (before - charge["created"].as_i64().unwrap() - validity).abs() <= 1,
        "7 days after the authorization: {charge}"
    );
    let captured = capture(&l, &id, "cap1", &[]);
    assert_eq!(captured.status, 200, "{captured:?}");
    assert_eq!(
        (
            captured.body["status"].as_str(),
            captured.body["amount_capturable"].as_u64(),
            captured.body["amount_received"].as_u64()
        ),
        (Some("succeeded"), Some(0), Some(1000))
    );
    let charge = &read(&l, &id)["latest_charge"];
    assert_eq!(
        (charge["captured"].as_bool(), charge["amount_captured"].as_u64()),
        (Some(true), Some(1000))
    );
    // A second capture (another key) is refused: it has been captured.
    refused(
        &capture(&l, &id, "cap2", &[]),
        "payment_intent_unexpected_state",
        "This PaymentIntent could not be captured because it has already been captured.",
    );
    // The same key replays the first answer.
    assert_eq!(capture(&l, &id, "cap1", &[]).body["status"], "succeeded");
}

#[test]
fn a_capture_is_refused_as_stripe_refuses_it() {
    let l = ledger();
    let id = authorize(&l, "auth1")["id"].as_str().unwrap().to_owned();
    refused(
        &capture(&l, &id, "over", &[("amount_to_capture", "1001")]),
        "amount_too_large",
        "The amount to capture",
    );
    assert_eq!(
        capture(&l, &id, "over", &[("amount_to_capture", "1001")]).body["error"]["param"],
        "amount_to_capture"
    );
    // An automatic-capture PaymentIntent is succeeded at once: nothing to capture.
    let p = params(&[
        ("amount", "1000"),
        ("currency", "eur"),
        ("confirm", "true"),
        ("payment_method", "pm_succeeded"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
    ]);
    let automatic = post(&l, "/v1/payment_intents", "auto", &p).body;
    assert_eq!(automatic["status"], "succeeded");
    refused(
        &capture(&l, automatic["id"].as_str().unwrap(), "cap-auto", &[]),
        "payment_intent_unexpected_state",
        "This PaymentIntent could not be captured because it has already been captured.",
    );
    // Canceled: no capture, and a captured one cannot be canceled.
    assert_eq!(cancel(&l, &id, "cancel1").body["status"], "canceled");
    refused(
        &capture(&l, &id, "cap-canceled", &[]),
        "payment_intent_unexpected_state",
        "This PaymentIntent could not be captured because it has a status of canceled.",
    );
    refused(
        &cancel(&l, automatic["id"].as_str().unwrap(), "cancel-succeeded"),
        "payment_intent_unexpected_state",
        "You cannot cancel this PaymentIntent because it has a status of succeeded.",
    );
    // A part of the authorization may be captured; the rest is released.
    let partial = authorize(&l, "auth2")["id"].as_str().unwrap().to_owned();
    let a = capture(&l, &partial, "part", &[("amount_to_capture", "600")]);
    assert_eq!(
        (a.status, a.body["amount_received"].as_u64()),
        (200, Some(600)),
        "{a:?}"
    );
    assert_eq!(
        read(&l, &partial)["latest_charge"]["amount_refunded"].as_u64(),
        Some(400)
    );
}

#[test]
fn a_canceled_authorization_releases_the_money_without_a_refund() {
    let l = ledger();
    let id = authorize(&l, "auth1")["id"].as_str().unwrap().to_owned();
    let canceled = cancel(&l, &id, "cancel1");
    assert_eq!(
        (
            canceled.status,
            canceled.body["status"].as_str(),
            canceled.body["amount_capturable"].as_u64()
        ),
        (200, Some("canceled"), Some(0)),
        "{canceled:?}"
    );
    assert!(
        l.refunds_of(&id).is_empty(),
        "no Refund object for a released authorization"
    );
    assert_eq!(read(&l, &id)["latest_charge"]["captured"], false);
}

#[test]
fn an_authorization_past_capture_before_is_canceled_and_can_no_longer_be_captured() {
    let l = ledger();
    let id = authorize(&l, "auth1")["id"].as_str().unwrap().to_owned();
    l.age_authorizations(AUTHORIZATION_VALIDITY - Duration::from_secs(60));
    assert_eq!(read(&l, &id)["status"], "requires_capture", "a minute left");
    l.age_authorizations(Duration::from_secs(61));
    let lapsed = read(&l, &id);
    assert_eq!(
        (
            lapsed["status"].as_str(),
            lapsed["cancellation_reason"].as_str(),
            lapsed["amount_capturable"].as_u64()
        ),
        (Some("canceled"), Some("automatic"), Some(0))
    );
    refused(
        &capture(&l, &id, "late", &[]),
        "payment_intent_unexpected_state",
        "This PaymentIntent could not be captured because it has a status of canceled.",
    );
    assert!(l.refunds_of(&id).is_empty());
}

#[test]
fn an_authorization_and_its_end_are_announced_by_stripes_events() {
    let l = ledger();
    let p = params(&[
        ("amount", "1000"),
        ("currency", "eur"),
        ("confirm", "true"),
        ("payment_method", "pm_succeeded"),
        ("capture_method", "manual"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
    ]);
    let created = l.handle("POST", "/v1/payment_intents", AUTH, Some("auth1"), &p);
    let kinds: Vec<&str> = created.webhooks.iter().map(|w| w.kind).collect();
    assert_eq!(kinds, ["payment_intent.amount_capturable_updated"]);
    let body = &created.webhooks[0].body["data"]["object"];
    assert_eq!(
        (body["status"].as_str(), body["amount_capturable"].as_u64()),
        (Some("requires_capture"), Some(1000))
    );
    let id = body["id"].as_str().unwrap();
    let captured = l.handle(
        "POST",
        &format!("/v1/payment_intents/{id}/capture"),
        AUTH,
        Some("c"),
        &params(&[]),
    );
    let kinds: Vec<&str> = captured.webhooks.iter().map(|w| w.kind).collect();
    assert_eq!(kinds, ["payment_intent.succeeded"]);
}
