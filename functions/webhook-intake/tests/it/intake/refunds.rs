//! Refunds as Stripe reports them (issue 23 item 7), through the intake on DynamoDB Local: `refund.created`,
//! `refund.updated`, `refund.failed` and `charge.refund.updated` each carry one Refund object, found by its
//! `payment_intent`. Only `succeeded` returns money; a failed refund reopens the money question.

use super::*;
use shared::{GiveBack, RefundStatus};

/// A refund event of type `kind` for the Refund `re` of the PaymentIntent `pi` (Stripe's refund shape).
fn refund_event(id: &str, kind: &str, re: &str, pi: &str, amount: u64, status: &str) -> Value {
    json!({
        "id": id, "object": "event", "type": kind, "created": now(), "livemode": false,
        "data": { "object": {
            "id": re, "object": "refund", "amount": amount, "balance_transaction": null, "charge": "ch_r1",
            "created": now(), "currency": "eur", "metadata": {}, "payment_intent": pi,
            "reason": "requested_by_customer", "status": status,
            "failure_reason": if status == "failed" { json!("expired_or_canceled_card") } else { Value::Null }
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

async fn send_refund(t: &TestIntake, event: &Value) -> String {
    let a = t.send(stripe(event, STRIPE_NEW)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    result(&a).to_owned()
}

#[tokio::test]
async fn a_refund_is_done_only_when_succeeded_and_a_failed_one_is_given_back_again() {
    let t = TestIntake::new().await;
    let id = captured(&t, "pay_rf1", "pi_rf1").await;

    // Created pending: recorded as pending, the payment stays captured with nothing refunded.
    let created = refund_event("evt_r1", "refund.created", "re_1", "pi_rf1", 1000, "pending");
    assert_eq!(send_refund(&t, &created).await, "applied");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Captured, 0));
    assert_eq!(p.pending_refunds().count(), 1);
    assert!(p.is_open(), "a pending refund keeps the payment open for recovery");

    // Succeeded: refunded in full.
    let done = refund_event("evt_r2", "refund.updated", "re_1", "pi_rf1", 1000, "succeeded");
    assert_eq!(send_refund(&t, &done).await, "applied");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Refunded, 1000));
    // The same refund again by `charge.refund.updated`: nothing new.
    let again = refund_event("evt_r3", "charge.refund.updated", "re_1", "pi_rf1", 1000, "succeeded");
    assert_eq!(send_refund(&t, &again).await, "duplicate");

    // Then it fails (a card refund can fail after succeeded): the money is ours again, to give back.
    let failed = refund_event("evt_r4", "refund.failed", "re_1", "pi_rf1", 1000, "failed");
    assert_eq!(send_refund(&t, &failed).await, "applied");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Captured, 0));
    assert_eq!(
        (p.refund_failures, p.give_back),
        (
            1,
            Some(GiveBack {
                failure: 1,
                amount_minor: 1000
            })
        )
    );
    assert!(p.is_open(), "recovery finds the give-back");
    // A late `pending` of the failed refund is stale: failed is final.
    let late = refund_event("evt_r5", "refund.updated", "re_1", "pi_rf1", 1000, "pending");
    assert_eq!(send_refund(&t, &late).await, "stale");

    // The event log keeps each refund with its own amount and status.
    let events = t.ctx.events(&id).await.unwrap();
    let refunds: Vec<_> = events
        .iter()
        .filter_map(|e| e.refund.as_ref().map(|r| (e.kind, r.amount_minor, r.status)))
        .collect();
    assert_eq!(
        refunds,
        [
            (EventKind::RefundPending, 1000, RefundStatus::Pending),
            (EventKind::PaymentRefunded, 1000, RefundStatus::Succeeded),
            (EventKind::RefundFailed, 1000, RefundStatus::Failed),
        ]
    );
    let failed_event = events.last().unwrap();
    assert!(
        failed_event
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("expired_or_canceled_card")),
        "{failed_event:?}"
    );
}

