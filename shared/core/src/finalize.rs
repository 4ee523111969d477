//! The one finalize decision that the sync, webhook and recovery paths all call.
//!
//! `decide` is pure: from the current payment and one observation it answers apply (the next payment and the
//! event to record), ignore (duplicate, stale, no-op) or defer (try again later). The store writes an
//! `Apply` under the version token; on a conflict it calls `decide` again with the item that won.
//!
//! An observation that is not about this payment (another amount, currency or PSP payment id, or one the
//! path already found inconsistent) is *refused*: an anomaly event is recorded and nothing else changes. It
//! binds no PSP reference, moves no event clock and takes no place in the dedup window, so it cannot shadow
//! the real news; its event id is kept apart (`refused_psp_events`), so the PSP's retries of it are
//! duplicates, not one more anomaly and alarm each.
//!
//! Recovery's observations are the PSP's status at the time of the query, not events: where the PSP says the
//! customer must act, a `processing` payment moves to `requires_action` (a webhook saying so would be stale),
//! and a recovered `processing` only moves a `pending` payment, so recovery never takes away an action or a
//! retry the customer may still need.

use crate::event::{EventKind, PaymentEvent};
use crate::observation::{Channel, Observation, Outcome};
use crate::payment::{CustomerAction, Payment, StrayCapture};
use crate::secret::RetryToken;
use crate::status::PaymentStatus::{self, *};
use serde::Serialize;

/// Why an observation changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IgnoreReason {
    /// This PSP event id was applied already.
    Duplicate,
    /// Older news than what the payment already holds (a late `processing` after `captured`).
    Stale,
    /// The payment already is in the observed state.
    NoOp,
}

impl IgnoreReason {
    /// The one wording of each reason outside the code: what the intake answers the PSP (its `result`) and
    /// what `paymentsctl parked replay` reports. A no-op is worded as a duplicate: to the PSP and to an
    /// operator both say the same, that the event changed nothing and needs no retry.
    pub fn answer(self) -> &'static str {
        match self {
            Self::Duplicate | Self::NoOp => "duplicate",
            Self::Stale => "stale",
        }
    }
}

/// Why an observation cannot be applied yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferReason {
    /// A refund arrived before the capture it refunds and does not prove the capture itself.
    RefundBeforeCapture,
    /// A dispute arrived before the capture of the money it disputes.
    DisputeBeforeCapture,
}

/// The next payment (version + 1) and the one event that records the move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub payment: Payment,
    pub event: PaymentEvent,
    /// Why the observation was refused (an anomaly recorded, nothing else applied), if it was.
    pub refused: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Apply(Box<Transition>),
    Ignore(IgnoreReason),
    Defer(DeferReason),
}

/// What an applicable observation does to the payment, before bookkeeping.
enum Change {
    To(PaymentStatus, EventKind),
    /// Money moved where it should not have: recorded and alarmed.
    Anomaly(String),
    /// Money taken on a failed payment: an anomaly, and a refund now due.
    StrayCapture,
    /// (Part of) the money of a stray capture came back: the refund recorded, the payment stays failed.
    StrayRefund {
        total: u64,
        anomaly: u32,
    },
    /// The observation is not about this payment: recorded, nothing else applied.
    Refused(String),
    /// One refund's news: the payment's refunds as they now stand (see [`refund`]).
    Refund {
        refunds: Vec<crate::refund::RefundEntry>,
        report: crate::observation::RefundReport,
        ends_give_back: bool,
    },
    /// A dispute's new fact: the payment's dispute after it and the event kind (see [`dispute`]).
    Dispute(Box<crate::dispute::Dispute>, EventKind),
    /// The capture failed at the card scheme (the reason): flagged, the status kept.
    CaptureFailed(String),
    /// A new capture after a failed one: the flag cleared.
    Recaptured,
}

