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

/// SQS's largest message (body and attributes together).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// What the relay allows itself for the attributes (ids, the event type, a trace context of at most
/// [`MAX_TRACE_CONTEXT_CHARS`]), so the check on the body alone keeps the whole message under the limit.
const ATTRIBUTES_ALLOWANCE: usize = 4 * 1024;
/// The longest trace context carried on (a `traceparent` is 55 characters, an X-Ray header about 100).
pub const MAX_TRACE_CONTEXT_CHARS: usize = 256;

/// Why an event cannot be sent to SQS as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsendable {
    /// A character SQS refuses (U+FFFF, a control character, ...), or one our text rules refuse.
    Characters,
    /// Over SQS's message size.
    Size,
}

impl Unsendable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unsendable::Characters => "characters",
            Unsendable::Size => "size",
        }
    }
}

/// Whether `event` can be sent as it is. Entry points refuse what breaks the text rules (`crate::text`), so
/// this fails only for an item written around them (an older version, a hand edit, a bug).
pub fn check_sendable(event: &PaymentEvent) -> Result<(), Unsendable> {
    let free_text = [event.reason.as_deref(), event.trace_context.as_deref()];
    if free_text.iter().flatten().any(|t| {
        !t.chars()
            .all(|c| crate::text::is_allowed(c) && crate::text::is_sqs_char(c))
    }) {
        return Err(Unsendable::Characters);
    }
    let too_long = |t: Option<&str>, max: usize| t.is_some_and(|t| t.chars().nth(max).is_some());
    if too_long(event.reason.as_deref(), crate::text::MAX_REASON_CHARS)
        || too_long(event.trace_context.as_deref(), MAX_TRACE_CONTEXT_CHARS)
        || message_body(event).len() > MAX_MESSAGE_BYTES.saturating_sub(ATTRIBUTES_ALLOWANCE)
    {
        return Err(Unsendable::Size);
    }
    Ok(())
}

/// `event` as it can be sent: its free text (the reason) cleaned and cut by the text rules, a trace context
/// that breaks them dropped. Everything else is typed and valid by construction, so the result always
/// passes [`check_sendable`].
pub fn made_sendable(event: &PaymentEvent) -> PaymentEvent {
    let mut event = event.clone();
    event.reason = event
        .reason
        .map(|r| crate::text::sanitized(&r, crate::text::MAX_REASON_CHARS));
    event.trace_context = event
        .trace_context
        .filter(|t| t.chars().nth(MAX_TRACE_CONTEXT_CHARS).is_none() && t.chars().all(|c| c.is_ascii_graphic()));
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use payments_core::fixtures;

    fn event_with(reason: Option<String>) -> PaymentEvent {
        let payment = fixtures::payment("pay_1");
        let mut e = PaymentEvent::describe(
            &payment,
            None,
            crate::EventKind::PaymentFailed,
            crate::Channel::Sync,
            None,
            &crate::CorrelationId::parse("c").expect("id"),
            None,
            0,
        );
        e.reason = reason;
        e
    }

    #[test]
    fn a_poison_reason_is_unsendable_and_made_sendable() {
        assert_eq!(check_sendable(&event_with(Some("fraudulent".into()))), Ok(()));
        let poison = event_with(Some("fraud\u{FFFF}".into()));
        assert_eq!(check_sendable(&poison), Err(Unsendable::Characters));
        let fixed = made_sendable(&poison);
        assert_eq!(fixed.reason.as_deref(), Some("fraud\u{FFFD}"));
        assert_eq!(check_sendable(&fixed), Ok(()));
        let huge = event_with(Some("r".repeat(300 * 1024)));
        assert_eq!(check_sendable(&huge), Err(Unsendable::Size));
        assert_eq!(check_sendable(&made_sendable(&huge)), Ok(()));
        let mut traced = event_with(None);
        traced.trace_context = Some("00-\u{1}".into());
        assert_eq!(check_sendable(&traced), Err(Unsendable::Characters));
        assert_eq!(made_sendable(&traced).trace_context, None);
    }
}
