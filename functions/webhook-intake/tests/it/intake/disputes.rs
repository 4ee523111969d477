//! Disputes as Stripe reports them (issue 23 item 8), through the intake on DynamoDB Local: each
//! `charge.dispute.*` event carries the dispute object, found by its `payment_intent`. Every new fact is a
//! payment event (what the outbox delivers to consumers), the payment's status never changes, and an event
//! delivered again adds nothing.

use super::*;
use shared::{Dispute, DisputeId, DisputeStatus};

/// A `charge.dispute.*` event of type `kind` for the dispute `du` of the PaymentIntent `pi` (Stripe's dispute
/// shape, as the simulator sends it).
fn dispute_event(id: &str, kind: &str, du: &str, pi: Value, status: &str) -> Value {
    json!({
        "id": id, "object": "event", "type": kind, "created": now(), "livemode": false,
        "data": { "object": {
            "id": du, "object": "dispute", "amount": 1000, "balance_transactions": [], "charge": "ch_d1",
            "created": now(), "currency": "eur", "evidence": {}, "is_charge_refundable": false,
            "livemode": false, "metadata": {}, "payment_intent": pi, "reason": "fraudulent", "status": status
        } }
    })
}

/// A captured payment bound to the PaymentIntent `pi`, as `payment_intent.succeeded` leaves it.
async fn captured(t: &TestIntake, name: &str, pi: &str) -> PaymentId {
    let mut new = fixtures::new_payment(name, 1000);
    new.psp_reference = Some(shared::PspReference::parse(pi).unwrap());
    let id = t.ctx.store.create(new).await.unwrap().id;
    let mut succeeded = intent_event(&format!("evt_{name}"), "payment_intent.succeeded", &id, now());
    succeeded["data"]["object"]["id"] = json!(pi);
    let a = t.send(stripe(&succeeded, STRIPE_NEW)).await;
    assert_eq!(result(&a), "applied", "{}", a.body);
    id
}

async fn send_dispute(t: &TestIntake, event: &Value) -> String {
    let a = t.send(stripe(event, STRIPE_NEW)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    result(&a).to_owned()
}

/// The payment's dispute events, each as (kind, the dispute it carries).
async fn dispute_events(t: &TestIntake, id: &PaymentId) -> Vec<(EventKind, Option<Dispute>)> {
    t.ctx
        .events(id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind.as_str().starts_with("Dispute"))
        .map(|e| (e.kind, e.dispute))
        .collect()
}

fn held(status: DisputeStatus, withdrawn: bool, reinstated: bool) -> Option<Dispute> {
    Some(Dispute {
        id: DisputeId::parse("du_1").unwrap(),
        status,
        amount_minor: 1000,
        funds_withdrawn: withdrawn,
        funds_reinstated: reinstated,
    })
}

#[tokio::test]
async fn each_dispute_fact_is_one_payment_event_and_the_payment_stays_captured() {
    let t = TestIntake::new().await;
    let id = captured(&t, "pay_dp1", "pi_dp1").await;
    let pi = || json!("pi_dp1");

    // Opened: DisputeOpened, the status unchanged.
    let created = dispute_event("evt_d1", "charge.dispute.created", "du_1", pi(), "needs_response");
    assert_eq!(send_dispute(&t, &created).await, "applied");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.refunded_minor),
        (PaymentStatus::Captured, 0),
        "a dispute never changes the status"
    );
    assert_eq!(p.dispute, held(DisputeStatus::NeedsResponse, false, false));
    // The same event delivered again: nothing new.
    let items = t.item_count().await;
    assert_eq!(send_dispute(&t, &created).await, "duplicate");
    assert_eq!(t.item_count().await, items, "a redelivery writes nothing");

    let withdrawn = dispute_event(
        "evt_d2",
        "charge.dispute.funds_withdrawn",
        "du_1",
        pi(),
        "needs_response",
    );
    assert_eq!(send_dispute(&t, &withdrawn).await, "applied");
    let review = dispute_event("evt_d3", "charge.dispute.updated", "du_1", pi(), "under_review");
    assert_eq!(send_dispute(&t, &review).await, "applied");
    let won = dispute_event("evt_d4", "charge.dispute.closed", "du_1", pi(), "won");
    assert_eq!(send_dispute(&t, &won).await, "applied");
    let reinstated = dispute_event("evt_d5", "charge.dispute.funds_reinstated", "du_1", pi(), "won");
    assert_eq!(send_dispute(&t, &reinstated).await, "applied");
    // Stripe sends a fact again under a new event id: recorded once.
    let again = dispute_event("evt_d6", "charge.dispute.funds_withdrawn", "du_1", pi(), "won");
    assert_eq!(send_dispute(&t, &again).await, "duplicate");

    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(p.status, PaymentStatus::Captured);
    assert_eq!(p.dispute, held(DisputeStatus::Won, true, true));
    // The events the outbox delivers, each carrying the dispute as it then stood.
    assert_eq!(
        dispute_events(&t, &id).await,
        [
            (
                EventKind::DisputeOpened,
                held(DisputeStatus::NeedsResponse, false, false)
            ),
            (
                EventKind::DisputeFundsWithdrawn,
                held(DisputeStatus::NeedsResponse, true, false)
            ),
            (EventKind::DisputeUpdated, held(DisputeStatus::UnderReview, true, false)),
            (EventKind::DisputeWon, held(DisputeStatus::Won, true, false)),
            (EventKind::DisputeFundsReinstated, held(DisputeStatus::Won, true, true)),
        ]
    );
    let events = t.ctx.events(&id).await.unwrap();
    assert!(
        events
            .iter()
            .filter(|e| e.kind.as_str().starts_with("Dispute"))
            .all(|e| e.status == PaymentStatus::Captured && e.path == Channel::Webhook),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_lost_dispute_closes_lost_and_older_news_is_stale() {
    let t = TestIntake::new().await;
    let id = captured(&t, "pay_dp2", "pi_dp2").await;
    let created = dispute_event(
        "evt_l1",
        "charge.dispute.created",
        "du_1",
        json!("pi_dp2"),
        "needs_response",
    );
    assert_eq!(send_dispute(&t, &created).await, "applied");
    let lost = dispute_event("evt_l2", "charge.dispute.closed", "du_1", json!("pi_dp2"), "lost");
    assert_eq!(send_dispute(&t, &lost).await, "applied");
    // An update Stripe sent before the closing, arriving after it: older news.
    let late = dispute_event(
        "evt_l3",
        "charge.dispute.updated",
        "du_1",
        json!("pi_dp2"),
        "under_review",
    );
    assert_eq!(send_dispute(&t, &late).await, "stale");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.dispute),
        (PaymentStatus::Captured, held(DisputeStatus::Lost, false, false))
    );
    let kinds: Vec<_> = dispute_events(&t, &id).await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, [EventKind::DisputeOpened, EventKind::DisputeLost]);
}