/// Decides what `observation` does to `current`. `now_ms` stamps the change.
pub fn decide(current: &Payment, observation: &Observation, now_ms: i64) -> Decision {
    if let Some(id) = &observation.psp_event_id {
        if current.has_seen(id) {
            return Decision::Ignore(IgnoreReason::Duplicate);
        }
    }
    let change = match observation.check(current) {
        Err(mismatch) => Ok(Change::Refused(mismatch)),
        Ok(()) => change_for(current, observation),
    };
    match change {
        // A PSP's retry of an event refused already: its anomaly is recorded (and alarmed) once.
        Ok(Change::Refused(_)) if refused_before(current, observation) => Decision::Ignore(IgnoreReason::Duplicate),
        Ok(change) => Decision::Apply(Box::new(apply(current, observation, change, now_ms))),
        Err(not_applied) => not_applied,
    }
}

fn refused_before(current: &Payment, observation: &Observation) -> bool {
    observation
        .psp_event_id
        .as_ref()
        .is_some_and(|id| current.has_refused(id))
}

fn ignore(reason: IgnoreReason) -> Result<Change, Decision> {
    Err(Decision::Ignore(reason))
}

/// What `observation` does to `current`, one function per kind of news. The arms are ordered: an anomaly
/// first, then the terminal outcomes (whatever the payment's status), then the non-terminal ones, which the
/// two guards keep off a terminal payment and off newer news.
fn change_for(current: &Payment, observation: &Observation) -> Result<Change, Decision> {
    match &observation.outcome {
        Outcome::Anomaly { reason } => Ok(Change::Refused(reason.clone())),
        Outcome::Succeeded => on_succeeded(current),
        Outcome::Refunded {
            refunded_total_minor,
            capture_proven,
        } => on_refunded(current, *refunded_total_minor, *capture_proven),
        Outcome::Failed { .. } => on_failed(current.status),
        Outcome::Refund(report) => refund::on_refund(current, report),
        Outcome::Dispute(report) => dispute::on_dispute(current, report),
        Outcome::CaptureFailed { reason, .. } => on_capture_failed(current, reason),

        // Non-terminal outcomes: never move a terminal payment, never go back from processing to an
        // action, and never let an older event overwrite a newer one.
        _ if current.status.is_terminal() => ignore(IgnoreReason::Stale),
        _ if is_older_than_current(current, observation) => ignore(IgnoreReason::Stale),
        Outcome::Processing => on_processing(current.status, observation.path),
        Outcome::Authorized { capture_before_ms } => on_authorized(current, *capture_before_ms),
        Outcome::RequiresAction(action) => on_requires_action(current, action, observation.path),
        Outcome::AttemptFailed { reason, retry_token } => on_attempt_failed(current, reason, retry_token),
    }
}

/// Money was taken.
fn on_succeeded(current: &Payment) -> Result<Change, Decision> {
    match current.status {
        // Money taken on a payment we hold as failed: never stale. Recorded once (whichever path reports it
        // first, however often), then recovery gives it back; the refund of it is recorded as such.
        Failed => match current.stray_capture {
            Some(_) => ignore(IgnoreReason::NoOp),
            None => Ok(Change::StrayCapture),
        },
        // A new capture after the last one failed at the scheme (Adyen's re-capture): the money comes after all.
        Captured if current.capture_failed.is_some() => Ok(Change::Recaptured),
        Captured => ignore(IgnoreReason::NoOp),
        Refunded => ignore(IgnoreReason::Stale),
        _ => Ok(Change::To(Captured, EventKind::PaymentCaptured)),
    }
}

/// The capture failed at the card scheme. Recorded beside the status, whatever it is but failed (where no
/// money was to come): on a `captured` payment the money will not arrive; before the capture is reported it
/// is the fact to keep when it is.
fn on_capture_failed(current: &Payment, reason: &str) -> Result<Change, Decision> {
    match current.status {
        Failed => ignore(IgnoreReason::NoOp),
        _ if current.capture_failed.is_some() => ignore(IgnoreReason::NoOp),
        _ => Ok(Change::CaptureFailed(reason.to_owned())),
    }
}

