//! Stripe's thin events (API v2, `"object": "v2.core.event"`), as an event destination delivers them to the
//! same endpoint with the same `Stripe-Signature`: only the event's id, type, `created` (an RFC 3339 text,
//! not epoch seconds) and `livemode`, no data. The one we act on, `v2.core.health.event_generation_failure.resolved`,
//! says Stripe failed to generate an event and names its object only in the event's data, which recovery
//! reads (`GET /v2/core/events/{id}`) with the object itself (`shared::store::recheck`).

use crate::psp_event::{self, Unparseable};
use psp::stripe::GENERATION_FAILURE_RESOLVED;
use serde::Deserialize;
use shared::PspEventId;

/// A thin event in our terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Thin {
    /// Stripe failed to generate an event: the object it names is to be read at Stripe.
    GenerationFailure { id: PspEventId, livemode: Option<bool> },
    /// Another v2 type: acknowledged and ignored.
    Ignored { event_type: String },
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    object: Option<String>,
}

#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    livemode: Option<bool>,
}

/// `None` for a body that is not a thin event (a v1 snapshot event, or not JSON: the v1 parse answers it).
pub fn parse(body: &[u8]) -> Option<Result<Thin, Unparseable>> {
    let head: Head = serde_json::from_slice(body).ok()?;
    (head.object.as_deref() == Some("v2.core.event")).then(|| thin(body))
}

fn thin(body: &[u8]) -> Result<Thin, Unparseable> {
    let event: Event = serde_json::from_slice(body).map_err(Unparseable::because)?;
    psp_event::event_type(&event.kind)?;
    if event.kind != GENERATION_FAILURE_RESOLVED {
        return Ok(Thin::Ignored { event_type: event.kind });
    }
    Ok(Thin::GenerationFailure {
        id: PspEventId::parse(event.id).map_err(Unparseable::because)?,
        livemode: event.livemode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A thin event as an event destination delivers it (the shape of Stripe's `EventNotification`).
    fn thin_event(kind: &str, id: &str) -> Vec<u8> {
        json!({ "id": id, "object": "v2.core.event", "type": kind, "livemode": false,
                "created": "2026-12-04T18:00:00.000Z", "context": null, "reason": null })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_generation_failure_is_read_by_its_id_and_other_v2_types_are_ignored() {
        assert_eq!(
            parse(&thin_event(GENERATION_FAILURE_RESOLVED, "evt_test_65R")).unwrap(),
            Ok(Thin::GenerationFailure {
                id: PspEventId::parse("evt_test_65R").unwrap(),
                livemode: Some(false)
            })
        );
        assert_eq!(
            parse(&thin_event("v2.core.event_destination.ping", "evt_2")).unwrap(),
            Ok(Thin::Ignored {
                event_type: "v2.core.event_destination.ping".into()
            })
        );
        assert!(parse(&thin_event(GENERATION_FAILURE_RESOLVED, "evt 1"))
            .unwrap()
            .is_err());
    }

    #[test]
    fn a_v1_event_or_no_json_is_not_thin() {
        let v1 = json!({ "id": "evt_1", "object": "event", "type": "refund.updated", "created": 1, "data": {} });
        assert!(parse(v1.to_string().as_bytes()).is_none());
        assert!(parse(b"not json").is_none());
    }
}
