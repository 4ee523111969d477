//! Adyen's HMAC signature of a notification item.
//!
//! Adyen signs each `NotificationRequestItem`, not the body: HMAC-SHA256, keyed by the endpoint's hex key
//! decoded to bytes, over eight fields joined by `:` with no escaping (`pspReference`, `originalReference`,
//! `merchantAccountCode`, `merchantReference`, `amount.value`, `amount.currency`, `eventCode`, `success`; a
//! missing one is an empty string), base64 in `additionalData.hmacSignature`. So an [`Item`] keeps the fields
//! as the text Adyen signed (an amount sent as `"1130"` or `1130` signs as `1130`), and everything else
//! (`live`, `eventDate`, `reason`, the rest of `additionalData`) is unsigned: nothing may be decided on it. A
//! reference holding `:` or `\` is signed as it is (Adyen's libraries' vectors), which makes the signed
//! string ambiguous in theory (`a:b` + `c` vs `a` + `b:c`); Adyen accepts that, and so does the intake: the
//! fields that move money (amount, currency, event code, success) sit after the free-text references, and
//! the payment found by a reference is checked against the claims anyway.
//!
//! The envelope around the items (`notificationItems`, its bounds) is the intake's to read.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// One notification item: the signed fields exactly as sent, the unsigned `reason`, and the signature.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    /// Signed: Adyen's reference of what this item is about (the payment, or a modification of it).
    #[serde(default)]
    pub psp_reference: Option<String>,
    /// Signed: the payment a modification's item is about.
    #[serde(default)]
    pub original_reference: Option<String>,
    /// Signed: the merchant account.
    #[serde(default)]
    pub merchant_account_code: Option<String>,
    /// Signed: the merchant's reference of the payment.
    #[serde(default)]
    pub merchant_reference: Option<String>,
    /// Signed: value and currency.
    #[serde(default)]
    pub amount: Option<Amount>,
    /// Signed: what happened (`AUTHORISATION`, `CAPTURE`, `REFUND`, ...).
    #[serde(default)]
    pub event_code: Option<String>,
    /// Signed: `"true"` or `"false"`, as text.
    #[serde(default)]
    pub success: Option<String>,
    /// Unsigned: kept as the refusal's reason for people, never for a decision.
    #[serde(default)]
    pub reason: Option<String>,
    /// Unsigned, but for the signature it carries.
    #[serde(default, skip_serializing)]
    pub additional_data: Option<AdditionalData>,
}

/// `amount`: `value` is a number in Adyen's JSON (a string in some of its libraries' fixtures).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
pub struct Amount {
    /// In minor units.
    #[serde(default)]
    pub value: Option<AmountValue>,
    /// ISO 4217, as sent.
    #[serde(default)]
    pub currency: Option<String>,
}

/// An amount's value as sent; signed as its decimal text.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum AmountValue {
    /// A JSON number (Adyen's webhooks).
    Number(u64),
    /// A JSON string (some of Adyen's libraries' fixtures).
    Text(String),
}

/// Of `additionalData`, only the signature is read (the rest is unsigned, and may hold personal data).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct AdditionalData {
    /// The item's signature, base64.
    #[serde(default, rename = "hmacSignature")]
    pub hmac_signature: Option<String>,
}

impl AmountValue {
    /// The value as Adyen signed it.
    pub fn text(&self) -> String {
        match self {
            Self::Number(n) => n.to_string(),
            Self::Text(t) => t.clone(),
        }
    }
}

impl Item {
    /// The eight signed fields, named, in Adyen's order; a missing one is empty.
    pub fn signed_fields(&self) -> [(&'static str, String); 8] {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let amount = self.amount.clone().unwrap_or_default();
        [
            ("pspReference", text(&self.psp_reference)),
            ("originalReference", text(&self.original_reference)),
            ("merchantAccountCode", text(&self.merchant_account_code)),
            ("merchantReference", text(&self.merchant_reference)),
            (
                "amount.value",
                amount.value.as_ref().map(AmountValue::text).unwrap_or_default(),
            ),
            ("amount.currency", text(&amount.currency)),
            ("eventCode", text(&self.event_code)),
            ("success", text(&self.success)),
        ]
    }

    /// What Adyen signs: the signed fields joined by `:`, unescaped.
    pub fn signing_string(&self) -> String {
        self.signed_fields().map(|(_, v)| v).join(":")
    }

    /// The base64 signature this item carries (empty when it has none).
    pub fn signature(&self) -> &str {
        self.additional_data
            .as_ref()
            .and_then(|d| d.hmac_signature.as_deref())
            .unwrap_or_default()
    }
}

/// Test or live: which of the endpoint's keys verified an item (never the unsigned `live` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A key of a test account.
    Test,
    /// A key of a live account.
    Live,
}

impl Mode {
    /// Whether this is [`Mode::Live`].
    pub fn is_live(self) -> bool {
        self == Self::Live
    }
}

/// One HMAC key of the endpoint: its bytes (the hex Adyen shows, decoded) and its mode. `Debug` shows the
/// mode only.
#[derive(Clone, PartialEq, Eq)]
pub struct HmacKey {
    /// The mode of the account the key belongs to.
    pub mode: Mode,
    key: Vec<u8>,
}

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HmacKey")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl HmacKey {
    /// A key from its hex text (as Adyen's Customer Area shows it); `Err` says why, never the value.
    pub fn from_hex(mode: Mode, hex_key: &str) -> Result<Self, &'static str> {
        let key = hex::decode(hex_key.trim()).map_err(|_| "is not hexadecimal")?;
        if key.len() < crate::MIN_SECRET_BYTES {
            return Err("is shorter than 24 bytes (Adyen's keys are 32: 64 hex digits)");
        }
        Ok(Self { mode, key })
    }

    fn mac(&self, item: &Item) -> Hmac<Sha256> {
        crate::mac(&self.key, &[item.signing_string().as_bytes()])
    }

    /// The base64 signature of `item` under this key (the simulator and the tests sign with it).
    #[cfg(any(test, feature = "signing"))]
    pub fn sign(&self, item: &Item) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(self.mac(item).finalize().into_bytes())
    }
}

/// Why an item's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsigned {
    /// The item (at this index of its body) carries no signature.
    #[error("item {0}: no additionalData.hmacSignature")]
    Missing(usize),
    /// The signature cannot be an HMAC-SHA256.
    #[error("item {0}: hmacSignature is not base64 of 32 bytes")]
    Malformed(usize),
    /// No key of the endpoint signed the item as it is.
    #[error("item {0}: the signature matches no key of this endpoint")]
    NoMatch(usize),
}

/// The mode of the first key whose HMAC of `item` (item `index` of its body) is its signature, compared in
/// constant time (`Mac::verify_slice`).
pub fn verify(index: usize, item: &Item, keys: &[HmacKey]) -> Result<Mode, Unsigned> {
    use base64::Engine;
    let signature = item.signature();
    if signature.is_empty() {
        return Err(Unsigned::Missing(index));
    }
    let tag = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .ok()
        .filter(|t| t.len() == 32)
        .ok_or(Unsigned::Malformed(index))?;
    keys.iter()
        .find(|k| k.mac(item).verify_slice(&tag).is_ok())
        .map(|k| k.mode)
        .ok_or(Unsigned::NoMatch(index))
}

#[cfg(test)]
mod tests;
