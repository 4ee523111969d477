//! Issue 34 item 1: Stripe events through Amazon EventBridge (partner source -> bus -> rule -> SQS -> the
//! intake's EventBridge handler), in the envelope EventBridge delivers. The same steps as a webhook: an event
//! applied by EventBridge is a `duplicate` by webhook afterwards (and the other way round); an envelope from
//! another source or account is refused, counted and writes nothing; a 503-worthy event stays on the queue.

use super::*;
use aws_lambda_events::event::sqs::SqsEvent;
use local_lambda::account::LOCAL_ACCOUNT;
use local_lambda::eventbridge::{envelope, LOCAL_SOURCE};
use webhook_intake::eventbridge::{Delivered, Expected, StripeBridge};
use webhook_intake::providers::ProviderSpec;

/// The EventBridge function on the test's table, taking events of the local world's source and account.
fn bridge(t: &TestIntake) -> StripeBridge {
    let spec: Vec<ProviderSpec> =
        serde_json::from_str(r#"[{"name":"stripe","scheme":"stripe","livemode":false}]"#).unwrap();
    let settings = IntakeSettings {
        lease_max_wait: Duration::from_millis(20),
        ..IntakeSettings::default()
    };
    StripeBridge {
        app: App::new(
            t.ctx.client_for("webhook-eventbridge"),
            &t.ctx.config(),
            Providers::default().into(),
            settings,
        ),
        provider: spec[0].unsigned(),
        expected: Expected {
            source: LOCAL_SOURCE.into(),
            account: LOCAL_ACCOUNT.into(),
        },
    }
}

fn bridged(event: &Value) -> String {
    envelope(LOCAL_SOURCE, LOCAL_ACCOUNT, event).to_string()
}

#[tokio::test]
async fn an_event_by_eventbridge_applies_once_and_the_same_by_webhook_is_a_duplicate() {
    let t = TestIntake::new().await;
    let bridge = bridge(&t);
    let id = t.payment("pay_eb1").await;
    let event = intent_event("evt_eb1", "payment_intent.succeeded", &id, now());

    let (delivered, metrics) = bridge.process("m-1", &bridged(&event)).await;
    assert_eq!(delivered, Delivered::Answered("applied"));
    assert_eq!(
        (metrics.provider.as_str(), metrics.result.as_str(), metrics.status),
        ("stripe", "applied", 200)
    );
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.version), (PaymentStatus::Captured, 2));
    let events = t.ctx.events(&id).await.unwrap();
    assert_eq!(events.last().unwrap().correlation_id.as_str(), "eventbridge-evt_eb1");
    // Deduplicated by Stripe's own event id, whichever way it came.
    assert!(p.has_seen(&shared::PspEventId::parse("evt_eb1").unwrap()));

    // The same event by webhook (a shop running both while it moves): acknowledged, nothing written.
    let a = t.send(stripe(&event, STRIPE_NEW)).await;
    assert_eq!((a.status, result(&a)), (StatusCode::OK, "duplicate"), "{}", a.body);
    // EventBridge's own at-least-once delivery: the same again.
    let (again, _) = bridge.process("m-2", &bridged(&event)).await;
    assert_eq!(again, Delivered::Answered("duplicate"));
    assert_eq!(t.ctx.store.get(&id).await.unwrap().unwrap().version, 2);

    // The other way round: a webhook first, then EventBridge.
    let other = t.payment("pay_eb2").await;
    let event = intent_event("evt_eb2", "payment_intent.processing", &other, now());
    assert_eq!(result(&t.send(stripe(&event, STRIPE_NEW)).await), "applied");
    let (late, _) = bridge.process("m-3", &bridged(&event)).await;
    assert_eq!(late, Delivered::Answered("duplicate"));
}

#[tokio::test]
async fn an_envelope_from_another_source_or_account_is_refused_counted_and_writes_nothing() {
    let t = TestIntake::new().await;
    let bridge = bridge(&t);
    let id = t.payment("pay_eb3").await;
    let event = intent_event("evt_eb3", "payment_intent.succeeded", &id, now());
    let before = t.item_count().await;
    let mut wrong_type = envelope(LOCAL_SOURCE, LOCAL_ACCOUNT, &event);
    wrong_type["detail-type"] = json!("payment_intent.canceled");
    let refused = [
        envelope("aws.partner/stripe.com/ed_test_someone_else", LOCAL_ACCOUNT, &event).to_string(),
        envelope("aws.partner/example.com/ed_test_local_world", LOCAL_ACCOUNT, &event).to_string(),
        envelope("shop.custom", LOCAL_ACCOUNT, &event).to_string(),
        envelope(LOCAL_SOURCE, "210987654321", &event).to_string(),
        wrong_type.to_string(),
        event.to_string(),
        "not json".to_owned(),
    ];
    for body in &refused {
        let (delivered, metrics) = bridge.process("m", body).await;
        assert!(matches!(delivered, Delivered::Refused(_)), "{body}: {delivered:?}");
        assert_eq!(
            (metrics.refused_deliveries, metrics.result.as_str()),
            (1, "refused"),
            "{body}"
        );
        assert_eq!(metrics.to_emf(1)["RefusedDeliveries"], 1);
    }
    assert_eq!(t.item_count().await, before, "a refused delivery writes nothing");
    assert_eq!(t.ctx.store.get(&id).await.unwrap().unwrap().version, 1);
}

