//! The outbox contract: which stream records are outbox events, and the SQS message an event becomes.
//!
//! The payment item written by each transition is the outbox (change-data-capture form): it carries the
//! transition (`last_event`, `event_version`), DynamoDB Streams carries its change record, and the relay
//! turns it into one message on the FIFO queue: group = payment id (order per payment), deduplication id =
//! event id, body = the event in our own trimmed schema, attributes = correlation id, trace context, event
//! type. Event items an older writer put in its transaction are still accepted, the same message.

use crate::store::item::{event_from_item, event_of_payment_item, ENTITY_EVENT};
use crate::store::StoreError;
use crate::PaymentEvent;

pub const ATTR_CORRELATION_ID: &str = "correlation_id";
pub const ATTR_TRACE_CONTEXT: &str = "traceparent";
pub const ATTR_EVENT_TYPE: &str = "event_type";

/// An outbox record of the stream, by its form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxRecord {
    /// A payment's change record carrying the transition that wrote it: the relay archives the event in the
    /// payment's history, then sends it.
    Transition(PaymentEvent),
    /// The INSERT of an event item an older writer put in its transaction (already history): sent. Accepted
    /// while the stream may hold such records, 24 h after the last writer of that form.
    EventItem(PaymentEvent),
}

impl OutboxRecord {
    pub fn event(&self) -> &PaymentEvent {
        match self {
            OutboxRecord::Transition(e) | OutboxRecord::EventItem(e) => e,
        }
    }
}

/// Whether a record is one the relay publishes: a payment's INSERT or MODIFY whose `event_version` is its
/// `version` (a transition wrote it), or an INSERT of an `entity = event` item. The stream mapping's filter
/// (`infra/template.yaml`) passes exactly these; leases, history items, changes that move no version and
/// TTL deletions (`REMOVE`, in DynamoDB Local `UNKNOWN_TO_SDK_VERSION`) never reach the relay.
pub fn is_outbox_record(event_name: &str, new_image: &serde_dynamo::Item) -> bool {
    use serde_dynamo::AttributeValue as V;
    match (event_name, new_image.get("entity")) {
        ("INSERT", Some(V::S(e))) if e == ENTITY_EVENT => true,
        ("INSERT" | "MODIFY", Some(V::S(e))) if e == "payment" => {
            matches!((new_image.get("event_version"), new_image.get("version")),
                     (Some(V::N(a)), Some(V::N(b))) if a == b)
        }
        _ => false,
    }
}

/// The outbox record `new_image` is, `None` when it is none ([`is_outbox_record`]); an error when it claims
/// to be one and cannot be read (a bug or a hand edit: the relay stops there, never skips it).
pub fn outbox_record(event_name: &str, new_image: &serde_dynamo::Item) -> Option<Result<OutboxRecord, StoreError>> {
    if !is_outbox_record(event_name, new_image) {
        return None;
    }
    let is_event_item = matches!(new_image.get("entity"),
        Some(serde_dynamo::AttributeValue::S(e)) if e == ENTITY_EVENT);
    Some(if is_event_item {
        event_from_item(new_image.clone()).map(OutboxRecord::EventItem)
    } else {
        match event_of_payment_item(new_image.clone()) {
            Ok(Some(event)) => Ok(OutboxRecord::Transition(event)),
            Ok(None) => Err(StoreError::corrupt(
                "payment change record",
                "event_version without last_event",
            )),
            Err(e) => Err(e),
        }
    })
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
