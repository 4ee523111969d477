//! The payment record as the domain sees it, and what a new payment is made from.

use crate::dispute::Dispute;
use crate::error::DomainError;
use crate::event::{EventKind, PaymentEvent};
use crate::ids::{CorrelationId, OrderId, PaymentId, PspEventId, PspReference};
use crate::metadata::Metadata;
use crate::money::Money;
use crate::observation::Channel;
use crate::provider::PspName;
use crate::refund::{GiveBack, RefundEntry, MAX_GIVE_BACKS};
use crate::secret::{ClientSecret, RedirectUrl, RetryToken};
use crate::status::PaymentStatus;
use serde::{Deserialize, Serialize};

/// How many recent PSP event ids a payment remembers for dedup. Older duplicates are still harmless: the
/// status only moves forward, refunds are cumulative and out-of-order events are judged by their time.
pub const SEEN_EVENTS_KEPT: usize = 16;

/// How many recent refused PSP event ids a payment remembers, so that a PSP's retries of one refused event
/// record (and alarm) its anomaly once. Kept apart from the dedup window: a refused event must never shadow
/// the real one with its id (another endpoint's delivery), nor push applied ids out of the window.
pub const REFUSED_EVENTS_KEPT: usize = 8;

/// What the customer must do next: confirm with a client secret and/or follow a redirect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerAction {
    client_secret: Option<ClientSecret>,
    redirect_url: Option<RedirectUrl>,
}

impl CustomerAction {
    pub fn new(client_secret: Option<ClientSecret>, redirect_url: Option<RedirectUrl>) -> Result<Self, DomainError> {
        if client_secret.is_none() && redirect_url.is_none() {
            return Err(DomainError::EmptyAction);
        }
        Ok(Self {
            client_secret,
            redirect_url,
        })
    }

    /// The action a PSP offered, as our [`RedirectPolicy`](crate::RedirectPolicy) lets it through: `url` is
    /// the offered redirect URL already parsed under that policy. A refused URL is dropped and the client
    /// secret alone is handed on, so the customer can still act (the whole action dropped made the PSP's
    /// answer unreadable: the saga escalated it again and again); only an offer with nothing left is refused.
    /// [`Offered::refused_url`] tells the shell to log the refusal (never the URL: it may carry a token).
    pub fn offered(
        client_secret: Option<ClientSecret>,
        url: Option<Result<RedirectUrl, DomainError>>,
    ) -> Result<Offered, DomainError> {
        let (redirect_url, refused_url) = match url {
            Some(Ok(url)) => (Some(url), None),
            Some(Err(refused)) if client_secret.is_some() => (None, Some(refused)),
            Some(Err(refused)) => return Err(refused),
            None => (None, None),
        };
        Ok(Offered {
            action: Self::new(client_secret, redirect_url)?,
            refused_url,
        })
    }

    pub fn client_secret(&self) -> Option<&ClientSecret> {
        self.client_secret.as_ref()
    }

    pub fn redirect_url(&self) -> Option<&RedirectUrl> {
        self.redirect_url.as_ref()
    }
}

/// What [`CustomerAction::offered`] decided: the action to hand on, and why a redirect URL was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    pub action: CustomerAction,
    /// The offered redirect URL our policy refused (dropped from `action`).
    pub refused_url: Option<DomainError>,
}

/// Money the PSP took after we had failed the payment ("success after failure"): recorded once as an anomaly
/// and given back by recovery, which refunds it with an idempotency key from (payment, anomaly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StrayCapture {
    /// The number of the anomaly that recorded it (the payment's `anomalies` count then): with the payment
    /// id, the refund's idempotency key.
    pub anomaly: u32,
    /// The PSP reported the money returned in full.
    pub refunded: bool,
}

