//! What of a webhook body may be parked for an operator: an **allow-list** of fields (ids, types, amounts,
//! currency, status, timestamps, and the few the parsers need to replay the event), everything else dropped.
//! A deny-list cannot know every field a PSP adds (Stripe's `next_action.use_stripe_sdk.stripe_js` URL carries
//! the client secret; billing details are personal data), so nothing is kept that is not named here.

use serde_json::{Map, Value};

/// Fields kept with their value when it is a scalar (a string, number, boolean or null). The camelCase
/// ones are an Adyen item's signed fields (`crate::adyen::parked::ParkedItem`).
const SCALARS: [&str; 34] = [
    "id",
    "object",
    "type",
    "created",
    "timestamp",
    "livemode",
    "account",
    "api_version",
    "amount",
    "amount_minor",
    "amount_received",
    "amount_captured",
    "amount_refunded",
    "refunded_total_minor",
    "currency",
    "status",
    "captured",
    "paid",
    "refunded",
    "payment_intent",
    "payment_id",
    "psp_reference",
    "order_id",
    "cancellation_reason",
    "decline_code",
    "code",
    "reason",
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
    "eventCode",
    "success",
    "value",
];

/// Objects kept, themselves filtered by the same lists.
/// (`amount` is one in an Adyen item, a scalar in Stripe's objects.)
const CONTAINERS: [&str; 5] = ["data", "object", "metadata", "last_payment_error", "amount"];

const MAX_STORED: usize = 16 * 1024;

/// The key under which a redacted body says how many fields were withheld (an operator's replay tells a body
/// that lost what its parser needs from one that is wrong).
pub const WITHHELD: &str = "_withheld";

fn keep(map: Map<String, Value>, withheld: &mut u64) -> Map<String, Value> {
    map.into_iter()
        .filter_map(|(key, value)| match value {
            Value::Object(inner) if CONTAINERS.contains(&key.as_str()) => {
                Some((key, Value::Object(keep(inner, withheld))))
            }
            scalar if SCALARS.contains(&key.as_str()) && !scalar.is_object() && !scalar.is_array() => {
                Some((key, scalar))
            }
            _ => {
                *withheld = withheld.saturating_add(1);
                None
            }
        })
        .collect()
}

/// The body as it may be stored: a JSON object reduced to the allowed fields (with the number of fields
/// withheld under [`WITHHELD`]); anything else only described.
pub fn redact(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => {
            let mut withheld = 0;
            let mut kept = keep(map, &mut withheld);
            if withheld > 0 {
                kept.insert(WITHHELD.to_owned(), Value::from(withheld));
            }
            Value::Object(kept).to_string()
        }
        Ok(_) => "[JSON that is not an object: withheld]".to_owned(),
        Err(_) => format!("[{} bytes, not JSON: withheld, it may hold secrets]", body.len()),
    };
    if text.len() > MAX_STORED {
        let cut = (0..=MAX_STORED).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        format!("{}...[truncated]", text.get(..cut).unwrap_or_default())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_fields_are_kept() {
        let body = br#"{"id":"evt_1","type":"payment_intent.requires_action","created":1,"livemode":false,
            "data":{"object":{"id":"pi_1","object":"payment_intent","client_secret":"pi_1_secret_x","amount":5,
            "currency":"eur","status":"requires_action","metadata":{"payment_id":"pay_1","email":"a@b.example"},
            "next_action":{"use_stripe_sdk":{"stripe_js":"https://js.stripe.com/?client_secret=pi_1_secret_x"}},
            "billing_details":{"name":"Erika Mustermann","address":{"line1":"Hauptstr. 1"}},
            "last_payment_error":{"code":"card_declined","decline_code":"insufficient_funds",
              "payment_method":{"billing_details":{"email":"a@b.example"}}},
            "items":[{"retry_token":"r1"}]}}}"#;
        let out = redact(body);
        for leak in [
            "secret_x",
            "stripe_js",
            "Mustermann",
            "Hauptstr",
            "a@b.example",
            "r1",
            "next_action",
        ] {
            assert!(!out.contains(leak), "{leak} in {out}");
        }
        for kept in [
            "evt_1",
            "pi_1",
            "\"amount\":5",
            "eur",
            "pay_1",
            "insufficient_funds",
            "requires_action",
        ] {
            assert!(out.contains(kept), "{kept} missing in {out}");
        }
        assert!(!redact(b"client_secret=pi_1_secret_x").contains("secret_x"));
        assert!(!redact(br#"["pi_1_secret_x"]"#).contains("secret_x"));
    }

    #[test]
    fn a_parked_event_still_parses_for_a_replay() {
        let body = br#"{"id":"evt_2","object":"event","type":"payment_intent.succeeded","created":1700000000,
            "livemode":false,"data":{"object":{"id":"pi_2","object":"payment_intent","amount":2500,"currency":"eur",
            "status":"succeeded","client_secret":"pi_2_secret_y","metadata":{"payment_id":"pay_2"}}}}"#;
        let parked = redact(body);
        assert!(!parked.contains("secret_y"));
        let parsed = crate::stripe::parse(parked.as_bytes()).expect("parses");
        let crate::psp_event::Parsed::Event(event) = parsed else {
            panic!("a payment event")
        };
        assert_eq!(event.outcome, shared::Outcome::Succeeded);
    }
}
