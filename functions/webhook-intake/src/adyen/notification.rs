//! An Adyen notification as it comes in: the envelope around the items, bounded before anything is kept.
//! Each item's signature, and the eight fields it covers, are the signatures library's
//! ([`webhook_signatures::adyen`]): everything else in an item is unsigned, and [`super::fact`] takes no
//! decision on it.
//!
//! Sizes are bounded before anything is kept: the body by the intake's limit, at most [`MAX_ITEMS`] items,
//! every signed field at most [`MAX_FIELD_CHARS`] characters.

use serde::Deserialize;
use webhook_signatures::adyen::Item;

/// Items one notification may carry (Adyen sends one, older integrations up to a handful).
pub const MAX_ITEMS: usize = 100;
/// Characters a signed field may have (Adyen's references are 16 to 80).
pub const MAX_FIELD_CHARS: usize = 256;

/// The body: `{"live": "false", "notificationItems": [{"NotificationRequestItem": {...}}]}`. `live` is not
/// signed and is not read: the key that verified an item says test or live.
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(rename = "notificationItems")]
    items: Vec<Wrapper>,
}

#[derive(Debug, Deserialize)]
struct Wrapper {
    #[serde(rename = "NotificationRequestItem")]
    item: Item,
}

/// Why a body is not an Adyen notification we can check (a 400: nothing written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("not an Adyen notification: {0}")]
    Json(String),
    #[error("a notification carries 1 to {MAX_ITEMS} items, this one {0}")]
    Items(usize),
    #[error("item {item}: field {field} is longer than {MAX_FIELD_CHARS} characters")]
    TooLong { item: usize, field: &'static str },
}

/// The items of a notification body, each with every signed field within [`MAX_FIELD_CHARS`].
pub fn items(body: &[u8]) -> Result<Vec<Item>, Malformed> {
    // serde's message names the position and the expected type, never a value.
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| Malformed::Json(shared::http::json_error(&e)))?;
    if envelope.items.is_empty() || envelope.items.len() > MAX_ITEMS {
        return Err(Malformed::Items(envelope.items.len()));
    }
    let items: Vec<Item> = envelope.items.into_iter().map(|w| w.item).collect();
    for (i, item) in items.iter().enumerate() {
        if let Some((field, _)) = item
            .signed_fields()
            .into_iter()
            .find(|(_, v)| v.chars().count() > MAX_FIELD_CHARS)
        {
            return Err(Malformed::TooLong { item: i, field });
        }
    }
    Ok(items)
}

#[cfg(test)]
pub(crate) mod tests;