/// The PSP's cumulative refunded `total`. A refund on a failed payment can only be of a stray capture; more
/// than the payment's amount is an anomaly; a refund before the capture waits for it unless it proves it.
fn on_refunded(current: &Payment, total: u64, capture_proven: bool) -> Result<Change, Decision> {
    let status = current.status;
    let amount = current.money.amount_minor();
    // A cumulative total also counts pending refunds: once the PSP reports refunds one by one, they decide.
    if !current.refunds.is_empty() {
        return ignore(IgnoreReason::NoOp);
    }
    if status == Failed {
        return on_stray_refund(current, total, amount);
    }
    if total > amount {
        return Ok(over_refund(total, amount));
    }
    match status {
        Captured | Refunded if total <= current.refunded_minor => ignore(if total == current.refunded_minor {
            IgnoreReason::NoOp
        } else {
            IgnoreReason::Stale
        }),
        Captured => Ok(refund_change(total, amount)),
        Refunded => ignore(IgnoreReason::Stale),
        _ if capture_proven => Ok(refund_change(total, amount)),
        _ => Err(Decision::Defer(DeferReason::RefundBeforeCapture)),
    }
}

/// A refund on a failed payment: of the stray capture, if one was recorded (the payment stays failed);
/// without one, money we never held came back, an anomaly.
fn on_stray_refund(current: &Payment, total: u64, amount: u64) -> Result<Change, Decision> {
    match current.stray_capture {
        Some(_) if total > amount => Ok(over_refund(total, amount)),
        Some(_) if total <= current.refunded_minor => ignore(IgnoreReason::NoOp),
        Some(stray) => Ok(Change::StrayRefund {
            total,
            anomaly: stray.anomaly,
        }),
        None => Ok(Change::Anomaly("refund on a failed payment".into())),
    }
}

/// More refunded than the payment's amount: never applied, whatever the status.
fn over_refund(total: u64, amount: u64) -> Change {
    Change::Anomaly(format!("refunded total {total} exceeds the payment amount {amount}"))
}

/// Cancelled or finally failed: news until the money is taken.
fn on_failed(status: PaymentStatus) -> Result<Change, Decision> {
    match status {
        Failed => ignore(IgnoreReason::NoOp),
        Captured | Refunded => ignore(IgnoreReason::Stale),
        _ => Ok(Change::To(Failed, EventKind::PaymentFailed)),
    }
}

/// The PSP holds the money (on a non-terminal payment, not older than its news): authorized, or, already
/// authorized, its capture deadline learned. Only a capture or a cancel moves an authorization on.
fn on_authorized(current: &Payment, capture_before_ms: Option<i64>) -> Result<Change, Decision> {
    match current.status {
        Authorized if capture_before_ms.is_none() || current.capture_before_ms == capture_before_ms => {
            ignore(IgnoreReason::NoOp)
        }
        _ => Ok(Change::To(Authorized, EventKind::PaymentAuthorized)),
    }
}

/// The PSP is processing the payment (on a non-terminal payment, not older than its news).
fn on_processing(status: PaymentStatus, path: Channel) -> Result<Change, Decision> {
    match status {
        Processing => ignore(IgnoreReason::NoOp),
        // An authorization is past processing: the PSP's earlier news.
        Authorized => ignore(IgnoreReason::Stale),
        // The PSP's snapshot says nothing about the action or retry the customer holds: keep them.
        RequiresAction | AttemptFailed if path == Channel::Recovery => ignore(IgnoreReason::NoOp),
        _ => Ok(Change::To(Processing, EventKind::ProcessingStarted)),
    }
}

