//! Stripe's refund events (`refund.created`, `refund.updated`, `refund.failed`, `charge.refund.updated`):
//! each carries one Refund object with its own amount and status, which is what makes a refund done
//! (`succeeded`), still on its way (`pending`, `requires_action`) or undone (`failed`, `canceled`, possibly
//! after `succeeded`). `charge.refunded` only says a running total and nothing of a refund that fails later.
//!
//! A refund carries no metadata of ours: it finds its payment by its `payment_intent` (the bound PSP
//! reference). A refund of a charge without a PaymentIntent is none of ours (every charge we make has one):
//! acknowledged and ignored.
//!
//! Since API version 2024-10-28.acacia Stripe sends `refund.created`, `refund.updated` and `refund.failed` for
//! every refund (before, for refunds without a charge only; card refunds' changes came as
//! `charge.refund.updated`): we take all four, and a refund heard of twice is a no-op.

use super::About;
use crate::psp_event::{self, Unparseable};
use serde::Deserialize;
use shared::{text, Outcome, RefundEntry, RefundReport, RefundStatus};

/// The refund event types we act on.
pub(super) fn handles(kind: &str) -> bool {
    matches!(
        kind,
        "refund.created" | "refund.updated" | "refund.failed" | "charge.refund.updated"
    )
}

#[derive(Deserialize)]
struct Refund {
    id: String,
    amount: u64,
    currency: String,
    status: String,
    #[serde(default)]
    payment_intent: Option<String>,
    #[serde(default)]
    failure_reason: Option<String>,
}

/// What a refund event says; `None` for a refund of a charge that has no PaymentIntent.
pub(super) fn about(object: &serde_json::Value) -> Result<Option<About>, Unparseable> {
    let refund = Refund::deserialize(object).map_err(Unparseable::because)?;
    let Some(intent) = refund.payment_intent else {
        return Ok(None);
    };
    let status =
        RefundStatus::parse(&refund.status).ok_or_else(|| Unparseable::unknown_status("refund", &refund.status))?;
    let report = RefundReport {
        refund: RefundEntry {
            // Stored on the payment and its events: within the text rules, as long as an account id at most.
            refund_id: text::bounded("refund id", &refund.id, text::MAX_ACCOUNT_CHARS).map_err(Unparseable::because)?,
            amount_minor: refund.amount,
            status,
        },
        // Stripe keeps a `failure_reason` on a refund that failed; it means something only then.
        failure_reason: match refund.failure_reason {
            Some(reason) if status.is_undone() => Some(psp_event::reason("failure_reason", &reason)?),
            _ => None,
        },
        answers_give_back: None,
    };
    About::of_intent(intent, refund.currency, Outcome::Refund(report)).map(Some)
}
