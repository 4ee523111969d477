//! A verified Adyen item in our terms: which payment, what happened, and its identity for the dedup. The
//! observation then goes through the one `decide` every path shares.
//!
//! | eventCode | success `true` | success `false` |
//! |---|---|---|
//! | `AUTHORISATION` | `Processing`: authorised, the money held, not taken | `Failed` (refused, with the reason): final for this pspReference, a new attempt is a new pspReference |
//! | `CAPTURE` | `Succeeded`: the money taken | `Anomaly`: the capture was refused, the money is only held |
//! | `CAPTURE_FAILED` | `CaptureFailed`: a capture reported done was rejected by the card scheme; the payment keeps its status, flagged `capture_failed` until a new `CAPTURE` (Adyen's re-capture) | ignored |
//! | `CANCELLATION`, `TECHNICAL_CANCEL` (a cancel by our reference) | `Failed` (cancelled) | `Anomaly`: the cancel was refused |
//! | `CANCEL_OR_REFUND` | `Failed` (cancelled), or a succeeded refund of the notification's amount when the payment holds a capture | `Anomaly` |
//! | `REFUND` | a refund `succeeded` | a refund `failed` (recovery gives it back) |
//! | `REFUND_FAILED`, `REFUNDED_REVERSED` | the refund `failed`: the money came back to us | ignored |
//! | `NOTIFICATION_OF_CHARGEBACK` | dispute opened (`needs_response`) | ignored |
//! | `CHARGEBACK` | dispute funds withdrawn | ignored |
//! | `CHARGEBACK_REVERSED` | dispute funds reinstated (`won`) | ignored |
//! | any other | acknowledged and ignored | |
//!
//! **Only signed fields decide** ([`DECISION_FIELDS`]): the event code, `success`, the references, the
//! amount and currency. The unsigned `reason` is kept as text for people; `live`, `eventDate` and
//! `additionalData` are not read (the mode is the verifying key's).
//!
//! **Identity**: Adyen sends no event id. A notification is `eventCode-success-pspReference`, plus
//! `-originalReference` for a modification (whose own pspReference is the modification's, the payment's
//! being in `originalReference`): the PSP event id of the dedup every path shares.
//!
//! **Order**: Adyen sends no event time we could trust (`eventDate` is unsigned), so no time is recorded
//! and none is compared. Each fact Adyen reports is final for its object (an authorisation, a capture, a
//! refund are each decided once), so the decision's own rules give the order: a terminal payment is never
//! moved back, `Processing` after `Succeeded` is stale, a refund or dispute before its capture waits (parked
//! and retried), a refund's status only moves forward, a dispute's facts are each recorded once.

use crate::psp_event::{named, Facts, PaymentRef, PspEvent, Unparseable};
use psp::adyen::split_reference;
use shared::{
    text, Currency, DisputeFact, DisputeId, DisputeReport, DisputeStatus, Outcome, PaymentId, PspEventId, PspReference,
    RefundEntry, RefundReport, RefundStatus,
};
use webhook_signatures::adyen::{Item, Mode};

/// The fields a decision reads: every one signed.
pub const DECISION_FIELDS: [&str; 7] = [
    "pspReference",
    "originalReference",
    "merchantReference",
    "amount.value",
    "amount.currency",
    "eventCode",
    "success",
];

/// The eventCodes we act on (every other is acknowledged): the ones to enable on the webhook.
pub const HANDLED_CODES: [&str; 12] = [
    "AUTHORISATION",
    "CAPTURE",
    "CAPTURE_FAILED",
    "CANCELLATION",
    "TECHNICAL_CANCEL",
    "CANCEL_OR_REFUND",
    "REFUND",
    "REFUND_FAILED",
    "REFUNDED_REVERSED",
    "NOTIFICATION_OF_CHARGEBACK",
    "CHARGEBACK",
    "CHARGEBACK_REVERSED",
];

/// One verified notification in our terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub event: PspEvent,
    /// The outcome instead of `event.outcome` when the payment holds a capture (`CANCEL_OR_REFUND`: Adyen
    /// refunded rather than cancelled; only the payment can tell which).
    pub if_captured: Option<Outcome>,
}

