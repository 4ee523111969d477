//! What recovery did: with one payment ([`Reconciled`]) and in one run ([`RecoveryReport`], written as the
//! reconciler's EMF record, [`emf`]).

use crate::RecoveryError;
use payments_core::recovery::NothingToAsk;
use shared::store::open_index::age_seconds;
use shared::store::{FinalizeOutcome, FinalizeResult};
use shared::telemetry::ErrorChain;
use shared::PaymentId;
use tracing::warn;

/// What recovery did with one payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// The PSP's answer changed the payment.
    Applied(shared::EventKind),
    /// The PSP's answer is what we know already (still processing, or a duplicate).
    Unchanged,
    /// Another worker (webhook intake) holds the payment's lease: skipped this round.
    Busy,
    /// The payment has no PSP reference yet: nothing to ask the PSP about (backed off).
    NoReference,
    /// The payment belongs to a PSP recovery holds no client of, or its PSP does not know its reference:
    /// nothing to ask (backed off).
    NoClient,
    /// Nothing to ask past [`RecoverySettings::expire_after`](crate::RecoverySettings::expire_after): recorded failed as expired.
    Expired,
    /// Already terminal (the index is eventually consistent): nothing to do.
    NotOpen,
    /// The PSP's answer was not about this payment (another PaymentIntent, amount or currency): an anomaly
    /// was recorded, nothing applied.
    Refused,
    /// The payment's PSP is deferred (its circuit breaker open, its key refused), now or earlier in the run:
    /// not asked this round, and backed off; the run goes on with the other PSPs' payments.
    Deferred,
    /// Past the age at a PSP without a status read (Adyen): its end (a cancel or reversal) was requested; the
    /// PSP's notification records it (backed off meanwhile).
    EndRequested,
    /// More refunds failed than recovery gives back ([`Payment::refund_for_operator`](shared::Payment::refund_for_operator)): the PSP is not asked
    /// (nothing recovery may do moves the money), the payment is counted (`RefundsForOperator`, alarmed) and
    /// looked at again after [`OPERATOR_RECHECK`](crate::OPERATOR_RECHECK), until a person's refund makes it `refunded`.
    ForOperator,
    /// A `captured` payment whose capture failed at the card scheme ([`Payment::capture_lost`](shared::Payment::capture_lost)): the money will
    /// not arrive unless the PSP captures again. Not asked (Adyen's notification tells the re-capture), counted
    /// (`CapturesFailed`, alarmed) and looked at again after [`OPERATOR_RECHECK`](crate::OPERATOR_RECHECK) while it lasts.
    CaptureLost,
}

impl Reconciled {
    /// What recording a refund's answer (or an expiry) did to the payment, from its finalize's `outcome`.
    pub(crate) fn of(outcome: &FinalizeOutcome) -> Self {
        match outcome.result {
            _ if outcome.refused.is_some() => Reconciled::Refused,
            FinalizeResult::Applied(kind) => Reconciled::Applied(kind),
            FinalizeResult::Ignored(_) | FinalizeResult::Deferred(_) => Reconciled::Unchanged,
        }
    }

    /// How a payment with nothing to ask (`why`) is counted.
    pub(crate) fn nothing_to_ask(why: NothingToAsk) -> Self {
        match why {
            NothingToAsk::NoReference => Reconciled::NoReference,
            NothingToAsk::NoClient
            | NothingToAsk::UnknownToPsp
            | NothingToAsk::NoStatusRead
            | NothingToAsk::EndUnanswered => Reconciled::NoClient,
        }
    }
}

/// Counts of one recovery run (also an EMF record).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub found: u32,
    pub applied: u32,
    pub unchanged: u32,
    pub busy: u32,
    pub no_reference: u32,
    /// Payments of a PSP recovery has no client of (or whose reference it does not know): not asked.
    pub no_client: u32,
    /// Payments with nothing to ask past the expiry age, recorded failed (`Expired`, alarmed).
    pub expired: u32,
    pub refused: u32,
    pub deferred: u32,
    /// Expired payments whose end was requested at a PSP without a status read (Adyen), awaiting its
    /// notification.
    pub end_requested: u32,
    /// Payments whose money only a person can return now ([`Reconciled::ForOperator`]): `RefundsForOperator`.
    pub for_operator: u32,
    /// Captured payments whose capture failed at the card scheme ([`Reconciled::CaptureLost`]): `CapturesFailed`.
    pub captures_lost: u32,
    pub errors: u32,
    /// Cut by the run's deadline (it and the payments not reached are the next run's).
    pub left: u32,
    /// `RecoveryLagSeconds`: how long the oldest due payment the run found has been due, in seconds (0 when
    /// none is due), from the index query the run makes anyway. Due is `RECOVERY_STALE_AFTER_SECONDS` after
    /// its opening or after its last back-off, which moves its sort key ahead (`open_index`); so it grows
    /// exactly when recovery stops getting through (a run that keeps failing, a back-off that does not
    /// persist, a backlog), which is what it is alarmed for. It says nothing of how long a payment is open:
    /// one the PSP keeps answering `processing` is backed off every run and is never due for long.
    pub lag_seconds: u64,
    /// `OldestOpenPaymentAgeSeconds`: the largest `now - created_at` over the payments the run read and left
    /// open, in seconds (0 when it read none). Every open payment is read at least every
    /// `MAX_RECHECK_INTERVAL` (6 h) plus one run while recovery gets through (else the lag alarms), so the
    /// maximum over any 6-hour window covers every open payment: what the open-payment alarm reads.
    pub oldest_open_age_seconds: u64,
    /// Objects Stripe failed to generate an event about, read once and applied (or found not ours).
    pub rechecked: u32,
    /// Objects Stripe failed to generate an event about that recovery could not read for good (Stripe does
    /// not know them, or their type is not one it reads): logged with the object for an operator, alarmed.
    pub rechecks_unread: u32,
}

