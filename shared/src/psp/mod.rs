//! The PSPs as the checkout saga and recovery call them: Stripe's PaymentIntents API and Adyen's Checkout API,
//! each behind its own circuit breaker, held together in a [`PspSet`] that routes every call about a payment
//! to the PSP recorded on it (invariant 13).
//!
//! | module | owns |
//! |---|---|
//! | [`stripe`] | Stripe's objects (PaymentIntent, Charge, Refund, error) and what a PaymentIntent's status means in our terms |
//! | [`adyen`] | [`adyen::AdyenClient`]: Adyen's Checkout API v71 (JSON, `X-API-Key`, idempotency keys within 64 characters, a refusal as a decline, a 3-D Secure `action` kept, modifications answered `received`) for payments that belong to Adyen |
//! | `http` | what both clients share: the HTTP client with its timeouts, one attempt (failed attempts reported to the breaker), the retry loop, transport causes |
//! | [`client`] | [`StripeClient`]: form bodies, Bearer key, pinned `Stripe-Version`, an `Idempotency-Key` on every POST, timeouts, retries that honour `Stripe-Should-Retry`, Stripe's errors in our terms |
//! | [`settings`] | [`PspSettings`] and [`ApiKey`]: the endpoint, the key (redacted, from Secrets Manager or the environment), redirects (a return URL or none), timeouts and retries, read once per cold start |
//! | [`pace`] | [`pace::Pace`] and [`pace::ScanRates`]: the request rate per PSP the scanners (recovery, the catch-up) keep to |
//! | [`key`] | [`key::CurrentKey`]: the key in use, read again from Secrets Manager after a 401/403 (rate-limited) |
//! | [`breaker`] | [`CircuitBreaker`]: stops calls for a cool-down when the PSP keeps failing; its state is one DynamoDB item per PSP shared by every instance |
//! | [`set`] | [`PspSet`]: one guarded client per configured PSP, built once per cold start, and [`PspRoute`]: the payment's PSP's client, typed by what that PSP can be asked (Adyen: no read, no search) |
//!
//! Every call that moves money carries an idempotency key chosen by the caller (the saga derives it from
//! (order, step)), so a retry after a timeout or a lost answer never charges, cancels or refunds twice; the
//! same key with other parameters is refused by Stripe (`idempotency_error`), never applied.

pub mod adyen;
pub mod breaker;
pub mod client;
mod http;
pub mod key;
pub mod pace;
pub mod set;
pub mod settings;
pub mod stripe;

pub use breaker::{BreakerSettings, CircuitBreaker};
pub use client::{ApiKey, CaptureMethod, PspSettings, StripeClient};
pub use set::{GuardedAdyen, PspRoute, PspSet, PspSetSettings, Psps, ADYEN_BREAKER, STRIPE_BREAKER};
pub use stripe::{IntentStatus, PaymentIntent, Refund};

use crate::{Money, OrderId, PaymentId, PspEventId, PspName, PspReference};

/// The PSP every function calls: Stripe's API behind the shared circuit breaker.
pub type GuardedStripe = CircuitBreaker<StripeClient>;

/// The Stripe breaker's name (its item is `BREAKER#stripe`): [`STRIPE_BREAKER`], as the tools name it.
pub const BREAKER_NAME: &str = STRIPE_BREAKER;

