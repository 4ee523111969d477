//! The account's webhook endpoints as Stripe serves them: `GET /v1/webhook_endpoints` (a list object,
//! `limit` 1 to 100, oldest first here; Stripe documents no order) and `GET /v1/webhook_endpoints/{id}`
//! (`resource_missing` for an unknown id), behind the same Bearer key as every call. `paymentsctl doctor`
//! reads them to say whether Stripe still delivers (a `disabled` endpoint sends nothing).
//!
//! The endpoints are not created through the API here (the simulator knows its one delivery URL):
//! [`Ledger::add_webhook_endpoint`] registers it, [`Ledger::set_webhook_endpoint_status`] disables or enables it
//! as the Dashboard does.

use super::answers::{answer, no_such};
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

impl Ledger {
    /// Registers an enabled endpoint delivering every event to `url` (`api_version` `None`: the account's
    /// default, as Stripe shows an endpoint created without one); returns its id.
    pub fn add_webhook_endpoint(&self, url: &str, api_version: Option<&str>) -> String {
        let mut state = self.state();
        let id = Self::next_id(&mut state, "we");
        state.webhook_endpoints.push(json!({
            "id": id,
            "object": "webhook_endpoint",
            "api_version": api_version,
            "application": null,
            "created": now_ms() / 1000,
            "description": null,
            "enabled_events": ["*"],
            "livemode": false,
            "metadata": {},
            "status": "enabled",
            "url": url,
        }));
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