/// One payment. `version` is the optimistic-concurrency token: 1 at creation, +1 on every accepted change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub id: PaymentId,
    pub order_id: OrderId,
    pub version: u64,
    pub status: PaymentStatus,
    pub money: Money,
    /// Cumulative refunded amount in minor units; `refunded` is reached only at the full amount.
    pub refunded_minor: u64,
    /// The PSP the payment belongs to, from its creation (invariant 13): the one client recovery may ask and
    /// the one PSP whose webhooks may change it. Its reference is in this PSP's namespace.
    pub provider: PspName,
    pub psp_reference: Option<PspReference>,
    pub metadata: Metadata,
    /// Present only while `requires_action`; removed by every transition out of it.
    pub action: Option<CustomerAction>,
    /// Present only while `attempt_failed`.
    pub retry_token: Option<RetryToken>,
    /// When the PSP releases the authorization if it is not captured (epoch ms; the charge's
    /// `capture_before`), recorded when the payment is `authorized` and kept after for the record.
    #[serde(default)]
    pub capture_before_ms: Option<i64>,
    /// Why the last attempt was declined, or why the payment failed.
    pub reason: Option<String>,
    /// The most recent PSP event ids applied, oldest first, at most [`SEEN_EVENTS_KEPT`].
    pub seen_psp_events: Vec<PspEventId>,
    /// The most recent PSP event ids refused (an anomaly recorded for each), oldest first, at most
    /// [`REFUSED_EVENTS_KEPT`]: a redelivery of one is a duplicate, not a second anomaly.
    #[serde(default)]
    pub refused_psp_events: Vec<PspEventId>,
    /// PSP time (epoch ms) of the newest applied observation that carried one.
    pub last_psp_event_at_ms: Option<i64>,
    /// How many anomalies were recorded on this payment.
    pub anomalies: u32,
    /// Money taken after the payment failed, if any: see [`StrayCapture`].
    pub stray_capture: Option<StrayCapture>,
    /// Each refund the PSP reported, with its last status (at most [`crate::refund::MAX_REFUNDS_KEPT`]).
    #[serde(default)]
    pub refunds: Vec<RefundEntry>,
    /// How many refunds the PSP reported failed or canceled: the client view and timeline show it, and
    /// it numbers the give-backs.
    #[serde(default)]
    pub refund_failures: u32,
    /// Money a failed refund left with us, for recovery to give back: see [`GiveBack`].
    #[serde(default)]
    pub give_back: Option<GiveBack>,
    /// The dispute of the payment's charge, if there is one: beside the status, which it never changes.
    pub dispute: Option<Dispute>,
    /// Why the PSP reported the capture failed at the card scheme (Adyen's `CAPTURE_FAILED`), until it
    /// reports a new capture: the money of a `captured` payment that will not arrive ([`Payment::capture_lost`]).
    #[serde(default)]
    pub capture_failed: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Payment {
    /// Money taken after the payment failed and not yet returned: the anomaly's number (for the refund's key).
    pub fn refund_due(&self) -> Option<u32> {
        self.stray_capture.filter(|s| !s.refunded).map(|s| s.anomaly)
    }

    /// Someone still has work to do on it: not terminal, stray money or a failed refund to give back, a
    /// refund still pending (recovery reads it back by id until it ends), or money no give-back may return any
    /// more ([`Payment::refund_for_operator`]). Open payments are in the `open-items` index, where recovery
    /// finds them.
    pub fn is_open(&self) -> bool {
        !self.status.is_terminal()
            || self.refund_due().is_some()
            || self.give_back.is_some()
            || self.pending_refunds().next().is_some()
            || self.refund_for_operator()
            || self.capture_lost()
    }

    /// The payment is `captured` but its capture failed at the card scheme and no new capture came: the
    /// money will not arrive. It stays open (recovery counts it every half hour, `CapturesFailed`, alarmed;
    /// `paymentsctl doctor` lists it) until the PSP reports a new capture or an operator ends it
    /// (docs/WEBHOOKS.md).
    pub fn capture_lost(&self) -> bool {
        self.status == PaymentStatus::Captured && self.capture_failed.is_some()
    }

    /// More refunds failed than recovery gives back ([`MAX_GIVE_BACKS`]), none is pending or still to give
    /// back, and the payment is `captured` (the money is with us): only a person can return it (a refund made
    /// by hand at the PSP, whose report makes the payment `refunded`). It stays open until then, so recovery
    /// keeps reporting it (`RefundsForOperator`, alarmed) and `paymentsctl doctor` keeps listing it, instead
    /// of leaving the index after the last failure's one alarm.
    pub fn refund_for_operator(&self) -> bool {
        self.refund_failures > MAX_GIVE_BACKS
            && self.status == PaymentStatus::Captured
            && self.give_back.is_none()
            && self.pending_refunds().next().is_none()
    }

    /// The refunds the PSP last reported `pending` or `requires_action`.
    pub fn pending_refunds(&self) -> impl Iterator<Item = &RefundEntry> {
        self.refunds.iter().filter(|r| r.status.is_pending())
    }

    pub fn has_seen(&self, event: &PspEventId) -> bool {
        self.seen_psp_events.iter().any(|e| e == event)
    }

    pub(crate) fn remember(&mut self, event: PspEventId) {
        self.seen_psp_events.push(event);
        let excess = self.seen_psp_events.len().saturating_sub(SEEN_EVENTS_KEPT);
        self.seen_psp_events.drain(..excess);
    }

    /// This event was refused already: its anomaly is recorded.
    pub fn has_refused(&self, event: &PspEventId) -> bool {
        self.refused_psp_events.iter().any(|e| e == event)
    }

    pub(crate) fn remember_refused(&mut self, event: PspEventId) {
        self.refused_psp_events.push(event);
        let excess = self.refused_psp_events.len().saturating_sub(REFUSED_EVENTS_KEPT);
        self.refused_psp_events.drain(..excess);
    }
}