#[tokio::test]
async fn partial_refunds_keep_their_own_amounts_and_only_the_currency_is_checked() {
    let t = TestIntake::new().await;
    let id = captured(&t, "pay_rf2", "pi_rf2").await;
    let part = |evt: &str, re: &str, amount| refund_event(evt, "refund.updated", re, "pi_rf2", amount, "succeeded");
    // Amounts that are not the payment's 1000: a refund's own amount, not an anomaly.
    assert_eq!(send_refund(&t, &part("evt_p1", "re_a", 300)).await, "applied");
    assert_eq!(send_refund(&t, &part("evt_p2", "re_b", 200)).await, "applied");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.refunded_minor, p.anomalies),
        (PaymentStatus::Captured, 500, 0)
    );

    // Another currency: an anomaly, nothing applied.
    let mut usd = part("evt_p3", "re_c", 100);
    usd["data"]["object"]["currency"] = json!("usd");
    let a = t.send(stripe(&usd, STRIPE_NEW)).await;
    assert_eq!((result(&a), a.metrics.anomalies), ("quarantined", 1), "{}", a.body);
    // More than the capture: an anomaly, the refund not recorded.
    assert_eq!(send_refund(&t, &part("evt_p4", "re_d", 600)).await, "applied");
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.refunded_minor, p.anomalies), (500, 2));
    assert!(p.refunds.iter().all(|r| r.refund_id != "re_d" && r.refund_id != "re_c"));
    let kinds: Vec<_> = t.ctx.events(&id).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            EventKind::RefundRecorded,
            EventKind::RefundRecorded,
            EventKind::AnomalyRecorded,
            EventKind::AnomalyRecorded
        ]
    );
}

#[tokio::test]
async fn a_refund_of_a_payment_intent_not_ours_is_ignored_and_one_before_the_capture_waits() {
    let t = TestIntake::new().await;
    let before = t.item_count().await;
    let foreign = refund_event("evt_x1", "refund.created", "re_x", "pi_billing", 500, "pending");
    let a = t.send(stripe(&foreign, STRIPE_NEW)).await;
    assert_eq!((result(&a), a.metrics.foreign_events), ("ignored", 1), "{}", a.body);
    assert_eq!(t.item_count().await, before, "nothing written");

    // Bound but not captured yet: the refund waits for the capture's news (the PSP retries).
    let mut new = fixtures::new_payment("pay_rf3", 1000);
    new.psp_reference = Some(shared::PspReference::parse("pi_rf3").unwrap());
    let id = t.ctx.store.create(new).await.unwrap().id;
    let early = refund_event("evt_x2", "refund.created", "re_y", "pi_rf3", 1000, "pending");
    let a = t.send(stripe(&early, STRIPE_NEW)).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunds.len()), (PaymentStatus::Pending, 0));
}

#[tokio::test]
async fn the_simulators_failing_refund_reaches_the_payment_as_pending_then_failed() {
    use psp_simulator::ledger::{Ledger, Timings};
    let t = TestIntake::new().await;
    let id = t.payment("pay_rf4").await;
    let sim = Ledger::new("sk_test_k", Timings::default(), None);
    let auth = Some("Bearer sk_test_k");
    let charge: std::collections::BTreeMap<String, String> = [
        ("amount", "1000"),
        ("currency", "eur"),
        ("confirm", "true"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
        ("payment_method", "pm_refund_fails"),
        ("metadata[payment_id]", id.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let charged = sim.handle("POST", "/v1/payment_intents", auth, Some("k_charge"), &charge);
    let pi = charged.answer.unwrap().body["id"].as_str().unwrap().to_owned();
    let refund = [("payment_intent".to_owned(), pi)].into_iter().collect();
    let refunded = sim.handle("POST", "/v1/refunds", auth, Some("k_refund"), &refund);
    assert_eq!(
        refunded.answer.unwrap().body["status"],
        "pending",
        "the simulator's answer"
    );
    // Its webhooks, signed as the simulator sends them, through our intake.
    let mut answers = Vec::new();
    for hook in charged.webhooks.iter().chain(&refunded.webhooks) {
        answers.push((hook.kind, send_refund(&t, &hook.body).await));
    }
    let answers: Vec<(&str, &str)> = answers.iter().map(|(k, r)| (*k, r.as_str())).collect();
    assert_eq!(
        answers,
        [
            ("payment_intent.succeeded", "applied"),
            ("refund.created", "applied"),
            ("refund.updated", "applied"),
            ("refund.failed", "duplicate")
        ]
    );
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Captured, 0));
    assert_eq!(
        (p.refund_failures, p.give_back),
        (
            1,
            Some(GiveBack {
                failure: 1,
                amount_minor: 1000
            })
        )
    );
    let kinds: Vec<_> = t.ctx.events(&id).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::PaymentCreated,
            EventKind::PaymentCaptured,
            EventKind::RefundPending,
            EventKind::RefundFailed
        ],
        "refund.updated and refund.failed report the same failure: one event"
    );
}
