//! What Stripe refuses before it does any work, refused here the same way (always on: a test or demo that
//! passes here passes a real account's checks), each with Stripe's error object and status:
//!
//! | rule | answer |
//! |---|---|
//! | `Idempotency-Key` empty or over 255 characters | 400 `invalid_request_error` |
//! | a parameter the operation does not declare in Stripe's OpenAPI description ([`crate::spec`]) | 400 `parameter_unknown`, `param` the key |
//! | a declared parameter with the wrong type, or a required one missing | 400 `parameter_invalid_*` / `parameter_missing` |
//! | metadata: over 50 keys, a key over 40 or a value over 500 characters | 400 `invalid_request_error`, `param` `metadata` |
//! | a confirm (create with `confirm=true`) with a `payment_method` but no `return_url`, no `automatic_payment_methods[allow_redirects]=never` (or `[enabled]=false`) and no `payment_method_types[]` | 400 `invalid_request_error`, `param` `return_url` (API version 2023-08-16 and later) |
//!
//! Stripe saves no idempotent answer for a request refused by validation, so these run before the key is
//! looked up or remembered.

use super::Answer;
use crate::spec::{self, Violation};
use serde_json::json;
use std::collections::BTreeMap;

/// Stripe's limit on an `Idempotency-Key`.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;
/// Stripe's metadata limits: keys per object, characters per key, characters per value.
pub const MAX_METADATA_KEYS: usize = 50;
pub const MAX_METADATA_KEY_CHARS: usize = 40;
pub const MAX_METADATA_VALUE_CHARS: usize = 500;

/// Stripe's answer when a confirm could redirect the customer and no `return_url` says where they come back.
pub const RETURN_URL_REQUIRED: &str = "This PaymentIntent is configured to accept payment methods enabled in your \
Dashboard, because it has `automatic_payment_methods` enabled. Some of these payment methods might redirect your \
customer off of your page, so you must provide a `return_url`. If you don't want to accept redirect-based payment \
methods, set `automatic_payment_methods[enabled]` to `true` and `automatic_payment_methods[allow_redirects]` to \
`never` when creating Setup Intents and Payment Intents.";

fn invalid(code: Option<&str>, param: &str, message: &str) -> Answer {
    Answer::error(400, "invalid_request_error", code, message, json!({ "param": param }))
}

/// The refusal of a request Stripe would refuse before any work, or `None`.
pub(super) fn refusal(
    method: &str,
    path: &str,
    idempotency_key: Option<&str>,
    params: &BTreeMap<String, String>,
) -> Option<Answer> {
    idempotency(method, idempotency_key)
        .or_else(|| described(method, path, params))
        .or_else(|| metadata(params))
        .or_else(|| return_url(method, path, params))
}

fn idempotency(method: &str, key: Option<&str>) -> Option<Answer> {
    let length = key?.chars().count();
    if method != "POST" || (1..=MAX_IDEMPOTENCY_KEY_CHARS).contains(&length) {
        return None;
    }
    Some(Answer::error(
        400,
        "invalid_request_error",
        None,
        &format!(
            "Idempotent key length is {length}, which is outside accepted lengths. Idempotent Keys must be \
             1-{MAX_IDEMPOTENCY_KEY_CHARS} characters long. If you're looking for a decent generator, try using a \
             UUID defined by IETF RFC 4122."
        ),
        json!({}),
    ))
}

/// Checked against Stripe's OpenAPI description; a path it does not hold is left to the router (404).
fn described(method: &str, path: &str, params: &BTreeMap<String, String>) -> Option<Answer> {
    let violation = spec::operation(method, path)?.check(params).into_iter().next()?;
    Some(match violation {
        Violation::Unknown { param } => invalid(
            Some("parameter_unknown"),
            &param,
            &format!("Received unknown parameter: {param}"),
        ),
        Violation::Missing { param } => invalid(
            Some("parameter_missing"),
            &param,
            &format!("Missing required param: {param}."),
        ),
        Violation::Invalid { param, expected } => {
            let code = match expected.as_str() {
                "an integer" => "parameter_invalid_integer",
                _ => "parameter_invalid",
            };
            invalid(Some(code), &param, &format!("Invalid {param}: must be {expected}"))
        }
    })
}

fn metadata(params: &BTreeMap<String, String>) -> Option<Answer> {
    let entries: Vec<(&str, &String)> = params
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("metadata[")?.strip_suffix(']')?, v)))
        .collect();
    if entries.len() > MAX_METADATA_KEYS {
        return Some(invalid(
            None,
            "metadata",
            &format!(
                "Metadata can have up to {MAX_METADATA_KEYS} keys, but you've set {}.",
                entries.len()
            ),
        ));
    }
    entries.into_iter().find_map(|(key, value)| {
        let (k, v) = (key.chars().count(), value.chars().count());
        if k > MAX_METADATA_KEY_CHARS {
            return Some(invalid(
                None,
                "metadata",
                &format!(
                    "Metadata keys can have up to {MAX_METADATA_KEY_CHARS} characters, but you passed in a key \
                     that is {k} characters."
                ),
            ));
        }
        (v > MAX_METADATA_VALUE_CHARS).then(|| {
            invalid(
                None,
                "metadata",
                &format!(
                    "Metadata values can have up to {MAX_METADATA_VALUE_CHARS} characters, but you passed in a \
                     value that is {v} characters."
                ),
            )
        })
    })
}

/// Since API version 2023-08-16 a PaymentIntent without `payment_method_types` has automatic payment
/// methods enabled, redirects allowed: confirming one with a payment method needs a `return_url`.
fn return_url(method: &str, path: &str, params: &BTreeMap<String, String>) -> Option<Answer> {
    let get = |k: &str| params.get(k).map(String::as_str);
    let confirming = method == "POST"
        && (path.ends_with("/confirm") || (path == "/v1/payment_intents" && get("confirm") == Some("true")));
    let redirects_possible = get("automatic_payment_methods[allow_redirects]") != Some("never")
        && get("automatic_payment_methods[enabled]") != Some("false")
        && !params.keys().any(|k| k.starts_with("payment_method_types["));
    let needs = confirming && params.contains_key("payment_method") && redirects_possible;
    (needs && get("return_url").is_none_or(str::is_empty)).then(|| invalid(None, "return_url", RETURN_URL_REQUIRED))
}

/// A request as the simulator received it (form keys and values of the body or query), for tests that check
/// what our client really sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    pub params: BTreeMap<String, String>,
    /// When it arrived (epoch ms): how fast a client calls (a scan's request rate).
    pub at_ms: i64,
}

/// The log keeps the latest requests only: a long local run must not grow without bound.
const LOG_CAPACITY: usize = 10_000;

impl super::Ledger {
    pub(super) fn log(&self, method: &str, path: &str, params: &BTreeMap<String, String>) {
        let mut log = self.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if log.len() >= LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(LoggedRequest {
            method: method.to_owned(),
            path: path.to_owned(),
            params: params.clone(),
            at_ms: super::now_ms(),
        });
    }

    /// The requests received so far (the latest 10 000), oldest first.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        let log = self.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.iter().cloned().collect()
    }
}
