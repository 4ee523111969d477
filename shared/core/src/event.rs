//! The event item: audit log and outbox in one, written with each accepted transition.
//!
//! Its payload is our own trimmed schema, never a raw PSP object: no client secret, redirect URL or token.

use crate::dispute::Dispute;
use crate::ids::{CorrelationId, OrderId, PaymentId, PspEventId};
use crate::money::Money;
use crate::observation::Channel;
use crate::payment::Payment;
use crate::refund::RefundEntry;
use crate::status::PaymentStatus;
use serde::{Deserialize, Serialize};

/// What happened, named for consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    PaymentCreated,
    ActionRequired,
    ProcessingStarted,
    AttemptFailed,
    /// The money is held for us (manual capture): not taken until the capture.
    PaymentAuthorized,
    PaymentCaptured,
    PaymentFailed,
    /// A partial refund: still `captured`, more refunded.
    RefundRecorded,
    /// Refunded in full.
    PaymentRefunded,
    /// A refund the PSP reports `pending` (or `requires_action`): asked for, not done; the payment is
    /// unchanged.
    RefundPending,
    /// A refund the PSP reports `failed` or `canceled`: the money is ours again and is given back anew.
    RefundFailed,
    /// A capture reported done was rejected by the card scheme: the money will not arrive unless the PSP
    /// captures again (alarmed; the payment stays `captured`, flagged `capture_failed`).
    CaptureFailed,
    /// Evidence that contradicts what we hold (money moved on a failed payment, an event that does not match
    /// the payment). Counted, alarmed, for an operator to compensate; the status does not change.
    AnomalyRecorded,
    /// The payment's charge is disputed: the first report of a dispute, whatever its status (alarmed).
    DisputeOpened,
    /// The dispute moved on (evidence under review, an inquiry become a chargeback).
    DisputeUpdated,
    /// The disputed amount was withdrawn from the merchant's balance.
    DisputeFundsWithdrawn,
    /// The disputed amount was reinstated to the merchant's balance.
    DisputeFundsReinstated,
    /// The dispute closed in the merchant's favour.
    DisputeWon,
    /// The dispute closed in the customer's favour: the money is gone.
    DisputeLost,
    /// An inquiry closed without a chargeback (`warning_closed`, `prevented`).
    DisputeClosed,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::PaymentCreated => "PaymentCreated",
            EventKind::ActionRequired => "ActionRequired",
            EventKind::ProcessingStarted => "ProcessingStarted",
            EventKind::AttemptFailed => "AttemptFailed",
            EventKind::PaymentAuthorized => "PaymentAuthorized",
            EventKind::PaymentCaptured => "PaymentCaptured",
            EventKind::PaymentFailed => "PaymentFailed",
            EventKind::RefundRecorded => "RefundRecorded",
            EventKind::PaymentRefunded => "PaymentRefunded",
            EventKind::RefundPending => "RefundPending",
            EventKind::RefundFailed => "RefundFailed",
            EventKind::CaptureFailed => "CaptureFailed",
            EventKind::AnomalyRecorded => "AnomalyRecorded",
            EventKind::DisputeOpened => "DisputeOpened",
            EventKind::DisputeUpdated => "DisputeUpdated",
            EventKind::DisputeFundsWithdrawn => "DisputeFundsWithdrawn",
            EventKind::DisputeFundsReinstated => "DisputeFundsReinstated",
            EventKind::DisputeWon => "DisputeWon",
            EventKind::DisputeLost => "DisputeLost",
            EventKind::DisputeClosed => "DisputeClosed",
        }
    }
}

/// One entry of a payment's history; its version is the payment version it produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentEvent {
    pub payment_id: PaymentId,
    pub order_id: OrderId,
    pub version: u64,
    pub kind: EventKind,
    pub path: Channel,
    pub status: PaymentStatus,
    pub previous_status: Option<PaymentStatus>,
    pub money: Money,
    /// The running total refunded (reported `succeeded`) after this event.
    pub refunded_minor: u64,
    /// The refund this event records, with its own amount and status (refund events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<RefundEntry>,
    pub reason: Option<String>,
    pub psp_event_id: Option<PspEventId>,
    pub correlation_id: CorrelationId,
    pub trace_context: Option<String>,
    pub recorded_at_ms: i64,
    /// The payment's dispute after this event, if it has one: every event carries it, so a consumer that
    /// keeps the latest event keeps the dispute's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispute: Option<Dispute>,
    /// Why the payment's capture failed at the card scheme, while it did and no new capture was reported:
    /// every event carries it, so a consumer that keeps the latest event shows it (the order projection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_failed: Option<String>,
}

impl PaymentEvent {
    /// The event that records `payment` (already at its new version) reached from `previous`.
    #[allow(clippy::too_many_arguments)]
    pub fn describe(
        payment: &Payment,
        previous: Option<PaymentStatus>,
        kind: EventKind,
        path: Channel,
        psp_event_id: Option<PspEventId>,
        correlation_id: &CorrelationId,
        trace_context: Option<String>,
        now_ms: i64,
    ) -> Self {
        Self {
            payment_id: payment.id.clone(),
            order_id: payment.order_id.clone(),
            version: payment.version,
            kind,
            path,
            status: payment.status,
            previous_status: previous,
            money: payment.money,
            refunded_minor: payment.refunded_minor,
            refund: None,
            reason: payment.reason.clone(),
            psp_event_id,
            correlation_id: correlation_id.clone(),
            trace_context,
            recorded_at_ms: now_ms,
            dispute: payment.dispute.clone(),
            capture_failed: payment.capture_failed.clone(),
        }
    }

    /// Globally unique id of this event: the SQS FIFO deduplication id and the consumers' dedup key.
    pub fn event_id(&self) -> String {
        format!("{}:{:010}", self.payment_id, self.version)
    }
}
