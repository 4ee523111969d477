//! The one finalize decision that the sync, webhook and recovery paths all call.
//!
//! `decide` is pure: from the current payment and one observation it answers apply (the next payment and the
//! event to record), ignore (duplicate, stale, no-op) or defer (try again later). The store writes an
//! `Apply` under the version token; on a conflict it calls `decide` again with the item that won.
//!
//! An observation that is not about this payment (another amount, currency or PSP payment id, or one the
//! path already found inconsistent) is *refused*: an anomaly event is recorded and nothing else changes. It
//! binds no PSP reference, moves no event clock and takes no place in the dedup window, so it cannot shadow
//! the real news.
//!
//! Recovery's observations are the PSP's status at the time of the query, not events: where the PSP says the
//! customer must act, a `processing` payment moves to `requires_action` (a webhook saying so would be stale),
//! and a recovered `processing` only moves a `pending` payment, so recovery never takes away an action or a
//! retry the customer may still need.

use crate::event::{EventKind, PaymentEvent};
use crate::observation::{Observation, Outcome, Path};
use crate::payment::{Payment, StrayCapture};
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

/// Why an observation cannot be applied yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferReason {
    /// A refund arrived before the capture it refunds and does not prove the capture itself.
    RefundBeforeCapture,
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
        Ok(change) => Decision::Apply(Box::new(apply(current, observation, change, now_ms))),
        Err(not_applied) => not_applied,
    }
}

fn ignore(reason: IgnoreReason) -> Result<Change, Decision> {
    Err(Decision::Ignore(reason))
}

fn change_for(current: &Payment, observation: &Observation) -> Result<Change, Decision> {
    let status = current.status;
    let amount = current.money.amount_minor();
    match &observation.outcome {
        Outcome::Anomaly { reason } => Ok(Change::Refused(reason.clone())),

        // Money taken on a payment we hold as failed: never stale. Recorded once (whichever path reports it
        // first, however often), then recovery gives it back; the refund of it is recorded as such.
        Outcome::Succeeded if status == Failed => match current.stray_capture {
            Some(_) => ignore(IgnoreReason::NoOp),
            None => Ok(Change::StrayCapture),
        },
        Outcome::Refunded {
            refunded_total_minor: total,
            ..
        } if status == Failed => match current.stray_capture {
            Some(_) if *total > amount => Ok(Change::Anomaly(format!(
                "refunded total {total} exceeds the payment amount {amount}"
            ))),
            Some(_) if *total <= current.refunded_minor => ignore(IgnoreReason::NoOp),
            Some(stray) => Ok(Change::StrayRefund {
                total: *total,
                anomaly: stray.anomaly,
            }),
            None => Ok(Change::Anomaly("refund on a failed payment".into())),
        },

        Outcome::Refunded {
            refunded_total_minor: total,
            ..
        } if *total > amount => Ok(Change::Anomaly(format!(
            "refunded total {total} exceeds the payment amount {amount}"
        ))),
        Outcome::Refunded {
            refunded_total_minor: total,
            capture_proven,
        } => match status {
            Captured | Refunded if *total <= current.refunded_minor => ignore(if *total == current.refunded_minor {
                IgnoreReason::NoOp
            } else {
                IgnoreReason::Stale
            }),
            Captured => Ok(refund_change(*total, amount)),
            Refunded => ignore(IgnoreReason::Stale),
            _ if *capture_proven => Ok(refund_change(*total, amount)),
            _ => Err(Decision::Defer(DeferReason::RefundBeforeCapture)),
        },

        Outcome::Succeeded => match status {
            Captured => ignore(IgnoreReason::NoOp),
            Refunded => ignore(IgnoreReason::Stale),
            _ => Ok(Change::To(Captured, EventKind::PaymentCaptured)),
        },
        Outcome::Failed { .. } => match status {
            Failed => ignore(IgnoreReason::NoOp),
            Captured | Refunded => ignore(IgnoreReason::Stale),
            _ => Ok(Change::To(Failed, EventKind::PaymentFailed)),
        },

        // Non-terminal outcomes: never move a terminal payment, never go back from processing to an
        // action, and never let an older event overwrite a newer one.
        _ if status.is_terminal() => ignore(IgnoreReason::Stale),
        _ if is_older_than_current(current, observation) => ignore(IgnoreReason::Stale),
        Outcome::Processing => match status {
            Processing => ignore(IgnoreReason::NoOp),
            // The PSP's snapshot says nothing about the action or retry the customer holds: keep them.
            RequiresAction | AttemptFailed if observation.path == Path::Recovery => ignore(IgnoreReason::NoOp),
            _ => Ok(Change::To(Processing, EventKind::ProcessingStarted)),
        },
        Outcome::RequiresAction(action) => match status {
            Processing if observation.path != Path::Recovery => ignore(IgnoreReason::Stale),
            RequiresAction if current.action.as_ref() == Some(action) => ignore(IgnoreReason::NoOp),
            _ => Ok(Change::To(RequiresAction, EventKind::ActionRequired)),
        },
        Outcome::AttemptFailed { reason, retry_token } => match status {
            AttemptFailed
                if current.reason.as_deref() == Some(reason.as_str()) && current.retry_token == *retry_token =>
            {
                ignore(IgnoreReason::NoOp)
            }
            _ => Ok(Change::To(AttemptFailed, EventKind::AttemptFailed)),
        },
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

fn apply(current: &Payment, observation: &Observation, change: Change, now_ms: i64) -> Transition {
    let mut next = current.clone();
    next.version = current.version.saturating_add(1);
    next.updated_at_ms = now_ms;
    let refused = match &change {
        Change::Refused(reason) => Some(reason.clone()),
        _ => None,
    };
    if refused.is_none() {
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

    let (kind, event_reason) = match change {
        Change::Anomaly(reason) | Change::Refused(reason) => {
            next.anomalies = next.anomalies.saturating_add(1);
            (EventKind::AnomalyRecorded, Some(reason))
        }
        Change::StrayCapture => {
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
        Change::StrayRefund { total, anomaly } => {
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
        Change::To(status, kind) => {
            next.status = status;
            // Secrets live only in the status that needs them: every other move removes them.
            next.action = None;
            next.retry_token = None;
            match &observation.outcome {
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
                Outcome::Processing | Outcome::Succeeded => next.reason = None,
                Outcome::Anomaly { .. } => {}
            }
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
    Transition {
        payment: next,
        event,
        refused,
    }
}

#[cfg(test)]
// Tests count versions and times freely (clippy.toml lets tests unwrap, expect, panic and index).
#[allow(clippy::arithmetic_side_effects)]
mod tests;
