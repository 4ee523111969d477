//! Stripe: its PaymentIntents API as a trait ([`StripeApi`]), the client that speaks it over HTTPS
//! ([`StripeClient`]), its settings ([`StripeSettings`]: the `PSP_*` variables deployments have always set),
//! its objects and what a PaymentIntent's status means in our terms, and the same calls through Stripe's circuit
//! breaker.
//!
//! | module | owns |
//! |---|---|
//! | `objects` | Stripe's objects (PaymentIntent, Charge, Refund, Dispute, event-generation failure, error), re-exported here |
//! | `client` | [`StripeClient`]: form bodies, Bearer key, pinned `Stripe-Version`, an `Idempotency-Key` on every POST, timeouts, retries that honour `Stripe-Should-Retry`, Stripe's errors in our terms |
//! | [`settings`] | [`StripeSettings`], [`Redirects`], [`CaptureMethod`] |

mod client;
pub(crate) mod objects;
pub mod settings;

pub use client::{StripeClient, STRIPE_API_VERSION};
pub use objects::*;
pub use settings::{CaptureMethod, Redirects, StripeSettings};

use crate::breaker::CircuitBreaker;
use crate::error::PspError;
use crate::ChargeRequest;
use payments_core::breaker::Request;
use shared::{PaymentId, PspEventId, PspName, PspReference};
use std::future::Future;

/// Stripe's PaymentIntents API: a PSP whose payments can be read (charge, read, search by our payment id,
/// cancel, refund, read a refund back). [`StripeClient`] speaks it; [`CircuitBreaker`] wraps any
/// implementation (a test's quirky client too). Adyen's Checkout API is not one (it has no read and no search):
/// it is [`GuardedAdyen`](crate::GuardedAdyen), with its own operations, and a
/// [`PspSet`](crate::PspSet) hands out one or the other by the payment's PSP
/// ([`PspRoute`](crate::PspRoute)), so asking Adyen for a read does not compile.
pub trait StripeApi: Send + Sync {
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
    fn retrieve_dispute(&self, dispute: &str) -> impl Future<Output = Result<Dispute, PspError>> + Send;

    /// Stripe's event-generation failure `event` (`GET /v2/core/events/{id}`): the object whose event Stripe
    /// never made, which recovery then reads (`store::recheck`).
    fn retrieve_generation_failure(
        &self,
        event: &PspEventId,
    ) -> impl Future<Output = Result<GenerationFailure, PspError>> + Send;

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

impl<P: StripeApi> StripeApi for CircuitBreaker<P> {
    fn provider(&self) -> shared::PspName {
        self.inner().provider()
    }

    async fn charge(&self, key: &str, request: &ChargeRequest<'_>) -> Result<PaymentIntent, PspError> {
        self.guarded(Request::Keyed(key), self.inner().charge(key, request))
            .await
    }

    async fn retrieve(&self, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.guarded(Request::Unkeyed, self.inner().retrieve(reference)).await
    }

    async fn cancel(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.guarded(Request::Keyed(key), self.inner().cancel(key, reference))
            .await
    }

    async fn capture(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.guarded(Request::Keyed(key), self.inner().capture(key, reference))
            .await
    }

    async fn refund(&self, key: &str, reference: &PspReference, amount_minor: Option<u64>) -> Result<Refund, PspError> {
        self.guarded(Request::Keyed(key), self.inner().refund(key, reference, amount_minor))
            .await
    }

    async fn retrieve_refund(&self, refund: &str) -> Result<Refund, PspError> {
        self.guarded(Request::Unkeyed, self.inner().retrieve_refund(refund))
            .await
    }

    async fn retrieve_dispute(&self, dispute: &str) -> Result<Dispute, PspError> {
        self.guarded(Request::Unkeyed, self.inner().retrieve_dispute(dispute))
            .await
    }

    async fn retrieve_generation_failure(&self, event: &shared::PspEventId) -> Result<GenerationFailure, PspError> {
        self.guarded(Request::Unkeyed, self.inner().retrieve_generation_failure(event))
            .await
    }
    async fn list_refunds(&self, reference: &PspReference) -> Result<Vec<Refund>, PspError> {
        self.guarded(Request::Unkeyed, self.inner().list_refunds(reference))
            .await
    }

    async fn find_for_payment(&self, payment: &PaymentId) -> Result<Option<PaymentIntent>, PspError> {
        self.guarded(Request::Unkeyed, self.inner().find_for_payment(payment))
            .await
    }
}

impl CircuitBreaker<StripeClient> {
    /// [`StripeClient::list_events`](StripeClient::list_events) through the breaker: the catch-up job
    /// stops when Stripe keeps failing, as every other caller does.
    pub async fn list_events(&self, query: &EventQuery<'_>) -> Result<EventList, PspError> {
        self.guarded(Request::Unkeyed, self.inner().list_events(query)).await
    }
}
