//! The account's webhook endpoints as Stripe serves them: `GET /v1/webhook_endpoints` (a list object,
//! `limit` 1 to 100, oldest first here; Stripe documents no order) and `GET /v1/webhook_endpoints/{id}`
//! (`resource_missing` for an unknown id), behind the same Bearer key as every call. `paymentsctl doctor`
//! reads them to say whether Stripe still delivers (a `disabled` endpoint sends nothing).
//!
//! `POST /v1/webhook_endpoints` creates one as Stripe does (`paymentsctl stripe setup` calls it), refusing what
//! Stripe refuses with its 400 `invalid_request_error`: no `url` or no `enabled_events` (`parameter_missing`),
//! a `url` that is not an absolute http(s) URL (`url_invalid`), an event type Stripe does not know in
//! `enabled_events[i]`, an `api_version` that is not one of Stripe's versions. These rules are written here,
//! not read from the vendored OpenAPI subset (`crate::spec`): its `api_version` enum stops at 2023-08-16,
//! before the version our client pins. The secret (`whsec_...`) is in the create answer only, as at Stripe.
//! The simulator still delivers to its one URL: [`Ledger::add_webhook_endpoint`] registers that one,
//! [`Ledger::set_webhook_endpoint_status`] disables or enables an endpoint as the Dashboard does.

use super::answers::{answer, missing, no_such};
use super::events::limit;
use super::{now_ms, Answer, Effects, Ledger};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// `GET /v1/webhook_endpoints`.
pub(super) fn list(endpoints: &[Value], params: &BTreeMap<String, String>) -> Effects {
    let limit = match limit(params) {
        Ok(n) => n,
        Err(refused) => return refused,
    };
    answer(Answer::ok(json!({
        "object": "list",
        "url": "/v1/webhook_endpoints",
        "has_more": endpoints.len() > limit,
        "data": endpoints.iter().take(limit).collect::<Vec<_>>(),
    })))
}

/// `GET /v1/webhook_endpoints/{id}`.
pub(super) fn get(endpoints: &[Value], id: &str) -> Effects {
    match endpoints.iter().find(|e| e["id"] == id) {
        Some(endpoint) => answer(Answer::ok(endpoint.clone())),
        None => answer(no_such("webhook_endpoint", id)),
    }
}

/// The event types this simulated account knows (a subset of Stripe's list: every type the system subscribes
/// to, and the neighbours a typo would be mistaken for); `*` is every type.
pub const KNOWN_EVENT_TYPES: &[&str] = &[
    "*",
    "charge.captured",
    "charge.dispute.closed",
    "charge.dispute.created",
    "charge.dispute.funds_reinstated",
    "charge.dispute.funds_withdrawn",
    "charge.dispute.updated",
    "charge.failed",
    "charge.refund.updated",
    "charge.refunded",
    "charge.succeeded",
    "charge.updated",
    "customer.created",
    "payment_intent.amount_capturable_updated",
    "payment_intent.canceled",
    "payment_intent.created",
    "payment_intent.partially_funded",
    "payment_intent.payment_failed",
    "payment_intent.processing",
    "payment_intent.requires_action",
    "payment_intent.succeeded",
    "refund.created",
    "refund.failed",
    "refund.updated",
];

/// Stripe API versions this simulated account accepts for `api_version`: a few of Stripe's published ones
/// and the one our client pins.
pub const KNOWN_API_VERSIONS: &[&str] = &[
    "2023-08-16",
    "2024-06-20",
    "2024-10-28.acacia",
    "2025-03-31.basil",
    psp::stripe::STRIPE_API_VERSION,
];

fn invalid(param: &str, code: Option<&str>, message: &str) -> Answer {
    Answer::error(400, "invalid_request_error", code, message, json!({ "param": param }))
}

