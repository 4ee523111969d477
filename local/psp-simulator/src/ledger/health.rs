//! Events Stripe never made: rarely Stripe fails to generate an event at all, so it is neither delivered nor
//! listed by `GET /v1/events`, and once the failure is resolved Stripe sends the thin event
//! `v2.core.health.event_generation_failure.resolved` to the account's event destinations instead, naming
//! the object in its data (`impact.related_object`), which only `GET /v2/core/events/{id}` returns.
//!
//! [`Ledger::fail_event_generation`] arms the failure for some event types: from then on each event of those
//! types is not made (not recorded, not sent), and a failure event naming its object is made in its place:
//! its thin form delivered to the webhook URL, signed as every webhook, its full form served by
//! `GET /v2/core/events/{id}` (an unknown id: 404 `resource_missing`, as Stripe answers).

use super::answers::{answer, no_such};
use super::{Answer, Effects, Ledger, WebhookEvent};
use psp::stripe::GENERATION_FAILURE_RESOLVED;
use serde_json::{json, Value};

/// The failure event Stripe makes for `lost` (an event never generated), full (as the v2 read answers it)
/// and thin (as delivered: no data).
fn failure_for(lost: &WebhookEvent, now_ms: i64) -> (Value, WebhookEvent) {
    let object = &lost.body["data"]["object"];
    let (id, kind) = (
        object["id"].as_str().unwrap_or_default(),
        object["object"].as_str().unwrap_or_default(),
    );
    let url = match kind {
        "payment_intent" => format!("/v1/payment_intents/{id}"),
        "refund" => format!("/v1/refunds/{id}"),
        "dispute" => format!("/v1/disputes/{id}"),
        _ => format!("/v1/charges/{id}"),
    };
    let event_id = format!("evt_test_{}", uuid::Uuid::new_v4().simple());
    let created = rfc3339(now_ms);
    let thin = json!({ "id": event_id, "object": "v2.core.event", "type": GENERATION_FAILURE_RESOLVED,
        "livemode": false, "created": created, "context": null, "reason": null });
    let mut full = thin.clone();
    full["data"] = json!({ "alert_id": format!("alert_{}", uuid::Uuid::new_v4().simple()),
        "grouping_key": format!("event_generation_failure:{kind}"), "resolved_at": created, "severity": "critical",
        "summary": "Stripe failed to generate an event",
        "impact": { "event_type": lost.kind, "related_object": { "id": id, "type": kind, "url": url } } });
    let delivered = WebhookEvent {
        id: event_id,
        kind: GENERATION_FAILURE_RESOLVED,
        body: thin,
    };
    (full, delivered)
}

/// `ms` since the epoch as RFC 3339 in UTC with milliseconds (`2026-12-04T18:00:00.000Z`), as v2 writes times.
fn rfc3339(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

/// `GET /v2/core/events/{id}`: the failure event made, or 404.
pub(super) fn get(failures: &[Value], id: &str) -> Effects {
    match failures.iter().find(|e| e["id"] == id) {
        Some(event) => answer(Answer {
            status: 200,
            body: event.clone(),
        }),
        None => answer(no_such("event", id)),
    }
}

impl Ledger {
    /// From now on, no event of a type in `types` is generated: a failure event names its object instead.
    pub fn fail_event_generation(&self, types: &[&'static str]) {
        self.state().never_generated = types.to_vec();
    }

    /// The failure events made so far, thin, as delivered (a test hands them to the intake itself).
    pub fn generation_failures(&self) -> Vec<Value> {
        let state = self.state();
        state
            .generation_failures
            .iter()
            .map(|full| {
                let mut thin = full.clone();
                if let Some(o) = thin.as_object_mut() {
                    o.remove("data");
                }
                thin
            })
            .collect()
    }

    /// Takes the events of the types armed by [`Ledger::fail_event_generation`] out of `events`, each replaced
    /// by its failure event (kept for the v2 read, delivered thin).
    pub(super) fn never_generate(&self, events: Vec<WebhookEvent>, now_ms: i64) -> Vec<WebhookEvent> {
        let mut state = self.state();
        if state.never_generated.is_empty() {
            return events;
        }
        let mut made = Vec::with_capacity(events.len());
        for event in events {
            if state.never_generated.contains(&event.kind) {
                let (full, delivered) = failure_for(&event, now_ms);
                state.generation_failures.push(full);
                made.push(delivered);
            } else {
                made.push(event);
            }
        }
        made
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ledger, Timings};
    use super::rfc3339;
    use std::collections::BTreeMap;

    fn get(l: &Ledger, path: &str) -> (u16, serde_json::Value) {
        let a = l
            .handle("GET", path, Some("Bearer sk_test_k"), None, &BTreeMap::new())
            .answer
            .unwrap();
        (a.status, a.body)
    }

    #[test]
    fn an_event_never_generated_is_not_listed_and_its_failure_names_its_object_only_in_the_v2_read() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        l.fail_event_generation(&["payment_intent.succeeded"]);
        let p: BTreeMap<String, String> = [
            ("amount", "1000"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("automatic_payment_methods[enabled]", "true"),
            ("automatic_payment_methods[allow_redirects]", "never"),
            ("payment_method", "pm_succeeded"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let made = l.handle("POST", "/v1/payment_intents", Some("Bearer sk_test_k"), Some("k1"), &p);
        let intent = made.answer.unwrap().body["id"].as_str().unwrap().to_owned();
        let delivered = l.record(made.webhooks);
        assert!(
            l.events_of_type("payment_intent.succeeded").is_empty(),
            "never made, never listed"
        );
        let (_, listed) = get(&l, "/v1/events");
        assert!(
            listed["data"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["object"] == "event"),
            "v2 events are not v1's"
        );
        let [thin] = delivered.as_slice() else {
            panic!("{delivered:?}")
        };
        assert_eq!(
            (thin.kind, thin.body["object"].as_str()),
            (super::GENERATION_FAILURE_RESOLVED, Some("v2.core.event"))
        );
        assert!(thin.body.get("data").is_none(), "a thin event carries no data");
        assert_eq!(l.generation_failures(), vec![thin.body.clone()]);
        let (status, full) = get(&l, &format!("/v2/core/events/{}", thin.id));
        assert_eq!(status, 200);
        let impact = &full["data"]["impact"];
        assert_eq!(impact["event_type"], "payment_intent.succeeded");
        assert_eq!(impact["related_object"]["id"], intent.as_str());
        assert_eq!(impact["related_object"]["type"], "payment_intent");
        assert_eq!(impact["related_object"]["url"], format!("/v1/payment_intents/{intent}"));
        let (status, missing) = get(&l, "/v2/core/events/evt_nope");
        assert_eq!(
            (status, missing["error"]["code"].as_str()),
            (404, Some("resource_missing"))
        );
        let unauthorized = l.handle(
            "GET",
            &format!("/v2/core/events/{}", thin.id),
            None,
            None,
            &BTreeMap::new(),
        );
        assert_eq!(unauthorized.answer.unwrap().status, 401);
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_407_200_123), "2026-12-04T18:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