/// The customer must act (on a non-terminal payment, not older than its news). Only recovery's snapshot
/// takes a `processing` payment back to an action; a webhook saying so is older news.
fn on_requires_action(current: &Payment, action: &CustomerAction, path: Channel) -> Result<Change, Decision> {
    match current.status {
        Processing if path != Channel::Recovery => ignore(IgnoreReason::Stale),
        Authorized => ignore(IgnoreReason::Stale),
        RequiresAction if current.action.as_ref() == Some(action) => ignore(IgnoreReason::NoOp),
        _ => Ok(Change::To(RequiresAction, EventKind::ActionRequired)),
    }
}

/// An attempt was declined (on a non-terminal payment, not older than its news): new unless the payment
/// holds this very reason and retry token.
fn on_attempt_failed(current: &Payment, reason: &str, retry_token: &Option<RetryToken>) -> Result<Change, Decision> {
    match current.status {
        Authorized => ignore(IgnoreReason::Stale),
        AttemptFailed if current.reason.as_deref() == Some(reason) && current.retry_token == *retry_token => {
            ignore(IgnoreReason::NoOp)
        }
        _ => Ok(Change::To(AttemptFailed, EventKind::AttemptFailed)),
    }
}

fn refund_change(total: u64, amount: u64) -> Change {
    if total == amount {
        Change::To(Refunded, EventKind::PaymentRefunded)
    } else {
        Change::To(Captured, EventKind::RefundRecorded)
    }
}

fn is_older_than_current(current: &Payment, observation: &Observation) -> bool {
    matches!(
        (observation.occurred_at_ms, current.last_psp_event_at_ms),
        (Some(seen), Some(newest)) if seen < newest
    )
}

/// The next payment and its event: bookkeeping of the news (unless refused), then the change itself.
fn apply(current: &Payment, observation: &Observation, change: Change, now_ms: i64) -> Transition {
    let mut next = current.clone();
    next.version = current.version.saturating_add(1);
    next.updated_at_ms = now_ms;
    let refused = match &change {
        Change::Refused(reason) => Some(reason.clone()),
        _ => None,
    };
    match (&refused, &observation.psp_event_id) {
        (None, _) => note_news(&mut next, observation),
        // Refused: only its id, apart from the dedup window, so its redeliveries are duplicates.
        (Some(_), Some(id)) => next.remember_refused(id.clone()),
        (Some(_), None) => {}
    }
    let mut refund_recorded = None;

    let (kind, event_reason) = match change {
        Change::Anomaly(reason) | Change::Refused(reason) => {
            next.anomalies = next.anomalies.saturating_add(1);
            (EventKind::AnomalyRecorded, Some(reason))
        }
        Change::StrayCapture => record_stray_capture(&mut next),
        Change::StrayRefund { total, anomaly } => record_stray_refund(&mut next, total, anomaly),
        Change::Refund {
            refunds,
            report,
            ends_give_back,
        } => {
            let recorded = refund::record_refund(&mut next, refunds, &report, ends_give_back);
            refund_recorded = Some(report.refund);
            recorded
        }
        Change::Dispute(held, kind) => dispute::record_dispute(&mut next, *held, kind),
        Change::CaptureFailed(reason) => record_capture_failed(&mut next, &observation.outcome, reason),
        Change::Recaptured => {
            next.capture_failed = None;
            (EventKind::PaymentCaptured, Some(RECAPTURED.to_owned()))
        }
        Change::To(status, kind) => {
            move_to(&mut next, status, &observation.outcome);
            (kind, next.reason.clone())
        }
    };

    let mut event = PaymentEvent::describe(
        &next,
        Some(current.status),
        kind,
        observation.path,
        observation.psp_event_id.clone(),
        &observation.correlation_id,
        observation.trace_context.clone(),
        now_ms,
    );
    event.reason = event_reason;
    event.refund = refund_recorded;
    Transition {
        payment: next,
        event,
        refused,
    }
}