/// Builds [`GuardedStripe`] alone from its settings (the key from Secrets Manager when `PSP_API_KEY_ARN` is
/// set), once per cold start, for what speaks only to Stripe (the events catch-up). Every PSP configured:
/// [`set::PspSetSettings::build`].
pub async fn guarded_stripe(
    settings: &PspSettings,
    sdk: &aws_config::SdkConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<GuardedStripe, crate::lambda::BuildError> {
    let client = StripeClient::from_settings(settings, sdk).await?;
    Ok(set::guarded(client, dynamodb, table, STRIPE_BREAKER))
}
use std::future::Future;
use thiserror::Error;

/// What a PSP call ended in, in our terms.
#[derive(Debug, Error)]
pub enum PspError {
    /// The customer's payment method was declined (`card_error`). The PaymentIntent, when Stripe sent it,
    /// says what the customer may do next (`requires_payment_method`: retry with another method).
    #[error("declined: {}", .0.summary())]
    Declined(Box<stripe::ErrorObject>),
    /// Stripe refused the request (`invalid_request_error`, `idempotency_error`, another 4xx): the same
    /// call will not succeed later. The PaymentIntent, when sent, shows its state (e.g. a cancel refused
    /// because it succeeded meanwhile).
    #[error("PSP refused the request (HTTP {status}): {}", .error.summary())]
    Refused {
        status: u16,
        error: Box<stripe::ErrorObject>,
    },
    /// No usable answer after the client's own retries (429, 5xx, `api_error`, timeout, connection): the
    /// same call with the same key may be tried again later. Its outcome may be unknown (a charge that timed
    /// out may have happened): only the idempotency key decides, never a new one.
    /// The cause (HTTP status and Stripe's error, or the transport failure with reqwest's error) is the
    /// `source()`.
    #[error("PSP unavailable: {0}")]
    Unavailable(#[source] crate::store::Cause),
    /// The circuit breaker is open: the call was not made. Defer; do not retry now.
    #[error("PSP calls paused by the circuit breaker until {until_ms} (epoch ms)")]
    CircuitOpen { until_ms: i64 },
    /// A 2xx answer we cannot read.
    #[error("PSP answer unreadable: {0}")]
    BadAnswer(#[source] crate::store::Cause),
    /// Stripe refused our key (401, 403: `authentication_error`, `permission_error`, a rolled or revoked key),
    /// also after the key was read again. A deployment fault, never the customer's refusal: the caller defers
    /// (no compensation, no decline) until the key is fixed; `PspAuthFailed` alarms.
    #[error("PSP refused our API key (HTTP {status}): {}", .error.summary())]
    AuthFailed {
        status: u16,
        error: Box<stripe::ErrorObject>,
    },
    /// The payment belongs to a PSP this deployment holds no client of ([`set::not_configured`]): a
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

/// One charge: a PaymentIntent created and confirmed in one call.
#[derive(Debug, Clone)]
pub struct ChargeRequest<'a> {
    pub payment_id: &'a PaymentId,
    pub order_id: &'a OrderId,
    pub money: &'a Money,
    /// A Stripe PaymentMethod id (`pm_...`).
    pub payment_method: &'a str,
}

/// A PSP whose payments can be read: Stripe's PaymentIntents API (charge, read, search by our payment id,
/// cancel, refund, read a refund back). [`StripeClient`] speaks it; [`CircuitBreaker`] wraps any
/// implementation. Adyen's Checkout API is not one (it has no read and no search): it is
/// [`GuardedAdyen`], with its own operations, and a [`PspSet`] hands out one or the other by the payment's
/// PSP ([`PspRoute`]), so asking Adyen for a read does not compile.
pub trait Psp: Send + Sync {
    /// The PSP this client speaks to: a payment the saga creates through it records it, and recovery asks
    /// it only about payments that belong to it (invariant 13). Every implementation of this trait speaks
    /// Stripe's PaymentIntents (its answers are PaymentIntents), hence the default.
    fn provider(&self) -> PspName {
        PspName::Stripe
    }

    /// Creates and confirms a PaymentIntent for our payment (`confirm=true`, `metadata[payment_id]`,
    /// `metadata[order_id]`), once per `key`.
    fn charge(
        &self,
        key: &str,
        request: &ChargeRequest<'_>,
    ) -> impl Future<Output = Result<PaymentIntent, PspError>> + Send;

    /// The PaymentIntent as it stands, with its latest charge expanded (refunds are on the charge).
    fn retrieve(&self, reference: &PspReference) -> impl Future<Output = Result<PaymentIntent, PspError>> + Send;

    /// Cancels the PaymentIntent, once per `key`. Refused (with the PaymentIntent) when it already succeeded.
    fn cancel(
        &self,
        key: &str,
        reference: &PspReference,
    ) -> impl Future<Output = Result<PaymentIntent, PspError>> + Send;

    /// Captures all of an authorized PaymentIntent (`requires_capture`), once per `key`. Refused (with the
    /// PaymentIntent) when it is in any other status: captured already, canceled, or its authorization lapsed.
    fn capture(
        &self,
        key: &str,
        reference: &PspReference,
    ) -> impl Future<Output = Result<PaymentIntent, PspError>> + Send;

    /// Refunds `amount_minor` of the PaymentIntent's charge (all of what is left when `None`), once per `key`.
    fn refund(
        &self,
        key: &str,
        reference: &PspReference,
        amount_minor: Option<u64>,
    ) -> impl Future<Output = Result<Refund, PspError>> + Send;

    /// The refund `refund` (a `re_...` id the PSP gave us) as it stands: how recovery learns what became of
    /// a refund still `pending` when its webhooks were lost.
    fn retrieve_refund(&self, refund: &str) -> impl Future<Output = Result<Refund, PspError>> + Send;

    /// The dispute `dispute` (a `du_...` id) as it stands: what recovery reads when Stripe failed to generate
    /// a `charge.dispute.*` event about it.
    fn retrieve_dispute(&self, dispute: &str) -> impl Future<Output = Result<stripe::Dispute, PspError>> + Send;

    /// Stripe's event-generation failure `event` (`GET /v2/core/events/{id}`): the object whose event Stripe
    /// never made, which recovery then reads (`store::recheck`).
    fn retrieve_generation_failure(
        &self,
        event: &PspEventId,
    ) -> impl Future<Output = Result<stripe::GenerationFailure, PspError>> + Send;

    /// Every refund the PSP made of the PaymentIntent, whatever its key or status: how the saga's refund step
    /// learns, before it creates one, that an earlier attempt made it (its answer and webhooks lost, its key
    /// forgotten after 24 hours), so it never creates a second.
    fn list_refunds(&self, reference: &PspReference) -> impl Future<Output = Result<Vec<Refund>, PspError>> + Send;

    /// The PaymentIntent created for our payment (by `metadata[payment_id]`), if any: how a charge retried
    /// after the PSP forgot its idempotency key finds the first one. Stripe's search is eventually consistent
    /// (seconds), so it is asked only about charges long past.
    fn find_for_payment(
        &self,
        payment: &PaymentId,
    ) -> impl Future<Output = Result<Option<PaymentIntent>, PspError>> + Send;
}
