//! Redaction of webhook bodies before they are parked for an operator: every value under a key that can
//! carry a secret (client secrets, tokens, URLs with one-time tokens) is replaced.

use serde_json::Value;

const SECRET_KEYS: [&str; 6] = ["secret", "token", "url", "password", "authorization", "redirect"];
const MAX_STORED: usize = 16 * 1024;

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|k| key.contains(k))
}

fn scrub(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if is_secret_key(key) {
                    *v = Value::String("[redacted]".into());
                } else {
                    scrub(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// The body as it may be stored: JSON with secret-bearing values replaced; anything else only described.
pub fn redact(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(mut json) => {
            scrub(&mut json);
            json.to_string()
        }
        Err(_) => format!("[{} bytes, not JSON: withheld, it may hold secrets]", body.len()),
    };
    if text.len() > MAX_STORED {
        let cut = (0..=MAX_STORED).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        format!("{}...[truncated]", &text[..cut])
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_everywhere() {
        let body = br#"{"id":"evt_1","data":{"object":{"client_secret":"pi_1_secret_x","amount":5,
            "next_action":{"redirect_to_url":{"url":"https://bank/3ds?t=1","return_url":"https://shop"}},
            "items":[{"retry_token":"r1"}]}}}"#;
        let out = redact(body);
        for leak in ["pi_1_secret_x", "bank/3ds", "shop", "r1"] {
            assert!(!out.contains(leak), "{leak} in {out}");
        }
        assert!(out.contains("evt_1") && out.contains("\"amount\":5"));
        assert!(!redact(b"client_secret=pi_1_secret_x").contains("secret_x"));
    }
}
