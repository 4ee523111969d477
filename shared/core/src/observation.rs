//! What one path learned about a payment: the input of the finalize decision.

use crate::ids::{CorrelationId, PspEventId, PspReference};
use crate::payment::CustomerAction;
use crate::secret::RetryToken;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which path wrote a change. All three call the same decision and the same write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// The PSP's synchronous answer, posted by the checkout orchestrator.
    Sync,
    /// A PSP webhook.
    Webhook,
    /// Reconciliation: the PSP asked about a payment that stayed open too long.
    Recovery,
}

impl Path {
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Sync => "sync",
            Path::Webhook => "webhook",
            Path::Recovery => "recovery",
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the PSP said happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    RequiresAction(CustomerAction),
    Processing,
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
    /// The path found the event inconsistent with the payment (amount, currency, mode, account): recorded,
    /// alarmed and not applied.
    Anomaly {
        reason: String,
    },
}

/// One observation from one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub path: Path,
    pub outcome: Outcome,
    /// The PSP's event id, when the observation came from an event (the dedup key).
    pub psp_event_id: Option<PspEventId>,
    /// When the PSP says this happened (epoch ms), used to spot out-of-order events.
    pub occurred_at_ms: Option<i64>,
    pub psp_reference: Option<PspReference>,
    pub correlation_id: CorrelationId,
    /// W3C `traceparent` (or X-Ray header) of the flow that observed it.
    pub trace_context: Option<String>,
}

impl Observation {
    /// An observation with no event id, time, reference or trace: the usual start for tests and sync answers.
    pub fn new(path: Path, outcome: Outcome, correlation_id: CorrelationId) -> Self {
        Self {
            path,
            outcome,
            psp_event_id: None,
            occurred_at_ms: None,
            psp_reference: None,
            correlation_id,
            trace_context: None,
        }
    }

    pub fn with_event(mut self, id: PspEventId, occurred_at_ms: i64) -> Self {
        self.psp_event_id = Some(id);
        self.occurred_at_ms = Some(occurred_at_ms);
        self
    }
}
