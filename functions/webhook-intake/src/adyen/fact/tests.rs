use super::*;
use crate::adyen::notification::{self, tests::set};
use serde_json::{json, Value};
use shared::{Outcome, RefundStatus};

const PAYMENT: &str = "7914073381342284";
const MODIFICATION: &str = "8835511210681017";

/// An item of `code`: an authorisation names the payment by its own pspReference, any other by
/// `originalReference`.
fn item(code: &str, success: &str) -> Value {
    let mut item = json!({
        "pspReference": if code == "AUTHORISATION" { PAYMENT } else { MODIFICATION },
        "merchantAccountCode": "TestMerchant", "merchantReference": "pay_0123456789abcdef",
        "amount": { "currency": "EUR", "value": 1130 }, "eventCode": code, "success": success,
        "eventDate": "2019-05-06T17:15:34.121+02:00", "reason": "CVC Declined", "paymentMethod": "visa",
        "operations": ["CANCEL", "CAPTURE", "REFUND"],
        "additionalData": { "hmacSignature": "not checked here", "modification.action": "refund" }
    });
    if code != "AUTHORISATION" {
        item["originalReference"] = json!(PAYMENT);
    }
    item
}

fn read(item: &Value, mode: Mode) -> Result<Option<Notification>, Unparseable> {
    let body = notification::tests::body(std::slice::from_ref(item));
    let parsed = notification::items(&body).unwrap().pop().unwrap();
    parse(&parsed, mode, 1_700_000_000)
}

fn outcome_of(code: &str, success: &str) -> Option<Outcome> {
    read(&item(code, success), Mode::Test).unwrap().map(|n| n.event.outcome)
}

fn refund(status: RefundStatus, failure: Option<&str>) -> Outcome {
    Outcome::Refund(RefundReport {
        refund: RefundEntry {
            refund_id: MODIFICATION.into(),
            amount_minor: 1130,
            status,
        },
        failure_reason: failure.map(str::to_owned),
        answers_give_back: None,
    })
}

fn dispute(fact: DisputeFact, status: DisputeStatus) -> Outcome {
    Outcome::Dispute(DisputeReport {
        id: DisputeId::parse(MODIFICATION).unwrap(),
        status,
        amount_minor: 1130,
        fact,
    })
}

fn anomaly(what: &str) -> Outcome {
    Outcome::Anomaly {
        reason: format!("{what} (EUR 1130 minor units): CVC Declined"),
    }
}

