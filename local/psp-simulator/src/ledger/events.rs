//! The account's events as Stripe's Events API lists them (`GET /v1/events`), and webhooks lost on purpose.
//!
//! Why: Stripe keeps every event for 30 days whether its webhook arrived or not, and an integration that
//! reads them (our catch-up job) recovers what a lost delivery dropped. So every event the simulator creates
//! is recorded here once, when it is handed to delivery, and a share of deliveries can be dropped
//! ([`Ledger::lose_webhooks`]) to show the catch-up finding them.
//!
//! The list is Stripe's: newest first, `created[gte]`/`created[gt]`/`created[lte]`/`created[lt]`, `types[]`
//! (or `types[N]`, as Stripe's libraries send arrays) and `type`, `limit` (1 to 100, default 10),
//! `starting_after` (an event id of the list: the page after it, older), `{"object": "list", "data",
//! "has_more", "url"}`.

use super::answers::answer;
use super::{Answer, Effects, Ledger, WebhookEvent};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One recorded event: its body, and its place in creation order (ties in `created` are broken by it).
#[derive(Debug, Clone)]
pub(super) struct Recorded {
    seq: u64,
    body: Value,
}

fn invalid(param: &str, message: &str) -> Effects {
    answer(Answer::error(
        400,
        "invalid_request_error",
        Some("parameter_invalid_integer"),
        message,
        json!({ "param": param }),
    ))
}

/// A list's `limit`, as Stripe takes it on every list: 1 to 100, default 10; anything else is refused.
pub(super) fn limit(params: &BTreeMap<String, String>) -> Result<usize, Effects> {
    match params.get("limit").map(|v| v.parse::<usize>()) {
        None => Ok(10),
        Some(Ok(n)) if (1..=100).contains(&n) => Ok(n),
        Some(_) => Err(invalid("limit", "limit must be an integer between 1 and 100")),
    }
}

/// `created[op]` as epoch seconds, if given.
fn bound(params: &BTreeMap<String, String>, op: &str) -> Result<Option<i64>, Effects> {
    let name = format!("created[{op}]");
    params
        .get(&name)
        .map(|v| v.parse::<i64>().map_err(|_| invalid(&name, "Invalid integer")))
        .transpose()
}

