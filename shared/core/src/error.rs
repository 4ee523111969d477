//! The one error type of the domain: what was wrong with a value that came from outside.

use thiserror::Error;

/// A value from a request, a webhook or a stored item failed validation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DomainError {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is longer than {max} characters")]
    TooLong { field: &'static str, max: usize },
    #[error("{field} may only contain letters, digits, '_', '-', '.' and ':'")]
    BadCharacters { field: &'static str },
    /// Control characters, Unicode non-characters (see `crate::text`).
    #[error("{field} contains a control character or a Unicode non-character")]
    BadText { field: &'static str },
    /// An id that goes into a URL path must start with a letter or a digit (never `.` or `..`).
    #[error("{field} must start with a letter or a digit (it goes into a URL path)")]
    NotPathSafe { field: &'static str },
    #[error("currency must be a three-letter ISO 4217 code in upper case, got {0:?}")]
    BadCurrency(String),
    #[error("amount must be a positive number of minor units")]
    NonPositiveAmount,
    #[error("amount {0} exceeds the maximum of 99999999999")]
    AmountTooLarge(u64),
    #[error(
        "redirect URL must be an absolute https URL without user info (http only for localhost in local development)"
    )]
    BadRedirectUrl,
    #[error("redirect URL's host is not one of REDIRECT_HOSTS")]
    RedirectHostNotAllowed,
    #[error("a customer action needs a client secret or a redirect URL")]
    EmptyAction,
    #[error("unknown payment status {0:?}")]
    UnknownStatus(String),
    #[error("provider must be 1 to 32 characters from [a-z0-9_-]")]
    BadProviderName,
    /// A Standard Webhooks provider configured under a well-known PSP's name.
    #[error("provider name {0:?} is a well-known PSP's, not a Standard Webhooks provider's")]
    WellKnownProvider(String),
    /// A PSP reference that the payment's provider cannot have issued (invariant 13).
    #[error("psp_reference is not a {provider} reference")]
    ForeignReference { provider: String },
}
