//! The account's refunds as Stripe's Refunds API lists them (`GET /v1/refunds`): how the saga's refund step
//! learns, before it creates a refund, which refunds of its PaymentIntent Stripe already made (an answer lost,
//! its webhooks lost, its idempotency key forgotten after 24 hours).
//!
//! The list is Stripe's: newest first, `payment_intent` (or `charge`) to keep one payment's refunds, `limit`
//! (1 to 100, default 10), `starting_after` (a refund id of the list: the page after it, older),
//! `{"object": "list", "data", "has_more", "url"}`. Refused as Stripe refuses it: a `limit` out of range, a
//! `payment_intent` or `starting_after` the account does not have (`resource_missing`, with its `param`).

use super::answers::answer;
use super::events::limit;
use super::{Answer, Effects, Intent};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// `resource_missing` for the object `id` a list parameter named.
fn missing(param: &str, object: &str, id: &str) -> Effects {
    answer(Answer::error(
        400,
        "invalid_request_error",
        Some("resource_missing"),
        &format!("No such {object}: '{id}'"),
        json!({ "param": param }),
    ))
}

/// `GET /v1/refunds` over the account's `refunds` (by id) and PaymentIntents (`intents`, to refuse an
/// unknown `payment_intent`).
pub(super) fn list(
    refunds: &HashMap<String, Value>,
    intents: &HashMap<String, Intent>,
    params: &BTreeMap<String, String>,
) -> Effects {
    let limit = match limit(params) {
        Ok(n) => n,
        Err(refused) => return refused,
    };
    let intent = params.get("payment_intent");
    if let Some(id) = intent.filter(|id| !intents.contains_key(id.as_str())) {
        return missing("payment_intent", "payment_intent", id);
    }
    let charge = params.get("charge");
    let mut matching: Vec<&Value> = refunds
        .values()
        .filter(|r| intent.is_none_or(|id| r["payment_intent"] == id.as_str()))
        .filter(|r| charge.is_none_or(|id| r["charge"] == id.as_str()))
        .collect();
    // Newest first, as every Stripe list: `created` in seconds, ties broken by the id, whose sequence number
    // grows with each object made.
    matching.sort_by_key(|r| {
        std::cmp::Reverse((
            r["created"].as_i64().unwrap_or(0),
            r["id"].as_str().unwrap_or("").to_owned(),
        ))
    });
    let start = match params.get("starting_after") {
        None => 0,
        Some(id) => match matching.iter().position(|r| r["id"] == id.as_str()) {
            Some(at) => at + 1,
            None => return missing("starting_after", "refund", id),
        },
    };
    let rest = matching.get(start..).unwrap_or_default();
    answer(Answer::ok(json!({
        "object": "list",
        "url": "/v1/refunds",
        "has_more": rest.len() > limit,
        "data": rest.iter().take(limit).collect::<Vec<_>>(),
    })))
}

#[cfg(test)]
mod tests {
    use super::super::{Ledger, Timings};
    use serde_json::Value;
    use std::collections::BTreeMap;

    fn call(l: &Ledger, method: &str, path: &str, key: Option<&str>, pairs: &[(&str, &str)]) -> (u16, Value) {
        let params: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let answer = l
            .handle(method, path, Some("Bearer sk_test_k"), key, &params)
            .answer
            .expect("an answer");
        (answer.status, answer.body)
    }

    /// A succeeded PaymentIntent of 1000, made under `key`.
    fn charged(l: &Ledger, key: &str) -> String {
        let made = super::super::tests::create(l, key, "pm_succeeded")
            .answer
            .expect("an answer");
        made.body["id"].as_str().expect("a PaymentIntent").to_owned()
    }

    fn ids(page: &Value) -> Vec<String> {
        page["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|r| r["id"].as_str().expect("id").to_owned())
            .collect()
    }

    #[test]
    fn a_payment_intents_refunds_are_listed_newest_first_in_pages() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        let pi = charged(&l, "pay_1");
        let other = charged(&l, "pay_2");
        let made: Vec<String> = (1..=3)
            .map(|n| {
                let key = format!("r{n}");
                let (status, r) = call(
                    &l,
                    "POST",
                    "/v1/refunds",
                    Some(&key),
                    &[("payment_intent", &pi), ("amount", "100")],
                );
                assert_eq!(status, 200, "{r}");
                r["id"].as_str().expect("id").to_owned()
            })
            .collect();
        call(&l, "POST", "/v1/refunds", Some("o1"), &[("payment_intent", &other)]);
        let (status, all) = call(&l, "GET", "/v1/refunds", None, &[("payment_intent", &pi)]);
        assert_eq!(
            (status, all["object"].as_str(), all["url"].as_str()),
            (200, Some("list"), Some("/v1/refunds"))
        );
        let newest_first: Vec<String> = made.iter().rev().cloned().collect();
        assert_eq!(ids(&all), newest_first, "only this PaymentIntent's, newest first");
        assert_eq!(all["has_more"], false);
        let (_, first) = call(
            &l,
            "GET",
            "/v1/refunds",
            None,
            &[("payment_intent", &pi), ("limit", "2")],
        );
        assert_eq!(
            (ids(&first), first["has_more"].as_bool()),
            (newest_first[..2].to_vec(), Some(true))
        );
        let last = newest_first[1].as_str();
        let (_, second) = call(
            &l,
            "GET",
            "/v1/refunds",
            None,
            &[("payment_intent", &pi), ("limit", "2"), ("starting_after", last)],
        );
        assert_eq!(
            (ids(&second), second["has_more"].as_bool()),
            (newest_first[2..].to_vec(), Some(false))
        );
        let (_, every) = call(&l, "GET", "/v1/refunds", None, &[]);
        assert_eq!(ids(&every).len(), 4, "no filter: the account's refunds");
    }

    #[test]
    fn a_bad_limit_an_unknown_payment_intent_or_cursor_is_refused_as_stripe_refuses_it() {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        let pi = charged(&l, "pay_1");
        for limit in ["0", "101", "ten"] {
            let (status, refused) = call(
                &l,
                "GET",
                "/v1/refunds",
                None,
                &[("payment_intent", &pi), ("limit", limit)],
            );
            assert_eq!(
                (status, refused["error"]["param"].as_str()),
                (400, Some("limit")),
                "limit={limit}"
            );
        }
        let (status, refused) = call(&l, "GET", "/v1/refunds", None, &[("payment_intent", "pi_nope")]);
        assert_eq!(
            (
                status,
                refused["error"]["code"].as_str(),
                refused["error"]["param"].as_str()
            ),
            (400, Some("resource_missing"), Some("payment_intent"))
        );
        let (status, refused) = call(
            &l,
            "GET",
            "/v1/refunds",
            None,
            &[("payment_intent", &pi), ("starting_after", "re_nope")],
        );
        assert_eq!(
            (
                status,
                refused["error"]["code"].as_str(),
                refused["error"]["param"].as_str()
            ),
            (400, Some("resource_missing"), Some("starting_after"))
        );
    }
}