#[tokio::test]
async fn a_batch_leaves_what_a_webhook_would_retry_on_the_queue_and_counts_an_older_version() {
    let t = TestIntake::new().await;
    let bridge = bridge(&t);
    let id = t.payment("pay_eb4").await;
    let mut older = intent_event("evt_eb4", "payment_intent.succeeded", &id, now());
    older["api_version"] = json!("2024-06-20");
    // A young event of ours whose payment is not written yet: a webhook would get a 503.
    let ghost = PaymentId::parse("pay_eb_ghost").unwrap();
    let young = intent_event("evt_eb5", "payment_intent.succeeded", &ghost, now());
    let record = |id: &str, body: String| json!({ "messageId": id, "body": body, "eventSource": "aws:sqs" });
    let batch: SqsEvent = serde_json::from_value(json!({ "Records": [
        record("m-older", bridged(&older)), record("m-young", bridged(&young)),
        record("m-foreign", envelope(LOCAL_SOURCE, "210987654321", &older).to_string()),
    ] }))
    .unwrap();
    let far = tokio::time::Instant::now() + Duration::from_secs(30);
    let answer = bridge.invoke(batch, far).await.unwrap();
    let failed: Vec<&str> = answer
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(
        failed,
        ["m-young"],
        "only the 503-worthy one comes back; a refused one is not retried"
    );
    assert_eq!(
        t.ctx.store.get(&id).await.unwrap().unwrap().status,
        PaymentStatus::Captured
    );

    let mut counted = intent_event(
        "evt_eb6",
        "payment_intent.succeeded",
        &t.payment("pay_eb6").await,
        now(),
    );
    counted["api_version"] = json!("2024-06-20");
    let (delivered, metrics) = bridge.process("m-6", &bridged(&counted)).await;
    assert_eq!(
        (delivered, metrics.version_mismatches),
        (Delivered::Answered("applied"), 1)
    );
}

/// The template's rule sends exactly the types the intake handles (a type left out is lost on this way in;
/// one too many is acknowledged as `ignored` but costs an invocation).
#[test]
fn the_rule_takes_the_types_the_intake_handles() {
    assert_eq!(
        local_lambda::eventbridge::rule_types(),
        webhook_intake::stripe::SUBSCRIBED_TYPES
    );
}

/// The local world's way in, as `scripts/run-local` runs it: events put on the local stand-in for the partner
/// bus (`local_lambda::eventbridge`: the template's rule, the envelope) land on the queue created from the
/// template and reach the handler through the SQS poller (the event source mapping's stand-in), which
/// deletes what was handled. A refund found by its PaymentIntent is applied, an old event of no known payment
/// parked, a type the rule does not take never sent; the same events by webhook are duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_bus_delivers_through_the_templates_queue_to_the_handler() {
    use local_lambda::eventbridge::Bus;
    use local_lambda::sqs_poller::SqsPoller;
    let t = TestIntake::new().await;
    let bridge = bridge(&t);
    let sqs = integration_tests::sqs_client(None);
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let (queue, _dlq) = local_testkit::queues::create_stripe_events(&sqs, &prefix).await;
    let bus = Bus::local(sqs, &queue);
    let id = t.payment("pay_eb7").await;
    let captured = intent_event("evt_eb7", "payment_intent.succeeded", &id, now());
    // Found by its PaymentIntent (no metadata of ours), as Stripe sends a refund.
    let refunded = json!({ "id": "evt_eb8", "object": "event", "type": "charge.refunded", "created": now(),
        "livemode": false, "data": { "object": { "id": "ch_1", "object": "charge", "amount": 1000,
        "amount_refunded": 1000, "currency": "eur", "captured": true, "payment_intent": "pi_test_1",
        "metadata": {} } } });
    let ghost = PaymentId::parse("pay_eb_gone").unwrap();
    let stale = intent_event("evt_eb9", "payment_intent.succeeded", &ghost, now() - 16 * 60);
    let customer = json!({ "id": "evt_eb10", "type": "customer.created", "created": now(), "data": { "object": {} } });
    assert!(
        !bus.put(&customer).await.unwrap(),
        "the rule does not take customer.created"
    );

    let mut poller = SqsPoller::new(
        integration_tests::function_sqs_client("webhook-eventbridge", None),
        &queue,
    );
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(20);
    for event in [&captured, &refunded, &stale] {
        assert!(bus.put(event).await.unwrap());
        // One at a time: the refund needs its capture applied first, as Stripe sends them minutes apart.
        let handled = poller
            .poll_once(|batch| async { bridge.invoke(batch, deadline()).await.unwrap() })
            .await
            .unwrap();
        assert_eq!(handled, 1);
    }
    let p = t.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(p.status, PaymentStatus::Refunded, "{p:?}");
    assert_eq!(t.ctx.store.parked(ParkedKind::UnknownPayment).await.unwrap().len(), 1);
    let left = poller
        .poll_once(|_| async { unreachable!("the queue is empty") })
        .await
        .unwrap();
    assert_eq!(left, 0, "every handled message was deleted");
    for event in [&captured, &refunded] {
        assert_eq!(result(&t.send(stripe(event, STRIPE_NEW)).await), "duplicate");
    }
}
