//! Issue 25 item 4, the smaller loops of the intake: a Standard Webhooks event must say when it was created
//! (the signing time is the delivery attempt's, not the event's), a Stripe quarantine is keyed by what the
//! signature covers and never overwritten, and a refused event is one anomaly however often it comes.

use super::*;
use webhook_signatures::sign_standard as sign;

/// A Standard Webhooks event for the Connect endpoint `acme` (its account), naming `payment`.
fn acme_event(kind: &str, payment: &PaymentId, created: Option<i64>, extra: Value) -> Value {
    let mut data = json!({ "payment_id": payment.as_str(), "amount_minor": 1000, "currency": "EUR" });
    data.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let mut event = json!({ "type": kind, "account": "acct_acme", "data": data });
    if let Some(created) = created {
        event["created"] = json!(created);
    }
    event
}

/// `body` signed for `acme` at `signed_at` (a PSP's retry re-signs with the attempt's time).
fn acme_signed_at(id: &str, body: &Value, signed_at: i64) -> Request {
    let bytes = body.to_string().into_bytes();
    let sig = sign(&SigningSecret::parse(STANDARD).unwrap(), id, signed_at, &bytes).unwrap();
    let headers = json!({ "webhook-id": id, "webhook-timestamp": signed_at.to_string(), "webhook-signature": sig });
    apigw("/webhooks/acme", headers, &bytes, false)
}

#[tokio::test]
async fn a_standard_event_without_created_is_refused_and_writes_nothing() {
    let t = TestIntake::new().await;
    let id = t.payment_of("pay_sc1", "acme").await;
    let action = json!({ "redirect_url": "https://bank.example/3ds" });
    let old = now() - 600;
    let a = t
        .send(standard(
            "msg_act",
            &acme_event("payment.requires_action", &id, Some(old), action),
        ))
        .await;
    assert_eq!(result(&a), "applied", "{}", a.body);
    let before = t.item_count().await;

    // A `processing` created before the action, retried late (a fresh signature) and without `created`:
    // taken at the attempt's time it looked newer than the action and took it from the customer.
    let late = acme_event("payment.processing", &id, None, json!({}));
    let a = t.send(acme_signed_at("msg_proc", &late, now())).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);
    assert!(
        a.body["error"].is_string() && a.body["message"].as_str().unwrap().contains("created"),
        "{}",
        a.body
    );
    // Created after it was signed (beyond the clock tolerance): no better than none.
    let future = acme_event("payment.processing", &id, Some(now() + 3_600), json!({}));
    let a = t.send(acme_signed_at("msg_future", &future, now())).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);

    assert_eq!(t.item_count().await, before, "a refusal writes nothing");
    assert!(t.ctx.store.parked(ParkedKind::Quarantined).await.unwrap().is_empty());
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(p.status, PaymentStatus::RequiresAction);
    assert!(p.action.is_some(), "the customer's action stays");

    // With its real `created` the same late event is what it is: older news than the action.
    let real = acme_event("payment.processing", &id, Some(old - 60), json!({}));
    assert_eq!(result(&t.send(acme_signed_at("msg_proc", &real, now())).await), "stale");
}

/// A Stripe request for `body`, also carrying a `webhook-id` header (which Stripe does not sign).
fn stripe_with_header(body: &Value, webhook_id: &str) -> Request {
    let bytes = body.to_string().into_bytes();
    let sig = sign_stripe(&SigningSecret::parse(STRIPE_NEW).unwrap(), now(), &bytes);
    let headers = json!({ "content-type": "application/json", "stripe-signature": sig, "webhook-id": webhook_id });
    apigw("/webhooks/stripe", headers, &bytes, false)
}

/// A signed Stripe event we cannot read (its amount is text).
fn unreadable(id: &str, note: &str) -> Value {
    json!({ "id": id, "object": "event", "type": "payment_intent.succeeded", "created": now(), "livemode": false,
            "data": { "object": { "id": "pi_q", "object": "payment_intent", "amount": note, "currency": "eur" } } })
}

