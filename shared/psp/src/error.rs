//! [`PspError`]: what a call to any PSP ended in, in our terms. A refusal is carried in Stripe's error shape
//! ([`ErrorObject`]), which Adyen's client fills too, so every caller reads one shape.

use super::stripe::objects::{ErrorObject, PaymentIntent};
use shared::PspName;
use thiserror::Error;

/// What a PSP call ended in, in our terms.
#[derive(Debug, Error)]
pub enum PspError {
    /// The customer's payment method was declined (`card_error`). The PaymentIntent, when Stripe sent it,
    /// says what the customer may do next (`requires_payment_method`: retry with another method).
    #[error("declined: {}", .0.summary())]
    Declined(Box<ErrorObject>),
    /// Stripe refused the request (`invalid_request_error`, `idempotency_error`, another 4xx): the same
    /// call will not succeed later. The PaymentIntent, when sent, shows its state (e.g. a cancel refused
    /// because it succeeded meanwhile).
    #[error("PSP refused the request (HTTP {status}): {}", .error.summary())]
    Refused { status: u16, error: Box<ErrorObject> },
    /// No usable answer after the client's own retries (429, 5xx, `api_error`, timeout, connection): the
    /// same call with the same key may be tried again later. Its outcome may be unknown (a charge that timed
    /// out may have happened): only the idempotency key decides, never a new one.
    /// The cause (HTTP status and Stripe's error, or the transport failure with reqwest's error) is the
    /// `source()`.
    #[error("PSP unavailable: {0}")]
    Unavailable(#[source] shared::store::Cause),
    /// The circuit breaker is open: the call was not made. Defer; do not retry now.
    #[error("PSP calls paused by the circuit breaker until {until_ms} (epoch ms)")]
    CircuitOpen { until_ms: i64 },
    /// A 2xx answer we cannot read.
    #[error("PSP answer unreadable: {0}")]
    BadAnswer(#[source] shared::store::Cause),
    /// Stripe refused our key (401, 403: `authentication_error`, `permission_error`, a rolled or revoked key),
    /// also after the key was read again. A deployment fault, never the customer's refusal: the caller defers
    /// (no compensation, no decline) until the key is fixed; `PspAuthFailed` alarms.
    #[error("PSP refused our API key (HTTP {status}): {}", .error.summary())]
    AuthFailed { status: u16, error: Box<ErrorObject> },
    /// The payment belongs to a PSP this deployment holds no client of ([`super::set::not_configured`]): a
    /// deployment fault, deferred like a refused key until the PSP's settings are there; `PspNotConfigured`
    /// alarms.
    #[error("no client of PSP {0} in this deployment")]
    NotConfigured(PspName),
}

impl PspError {
    /// A retry of the same call (same key) may succeed soon.
    pub fn is_transient(&self) -> bool {
        matches!(self, PspError::Unavailable(_))
    }

    /// Come back later instead of retrying now or giving up: the breaker stopped the call (after the
    /// cool-down), the PSP refused our key, or no client of the payment's PSP is configured (once either is
    /// fixed). None says anything about the payment.
    pub fn is_deferred(&self) -> bool {
        matches!(
            self,
            PspError::CircuitOpen { .. } | PspError::AuthFailed { .. } | PspError::NotConfigured(_)
        )
    }

    /// The PaymentIntent an error answer carried, if any.
    pub fn payment_intent(&self) -> Option<&PaymentIntent> {
        match self {
            PspError::Declined(e) | PspError::Refused { error: e, .. } => e.payment_intent.as_deref(),
            _ => None,
        }
    }
}