/// The module's table, row by row.
#[test]
fn each_event_code_maps_to_its_observation() {
    let failed = |reason: &str| Outcome::Failed { reason: reason.into() };
    let cases: Vec<(&str, &str, Option<Outcome>)> = vec![
        ("AUTHORISATION", "true", Some(Outcome::Processing)),
        ("AUTHORISATION", "false", Some(failed("refused: CVC Declined"))),
        ("CAPTURE", "true", Some(Outcome::Succeeded)),
        ("CAPTURE", "false", Some(anomaly("Adyen refused the capture"))),
        (
            "CAPTURE_FAILED",
            "true",
            Some(Outcome::CaptureFailed {
                reason: "the capture of EUR 1130 minor units failed at the card scheme: CVC Declined".into(),
                capture_event: Some(PspEventId::parse(format!("CAPTURE-true-{MODIFICATION}")).unwrap()),
            }),
        ),
        ("CAPTURE_FAILED", "false", None),
        ("CANCELLATION", "true", Some(failed("cancelled"))),
        ("CANCELLATION", "false", Some(anomaly("Adyen refused the cancel"))),
        ("TECHNICAL_CANCEL", "true", Some(failed("cancelled"))),
        ("TECHNICAL_CANCEL", "false", Some(anomaly("Adyen refused the cancel"))),
        ("CANCEL_OR_REFUND", "true", Some(failed("cancelled"))),
        (
            "CANCEL_OR_REFUND",
            "false",
            Some(anomaly("Adyen refused the cancel or refund")),
        ),
        ("REFUND", "true", Some(refund(RefundStatus::Succeeded, None))),
        (
            "REFUND",
            "false",
            Some(refund(RefundStatus::Failed, Some("refund refused: CVC Declined"))),
        ),
        (
            "REFUND_FAILED",
            "true",
            Some(refund(RefundStatus::Failed, Some("refund failed: CVC Declined"))),
        ),
        (
            "REFUNDED_REVERSED",
            "true",
            Some(refund(RefundStatus::Failed, Some("refund reversed: CVC Declined"))),
        ),
        (
            "NOTIFICATION_OF_CHARGEBACK",
            "true",
            Some(dispute(DisputeFact::Created, DisputeStatus::NeedsResponse)),
        ),
        (
            "CHARGEBACK",
            "true",
            Some(dispute(DisputeFact::FundsWithdrawn, DisputeStatus::NeedsResponse)),
        ),
        (
            "CHARGEBACK_REVERSED",
            "true",
            Some(dispute(DisputeFact::FundsReinstated, DisputeStatus::Won)),
        ),
        ("CHARGEBACK", "false", None),
        ("REPORT_AVAILABLE", "true", None),
        ("PAIDOUT_REVERSED", "true", None),
        ("OFFER_CLOSED", "true", None),
    ];
    for (code, success, expected) in cases {
        assert_eq!(outcome_of(code, success), expected, "{code} {success}");
    }
    // CANCEL_OR_REFUND: a refund of the notification's amount when the payment holds a capture.
    let n = read(&item("CANCEL_OR_REFUND", "true"), Mode::Test).unwrap().unwrap();
    assert_eq!(n.if_captured, Some(refund(RefundStatus::Succeeded, None)));
    assert_eq!(
        read(&item("CAPTURE", "true"), Mode::Test).unwrap().unwrap().if_captured,
        None
    );
}

#[test]
fn identity_target_and_claims_are_adyens() {
    let auth = read(&item("AUTHORISATION", "true"), Mode::Live).unwrap().unwrap().event;
    assert_eq!(auth.id.as_str(), "AUTHORISATION-true-7914073381342284");
    assert_eq!(auth.target.psp_reference.as_ref().map(|r| r.as_str()), Some(PAYMENT));
    assert_eq!(
        auth.target.payment_id.as_ref().map(|p| p.as_str()),
        Some("pay_0123456789abcdef")
    );
    assert_eq!((auth.facts.amount_minor, auth.facts.livemode), (Some(1130), Some(true)));
    let refused = read(&item("AUTHORISATION", "false"), Mode::Test)
        .unwrap()
        .unwrap()
        .event;
    assert_eq!(refused.id.as_str(), "AUTHORISATION-false-7914073381342284");
    assert_eq!(refused.facts.livemode, Some(false), "the key's mode, not `live`");
    let refund = read(&item("REFUND", "true"), Mode::Test).unwrap().unwrap().event;
    assert_eq!(refund.id.as_str(), "REFUND-true-8835511210681017-7914073381342284");
    assert_eq!(
        refund.target.psp_reference.as_ref().map(|r| r.as_str()),
        Some(PAYMENT),
        "a modification finds the payment by originalReference"
    );
    assert_eq!(refund.facts.amount_minor, None, "a refund's amount is its own");
    assert_eq!(refund.facts.currency.map(|c| c.to_string()).as_deref(), Some("EUR"));
    // Not our payment id: found (or not) by the reference alone.
    let mut other = item("CAPTURE", "true");
    other["merchantReference"] = json!("order-77");
    assert_eq!(read(&other, Mode::Test).unwrap().unwrap().event.target.payment_id, None);
}

