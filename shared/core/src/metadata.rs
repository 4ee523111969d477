//! Free-form key/value metadata a checkout attaches to a payment, bounded so items stay small.

use crate::error::DomainError;
use crate::text;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const MAX_KEYS: usize = 10;
pub const MAX_KEY_LEN: usize = 40;
pub const MAX_VALUE_LEN: usize = 200;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "BTreeMap<String, String>", into = "BTreeMap<String, String>")]
pub struct Metadata(BTreeMap<String, String>);

impl Metadata {
    pub fn parse(map: BTreeMap<String, String>) -> Result<Self, DomainError> {
        if map.len() > MAX_KEYS {
            return Err(DomainError::TooLong {
                field: "metadata",
                max: MAX_KEYS,
            });
        }
        for (key, value) in &map {
            if key.is_empty() || key.len() > MAX_KEY_LEN {
                return Err(DomainError::TooLong {
                    field: "metadata key",
                    max: MAX_KEY_LEN,
                });
            }
            if !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                return Err(DomainError::BadCharacters { field: "metadata key" });
            }
            // An empty value is allowed (Stripe's way to unset a key); otherwise the text rules apply.
            if !value.is_empty() {
                text::check("metadata value", value, MAX_VALUE_LEN)?;
            }
        }
        Ok(Self(map))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

impl TryFrom<BTreeMap<String, String>> for Metadata {
    type Error = DomainError;
    fn try_from(map: BTreeMap<String, String>) -> Result<Self, Self::Error> {
        Self::parse(map)
    }
}

impl From<Metadata> for BTreeMap<String, String> {
    fn from(m: Metadata) -> Self {
        m.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced() {
        let ok = BTreeMap::from([("cart".to_string(), "c-1".to_string())]);
        assert!(Metadata::parse(ok).is_ok());
        let many: BTreeMap<_, _> = (0..11).map(|i| (format!("k{i}"), "v".to_string())).collect();
        assert!(Metadata::parse(many).is_err());
        assert!(Metadata::parse(BTreeMap::from([("bad key".into(), "v".into())])).is_err());
        assert!(Metadata::parse(BTreeMap::from([("k".into(), "v".repeat(201))])).is_err());
        assert!(Metadata::parse(BTreeMap::from([("k".into(), "v\u{FFFF}".into())])).is_err());
        assert!(Metadata::parse(BTreeMap::from([("k".into(), String::new())])).is_ok());
    }
}