/// The `enabled_events[i]` values in order (`enabled_events[]` or indexed keys), or the refusal of the first
/// one Stripe does not know.
fn enabled_events(params: &BTreeMap<String, String>) -> Result<Vec<String>, Answer> {
    let events: Vec<(&String, &String)> = params
        .iter()
        .filter(|(k, _)| k.starts_with("enabled_events["))
        .collect();
    if events.is_empty() {
        return Err(missing("enabled_events"));
    }
    let mut indexed: Vec<(usize, &String, &String)> = events
        .into_iter()
        .map(|(k, v)| {
            let index = k["enabled_events[".len()..].trim_end_matches(']').parse().unwrap_or(0);
            (index, k, v)
        })
        .collect();
    indexed.sort_by_key(|(i, _, _)| *i);
    indexed
        .into_iter()
        .map(|(_, key, kind)| {
            if KNOWN_EVENT_TYPES.contains(&kind.as_str()) {
                Ok(kind.clone())
            } else {
                let message = format!("Invalid {key}: must be one of the event types Stripe sends (got {kind:?})");
                Err(invalid(key, None, &message))
            }
        })
        .collect()
}

/// `POST /v1/webhook_endpoints`: the endpoint, with its secret (shown at creation only).
pub(super) fn create(state: &mut super::State, params: &BTreeMap<String, String>) -> Effects {
    let Some(url) = params.get("url").filter(|u| !u.is_empty()) else {
        return answer(missing("url"));
    };
    let absolute = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    if absolute.is_none_or(|rest| rest.is_empty() || rest.starts_with('/') || rest.contains(' ')) {
        return answer(invalid("url", Some("url_invalid"), &format!("Invalid URL: {url}")));
    }
    let events = match enabled_events(params) {
        Ok(events) => events,
        Err(refused) => return answer(refused),
    };
    let api_version = params.get("api_version");
    if let Some(version) = api_version.filter(|v| !KNOWN_API_VERSIONS.contains(&v.as_str())) {
        let message = format!("Invalid api_version: {version:?} is not a Stripe API version");
        return answer(invalid("api_version", None, &message));
    }
    let id = Ledger::next_id(state, "we");
    let mut endpoint = endpoint_object(&id, url, api_version.map(String::as_str), &events);
    state.webhook_endpoints.push(endpoint.clone());
    endpoint["secret"] = json!(format!("whsec_sim{}", uuid::Uuid::new_v4().simple()));
    answer(Answer::ok(endpoint))
}

/// The Webhook Endpoint object as Stripe lists it (no `secret`: that is in the create answer only).
fn endpoint_object(id: &str, url: &str, api_version: Option<&str>, events: &[String]) -> Value {
    json!({
        "id": id,
        "object": "webhook_endpoint",
        "api_version": api_version,
        "application": null,
        "created": now_ms() / 1000,
        "description": null,
        "enabled_events": events,
        "livemode": false,
        "metadata": {},
        "status": "enabled",
        "url": url,
    })
}

impl Ledger {
    /// Registers an enabled endpoint delivering every event to `url` (`api_version` `None`: the account's
    /// default, as Stripe shows an endpoint created without one); returns its id.
    pub fn add_webhook_endpoint(&self, url: &str, api_version: Option<&str>) -> String {
        let mut state = self.state();
        let id = Self::next_id(&mut state, "we");
        let endpoint = endpoint_object(&id, url, api_version, &["*".to_owned()]);
        state.webhook_endpoints.push(endpoint);
        id
    }

    /// Disables (`false`) or enables the endpoint `id`, as the Dashboard does; false if there is none.
    pub fn set_webhook_endpoint_status(&self, id: &str, enabled: bool) -> bool {
        let mut state = self.state();
        let Some(endpoint) = state.webhook_endpoints.iter_mut().find(|e| e["id"] == id) else {
            return false;
        };
        endpoint["status"] = json!(if enabled { "enabled" } else { "disabled" });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ledger, Timings};
    use serde_json::Value;
    use std::collections::BTreeMap;

    fn get(l: &Ledger, path: &str, key: &str, pairs: &[(&str, &str)]) -> (u16, Value) {
        let params: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let answer = l
            .handle("GET", path, Some(&format!("Bearer {key}")), None, &params)
            .answer
            .unwrap();
        (answer.status, answer.body)
    }

    #[test]
    fn endpoints_are_listed_and_read_as_stripe_serves_them_and_a_disabled_one_says_so() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        let id = l.add_webhook_endpoint("http://127.0.0.1:3000/webhooks/stripe", Some("2025-03-31.basil"));
        let (status, page) = get(&l, "/v1/webhook_endpoints", "sk_test_k", &[]);
        assert_eq!(status, 200);
        assert_eq!(page["object"], "list");
        assert_eq!(page["data"][0]["id"], id.as_str());
        assert_eq!(page["data"][0]["status"], "enabled");
        assert_eq!(page["data"][0]["api_version"], "2025-03-31.basil");