/// Only signed fields decide: changing any unsigned field leaves the notification as it was (the unsigned
/// reason is text for people and changes only that text); the signed fields a decision reads are
/// [`DECISION_FIELDS`], each of which changes it.
#[test]
fn a_decision_uses_only_signed_fields() {
    let signed: Vec<&str> = webhook_signatures::adyen::Item::default()
        .signed_fields()
        .iter()
        .map(|(name, _)| *name)
        .collect();
    assert!(DECISION_FIELDS.iter().all(|f| signed.contains(f)), "{signed:?}");
    for code in HANDLED_CODES {
        for success in ["true", "false"] {
            let base = item(code, success);
            let Some(expected) = read(&base, Mode::Test).unwrap() else {
                continue;
            };
            for (pointer, value) in [
                ("/eventDate", json!("2001-01-01T00:00:00Z")),
                ("/paymentMethod", json!("mc")),
                ("/operations", json!([])),
                ("/additionalData/modification.action", json!("cancel")),
                ("/additionalData/disputeStatus", json!("Won")),
                ("/live", json!("true")),
                ("/merchantAccountCode", json!("OtherAccount")),
            ] {
                let mut changed = base.clone();
                set(&mut changed, pointer, value);
                assert_eq!(
                    read(&changed, Mode::Test).unwrap().as_ref(),
                    Some(&expected),
                    "{code} {success}: {pointer}"
                );
            }
            let mut reason = base.clone();
            reason["reason"] = json!("something else");
            let with_reason = read(&reason, Mode::Test).unwrap().unwrap();
            assert_eq!(
                (with_reason.event.id, with_reason.event.target, with_reason.event.facts),
                (
                    expected.event.id.clone(),
                    expected.event.target.clone(),
                    expected.event.facts.clone()
                ),
                "{code} {success}: the reason moves nothing"
            );
            assert_eq!(
                std::mem::discriminant(&with_reason.event.outcome),
                std::mem::discriminant(&expected.event.outcome)
            );
            // Another code Adyen could have signed: an authorisation read as a capture, a modification as
            // an authorisation.
            let other_code = HANDLED_CODES.iter().find(|c| **c != code).unwrap();
            for (pointer, value) in [
                ("/pspReference", json!("9935511210681017")),
                ("/originalReference", json!("7914073381342299")),
                ("/merchantReference", json!("pay_fedcba9876543210")),
                ("/amount/value", json!(1)),
                ("/amount/currency", json!("USD")),
                ("/eventCode", json!(other_code)),
                ("/success", json!(if success == "true" { "false" } else { "true" })),
            ] {
                let mut changed = base.clone();
                set(&mut changed, pointer, value);
                assert_ne!(
                    read(&changed, Mode::Test).ok().flatten().as_ref(),
                    Some(&expected),
                    "{code} {success}: {pointer} decides"
                );
            }
        }
    }
}

#[test]
fn items_we_cannot_use_are_unparseable() {
    for (pointer, value) in [
        ("/success", json!("yes")),
        ("/success", json!(null)),
        ("/pspReference", json!("")),
        ("/pspReference", json!("has space")),
        ("/amount/currency", json!("EURO")),
        ("/amount/value", json!("11.30")),
        ("/amount/value", json!(null)),
        ("/eventCode", json!("AUTH\u{0}")),
    ] {
        let mut bad = item("AUTHORISATION", "true");
        set(&mut bad, pointer, value.clone());
        assert!(read(&bad, Mode::Test).is_err(), "{pointer} = {value}");
    }
    let mut orphan = item("REFUND", "true");
    orphan.as_object_mut().unwrap().remove("originalReference");
    let by_our_reference = read(&orphan, Mode::Test).unwrap().unwrap().event.target;
    assert_eq!(
        (by_our_reference.payment_id.is_some(), by_our_reference.psp_reference),
        (true, None),
        "found by our payment id alone"
    );
    orphan["merchantReference"] = json!("order-77");
    assert_eq!(
        read(&orphan, Mode::Test).unwrap_err().0,
        "REFUND names neither our payment id nor an originalReference"
    );
    let mut long = item("REFUND", "true");
    long["pspReference"] = json!("p".repeat(70));
    long["originalReference"] = json!("o".repeat(70));
    assert!(read(&long, Mode::Test).is_err(), "an identity over 128 characters");
    let mut reason = item("AUTHORISATION", "false");
    reason["reason"] = json!(format!("bad\u{FFFF}{}", "r".repeat(500)));
    let Some(Outcome::Failed { reason }) = read(&reason, Mode::Test).unwrap().map(|n| n.event.outcome) else {
        panic!()
    };
    assert!(reason.chars().count() <= shared::text::MAX_REASON_CHARS && !reason.contains('\u{FFFF}'));
}
