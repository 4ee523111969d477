//! What one path learned about a payment: the input of the finalize decision.

use crate::dispute::DisputeReport;
use crate::ids::{CorrelationId, PspEventId, PspReference};
use crate::money::Currency;
use crate::payment::{CustomerAction, Payment};
use crate::refund::RefundEntry;
use crate::secret::RetryToken;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The channel a change came through (the "path" of an observation or event: the field keeps that name, and
/// the stored value is `sync`, `webhook` or `recovery`). All three call the same decision and the same write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// The PSP's synchronous answer, posted by the checkout orchestrator.
    Sync,
    /// A PSP webhook.
    Webhook,
    /// Reconciliation: the PSP asked about a payment that stayed open too long. Its observation is the PSP's
    /// status at the time of the query (a snapshot), not an event: see [`crate::decide`].
    Recovery,
}

impl Channel {
    /// The stored and logged name (`sync`, `webhook`, `recovery`): the same as the serde form.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Sync => "sync",
            Channel::Webhook => "webhook",
            Channel::Recovery => "recovery",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the PSP said happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    RequiresAction(CustomerAction),
    Processing,
    /// The PSP holds the money until we capture it (manual capture), at most until `capture_before_ms` (epoch
    /// ms, Stripe's `capture_before` of the charge) when the report carries it.
    Authorized {
        capture_before_ms: Option<i64>,
    },
    /// Money was taken.
    Succeeded,
    /// This attempt was declined; the customer may retry.
    AttemptFailed {
        reason: String,
        retry_token: Option<RetryToken>,
    },
    /// Cancelled or finally failed.
    Failed {
        reason: String,
    },
    /// The PSP's cumulative refunded amount. `capture_proven`: the event itself shows the capture happened
    /// (a Stripe `charge.refunded` carries a captured charge).
    Refunded {
        refunded_total_minor: u64,
        capture_proven: bool,
    },
    /// A capture the PSP reported done was rejected by the card scheme (Adyen's `CAPTURE_FAILED`): the money
    /// will not arrive unless the PSP captures again. Recorded beside the status (`Payment::capture_failed`),
    /// which it never changes.
    CaptureFailed {
        reason: String,
        /// The event id under which the PSP reported the capture that failed, or its stem when the failure
        /// does not carry all of it (Adyen's `CAPTURE-true-<capture>`, without the payment's reference the
        /// failure may leave out): that id, and every id that extends it by `-...`, is forgotten by the
        /// dedup, so a new capture reported under the same id (Adyen re-captures under the capture's own
        /// reference) is news, not a duplicate.
        capture_event: Option<PspEventId>,
    },
    /// The path found the event inconsistent with the payment (amount, currency, mode, account): recorded,
    /// alarmed and not applied.
    Anomaly {
        reason: String,
    },
    /// One refund as the PSP reports it now (a Stripe Refund object): only `succeeded` returns money, a
    /// pending one is recorded as pending, a failed or canceled one reopens the money question.
    Refund(RefundReport),
    /// A dispute (chargeback or inquiry) of the payment's charge, as a `charge.dispute.*` event reports it.
    Dispute(DisputeReport),
}

/// One refund, as a `refund.*` / `charge.refund.updated` event or a refund answer reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundReport {
    /// The PSP's refund id, amount (this refund's, not a total) and status.
    pub refund: RefundEntry,
    /// Why the refund failed or was canceled, when it did and the PSP says (`failure_reason`).
    pub failure_reason: Option<String>,
    /// This is recovery's answer to the give-back of failure `n` ([`crate::GiveBack`]): recording it ends
    /// that give-back, also when the refund was heard of already (a run that crashed after the refund call).
    pub answers_give_back: Option<u32>,
}

/// What the PSP says about the money of the payment it reports on. Checked against our payment before
/// anything is applied ([`Observation::check`]); a field the PSP did not send is not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    pub amount_minor: Option<u64>,
    pub currency: Option<Currency>,
}

/// One observation from one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub path: Channel,
    pub outcome: Outcome,
    /// The PSP's event id, when the observation came from an event (the dedup key).
    pub psp_event_id: Option<PspEventId>,
    /// When the PSP says this happened (epoch ms), used to spot out-of-order events.
    pub occurred_at_ms: Option<i64>,
    /// The PSP's id of the payment it reports on (a Stripe PaymentIntent id). Bound to our payment by the
    /// first applied observation that names one; any later one must name the same.
    pub psp_reference: Option<PspReference>,
    /// Amount and currency as the PSP reports them.
    pub claims: Claims,
    pub correlation_id: CorrelationId,
    /// W3C `traceparent` (or X-Ray header) of the flow that observed it.
    pub trace_context: Option<String>,
}

impl Observation {
    /// An observation with no event id, time, reference or trace: the usual start for tests and sync answers.
    pub fn new(path: Channel, outcome: Outcome, correlation_id: CorrelationId) -> Self {
        Self {
            path,
            outcome,
            psp_event_id: None,
            occurred_at_ms: None,
            psp_reference: None,
            claims: Claims::default(),
            correlation_id,
            trace_context: None,
        }
    }

    pub fn with_event(mut self, id: PspEventId, occurred_at_ms: i64) -> Self {
        self.psp_event_id = Some(id);
        self.occurred_at_ms = Some(occurred_at_ms);
        self
    }

    /// Is this observation about `payment` at all? Amount, currency and the PSP's payment id must match what
    /// we hold, and the id must be one the payment's PSP could have issued. Every path calls this one check (webhook intake before it answers, and [`crate::decide`] on
    /// every decision, so a decision made again after a version conflict checks again). `Err` names the first
    /// mismatch.
    pub fn check(&self, payment: &Payment) -> Result<(), String> {
        if let Some(amount) = self.claims.amount_minor {
            if amount != payment.money.amount_minor() {
                return Err(format!(
                    "amount {amount} does not match the payment's {}",
                    payment.money.amount_minor()
                ));
            }
        }
        if let Some(currency) = self.claims.currency {
            if currency != payment.money.currency() {
                return Err(format!(
                    "currency {currency} does not match the payment's {}",
                    payment.money.currency()
                ));
            }
        }
        if let Some(named) = &self.psp_reference {
            // Another PSP's object (invariant 13): binding it would have recovery ask the wrong PSP forever.
            payment.provider.check_reference(named).map_err(|e| e.to_string())?;
        }
        if let (Some(bound), Some(named)) = (&payment.psp_reference, &self.psp_reference) {
            if bound != named {
                return Err(format!(
                    "PSP payment {named} is not the one bound to this payment ({bound})"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Channel;

    /// Stored events and outbox messages carry `"path":"sync"` etc.: the type's name is not part of the form.
    #[test]
    fn channel_is_stored_as_the_paths_old_names() {
        for (channel, stored) in [
            (Channel::Sync, "\"sync\""),
            (Channel::Webhook, "\"webhook\""),
            (Channel::Recovery, "\"recovery\""),
        ] {
            assert_eq!(serde_json::to_string(&channel).unwrap(), stored);
            assert_eq!(serde_json::from_str::<Channel>(stored).unwrap(), channel);
            assert_eq!(format!("\"{channel}\""), stored);
        }
    }
}