        assert!(l.set_webhook_endpoint_status(&id, false));
        let (status, one) = get(&l, &format!("/v1/webhook_endpoints/{id}"), "sk_test_k", &[]);
        assert_eq!((status, one["status"].as_str()), (200, Some("disabled")));
        let (status, missing) = get(&l, "/v1/webhook_endpoints/we_nope", "sk_test_k", &[]);
        assert_eq!(
            (status, missing["error"]["code"].as_str()),
            (404, Some("resource_missing"))
        );
    }

    fn post(l: &Ledger, pairs: &[(&str, &str)]) -> (u16, Value) {
        let params: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let key = format!("k-{}", uuid::Uuid::new_v4());
        let answer = l
            .handle(
                "POST",
                "/v1/webhook_endpoints",
                Some("Bearer sk_test_k"),
                Some(&key),
                &params,
            )
            .answer
            .unwrap();
        (answer.status, answer.body)
    }

    const URL: (&str, &str) = ("url", "https://shop.example/webhooks/stripe");
    const PINNED: (&str, &str) = ("api_version", psp::stripe::STRIPE_API_VERSION);

    #[test]
    fn an_endpoint_is_created_with_its_version_and_events_and_its_secret_shown_once() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        let events = [
            ("enabled_events[0]", "payment_intent.succeeded"),
            ("enabled_events[1]", "refund.failed"),
        ];
        let (status, created) = post(&l, &[URL, PINNED, events[0], events[1]]);
        assert_eq!(status, 200, "{created}");
        assert_eq!(created["api_version"], psp::stripe::STRIPE_API_VERSION);
        assert_eq!(
            created["enabled_events"],
            serde_json::json!(["payment_intent.succeeded", "refund.failed"])
        );
        assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
        let id = created["id"].as_str().unwrap();
        let (_, listed) = get(&l, &format!("/v1/webhook_endpoints/{id}"), "sk_test_k", &[]);
        assert_eq!((listed["url"].as_str(), listed.get("secret")), (Some(URL.1), None));
    }

    #[test]
    fn a_create_stripe_would_refuse_is_refused_and_creates_nothing() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        let event = ("enabled_events[0]", "payment_intent.succeeded");
        // (the request's parameters, the `param` refused, its `code`)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, Option<&'a str>);
        let cases: &[Case] = &[
            (&[PINNED, event], "url", Some("parameter_missing")),
            (&[URL, PINNED], "enabled_events", Some("parameter_missing")),
            (&[("url", "webhooks/stripe"), event], "url", Some("url_invalid")),
            (
                &[URL, ("enabled_events[0]", "payment_intent.succeded")],
                "enabled_events[0]",
                None,
            ),
            (&[URL, event, ("api_version", "2026-13-45.nope")], "api_version", None),
        ];
        for (pairs, param, code) in cases {
            let (status, refused) = post(&l, pairs);
            assert_eq!(status, 400, "{pairs:?}: {refused}");
            assert_eq!(refused["error"]["type"], "invalid_request_error");
            assert_eq!(refused["error"]["param"], *param, "{pairs:?}");
            assert_eq!(refused["error"]["code"].as_str(), *code, "{pairs:?}");
        }
        let (_, page) = get(&l, "/v1/webhook_endpoints", "sk_test_k", &[]);
        assert_eq!(page["data"], serde_json::json!([]));
    }

    #[test]
    fn a_wrong_key_or_limit_is_refused_as_stripe_refuses_it() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        l.add_webhook_endpoint("http://127.0.0.1:3000/webhooks/stripe", None);
        let (status, _) = get(&l, "/v1/webhook_endpoints", "sk_test_wrong", &[]);
        assert_eq!(status, 401);
        for limit in ["0", "101", "ten"] {
            let (status, refused) = get(&l, "/v1/webhook_endpoints", "sk_test_k", &[("limit", limit)]);
            assert_eq!(status, 400, "limit={limit}");
            assert_eq!(refused["error"]["param"], "limit");
        }
    }
}