/// The types asked for: `types[]`, `types[N]` and `type` (none: every type).
fn types(params: &BTreeMap<String, String>) -> Vec<&str> {
    params
        .iter()
        .filter(|(k, _)| k.as_str() == "type" || (k.starts_with("types[") && k.ends_with(']')))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// `GET /v1/events`.
pub(super) fn list(events: &[Recorded], params: &BTreeMap<String, String>) -> Effects {
    let limit = match limit(params) {
        Ok(n) => n,
        Err(refused) => return refused,
    };
    let (gte, gt, lte, lt) = match (
        bound(params, "gte"),
        bound(params, "gt"),
        bound(params, "lte"),
        bound(params, "lt"),
    ) {
        (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
        (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => return e,
    };
    let wanted = types(params);
    let mut matching: Vec<&Recorded> = events
        .iter()
        .filter(|r| {
            let created = r.body["created"].as_i64().unwrap_or(0);
            gte.is_none_or(|b| created >= b)
                && gt.is_none_or(|b| created > b)
                && lte.is_none_or(|b| created <= b)
                && lt.is_none_or(|b| created < b)
                && (wanted.is_empty() || wanted.contains(&r.body["type"].as_str().unwrap_or("")))
        })
        .collect();
    // Newest first, as every Stripe list.
    matching.sort_by_key(|r| std::cmp::Reverse((r.body["created"].as_i64().unwrap_or(0), r.seq)));
    let start = match params.get("starting_after") {
        None => 0,
        Some(id) => match matching.iter().position(|r| r.body["id"].as_str() == Some(id.as_str())) {
            Some(at) => at + 1,
            None => {
                return answer(Answer::error(
                    400,
                    "invalid_request_error",
                    Some("resource_missing"),
                    &format!("No such event: '{id}'"),
                    json!({ "param": "starting_after" }),
                ))
            }
        },
    };
    let rest = matching.get(start..).unwrap_or_default();
    let page: Vec<Value> = rest.iter().take(limit).map(|r| r.body.clone()).collect();
    answer(Answer::ok(json!({
        "object": "list",
        "url": "/v1/events",
        "has_more": rest.len() > limit,
        "data": page,
    })))
}

impl Ledger {
    /// Records `events` (once each, as created) and returns the ones to deliver: all of them, unless
    /// [`Ledger::lose_webhooks`] drops a share.
    pub fn record(&self, events: Vec<WebhookEvent>) -> Vec<WebhookEvent> {
        // An event Stripe failed to generate is neither listed nor sent; its failure event is (v2, not listed).
        let events = self.never_generate(events, super::now_ms());
        let mut state = self.state();
        let loss = state.loss_rate;
        for e in events
            .iter()
            .filter(|e| e.kind != psp::stripe::GENERATION_FAILURE_RESOLVED)
        {
            state.seq += 1;
            let seq = state.seq;
            state.events.push(Recorded {
                seq,
                body: e.body.clone(),
            });
        }
        if loss <= 0.0 {
            return events;
        }
        events
            .into_iter()
            .filter(|_| !rand::random_bool(loss.min(1.0)))
            .collect()
    }

    /// The events of type `kind` made so far (what `GET /v1/events` can list), oldest first.
    pub fn events_of_type(&self, kind: &str) -> Vec<Value> {
        let state = self.state();
        state
            .events
            .iter()
            .filter(|r| r.body["type"] == kind)
            .map(|r| r.body.clone())
            .collect()
    }

    /// From now on, each event's webhook is lost (never sent) with probability `rate` (1.0: every one); the
    /// event is still listed by `GET /v1/events`, as at Stripe.
    pub fn lose_webhooks(&self, rate: f64) {
        self.state().loss_rate = rate.clamp(0.0, 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ledger, Timings, WebhookEvent};
    use serde_json::{json, Value};
    use std::collections::BTreeMap;

    fn event(id: &str, kind: &'static str, created: i64) -> WebhookEvent {
        let body = json!({ "id": id, "object": "event", "type": kind, "created": created, "data": { "object": {} } });
        WebhookEvent {
            id: id.to_owned(),
            kind,
            body,
        }
    }

    fn list(l: &Ledger, pairs: &[(&str, &str)]) -> (u16, Value) {
        let params: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let answer = l
            .handle("GET", "/v1/events", Some("Bearer sk_test_k"), None, &params)
            .answer
            .unwrap();
        (answer.status, answer.body)
    }

    fn ids(page: &Value) -> Vec<&str> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn events_are_listed_newest_first_by_type_and_time_with_starting_after_pages() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        let sent = l.record(vec![
            event("evt_1", "payment_intent.succeeded", 100),
            event("evt_2", "charge.refunded", 100),
            event("evt_3", "payment_intent.created", 200),
            event("evt_4", "charge.refunded", 300),
        ]);
        assert_eq!(sent.len(), 4, "nothing is lost unless asked");
        let types = [
            ("types[0]", "payment_intent.succeeded"),
            ("types[1]", "charge.refunded"),
        ];
        let (status, all) = list(&l, &[types[0], types[1], ("limit", "100")]);
        assert_eq!(status, 200);
        assert_eq!(
            (all["object"].as_str(), all["url"].as_str()),
            (Some("list"), Some("/v1/events"))
        );
        assert_eq!(
            ids(&all),
            ["evt_4", "evt_2", "evt_1"],
            "newest first; same second: later first"
        );
        assert_eq!(all["has_more"], false);
        let (_, first) = list(&l, &[types[0], types[1], ("limit", "2")]);
        assert_eq!(
            (ids(&first), &first["has_more"]),
            (vec!["evt_4", "evt_2"], &json!(true))
        );
        let (_, next) = list(&l, &[types[0], types[1], ("limit", "2"), ("starting_after", "evt_2")]);
        assert_eq!((ids(&next), &next["has_more"]), (vec!["evt_1"], &json!(false)));
        let (_, recent) = list(&l, &[("created[gte]", "200"), ("created[lte]", "250")]);
        assert_eq!(ids(&recent), ["evt_3"]);
        assert_eq!(list(&l, &[("limit", "101")]).0, 400);
        assert_eq!(list(&l, &[("starting_after", "evt_nope")]).0, 400);
        assert_eq!(list(&l, &[("created[gte]", "soon")]).0, 400);
    }

    #[test]
    fn lost_webhooks_are_not_sent_but_still_listed() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        l.lose_webhooks(1.0);
        let sent = l.record(vec![event("evt_1", "charge.refunded", 100)]);
        assert!(sent.is_empty());
        assert_eq!(ids(&list(&l, &[]).1), ["evt_1"]);
        l.lose_webhooks(0.0);
        assert_eq!(l.record(vec![event("evt_2", "charge.refunded", 101)]).len(), 1);
    }
}
