//! Amounts in minor units with their ISO 4217 currency.

use crate::error::DomainError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Upper bound for an amount: 11 digits of minor units, what card networks carry.
pub const MAX_MINOR: u64 = 99_999_999_999;

/// A three-letter ISO 4217 currency code in upper case (`EUR`, `USD`, `JPY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Currency([u8; 3]);

impl Currency {
    /// Accepts `eur` or `EUR` (Stripe sends lower case) and stores upper case.
    pub fn parse(value: &str) -> Result<Self, DomainError> {
        match value.as_bytes() {
            &[a, b, c] if [a, b, c].iter().all(u8::is_ascii_alphabetic) => Ok(Self([
                a.to_ascii_uppercase(),
                b.to_ascii_uppercase(),
                c.to_ascii_uppercase(),
            ])),
            // The value is quoted only when it is short: an error never carries a large input.
            _ => Err(DomainError::BadCurrency(value.chars().take(8).collect())),
        }
    }

    pub fn as_str(&self) -> &str {
        // The bytes are ASCII letters by construction.
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

impl TryFrom<String> for Currency {
    type Error = DomainError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<Currency> for String {
    fn from(value: Currency) -> String {
        value.as_str().to_owned()
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A positive amount in minor units (cents) of one currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "MoneyRepr")]
pub struct Money {
    amount_minor: u64,
    currency: Currency,
}

/// The unvalidated wire shape of [`Money`]; deserializing goes through [`Money::new`].
#[derive(Deserialize)]
struct MoneyRepr {
    amount_minor: u64,
    currency: Currency,
}

impl TryFrom<MoneyRepr> for Money {
    type Error = DomainError;
    fn try_from(repr: MoneyRepr) -> Result<Self, Self::Error> {
        Money::new(repr.amount_minor, repr.currency)
    }
}

impl Money {
    pub fn new(amount_minor: u64, currency: Currency) -> Result<Self, DomainError> {
        if amount_minor == 0 {
            return Err(DomainError::NonPositiveAmount);
        }
        if amount_minor > MAX_MINOR {
            return Err(DomainError::AmountTooLarge(amount_minor));
        }
        Ok(Self { amount_minor, currency })
    }

    pub fn amount_minor(&self) -> u64 {
        self.amount_minor
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn currency_is_normalised_and_validated() {
        assert_eq!(Currency::parse("eur").unwrap().as_str(), "EUR");
        assert!(Currency::parse("EURO").is_err());
        assert!(Currency::parse("E1R").is_err());
        assert!(Currency::parse("").is_err());
    }

    #[test]
    fn amount_must_be_positive_and_bounded() {
        let eur = Currency::parse("EUR").unwrap();
        assert_eq!(Money::new(0, eur), Err(DomainError::NonPositiveAmount));
        assert_eq!(
            Money::new(MAX_MINOR + 1, eur),
            Err(DomainError::AmountTooLarge(MAX_MINOR + 1))
        );
        assert_eq!(Money::new(1999, eur).unwrap().amount_minor(), 1999);
    }

    #[test]
    fn money_round_trips_through_json() {
        let m = Money::new(500, Currency::parse("usd").unwrap()).unwrap();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"{"amount_minor":500,"currency":"USD"}"#);
        let back: Money = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert!(serde_json::from_str::<Money>(r#"{"amount_minor":5,"currency":"usdx"}"#).is_err());
        assert!(serde_json::from_str::<Money>(r#"{"amount_minor":0,"currency":"USD"}"#).is_err());
    }
}