/// What a payment is created from.
#[derive(Debug, Clone)]
pub struct NewPayment {
    pub id: PaymentId,
    pub order_id: OrderId,
    pub money: Money,
    /// The PSP the payment belongs to: the API caller's `provider`, or the saga's PSP client.
    pub provider: PspName,
    pub psp_reference: Option<PspReference>,
    pub metadata: Metadata,
    pub correlation_id: CorrelationId,
    pub trace_context: Option<String>,
    pub now_ms: i64,
}

impl NewPayment {
    /// The payment at version 1 and its `PaymentCreated` event, to be written together.
    pub fn into_payment(self) -> (Payment, PaymentEvent) {
        let payment = Payment {
            id: self.id,
            order_id: self.order_id,
            version: 1,
            status: PaymentStatus::Pending,
            money: self.money,
            refunded_minor: 0,
            provider: self.provider,
            psp_reference: self.psp_reference,
            metadata: self.metadata,
            action: None,
            retry_token: None,
            capture_before_ms: None,
            reason: None,
            seen_psp_events: Vec::new(),
            last_psp_event_at_ms: None,
            anomalies: 0,
            stray_capture: None,
            refunds: Vec::new(),
            refund_failures: 0,
            give_back: None,
            dispute: None,
            capture_failed: None,
            refused_psp_events: Vec::new(),
            created_at_ms: self.now_ms,
            updated_at_ms: self.now_ms,
        };
        let event = PaymentEvent::describe(
            &payment,
            None,
            EventKind::PaymentCreated,
            Channel::Sync,
            None,
            &self.correlation_id,
            self.trace_context,
            self.now_ms,
        );
        (payment, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_needs_a_secret_or_a_url() {
        assert_eq!(CustomerAction::new(None, None), Err(DomainError::EmptyAction));
        let url = RedirectUrl::parse("https://bank.example/3ds").unwrap();
        assert!(CustomerAction::new(None, Some(url)).is_ok());
    }

    #[test]
    fn a_refused_redirect_url_is_dropped_and_the_secret_kept() {
        let policy = crate::RedirectPolicy::from_values(false, Some("bank.example"));
        let secret = ClientSecret::parse("pi_1_secret_abc").unwrap();
        let refused = RedirectUrl::parse_with("https://evil.example/3ds", &policy);
        assert_eq!(refused, Err(DomainError::RedirectHostNotAllowed));

        let offered = CustomerAction::offered(Some(secret.clone()), Some(refused.clone())).unwrap();
        assert_eq!(offered.action.client_secret(), Some(&secret));
        assert_eq!(offered.action.redirect_url(), None);
        assert_eq!(offered.refused_url, Some(DomainError::RedirectHostNotAllowed));

        // Nothing left to hand on: refused, with the URL's reason.
        assert_eq!(
            CustomerAction::offered(None, Some(refused)),
            Err(DomainError::RedirectHostNotAllowed)
        );
        assert_eq!(CustomerAction::offered(None, None), Err(DomainError::EmptyAction));

        let allowed = RedirectUrl::parse_with("https://bank.example/3ds", &policy);
        let offered = CustomerAction::offered(Some(secret), Some(allowed.clone())).unwrap();
        assert_eq!(offered.action.redirect_url(), allowed.ok().as_ref());
        assert_eq!(offered.refused_url, None);
    }
}
