//! Recovery at Adyen, which has no payment or refund to read back: its end of an expired payment
//! ([`end_at_psp`]), and its give-backs ([`give_back`]): money Adyen took on a payment we had failed, and what refunds Adyen reported failed (`REFUND success=false`, `REFUND_FAILED`,
//! `REFUNDED_REVERSED`) left with us, are refunded through `/payments/{pspReference}/refunds` under the same
//! keys as Stripe's ([`payments_core::give_back_key`], [`payments_core::stray_refund_key`]: one per failure,
//! Adyen replays a key's answer). Adyen answers `received`; the refund is recorded `pending` under the
//! modification's pspReference, answering the give-back, and its `REFUND` (then perhaps `REFUND_FAILED`)
//! notification records how it ended through the intake: a failure is the next give-back, up to
//! [`payments_core::refund::MAX_GIVE_BACKS`], then alarmed only, as for Stripe.

use crate::{back_off, Reconciled, Recovery, RecoveryError};

use payments_core::{give_back_refund, GiveBackRefund};
use psp::{GuardedAdyen, PspError, Psps};
use shared::lease::Lease;
use shared::telemetry::ErrorChain;
use shared::PspReference;
use shared::{Channel, CorrelationId, Money, Observation, Outcome, Payment, RefundEntry, RefundReport, RefundStatus};
use tracing::{info, warn};

/// Gives back at Adyen what `current` owes (see the module doc). `None` when it owes nothing to refund
/// now (the look goes on as for any Adyen payment: it waits for its notifications).
pub(crate) async fn give_back<P: Psps>(
    r: &Recovery<P>,
    current: &Payment,
    adyen: &GuardedAdyen,
    lease: &Lease,
    correlation: CorrelationId,
    open_since: &mut Option<i64>,
) -> Result<Option<(Reconciled, bool)>, RecoveryError> {
    let (Some(reference), Some(refund)) = (&current.psp_reference, give_back_refund(current)) else {
        return Ok(None);
    };
    let money = Money::new(refund.amount_minor, current.money.currency())
        .map_err(|e| PspError::BadAnswer(e.to_string().into()))?;
    let report = match adyen.refund(&refund.key, reference, &money).await {
        Ok(received) => report(&refund, received.psp_reference.to_string(), RefundStatus::Pending),
        Err(e) if e.is_deferred() => return Ok(Some((Reconciled::Deferred, false))),
        // A give-back refused for good (a validation error): its attempt is spent, recorded failed under
        // `refused:<key>` (as Stripe's), so the next failure's key follows and, past MAX_GIVE_BACKS, a
        // person; never the same refused call on every look.
        Err(e @ PspError::Refused { .. }) if refund.answers_give_back.is_some() => {
            warn!(payment_id = %current.id, key = %refund.key, error = %ErrorChain(&e),
                  "Adyen refused the give-back: recorded as its failed attempt");
            report(&refund, format!("refused:{}", refund.key), RefundStatus::Failed)
        }
        // A stray capture's refund refused: not retried sooner than the back-off; the payment stays open,
        // and its age alarms, for an operator.
        Err(e @ PspError::Refused { .. }) => {
            warn!(payment_id = %current.id, key = %refund.key, error = %ErrorChain(&e),
                  "Adyen refused the refund of a stray capture; an operator decides");
            back_off::back_off(r, &current.id, current.created_at_ms).await;
            return Ok(Some((Reconciled::Refused, false)));
        }
        Err(e) => return Err(e.into()),
    };
    let observation_refund = report.refund.refund_id.clone();
    let mut observation = Observation::new(Channel::Recovery, Outcome::Refund(report), correlation);
    observation.psp_reference = Some(reference.clone());
    let outcome = r
        .store
        .finalize_from(current.clone(), &observation, Some(lease))
        .await?;
    warn!(payment_id = %current.id, refund = %observation_refund, amount_minor = refund.amount_minor,
          key = %refund.key, result = ?outcome.result, "give-back at Adyen recorded; its REFUND notification tells how it ends");
    if outcome.payment.is_open() {
        back_off::back_off(r, &outcome.payment.id, outcome.payment.created_at_ms).await;
    } else {
        *open_since = None;
    }
    Ok(Some((Reconciled::of(&outcome), outcome.lease_released)))
}

/// Ends at Adyen, which has no status to read, a payment past the age (key `<payment>:expire`): a
/// reversal of its pspReference (cancel, or refund what was captured), or a cancel by our own reference
/// when its pspReference never reached us. Adyen answers `received`; the notification
/// (`CANCELLATION`, `CANCEL_OR_REFUND`, `TECHNICAL_CANCEL`) records the end through the intake. Until it
/// comes the payment stays open and backed off, and the request is sent again under the same key (Adyen
/// replays its answer), until the core expires it ([`NothingToAsk::EndUnanswered`](payments_core::recovery::NothingToAsk::EndUnanswered)): the loop ends.
pub(crate) async fn end_at_psp<P: Psps>(
    r: &Recovery<P>,
    current: &Payment,
    reference: Option<PspReference>,
    adyen: &GuardedAdyen,
) -> Result<(Reconciled, bool), RecoveryError> {
    let key = format!("{}:expire", current.id);
    let sent = match &reference {
        Some(reference) => adyen.reverse(&key, reference).await,
        None => adyen.cancel_by_reference(&key, &current.id).await,
    };
    let reconciled = match sent {
        Ok(modification) => {
            info!(payment_id = %current.id, modification = %modification.psp_reference,
                  "expired payment's end requested at Adyen; its notification records it");
            Reconciled::EndRequested
        }
        Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
        // Refused for good (no such payment, a validation error): sending it again tells nothing new, and
        // the payment expires here when the wait for a notification is over.
        Err(e @ PspError::Refused { .. }) => {
            warn!(payment_id = %current.id, error = %ErrorChain(&e), "Adyen refused to end the expired payment");
            Reconciled::Refused
        }
        Err(e) => return Err(e.into()),
    };
    back_off::back_off(r, &current.id, current.created_at_ms).await;
    Ok((reconciled, false))
}

/// Adyen's answer to `refund` as its refund report, answering its give-back: `received` is `pending` under the
/// modification's pspReference (`refund_id`), a refusal `failed` under `refused:<key>`.
fn report(refund: &GiveBackRefund, refund_id: String, status: RefundStatus) -> RefundReport {
    RefundReport {
        refund: RefundEntry {
            refund_id,
            amount_minor: refund.amount_minor,
            status,
        },
        failure_reason: None,
        answers_give_back: refund.answers_give_back,
    }
}
