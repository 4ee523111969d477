//! The outbox contract: which stream records are outbox events, and the SQS message an event becomes.
//!
//! The event item written with each transition is the outbox. DynamoDB Streams carries it; the relay turns
//! it into one message on the FIFO queue: group = payment id (order per payment), deduplication id = event
//! id, body = the event in our own trimmed schema, attributes = correlation id, trace context, event type.

use crate::PaymentEvent;

pub const ATTR_CORRELATION_ID: &str = "correlation_id";
pub const ATTR_TRACE_CONTEXT: &str = "traceparent";
pub const ATTR_EVENT_TYPE: &str = "event_type";

/// True for the records the relay publishes: INSERTs of event items. Everything else (payment updates,
/// leases, TTL deletions, which DynamoDB Local reports as `UNKNOWN_TO_SDK_VERSION`) is ignored.
pub fn is_outbox_insert(event_name: &str, new_image: &serde_dynamo::Item) -> bool {
    event_name == "INSERT"
        && matches!(new_image.get("entity"), Some(serde_dynamo::AttributeValue::S(e)) if e == "event")
}

pub fn message_body(event: &PaymentEvent) -> String {
    // PaymentEvent holds only our own fields; serializing it cannot fail.
    serde_json::to_string(event).unwrap_or_default()
}

pub fn parse_body(body: &str) -> Result<PaymentEvent, serde_json::Error> {
    serde_json::from_str(body)
}

/// The FIFO message group: all events of one payment, in order.
pub fn group_id(event: &PaymentEvent) -> String {
    event.payment_id.to_string()
}

/// The FIFO deduplication id: the event's own id, stable across relay retries and replays.
pub fn deduplication_id(event: &PaymentEvent) -> String {
    event.event_id()
}
