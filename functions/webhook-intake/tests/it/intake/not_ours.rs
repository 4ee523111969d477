//! Events that are not this deployment's (issue 23): another stage's PaymentIntents and other products'
//! ones share the PSP account and reach the same endpoint. They are acknowledged as `ignored` and counted
//! (`ForeignEvents`), never parked, alarmed or answered 503; the 503 window stays for events that carry our
//! marker or payment id. And the `account` check: a Connect endpoint's only.

use super::*;
use webhook_intake::psp_event::STAGE_MARKER;

/// A PaymentIntent event whose metadata is exactly `metadata`, for the PaymentIntent `pi`.
fn intent_with(id: &str, pi: &str, metadata: Value, created: i64) -> Value {
    json!({
        "id": id, "object": "event", "type": "payment_intent.succeeded", "created": created, "livemode": false,
        "data": { "object": { "id": pi, "object": "payment_intent", "amount": 1000, "currency": "eur",
                              "metadata": metadata } }
    })
}

fn other_stage() -> String {
    format!("{}-other", shared::metrics::stage())
}

/// Nothing in the table changed and nothing was parked.
async fn wrote_nothing(t: &TestIntake, before: i32) {
    assert_eq!(t.item_count().await, before, "an event not ours writes nothing");
    assert!(t.ctx.store.parked(ParkedKind::UnknownPayment).await.unwrap().is_empty());
    assert!(t.ctx.store.parked(ParkedKind::Quarantined).await.unwrap().is_empty());
}

fn ignored_as_foreign(a: &Answer) {
    assert_eq!((a.status, result(a)), (StatusCode::OK, "ignored"), "{}", a.body);
    assert_eq!(
        (
            a.metrics.foreign_events,
            a.metrics.unknown_payments,
            a.metrics.quarantines
        ),
        (1, 0, 0)
    );
    assert_eq!(
        a.metrics.to_emf(1)["ForeignEvents"],
        json!(1),
        "the metric is published"
    );
}

#[tokio::test]
async fn another_stages_event_is_acknowledged_and_ignored_writing_nothing() {
    let t = TestIntake::new().await;
    let ours = t.payment("pay_st1").await;
    let before = t.item_count().await;
    let theirs = json!({ STAGE_MARKER: other_stage(), "payment_id": "pay_theirs" });
    // Young (a first delivery), a minute old (a redelivery: read first), past the window: all the same.
    for (i, created) in [now(), now() - 120, now() - 16 * 60].into_iter().enumerate() {
        let body = intent_with(&format!("evt_st{i}"), "pi_theirs", theirs.clone(), created);
        ignored_as_foreign(&t.send(stripe(&body, STRIPE_NEW)).await);
    }
    // Even naming a payment id we hold, the marker decides: not ours, not applied.
    let clash = json!({ STAGE_MARKER: other_stage(), "payment_id": ours.as_str() });
    ignored_as_foreign(
        &t.send(stripe(&intent_with("evt_st9", "pi_clash", clash, now()), STRIPE_NEW))
            .await,
    );
    wrote_nothing(&t, before).await;
    assert_eq!(
        t.ctx.store.get(&ours).await.unwrap().unwrap().status,
        PaymentStatus::Pending
    );
}

#[tokio::test]
async fn a_foreign_payment_intent_is_acknowledged_and_ignored_at_once() {
    let t = TestIntake::new().await;
    let before = t.item_count().await;
    // Billing's or Checkout's PaymentIntent: no marker, no payment id, a reference no payment holds.
    let billing = intent_with("evt_f1", "pi_billing", json!({ "invoice": "in_1" }), now());
    ignored_as_foreign(&t.send(stripe(&billing, STRIPE_NEW)).await);
    // Another system's `payment_id` that is not one of our ids, unmarked: not ours either (not quarantined).
    let other_system = intent_with("evt_f2", "pi_other", json!({ "payment_id": "order #5" }), now());
    ignored_as_foreign(&t.send(stripe(&other_system, STRIPE_NEW)).await);
    // Its refund: the charge's PaymentIntent is bound to none of our payments.
    let refund = json!({ "id": "evt_f3", "object": "event", "type": "charge.refunded", "created": now(),
        "livemode": false, "data": { "object": { "id": "ch_1", "object": "charge", "amount": 1000,
        "amount_refunded": 1000, "currency": "eur", "captured": true, "payment_intent": "pi_billing",
        "metadata": {} } } });
    ignored_as_foreign(&t.send(stripe(&refund, STRIPE_NEW)).await);
    wrote_nothing(&t, before).await;
}