/// What an applied observation leaves behind whatever it changes: its event id in the dedup window, the
/// newest event time, and the PSP reference if the payment had none. A refused one leaves none of these, so
/// it cannot shadow the real news.
fn note_news(next: &mut Payment, observation: &Observation) {
    if let Some(id) = &observation.psp_event_id {
        next.remember(id.clone());
    }
    if let Some(at) = observation.occurred_at_ms {
        next.last_psp_event_at_ms = Some(next.last_psp_event_at_ms.map_or(at, |newest| newest.max(at)));
    }
    if next.psp_reference.is_none() {
        next.psp_reference.clone_from(&observation.psp_reference);
    }
}

/// The reason of the event that clears a failed capture: the PSP captured again.
const RECAPTURED: &str = "captured again after the capture failed at the card scheme";

/// The capture failed at the card scheme: flagged with `reason`, and the failed capture's event forgotten by
/// the dedup, so the PSP's re-capture under the same id is news.
fn record_capture_failed(next: &mut Payment, outcome: &Outcome, reason: String) -> (EventKind, Option<String>) {
    if let Outcome::CaptureFailed {
        capture_event: Some(capture),
        ..
    } = outcome
    {
        let stem = format!("{}-", capture.as_str());
        next.seen_psp_events
            .retain(|seen| seen != capture && !seen.as_str().starts_with(&stem));
    }
    next.capture_failed = Some(reason.clone());
    (EventKind::CaptureFailed, Some(reason))
}

/// Money taken on a failed payment: an anomaly, numbered so that its refund can name it, and a refund due.
fn record_stray_capture(next: &mut Payment) -> (EventKind, Option<String>) {
    next.anomalies = next.anomalies.saturating_add(1);
    next.stray_capture = Some(StrayCapture {
        anomaly: next.anomalies,
        refunded: false,
    });
    let reason = format!(
        "money taken after the payment failed (anomaly {}): to be refunded",
        next.anomalies
    );
    (EventKind::AnomalyRecorded, Some(reason))
}

/// The refund of a stray capture: the total recorded, the capture marked refunded once all of it came back;
/// the status stays failed.
fn record_stray_refund(next: &mut Payment, total: u64, anomaly: u32) -> (EventKind, Option<String>) {
    next.refunded_minor = total;
    let full = total == next.money.amount_minor();
    next.stray_capture = Some(StrayCapture {
        anomaly,
        refunded: full,
    });
    let (kind, what) = if full {
        (EventKind::PaymentRefunded, "refunded")
    } else {
        (EventKind::RefundRecorded, "partly refunded")
    };
    (
        kind,
        Some(format!(
            "money taken after the payment failed (anomaly {anomaly}) {what}"
        )),
    )
}

/// Moves the payment to `status` with what the outcome carries.
fn move_to(next: &mut Payment, status: PaymentStatus, outcome: &Outcome) {
    next.status = status;
    // Secrets live only in the status that needs them: every other move removes them.
    next.action = None;
    next.retry_token = None;
    match outcome {
        Outcome::RequiresAction(action) => {
            next.action = Some(action.clone());
            next.reason = None;
        }
        Outcome::AttemptFailed { reason, retry_token } => {
            next.retry_token.clone_from(retry_token);
            next.reason = Some(reason.clone());
        }
        Outcome::Failed { reason } => next.reason = Some(reason.clone()),
        Outcome::Refunded {
            refunded_total_minor, ..
        } => next.refunded_minor = *refunded_total_minor,
        Outcome::Authorized { capture_before_ms } => {
            next.reason = None;
            next.capture_before_ms = capture_before_ms.or(next.capture_before_ms);
        }
        Outcome::Processing | Outcome::Succeeded => next.reason = None,
        Outcome::Anomaly { .. } | Outcome::Refund(_) | Outcome::Dispute(_) | Outcome::CaptureFailed { .. } => {}
    }
}

mod dispute;
mod refund;

#[cfg(test)]
// Tests count versions and times freely (clippy.toml lets tests unwrap, expect, panic and index).
#[allow(clippy::arithmetic_side_effects)]
mod tests;
