//! How an Adyen test payment plays out, chosen the way Adyen's test platform chooses it: a 3-D Secure 2 test
//! card number asks for a challenge, and `paymentMethod.holderName` set to a refusal name (`DECLINED`,
//! `NOT_ENOUGH_BALANCE`, ...) refuses the payment with that reason ("testing result codes and refusal
//! reasons" in Adyen's docs). Two names are the simulator's own, for what Adyen's test platform cannot be
//! asked to do: `CAPTURE_FAILED` (the capture is accepted, then fails at the scheme: `CAPTURE`, then
//! `CAPTURE_FAILED`), `REFUND_FAILED` (every refund: `REFUND`, then `REFUND_FAILED`) and `REFUND_FAILED_ONCE`
//! (the first refund so, the later ones succeed: a give-back after a failure).

use serde_json::Value;

/// Adyen's 3-D Secure 2 test cards (Visa, Mastercard): the payment answers `RedirectShopper` with an `action`.
pub const CHALLENGE_CARDS: [&str; 2] = ["4917610000000000", "5454545454545454"];

/// A refusal: Adyen's `refusalReason` and `refusalReasonCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub code: &'static str,
}

/// `holderName` → refusal, as Adyen's test platform maps them (the code is Adyen's refusal reason code).
const REFUSALS: [(&str, Refusal); 6] = [
    (
        "DECLINED",
        Refusal {
            reason: "Refused",
            code: "2",
        },
    ),
    (
        "BLOCK_CARD",
        Refusal {
            reason: "Blocked Card",
            code: "5",
        },
    ),
    (
        "CARD_EXPIRED",
        Refusal {
            reason: "Expired Card",
            code: "6",
        },
    ),
    (
        "NOT_ENOUGH_BALANCE",
        Refusal {
            reason: "Not enough balance",
            code: "12",
        },
    ),
    (
        "FRAUD",
        Refusal {
            reason: "FRAUD",
            code: "20",
        },
    ),
    (
        "CVC_DECLINED",
        Refusal {
            reason: "CVC Declined",
            code: "24",
        },
    ),
];

/// What one payment does: challenge first or not, then refused or authorised; and whether its captures or
/// refunds fail after they were accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scenario {
    pub challenge: bool,
    pub refusal: Option<Refusal>,
    pub capture_fails: bool,
    /// The capture fails at the scheme, then Adyen re-captures it (`CAPTURE_FAILED`, then a second `CAPTURE`
    /// under the same pspReference, reason `Transaction Recaptured`): `CAPTURE_RECAPTURED`.
    pub recaptured: bool,
    pub refund_fails: bool,
    /// The next refund fails (then this is cleared): `REFUND_FAILED_ONCE`.
    pub refund_fails_once: bool,
    /// A refund is made, then reversed: the money comes back to the merchant (`REFUNDED_REVERSED`).
    pub refund_reversed: bool,
    /// The late failures (`CAPTURE_FAILED`, `REFUND_FAILED`, `REFUNDED_REVERSED`) leave `originalReference`
    /// out, as Adyen's description allows (it is not required there): a holder name ending `_NO_ORIGINAL`.
    pub late_without_original: bool,
}

impl Scenario {
    /// The scenario of a `paymentMethod` object: a redirect method (any `type` but `scheme`) or a challenge
    /// card is challenged; the holder's name picks a refusal or a failing capture or refund.
    pub fn of(payment_method: &Value) -> Self {
        let text = |name: &str| payment_method.get(name).and_then(Value::as_str).unwrap_or_default();
        // Adyen's test platform takes unencrypted test values as `test_<value>`.
        let card = [text("encryptedCardNumber"), text("number")]
            .into_iter()
            .map(|n| n.strip_prefix("test_").unwrap_or(n).replace(' ', ""))
            .find(|n| !n.is_empty())
            .unwrap_or_default();
        let holder = text("holderName").trim().to_ascii_uppercase();
        let (holder, late_without_original) = match holder.strip_suffix("_NO_ORIGINAL") {
            Some(scenario) => (scenario.to_owned(), true),
            None => (holder, false),
        };
        Self {
            challenge: text("type") != "scheme" || CHALLENGE_CARDS.contains(&card.as_str()),
            refusal: REFUSALS.iter().find(|(name, _)| *name == holder).map(|(_, r)| *r),
            capture_fails: holder == "CAPTURE_FAILED",
            recaptured: holder == "CAPTURE_RECAPTURED",
            refund_fails: holder == "REFUND_FAILED",
            refund_fails_once: holder == "REFUND_FAILED_ONCE",
            refund_reversed: holder == "REFUNDED_REVERSED",
            late_without_original,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cards_and_holder_names_pick_the_scenario() {
        let plain = Scenario::of(&json!({"type": "scheme", "encryptedCardNumber": "test_4111111111111111"}));
        assert_eq!(plain, Scenario::default());
        let challenged =
            Scenario::of(&json!({"type": "scheme", "number": "4917 6100 0000 0000", "holderName": "card_expired"}));
        assert!(challenged.challenge);
        assert_eq!(challenged.refusal.map(|r| r.code), Some("6"));
        assert!(Scenario::of(&json!({"type": "ideal"})).challenge);
        assert!(Scenario::of(&json!({"type": "scheme", "holderName": "CAPTURE_FAILED"})).capture_fails);
        assert!(Scenario::of(&json!({"type": "scheme", "holderName": "REFUND_FAILED"})).refund_fails);
        assert!(Scenario::of(&json!({"type": "scheme", "holderName": "CAPTURE_RECAPTURED"})).recaptured);
        let reversed = Scenario::of(&json!({"type": "scheme", "holderName": "REFUNDED_REVERSED_NO_ORIGINAL"}));
        assert!(reversed.refund_reversed && reversed.late_without_original);
    }
}