/// The signed text of an item, parsed once.
#[derive(Clone)]
struct Signed<'a> {
    code: &'a str,
    success: bool,
    own: PspReference,
    original: Option<PspReference>,
    amount_minor: u64,
    currency: Currency,
    /// Unsigned: for people only.
    reason: String,
}

/// What a verified item (verified by a key of `mode`, received at `received_secs`) says; `None` for an
/// eventCode we do not act on, or a success value that means nothing for it (acknowledged and ignored).
pub fn parse(item: &Item, mode: Mode, received_secs: i64) -> Result<Option<Notification>, Unparseable> {
    let code = item.event_code.as_deref().unwrap_or_default();
    crate::psp_event::event_type(code)?;
    if !HANDLED_CODES.contains(&code) {
        return Ok(None);
    }
    let signed = signed(item, code)?;
    let Some((outcome, if_captured)) = outcome(&signed)? else {
        return Ok(None);
    };
    let payment_reference = match code {
        "AUTHORISATION" => Some(signed.own.clone()),
        _ => signed.original.clone(),
    };
    // Our merchantReference is `<payment id>@<stage>`, signed: the stage decides whose it is (another
    // stage's is ignored at once); without one, a payment id claims the payment, a bound pspReference finds
    // it, anything else is not ours.
    let (reference, stage) = match item.merchant_reference.as_deref() {
        Some(reference) => split_reference(reference),
        None => ("", None),
    };
    let target = PaymentRef {
        payment_id: our_payment_id(Some(reference)),
        psp_reference: payment_reference,
        stage: crate::psp_event::stage_marker(stage)?,
    };
    let target = named(
        target,
        &format!("{code} names neither our payment id nor an originalReference"),
    )?;
    let event = PspEvent {
        id: identity(&signed)?,
        created_secs: received_secs,
        target,
        facts: Facts {
            amount_minor: claims_payment_amount(code).then_some(signed.amount_minor),
            currency: Some(signed.currency),
            livemode: Some(mode.is_live()),
            account: None,
        },
        outcome,
    };
    Ok(Some(Notification { event, if_captured }))
}

fn signed<'a>(item: &'a Item, code: &'a str) -> Result<Signed<'a>, Unparseable> {
    let success = match item.success.as_deref() {
        Some("true") => true,
        Some("false") => false,
        other => {
            return Err(Unparseable(format!(
                "success is {:?}, not \"true\" or \"false\"",
                other.map(|s| s.chars().take(8).collect::<String>())
            )))
        }
    };
    let reference = |value: &Option<String>| {
        value
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(PspReference::parse)
            .transpose()
            .map_err(Unparseable::because)
    };
    let own = reference(&item.psp_reference)?.ok_or_else(|| Unparseable("pspReference is missing".into()))?;
    let amount = item.amount.clone().unwrap_or_default();
    let amount_minor = amount
        .value
        .as_ref()
        .and_then(|v| v.text().parse::<u64>().ok())
        .ok_or_else(|| Unparseable("amount.value is missing or not a whole number".into()))?;
    let currency = Currency::parse(amount.currency.as_deref().unwrap_or_default()).map_err(Unparseable::because)?;
    Ok(Signed {
        code,
        success,
        own,
        original: reference(&item.original_reference)?,
        amount_minor,
        currency,
        reason: text::sanitized(item.reason.as_deref().unwrap_or_default(), text::MAX_REASON_CHARS),
    })
}

/// Does this code's amount claim the payment's own amount (checked against it)? A refund's, a failed
/// capture's and a dispute's are their own.
fn claims_payment_amount(code: &str) -> bool {
    matches!(
        code,
        "AUTHORISATION" | "CAPTURE" | "CANCELLATION" | "TECHNICAL_CANCEL" | "CANCEL_OR_REFUND"
    )
}

/// The merchant reference as our payment id, when it is one (we send the payment id as Adyen's `reference`).
fn our_payment_id(reference: Option<&str>) -> Option<PaymentId> {
    reference
        .filter(|r| r.starts_with("pay_"))
        .and_then(|r| PaymentId::parse(r).ok())
}

/// The notification's identity as Adyen defines it, as the PSP event id of the dedup.
fn identity(s: &Signed<'_>) -> Result<PspEventId, Unparseable> {
    let mut id = format!("{}-{}-{}", s.code, s.success, s.own);
    if let Some(original) = &s.original {
        id.push('-');
        id.push_str(original.as_str());
    }
    PspEventId::parse(id).map_err(Unparseable::because)
}

