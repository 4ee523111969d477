//! The account's secret keys, rolled as in Stripe's Dashboard: a roll makes a new key and expires the old
//! ones, at once or after a grace period, so a test can show what the system does with a rolled key (Stripe:
//! 401, `api_key_expired`) and with an unknown one (401, `Invalid API Key provided`).

use super::Answer;
use serde_json::json;

/// The keys: the current one, and earlier ones with when they stop working (epoch ms).
#[derive(Debug)]
pub(super) struct Keys {
    current: String,
    rolled: Vec<(String, i64)>,
}

/// Stripe's redaction of a key in its messages: the prefix, stars, the last four characters.
fn redacted(key: &str) -> String {
    let prefix: String = key.chars().take(8).collect();
    let tail: Vec<char> = key.chars().rev().take(4).collect();
    let tail: String = tail.into_iter().rev().collect();
    format!("{prefix}****{tail}")
}

fn unauthorized(code: Option<&str>, message: String) -> Answer {
    Answer::error(401, "invalid_request_error", code, &message, json!({}))
}

impl Keys {
    pub(super) fn new(current: String) -> Self {
        Self {
            current,
            rolled: Vec::new(),
        }
    }

    /// `None` when `authorization` carries a key valid at `now`; Stripe's 401 otherwise.
    pub(super) fn refusal(&self, authorization: Option<&str>, now: i64) -> Option<Answer> {
        let Some(key) = authorization.and_then(|h| h.strip_prefix("Bearer ")) else {
            return Some(unauthorized(
                None,
                "You did not provide an API key. You need to provide your API key in the Authorization header, \
                 using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."
                    .into(),
            ));
        };
        if key == self.current {
            return None;
        }
        match self.rolled.iter().find(|(k, _)| k == key) {
            Some((_, until)) if now < *until => None,
            Some(_) => Some(unauthorized(
                Some("api_key_expired"),
                format!("Expired API Key provided: {}", redacted(key)),
            )),
            None => Some(unauthorized(
                None,
                format!("Invalid API Key provided: {}", redacted(key)),
            )),
        }
    }

    /// Makes `new` the key; the current key and any still in grace stop working at `expires_at` (epoch ms).
    pub(super) fn roll(&mut self, new: String, expires_at: i64) {
        let old = std::mem::replace(&mut self.current, new);
        for (_, until) in &mut self.rolled {
            *until = (*until).min(expires_at);
        }
        self.rolled.push((old, expires_at));
    }
}

impl super::Ledger {
    pub(super) fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Rolls the account's secret key to `new`: requests with the old key keep working for `grace`, then
    /// get Stripe's 401 `api_key_expired` (as when rolling in the Dashboard with an expiry).
    pub fn roll_key(&self, new: impl Into<String>, grace: std::time::Duration) {
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        self.keys().roll(new.into(), super::now_ms().saturating_add(grace_ms));
    }

    /// `POST /_sim/keys/roll` (`key`, optional `grace_seconds`): the simulator's own admin route, served to
    /// 127.0.0.1 without a key, so a local run can roll the key the way an operator does at Stripe.
    pub(super) fn admin(
        &self,
        method: &str,
        path: &str,
        params: &std::collections::BTreeMap<String, String>,
    ) -> Option<super::Effects> {
        if !path.starts_with("/_sim/") {
            return None;
        }
        let key = params.get("key").filter(|k| !k.trim().is_empty());
        let grace = params.get("grace_seconds").map(|g| g.parse::<u64>());
        let answer = match (method, path, key, grace) {
            ("POST", "/_sim/keys/roll", Some(key), None | Some(Ok(_))) => {
                let seconds = params.get("grace_seconds").and_then(|g| g.parse().ok()).unwrap_or(0);
                self.roll_key(key.trim(), std::time::Duration::from_secs(seconds));
                Answer::ok(json!({ "rolled": true, "old_keys_expire_in_seconds": seconds }))
            }
            ("POST", "/_sim/keys/roll", _, _) => Answer::error(
                400,
                "invalid_request_error",
                Some("parameter_missing"),
                "Roll with key=<the new secret key> and optionally grace_seconds=<n>.",
                json!({ "param": "key" }),
            ),
            _ => super::answers::not_found(path),
        };
        Some(super::answers::answer(answer))
    }
}