#[tokio::test]
async fn a_stripe_quarantine_is_keyed_by_its_signed_body_and_never_overwritten() {
    let t = TestIntake::new().await;
    // Two different bodies under one (unsigned) `webhook-id` header: two parked items, by the bodies' ids.
    for (event, note) in [("evt_q1", "first"), ("evt_q2", "second")] {
        let a = t.send(stripe_with_header(&unreadable(event, note), "evt_same")).await;
        assert_eq!(result(&a), "quarantined", "{}", a.body);
    }
    let keys = |parked: &[shared::store::Parked]| {
        let mut keys: Vec<String> = parked.iter().map(|p| p.event_key.clone()).collect();
        keys.sort();
        keys
    };
    let parked = t.ctx.store.parked(ParkedKind::Quarantined).await.unwrap();
    assert_eq!(keys(&parked), ["evt_q1", "evt_q2"], "{parked:?}");

    // Another body under an id already parked does not replace the first one.
    let a = t
        .send(stripe_with_header(&unreadable("evt_q1", "replaced"), "evt_q1"))
        .await;
    assert_eq!(result(&a), "quarantined");
    let parked = t.ctx.store.parked(ParkedKind::Quarantined).await.unwrap();
    let first = parked.iter().find(|p| p.event_key == "evt_q1").unwrap();
    assert!(
        first.body.contains("first") && !first.body.contains("replaced"),
        "{}",
        first.body
    );

    // No usable id in the body (not JSON): a hash of the body, whatever the header says.
    let a = t.send(stripe_with_header(&json!("not an event"), "evt_q2")).await;
    assert_eq!(result(&a), "quarantined");
    let parked = t.ctx.store.parked(ParkedKind::Quarantined).await.unwrap();
    assert_eq!(parked.len(), 3);
    assert!(keys(&parked)[2].starts_with("sha256-"), "{:?}", keys(&parked));
}

#[tokio::test]
async fn a_refused_event_is_one_anomaly_however_often_it_is_delivered() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_an1").await;
    let mut wrong = intent_event("evt_an", "payment_intent.succeeded", &id, now());
    wrong["data"]["object"]["amount"] = json!(999_999);
    let a = t.send(stripe(&wrong, STRIPE_NEW)).await;
    assert_eq!((result(&a), a.metrics.anomalies), ("quarantined", 1));
    // The PSP retries it (we answered 200, but a lost answer or a resend does the same), now and late.
    for created in [now(), now() - 16 * 60] {
        wrong["created"] = json!(created);
        let a = t.send(stripe(&wrong, STRIPE_NEW)).await;
        assert_eq!(
            (result(&a), a.metrics.anomalies, a.metrics.quarantines),
            ("duplicate", 0, 0),
            "{}",
            a.body
        );
    }
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.anomalies, p.version), (PaymentStatus::Pending, 1, 2));
    assert_eq!(t.ctx.store.parked(ParkedKind::Quarantined).await.unwrap().len(), 1);
}

/// An endpoint's own clock tolerance (`tolerance_secs` in `WEBHOOK_PROVIDERS`) bounds `created` as it bounds
/// the signing time: a tight one refuses an event created 100 s after its signing, a wide one takes one
/// created 600 s after it (the default, 300 s, would have decided both the other way).
#[tokio::test]
async fn created_is_checked_against_the_endpoints_own_tolerance() {
    let secrets = json!({ "acme": [STANDARD] }).to_string();
    let endpoint = |tolerance: i64| {
        let spec = json!([{ "name": "acme", "scheme": "standard", "connect": true, "account": "acct_acme",
                            "tolerance_secs": tolerance }]);
        Providers::from_json(&spec.to_string(), &secrets).unwrap()
    };
    let mut t = TestIntake::new().await;
    let id = t.payment_of("pay_sc_tol", "acme").await;

    t.app.providers = endpoint(60).into();
    let ahead = acme_event("payment.processing", &id, Some(now() + 100), json!({}));
    let a = t.send(acme_signed_at("msg_tight", &ahead, now())).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);
    assert!(a.body["message"].as_str().unwrap().contains("created"), "{}", a.body);

    t.app.providers = endpoint(900).into();
    let skewed = acme_event("payment.processing", &id, Some(now() + 600), json!({}));
    let a = t.send(acme_signed_at("msg_wide", &skewed, now())).await;
    assert_eq!(result(&a), "applied", "{}", a.body);
}