impl RecoveryReport {
    /// Counts a payment created at `created_ms` that the run read and left open.
    pub(crate) fn saw_open(&mut self, created_ms: Option<i64>, now_ms: i64) {
        if let Some(created) = created_ms {
            self.oldest_open_age_seconds = self.oldest_open_age_seconds.max(age_seconds(created, now_ms));
        }
    }

    /// Counts one payment's outcome.
    pub(crate) fn count(&mut self, id: &PaymentId, reconciled: Result<Reconciled, RecoveryError>) {
        match reconciled {
            Ok(Reconciled::Applied(_)) => self.applied = self.applied.saturating_add(1),
            Ok(Reconciled::Unchanged | Reconciled::NotOpen) => self.unchanged = self.unchanged.saturating_add(1),
            Ok(Reconciled::Busy) => self.busy = self.busy.saturating_add(1),
            Ok(Reconciled::NoReference) => self.no_reference = self.no_reference.saturating_add(1),
            Ok(Reconciled::NoClient) => self.no_client = self.no_client.saturating_add(1),
            Ok(Reconciled::Expired) => self.expired = self.expired.saturating_add(1),
            Ok(Reconciled::Refused) => self.refused = self.refused.saturating_add(1),
            Ok(Reconciled::Deferred) => self.deferred = self.deferred.saturating_add(1),
            Ok(Reconciled::EndRequested) => self.end_requested = self.end_requested.saturating_add(1),
            Ok(Reconciled::ForOperator) => self.for_operator = self.for_operator.saturating_add(1),
            Ok(Reconciled::CaptureLost) => self.captures_lost = self.captures_lost.saturating_add(1),
            Err(e) => {
                self.errors = self.errors.saturating_add(1);
                warn!(payment_id = %id, error = %ErrorChain(&e), "recovery of one payment failed; retried after its back-off");
            }
        }
    }
}

/// Namespace of the reconciler's metrics.
pub const NAMESPACE: &str = "Payments/Recovery";

/// The reconciler's EMF record, one per run: its counts, `RecoveryLagSeconds`, `OldestOpenPaymentAgeSeconds`
/// and `RefundsForOperator` (alarmed; see [`RecoveryReport`]).
pub fn emf(r: &RecoveryReport, now_ms: i64) -> serde_json::Value {
    shared::metrics::emf(
        NAMESPACE,
        &[&[]],
        &[
            ("Found", "Count"),
            ("Applied", "Count"),
            ("Unchanged", "Count"),
            ("Busy", "Count"),
            ("NoReference", "Count"),
            ("NoClient", "Count"),
            ("Expired", "Count"),
            ("Refused", "Count"),
            ("Deferred", "Count"),
            ("EndRequested", "Count"),
            ("RefundsForOperator", "Count"),
            ("CapturesFailed", "Count"),
            ("Errors", "Count"),
            ("RecoveryLagSeconds", "Seconds"),
            ("OldestOpenPaymentAgeSeconds", "Seconds"),
            ("Rechecked", "Count"),
            ("RechecksUnread", "Count"),
        ],
        serde_json::json!({
            "Found": r.found, "Applied": r.applied, "Unchanged": r.unchanged, "Busy": r.busy,
            "NoReference": r.no_reference, "NoClient": r.no_client,
            "Expired": r.expired, "Refused": r.refused, "Deferred": r.deferred, "EndRequested": r.end_requested,
            "RefundsForOperator": r.for_operator, "CapturesFailed": r.captures_lost, "Errors": r.errors,
            "Left": r.left, "RecoveryLagSeconds": r.lag_seconds,
            "OldestOpenPaymentAgeSeconds": r.oldest_open_age_seconds,
            "Rechecked": r.rechecked, "RechecksUnread": r.rechecks_unread,
        }),
        now_ms,
    )
}
