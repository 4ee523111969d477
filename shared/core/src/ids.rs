//! Identifier newtypes. Each is parsed once at the edge; inside, a value of the type is valid by construction.

use crate::error::DomainError;
use crate::text;
use serde::{Deserialize, Serialize};
use std::fmt;

fn validate(field: &'static str, value: &str, max: usize) -> Result<(), DomainError> {
    text::check(field, value, max)?;
    let ok = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if !ok {
        return Err(DomainError::BadCharacters { field });
    }
    Ok(())
}

/// An id that goes into a URL path as one segment (`/v1/payment_intents/{id}`) must be one: besides the id
/// characters (no `/`, `%`, `?`, `#`, control characters), it starts with a letter or a digit, so it is never
/// a dot segment (`.`, `..`) that a URL resolver folds into its parent, nor an option-like `-x` or `:x`.
fn path_safe(field: &'static str, value: &str) -> Result<(), DomainError> {
    match value.chars().next() {
        Some(c) if c.is_ascii_alphanumeric() => Ok(()),
        _ => Err(DomainError::NotPathSafe { field }),
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:literal $(, $also:path)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates `value`: 1 to
            #[doc = stringify!($max)]
            /// characters from `[A-Za-z0-9_.:-]`.
            pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
                let value = value.into();
                validate($field, &value, $max)?;
                $($also($field, &value)?;)?
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = DomainError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// Our id of a payment (`pay_...`), the partition of everything the payment owns.
    PaymentId, "payment_id", 64
);
id_type!(
    /// The checkout's order id the payment belongs to.
    OrderId, "order_id", 128
);
id_type!(
    /// The PSP's id of one webhook event (`evt_...`, a Standard Webhooks `webhook-id`): the dedup key.
    PspEventId, "psp_event_id", 128
);
id_type!(
    /// The PSP's id of the payment (`pi_...`), used to find a payment from a webhook. It goes into the
    /// PSP's URL paths, so it is also path-safe: it starts with a letter or a digit (no `..`).
    PspReference, "psp_reference", 128, path_safe
);
id_type!(
    /// The `Idempotency-Key` a caller sends with a create: the same key and body answer the same payment.
    IdempotencyKey, "idempotency_key", 128
);
id_type!(
    /// Travels with every log line, event and message of one flow.
    CorrelationId, "correlation_id", 128
);

id_type!(
    /// A stock-keeping unit: the inventory item a checkout reserves.
    Sku, "sku", 64
);

id_type!(
    /// The PSP's id of a dispute (a Stripe `du_...` / `dp_...`): one payment's chargeback or inquiry.
    DisputeId, "dispute_id", 128
);

impl CorrelationId {
    /// The correlation id of a flow derived from another id (`checkout-<order>`): `<prefix>-<id>` when that
    /// fits, else the id's first characters and a hash of all of it, so every id yields a valid, distinct
    /// correlation id and none can fail. `prefix` is a constant of ours (`[a-z-]`, a few characters).
    pub fn derived(prefix: &'static str, id: &str) -> Self {
        let full = format!("{prefix}-{id}");
        if validate("correlation_id", &full, CORRELATION_MAX).is_ok() {
            return Self(full);
        }
        // FNV-1a (64 bit): stable across builds and platforms, which std's hasher does not promise.
        let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let keep: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
            .take(64)
            .collect();
        Self(format!("{prefix}-{keep}-{hash:016x}"))
    }
}

/// `CorrelationId`'s longest value.
const CORRELATION_MAX: usize = 128;

impl PaymentId {
    /// A fresh random id, `pay_` followed by 32 hex digits.
    pub fn generate(random: u128) -> Self {
        Self(format!("pay_{random:032x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_usual_ids() {
        assert!(PaymentId::parse("pay_123").is_ok());
        assert!(PspEventId::parse("evt_1NG8Du2eZvKYlo2CUI79vXWy").is_ok());
        assert!(PspEventId::parse("msg_p5jXN8AQM9LWM0D4loKWxJek").is_ok());
    }

    #[test]
    fn refuses_empty_long_and_odd_ids() {
        assert_eq!(PaymentId::parse(""), Err(DomainError::Empty { field: "payment_id" }));
        assert_eq!(
            PaymentId::parse("x".repeat(65)),
            Err(DomainError::TooLong {
                field: "payment_id",
                max: 64
            })
        );
        assert_eq!(
            PaymentId::parse("pay#1"),
            Err(DomainError::BadCharacters { field: "payment_id" })
        );
        assert!(OrderId::parse("a b").is_err());
    }

    #[test]
    fn psp_references_are_path_safe() {
        // A reference goes into a URL path (`/v1/payment_intents/{id}`): a dot segment would climb out of it.
        for bad in [
            ".", "..", "...", ".hidden", "-x", ":x", "a/b", "../x", "a%2F", "a?b", "a#b", "a\u{0}", "a\nb", "a b",
        ] {
            assert!(PspReference::parse(bad).is_err(), "{bad:?}");
        }
        for good in [
            "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            "psp_ref_1",
            "8535296650153317",
            "re_1.x:y-z",
        ] {
            assert!(PspReference::parse(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn derived_correlation_ids_always_fit() {
        assert_eq!(CorrelationId::derived("checkout", "o-1").as_str(), "checkout-o-1");
        let long = OrderId::parse("o".repeat(128)).unwrap();
        let a = CorrelationId::derived("checkout", long.as_str());
        assert!(CorrelationId::parse(a.as_str()).is_ok(), "{a}");
        let other = OrderId::parse(format!("{}p", "o".repeat(127))).unwrap();
        assert_ne!(a, CorrelationId::derived("checkout", other.as_str()));
        for n in 100..=128 {
            let id = "x".repeat(n);
            assert!(CorrelationId::parse(CorrelationId::derived("checkout", &id).as_str()).is_ok());
        }
    }

    #[test]
    fn generated_ids_parse() {
        let id = PaymentId::generate(42);
        assert_eq!(PaymentId::parse(id.as_str()).unwrap(), id);
    }
}