#[tokio::test]
async fn an_unmarked_event_whose_reference_is_bound_to_our_payment_is_ours() {
    let t = TestIntake::new().await;
    let mut new = fixtures::new_payment("pay_bound", 1000);
    new.psp_reference = Some(shared::PspReference::parse("pi_bound").unwrap());
    let id = t.ctx.store.create(new).await.unwrap().id;
    let a = t
        .send(stripe(&intent_with("evt_b1", "pi_bound", json!({}), now()), STRIPE_NEW))
        .await;
    assert_eq!((result(&a), a.metrics.foreign_events), ("applied", 0), "{}", a.body);
    assert_eq!(
        t.ctx.store.get(&id).await.unwrap().unwrap().status,
        PaymentStatus::Captured
    );
}

#[tokio::test]
async fn our_marker_on_an_unknown_payment_waits_the_window_then_parks() {
    let t = TestIntake::new().await;
    let stage = shared::metrics::stage();
    let ours = json!({ STAGE_MARKER: stage, "payment_id": "pay_early" });
    let a = t
        .send(stripe(
            &intent_with("evt_o1", "pi_early", ours.clone(), now()),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(
        (a.status, a.retry_after.is_some(), a.metrics.foreign_events),
        (StatusCode::SERVICE_UNAVAILABLE, true, 0),
        "ours and early: the PSP retries"
    );
    // Our marker alone (no payment id) is a claim too.
    let marker_only = json!({ STAGE_MARKER: stage });
    let a = t
        .send(stripe(
            &intent_with("evt_o2", "pi_early2", marker_only, now()),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    let a = t
        .send(stripe(
            &intent_with("evt_o3", "pi_early", ours.clone(), now() - 16 * 60),
            STRIPE_NEW,
        ))
        .await;
    assert_eq!((result(&a), a.metrics.unknown_payments), ("unknown_payment", 1));
    assert_eq!(t.ctx.store.parked(ParkedKind::UnknownPayment).await.unwrap().len(), 1);
    // Once its payment exists, our marked event applies as any other.
    let id = t.payment("pay_marked").await;
    let marked = json!({ STAGE_MARKER: stage, "payment_id": id.as_str() });
    let a = t
        .send(stripe(&intent_with("evt_o4", "pi_marked", marked, now()), STRIPE_NEW))
        .await;
    assert_eq!(result(&a), "applied", "{}", a.body);
}

#[tokio::test]
async fn a_standard_event_is_ours_when_it_names_our_payment_id() {
    let t = TestIntake::new().await;
    let before = t.item_count().await;
    let event =
        |data: Value| json!({ "type": "payment.succeeded", "created": now(), "account": "acct_acme", "data": data });
    let unbound = event(json!({ "psp_reference": "psp_unbound", "amount_minor": 1000, "currency": "EUR" }));
    ignored_as_foreign(&t.send(standard("msg_u1", &unbound)).await);
    wrote_nothing(&t, before).await;
    let early = event(json!({ "payment_id": "pay_std_early", "amount_minor": 1000, "currency": "EUR" }));
    assert_eq!(
        t.send(standard("msg_u2", &early)).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

/// The intake `t` with `providers` (JSON) for `stripe`, signed with [`STRIPE_NEW`].
fn with_stripe(t: &TestIntake, providers: &str) -> App {
    let secrets = json!({ "stripe": [STRIPE_NEW] }).to_string();
    App {
        providers: Providers::from_json(providers, &secrets).unwrap().into(),
        ..t.app.clone()
    }
}

#[tokio::test]
async fn only_a_connect_endpoint_checks_the_account() {
    let t = TestIntake::new().await;
    let (a1, a2) = (t.payment("pay_c1").await, t.payment("pay_c2").await);
    let with_account = |id: &str, payment: &PaymentId, account: Option<&str>| {
        let mut e = intent_event(id, "payment_intent.succeeded", payment, now());
        if let Some(account) = account {
            e["account"] = json!(account);
        }
        e
    };
    // An ordinary endpoint: Stripe sends no `account`; one that is there is not this endpoint's business.
    let plain = with_stripe(&t, r#"[{"name":"stripe","scheme":"stripe","livemode":false}]"#);
    let a = send(
        &plain,
        stripe(&with_account("evt_c1", &a1, Some("acct_any")), STRIPE_NEW),
    )
    .await;
    assert_eq!(result(&a), "applied", "{}", a.body);
    // A Connect endpoint: its connected account only; another account, or none, is an anomaly.
    let connect = with_stripe(
        &t,
        r#"[{"name":"stripe","scheme":"stripe","livemode":false,"connect":true,"account":"acct_shop"}]"#,
    );
    let a = send(
        &connect,
        stripe(&with_account("evt_c2", &a2, Some("acct_other")), STRIPE_NEW),
    )
    .await;
    assert_eq!((result(&a), a.metrics.anomalies), ("quarantined", 1));
    let a = send(&connect, stripe(&with_account("evt_c3", &a2, None), STRIPE_NEW)).await;
    assert_eq!(result(&a), "quarantined");
    let a = send(
        &connect,
        stripe(&with_account("evt_c4", &a2, Some("acct_shop")), STRIPE_NEW),
    )
    .await;
    assert_eq!(result(&a), "applied", "{}", a.body);
    // Configured the old way (`account` without `connect`): the start fails, saying what to do.
    let secrets = json!({ "stripe": [STRIPE_NEW] }).to_string();
    let err = Providers::from_json(
        r#"[{"name":"stripe","scheme":"stripe","account":"acct_shop"}]"#,
        &secrets,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("not a Connect endpoint") && err.contains("\"connect\": true"),
        "{err}"
    );
}

/// Invariant 13: a payment belongs to one PSP, and only that PSP's events change it. Another endpoint's
/// event about it (a Standard Webhooks provider naming a Stripe payment's id, a Stripe event whose metadata
/// names a Standard provider's payment) is acknowledged and left alone: counted, never applied or parked.
#[tokio::test]
async fn an_event_from_another_psp_is_acknowledged_and_left_alone() {
    let t = TestIntake::new().await;
    let stripes = t.payment("pay_psp_stripe").await;
    let acmes = t.payment_of("pay_psp_acme", "acme").await;
    let before = t.item_count().await;

    let from_acme = json!({ "type": "payment.succeeded", "created": now(), "account": "acct_acme",
        "data": { "payment_id": stripes.as_str(), "amount_minor": 1000, "currency": "EUR" } });
    ignored_as_foreign(&t.send(standard("msg_psp1", &from_acme)).await);
    let from_stripe = intent_event("evt_psp2", "payment_intent.succeeded", &acmes, now());
    ignored_as_foreign(&t.send(stripe(&from_stripe, STRIPE_NEW)).await);
    // A redelivery (read first) is left alone the same way.
    let late = intent_event("evt_psp3", "payment_intent.succeeded", &acmes, now() - 120);
    ignored_as_foreign(&t.send(stripe(&late, STRIPE_NEW)).await);

    wrote_nothing(&t, before).await;
    for id in [&stripes, &acmes] {
        let p = t.ctx.store.get(id).await.unwrap().unwrap();
        assert_eq!((p.status, p.version), (PaymentStatus::Pending, 1), "{id}");
    }
}
