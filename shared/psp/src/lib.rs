//! The PSPs as the checkout saga and recovery call them: Stripe's PaymentIntents API and Adyen's Checkout API,
//! each behind its own circuit breaker, held together in a [`PspSet`] that routes every call about a payment
//! to the PSP recorded on it (invariant 13). "PSP" here means any PSP; what is one PSP's says its name.
//!
//! Three layers, each importing only the ones below it:
//!
//! | layer | module | owns |
//! |---|---|---|
//! | routing | [`set`] | [`PspSet`]: one guarded client per configured PSP, built once per cold start, and [`PspRoute`]: the payment's PSP's client, typed by what that PSP can be asked (Adyen: no read, no search) |
//! | one PSP | [`stripe`] | [`StripeApi`] (Stripe's PaymentIntents API as a trait), [`StripeClient`] (form bodies, Bearer key, pinned `Stripe-Version`, an `Idempotency-Key` on every POST, retries that honour `Stripe-Should-Retry`), [`StripeSettings`], Stripe's objects and what a PaymentIntent's status means in our terms |
//! | one PSP | [`adyen`] | [`adyen::AdyenClient`]: Adyen's Checkout API v71 (JSON, `X-API-Key`, idempotency keys within 64 characters, a refusal as a decline, a 3-D Secure `action` kept, modifications answered `received`) for payments that belong to Adyen, and [`adyen::AdyenSettings`] |
//! | generic | [`breaker`] | [`CircuitBreaker`]: stops calls for a cool-down when a PSP keeps failing; its state is one DynamoDB item per PSP shared by every instance. Each PSP's module has the calls through it |
//! | generic | `http` | what both clients share: the HTTP client with its timeouts, one attempt (failed attempts reported to the breaker), the retry loop, transport causes, the refusal reporter, the stage marker ([`STAGE_MARKER`]) |
//! | generic | [`key`] | [`key::CurrentKey`]: the key in use, read again from Secrets Manager after a 401/403 (rate-limited) |
//! | generic | [`settings`] | [`ApiKey`] and [`settings::KeySource`]: the key (redacted, from Secrets Manager or the environment), the endpoint and transport settings every client reads |
//! | generic | [`pace`] | [`pace::Pace`] and [`pace::ScanRates`]: the request rate per PSP the scanners (recovery, the catch-up) keep to |
//!
//! Every layer speaks [`PspError`] (`error`: a PSP call's end in our terms, a refusal in Stripe's error shape,
//! which Adyen's client fills too); both clients take a [`ChargeRequest`]. The generic layer imports no PSP's
//! module.
//!
//! Every call that moves money carries an idempotency key chosen by the caller (the saga derives it from
//! (order, step)), so a retry after a timeout or a lost answer never charges, cancels or refunds twice; the
//! same key with other parameters is refused by Stripe (`idempotency_error`), never applied.

pub mod adyen;
pub mod breaker;
mod error;
mod http;
pub mod key;
pub mod pace;
pub mod set;
pub mod settings;
pub mod stripe;

pub use breaker::{BreakerSettings, CircuitBreaker};
pub use error::PspError;
pub use http::STAGE_MARKER;
pub use set::{
    guarded_stripe, GuardedAdyen, GuardedStripe, PspRoute, PspSet, PspSetSettings, Psps, ADYEN_BREAKER, BREAKER_NAME,
    STRIPE_BREAKER,
};
pub use settings::ApiKey;
pub use stripe::{CaptureMethod, IntentStatus, PaymentIntent, Refund, StripeApi, StripeClient, StripeSettings};

use shared::{Money, OrderId, PaymentId};

/// One charge: a PaymentIntent created and confirmed in one call.
#[derive(Debug, Clone)]
pub struct ChargeRequest<'a> {
    pub payment_id: &'a PaymentId,
    pub order_id: &'a OrderId,
    pub money: &'a Money,
    /// A Stripe PaymentMethod id (`pm_...`).
    pub payment_method: &'a str,
}