#[tokio::test]
async fn a_dispute_not_ours_is_ignored_one_before_the_capture_waits_and_another_currency_is_quarantined() {
    let t = TestIntake::new().await;
    // Another product's PaymentIntent (bound to none of our payments), and a charge without one.
    let before = t.item_count().await;
    for (n, pi) in [json!("pi_billing"), Value::Null].into_iter().enumerate() {
        let foreign = dispute_event(
            &format!("evt_f{n}"),
            "charge.dispute.created",
            "du_x",
            pi,
            "needs_response",
        );
        let a = t.send(stripe(&foreign, STRIPE_NEW)).await;
        assert_eq!((a.status, result(&a)), (StatusCode::OK, "ignored"), "{}", a.body);
        assert_eq!((a.metrics.unknown_payments, a.metrics.quarantines), (0, 0));
    }
    assert_eq!(t.item_count().await, before, "nothing written");
    assert!(t.ctx.store.parked(ParkedKind::UnknownPayment).await.unwrap().is_empty());

    // Bound but not captured yet: the dispute waits for the capture's news (Stripe retries).
    let mut new = fixtures::new_payment("pay_dp3", 1000);
    new.psp_reference = Some(shared::PspReference::parse("pi_dp3").unwrap());
    let early_id = t.ctx.store.create(new).await.unwrap().id;
    let early = dispute_event(
        "evt_e1",
        "charge.dispute.created",
        "du_e",
        json!("pi_dp3"),
        "needs_response",
    );
    let a = t.send(stripe(&early, STRIPE_NEW)).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    let p = t.ctx.store.get(&early_id).await.unwrap().unwrap();
    assert_eq!((p.status, p.dispute), (PaymentStatus::Pending, None));

    // Another currency than the payment's: not applied, quarantined.
    let id = captured(&t, "pay_dp4", "pi_dp4").await;
    let mut usd = dispute_event(
        "evt_c1",
        "charge.dispute.created",
        "du_c",
        json!("pi_dp4"),
        "needs_response",
    );
    usd["data"]["object"]["currency"] = json!("usd");
    let a = t.send(stripe(&usd, STRIPE_NEW)).await;
    assert_eq!((result(&a), a.metrics.anomalies), ("quarantined", 1), "{}", a.body);
    assert_eq!(t.ctx.store.get(&id).await.unwrap().unwrap().dispute, None);
}
