//! The money questions at Stripe, before a payment's status: money taken after it failed refunded, a refund
//! last heard `pending` read back, what failed refunds left given back again (see the crate doc).

use crate::ask::Asked;
use crate::{back_off, Reconciled, Recovery, RecoveryError};
use psp::stripe::Refund;
use psp::{PspError, Psps, StripeApi};
use shared::lease::Lease;
use shared::store::FinalizeOutcome;
use shared::telemetry::ErrorChain;
use shared::{Channel, CorrelationId, GiveBack, Payment, PspReference, RefundStatus};
use tracing::{info, warn};

/// The money questions of a payment asked about, before its status: money taken after it failed is given
/// back, a refund last heard `pending` is read back, what failed refunds left is given back again. `Some`
/// when one of them ended this look.
pub(crate) async fn settle_money<P: Psps>(
    r: &Recovery<P>,
    asked: &Asked<'_, P::Stripe>,
    open_since: &mut Option<i64>,
) -> Result<Option<(Reconciled, bool)>, RecoveryError> {
    let (psp, current, reference, lease) = (asked.psp, &asked.current, &asked.reference, asked.lease);
    if let Some(anomaly) = current.refund_due() {
        match give_back(psp, current, reference, anomaly).await {
            Ok(()) => {}
            Err(e) if e.is_deferred() => return Ok(Some((Reconciled::Deferred, false))),
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(done) = read_back_pending_refund(r, psp, current, lease, asked.correlation.clone(), open_since).await? {
        return Ok(Some(done));
    }
    match current.give_back {
        Some(give_back) => give_back_failed_refund(r, asked, give_back, open_since).await.map(Some),
        None => Ok(None),
    }
}

/// Refunds money the PSP took on a payment we had failed: all that is left on the charge, with the key
/// `<payment>:anomaly-<n>:refund`, the same on every run, so a retry never refunds twice. The caller then
/// reads the PaymentIntent back, whose charge's refunded total records the refund on the payment.
async fn give_back(
    psp: &impl StripeApi,
    payment: &Payment,
    reference: &PspReference,
    anomaly: u32,
) -> Result<(), PspError> {
    let key = payments_core::stray_refund_key(&payment.id, anomaly);
    match psp.refund(&key, reference, None).await {
        Ok(refund) => {
            warn!(payment_id = %payment.id, refund_id = %refund.id, status = %refund.status, anomaly,
                  "money taken after the payment failed: refunded");
            Ok(())
        }
        // Nothing left to refund (the charge was refunded meanwhile): the read-back records what happened.
        Err(PspError::Refused { .. }) => {
            warn!(payment_id = %payment.id, anomaly, "refund of money taken after failure refused; reading back");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Reads back, by id, each refund `current` last heard was pending (its webhooks may be lost): the first
/// whose status moved is recorded through finalize as that refund's report, as the webhook's would be.
/// `None` when every one is still pending (the look goes on).
pub(crate) async fn read_back_pending_refund<P: Psps>(
    r: &Recovery<P>,
    psp: &P::Stripe,
    current: &Payment,
    lease: &Lease,
    correlation: CorrelationId,
    open_since: &mut Option<i64>,
) -> Result<Option<(Reconciled, bool)>, RecoveryError> {
    for entry in current.pending_refunds() {
        let refund = match psp.retrieve_refund(&entry.refund_id).await {
            Ok(refund) => refund,
            Err(e) if e.is_deferred() => return Ok(Some((Reconciled::Deferred, false))),
            // Stripe does not know it (not this account's): asking again tells nothing; the rest goes on.
            Err(e @ PspError::Refused { .. }) => {
                warn!(payment_id = %current.id, refund_id = %entry.refund_id, error = %ErrorChain(&e),
                      "pending refund cannot be read back");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if refund.status == entry.status.as_str() {
            continue;
        }
        let observation = refund
            .observation(Channel::Recovery, None, correlation)
            .map_err(|e| PspError::BadAnswer(e.into()))?;
        let outcome = r
            .store
            .finalize_from(current.clone(), &observation, Some(lease))
            .await?;
        info!(payment_id = %current.id, refund_id = %refund.id, status = %refund.status,
              result = ?outcome.result, "pending refund read back");
        if !outcome.payment.is_open() {
            *open_since = None;
        }
        return Ok(Some((Reconciled::of(&outcome), outcome.lease_released)));
    }
    Ok(None)
}

/// Gives back what failed refunds left (see the module doc): a refund of the give-back's amount under its
/// failure's key, the answer recorded through finalize as the report answering that give-back. A refusal
/// (the charge disputed, nothing left) is not retried sooner than the back-off: the payment stays open,
/// and its age alarms, for an operator.
async fn give_back_failed_refund<P: Psps>(
    r: &Recovery<P>,
    asked: &Asked<'_, P::Stripe>,
    give_back: GiveBack,
    open_since: &mut Option<i64>,
) -> Result<(Reconciled, bool), RecoveryError> {
    let (psp, current, reference) = (asked.psp, &asked.current, &asked.reference);
    // The PaymentIntent's refunds first: one the payment has not recorded (an earlier give-back whose
    // answer and webhooks were lost) is recorded and ends this look, so a key Stripe forgot after a day
    // never makes that give-back twice (found by the protocol model, `refund_owner`).
    let listed = match psp.list_refunds(reference).await {
        Ok(listed) => listed,
        Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
        Err(e) => return Err(e.into()),
    };
    if let Some(missed) = psp::stripe::unrecorded(current, &listed).first() {
        warn!(payment_id = %current.id, refund_id = %missed.id, status = %missed.status,
              "a refund Stripe made that the payment had not recorded: recorded before any give-back");
        let observation = missed
            .observation(Channel::Recovery, None, asked.correlation.clone())
            .map_err(|e| PspError::BadAnswer(e.into()))?;
        let outcome = r
            .store
            .finalize_from(current.clone(), &observation, Some(asked.lease))
            .await?;
        return Ok(after_give_back(r, &outcome, open_since).await);
    }
    let key = payments_core::give_back_key(&current.id, give_back.failure);
    let refund = match psp.refund(&key, reference, Some(give_back.amount_minor)).await {
        Ok(refund) => refund,
        Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
        // Refused for good (nothing left on the charge: a refund made by hand whose webhook was lost; a
        // disputed charge): the give-back's attempt is spent, recorded as failed under `refused:<key>`, so
        // the next look gives back the next failure's and, past MAX_GIVE_BACKS, the payment waits for a
        // person (`Reconciled::ForOperator`): the same refused call is never made on every look.
        Err(e @ PspError::Refused { .. }) => {
            warn!(payment_id = %current.id, failure = give_back.failure, error = %ErrorChain(&e),
                  "giving back a failed refund was refused: recorded as that give-back's failed attempt");
            Refund {
                id: format!("refused:{key}"),
                amount: give_back.amount_minor,
                currency: current.money.currency().as_str().to_ascii_lowercase(),
                status: RefundStatus::Failed.as_str().to_owned(),
                payment_intent: Some(reference.to_string()),
                charge: None,
            }
        }
        Err(e) => return Err(e.into()),
    };
    let observation = refund
        .observation(Channel::Recovery, Some(give_back.failure), asked.correlation.clone())
        .map_err(|e| PspError::BadAnswer(e.into()))?;
    let outcome = r
        .store
        .finalize_from(current.clone(), &observation, Some(asked.lease))
        .await?;
    warn!(payment_id = %outcome.payment.id, refund_id = %refund.id, status = %refund.status,
          failure = give_back.failure, result = ?outcome.result, "failed refund given back again");
    Ok(after_give_back(r, &outcome, open_since).await)
}

/// The end of a give-back look that wrote `outcome`: a payment still open backs off, a closed one is no
/// longer counted open.
async fn after_give_back<P: Psps>(
    r: &Recovery<P>,
    outcome: &FinalizeOutcome,
    open_since: &mut Option<i64>,
) -> (Reconciled, bool) {
    if outcome.payment.is_open() {
        back_off::back_off(r, &outcome.payment.id, outcome.payment.created_at_ms).await;
    } else {
        *open_since = None;
    }
    (Reconciled::of(outcome), outcome.lease_released)
}