/// A reason for people: Adyen's (unsigned) or `default`.
fn because(s: &Signed<'_>, default: &str) -> String {
    if s.reason.is_empty() {
        default.to_owned()
    } else {
        format!("{default}: {}", s.reason)
            .chars()
            .take(text::MAX_REASON_CHARS)
            .collect()
    }
}

type Mapped = Option<(Outcome, Option<Outcome>)>;

/// The table of the module doc.
fn outcome(s: &Signed<'_>) -> Result<Mapped, Unparseable> {
    // An anomaly names the money it is about, for the operator who takes it from there.
    let anomaly = |what: &str| Outcome::Anomaly {
        reason: because(s, &format!("{what} ({} {} minor units)", s.currency, s.amount_minor)),
    };
    let plain = |o: Outcome| Ok(Some((o, None)));
    match (s.code, s.success) {
        ("AUTHORISATION", true) => plain(Outcome::Processing),
        ("AUTHORISATION", false) => plain(Outcome::Failed {
            reason: because(s, "refused"),
        }),
        ("CAPTURE", true) => plain(Outcome::Succeeded),
        ("CAPTURE", false) => plain(anomaly("Adyen refused the capture")),
        ("CAPTURE_FAILED", true) => plain(Outcome::CaptureFailed {
            reason: because(
                s,
                &format!(
                    "the capture of {} {} minor units failed at the card scheme",
                    s.currency, s.amount_minor
                ),
            ),
            // The capture's identity without the payment's reference, which the failure may leave out: the
            // capture's report is forgotten by the dedup with or without it, so Adyen's re-capture is news.
            capture_event: identity(&Signed {
                code: "CAPTURE",
                original: None,
                ..s.clone()
            })
            .ok(),
        }),
        ("CANCELLATION" | "TECHNICAL_CANCEL", true) => plain(cancelled()),
        ("CANCELLATION" | "TECHNICAL_CANCEL", false) => plain(anomaly("Adyen refused the cancel")),
        ("CANCEL_OR_REFUND", true) => Ok(Some((cancelled(), Some(refund(s, RefundStatus::Succeeded, None))))),
        ("CANCEL_OR_REFUND", false) => plain(anomaly("Adyen refused the cancel or refund")),
        ("REFUND", true) => plain(refund(s, RefundStatus::Succeeded, None)),
        ("REFUND", false) => plain(refund(s, RefundStatus::Failed, Some(because(s, "refund refused")))),
        ("REFUND_FAILED", true) => plain(refund(s, RefundStatus::Failed, Some(because(s, "refund failed")))),
        ("REFUNDED_REVERSED", true) => plain(refund(s, RefundStatus::Failed, Some(because(s, "refund reversed")))),
        ("NOTIFICATION_OF_CHARGEBACK", true) => plain(dispute(s, DisputeFact::Created, DisputeStatus::NeedsResponse)?),
        ("CHARGEBACK", true) => plain(dispute(s, DisputeFact::FundsWithdrawn, DisputeStatus::NeedsResponse)?),
        ("CHARGEBACK_REVERSED", true) => plain(dispute(s, DisputeFact::FundsReinstated, DisputeStatus::Won)?),
        _ => Ok(None),
    }
}

fn cancelled() -> Outcome {
    Outcome::Failed {
        reason: "cancelled".to_owned(),
    }
}

/// A refund report: the refund is the modification (its own pspReference), of the notification's amount.
fn refund(s: &Signed<'_>, status: RefundStatus, failure_reason: Option<String>) -> Outcome {
    Outcome::Refund(RefundReport {
        refund: RefundEntry {
            refund_id: s.own.to_string(),
            amount_minor: s.amount_minor,
            status,
        },
        failure_reason,
        answers_give_back: None,
    })
}

/// A dispute report: every notification of one dispute carries the dispute's pspReference.
fn dispute(s: &Signed<'_>, fact: DisputeFact, status: DisputeStatus) -> Result<Outcome, Unparseable> {
    Ok(Outcome::Dispute(DisputeReport {
        id: DisputeId::parse(s.own.as_str()).map_err(Unparseable::because)?,
        status,
        amount_minor: s.amount_minor,
        fact,
    }))
}

#[cfg(test)]
mod tests;
