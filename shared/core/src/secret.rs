//! Values that must never reach a log: client secrets, redirect URLs, retry tokens, webhook signing secrets.
//!
//! Each is a distinct type so the client view can refuse them by type. `Debug` prints `[redacted]` and there
//! is no `Display`; the value is read only through `expose()`, which makes every use easy to find.

use crate::error::DomainError;
use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! secret_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The secret value. Call only where it is handed to its rightful receiver.
            pub fn expose(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "([redacted])"))
            }
        }
    };
}

secret_type!(
    /// The PSP's client secret (`pi_..._secret_...`) that lets a browser confirm the payment.
    ClientSecret
);
secret_type!(
    /// Where the customer is sent to authenticate (3-D Secure, a bank's page). Carries one-time tokens.
    RedirectUrl
);
secret_type!(
    /// Lets the customer retry a declined attempt.
    RetryToken
);
secret_type!(
    /// A webhook signing secret (Stripe `whsec_...`, a Standard Webhooks key).
    SigningSecret
);

fn non_empty(field: &'static str, value: String) -> Result<String, DomainError> {
    if value.trim().is_empty() {
        Err(DomainError::Empty { field })
    } else {
        Ok(value)
    }
}

impl ClientSecret {
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        non_empty("client_secret", value.into()).map(Self)
    }
}

impl RetryToken {
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        non_empty("retry_token", value.into()).map(Self)
    }
}

impl SigningSecret {
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        non_empty("signing_secret", value.into()).map(Self)
    }
}

impl RedirectUrl {
    /// An absolute `https://` URL; `http://` only for `localhost` and `127.0.0.1` (local development).
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        let value = value.into();
        let ok = if let Some(rest) = value.strip_prefix("https://") {
            !rest.is_empty() && !rest.starts_with('/')
        } else if let Some(rest) = value.strip_prefix("http://") {
            rest.starts_with("localhost") || rest.starts_with("127.0.0.1")
        } else {
            false
        };
        if ok && !value.chars().any(char::is_whitespace) {
            Ok(Self(value))
        } else {
            Err(DomainError::BadRedirectUrl)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = ClientSecret::parse("pi_1_secret_abc").unwrap();
        assert_eq!(format!("{s:?}"), "ClientSecret([redacted])");
        let w = SigningSecret::parse("whsec_topsecret").unwrap();
        assert!(!format!("{w:?}").contains("topsecret"));
    }

    #[test]
    fn redirect_urls_are_validated() {
        assert!(RedirectUrl::parse("https://hooks.stripe.com/3d_secure/x").is_ok());
        assert!(RedirectUrl::parse("http://127.0.0.1:4000/3ds").is_ok());
        assert!(RedirectUrl::parse("http://evil.example/3ds").is_err());
        assert!(RedirectUrl::parse("javascript:alert(1)").is_err());
        assert!(RedirectUrl::parse("https:///path").is_err());
    }

    #[test]
    fn empty_secrets_are_refused() {
        assert!(ClientSecret::parse(" ").is_err());
        assert!(RetryToken::parse("").is_err());
    }
}
