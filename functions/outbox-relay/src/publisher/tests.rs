use super::*;
use shared::{Channel, CorrelationId, EventKind, Money, OrderId, PaymentStatus};

/// The message carries the `publish` span's context, in the event item's trace, both as `traceparent`
/// and as SQS's `AWSTraceHeader`, so the consumer's `consume` span continues the webhook's trace.
#[test]
fn an_entry_hands_the_event_items_trace_on_to_sqs() {
    use tracing_subscriber::layer::SubscriberExt;
    const TRACE: &str = "5759e988bd862e3fe1be46a994272793";
    let provider = telemetry::tracer_provider();
    let subscriber = tracing_subscriber::registry().with(telemetry::otel_layer(&provider));
    tracing::subscriber::with_default(subscriber, || {
        let mut e = event("pay_1", 3);
        e.trace_context = Some(format!("00-{TRACE}-53995c3f42cd8ad8-01"));
        let span = telemetry::step_span_with_parent("publish", e.trace_context.as_deref());
        let entry = Publisher::entry(0, &e, &span).unwrap();
        let header = entry.message_system_attributes().unwrap()[&MessageSystemAttributeNameForSends::AwsTraceHeader]
            .string_value()
            .unwrap()
            .to_owned();
        assert!(
            header.starts_with("Root=1-5759e988-bd862e3fe1be46a994272793;Parent="),
            "{header}"
        );
        assert!(
            !header.contains("53995c3f42cd8ad8"),
            "the parent is the publish span: {header}"
        );
        let traceparent = entry.message_attributes().unwrap()[outbox::ATTR_TRACE_CONTEXT]
            .string_value()
            .unwrap()
            .to_owned();
        assert_eq!(&traceparent[3..35], TRACE);
        assert_eq!(Some(traceparent), telemetry::traceparent_of(&span));

        // An event without a trace context starts a trace at the relay, still handed on.
        let untraced = Publisher::entry(
            1,
            &event("pay_2", 1),
            &telemetry::step_span_with_parent("publish", None),
        )
        .unwrap();
        assert!(untraced.message_system_attributes().is_some());
    });
}

fn event(payment: &str, version: u64) -> PaymentEvent {
    PaymentEvent {
        payment_id: PaymentId::parse(payment).unwrap(),
        order_id: OrderId::parse("o").unwrap(),
        version,
        kind: EventKind::ProcessingStarted,
        path: Channel::Sync,
        status: PaymentStatus::Processing,
        previous_status: None,
        money: Money::new(1, shared::Currency::parse("EUR").unwrap()).unwrap(),
        refunded_minor: 0,
        refund: None,
        reason: None,
        psp_event_id: None,
        correlation_id: CorrelationId::parse("c").unwrap(),
        trace_context: None,
        recorded_at_ms: 0,
        dispute: None,
        capture_failed: None,
    }
}

#[test]
fn batches_hold_one_event_per_payment_and_keep_each_payments_order() {
    let events: Vec<_> = [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("c", 1), ("b", 2)]
        .iter()
        .map(|(p, v)| event(p, *v))
        .collect();
    let mut lanes = Lanes::new(&events);
    let mut sent = Vec::new();
    loop {
        let batch = lanes.next_batch();
        if batch.is_empty() {
            break;
        }
        let payments: Vec<&str> = batch.iter().map(|&i| events[i].payment_id.as_str()).collect();
        let mut unique = payments.clone();
        unique.dedup();
        assert_eq!(unique.len(), payments.len(), "one per payment: {payments:?}");
        for &i in &batch {
            lanes.confirm(i);
            sent.push((events[i].payment_id.as_str().to_owned(), events[i].version));
        }
    }
    for p in ["a", "b", "c"] {
        let versions: Vec<u64> = sent.iter().filter(|(q, _)| q == p).map(|(_, v)| *v).collect();
        let mut sorted = versions.clone();
        sorted.sort();
        assert_eq!(versions, sorted, "{p} in order");
    }
    assert_eq!(sent.len(), 6);
    assert_eq!(lanes.first_unconfirmed(), 6);
}

#[test]
fn a_batch_has_at_most_ten_entries() {
    let events: Vec<_> = (0..25).map(|i| event(&format!("p{i}"), 1)).collect();
    let lanes = Lanes::new(&events);
    assert_eq!(lanes.next_batch().len(), 10);
}
