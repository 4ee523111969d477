//! The steps that move money at Stripe: charge the saved payment, refund it, cancel its PaymentIntent. Each
//! call carries a key derived from (order, step), so a retry or a resume after a crash never moves money twice.

use super::error::RunError;
use super::observe::{self, in_checkout_trace};
use super::psp_step;
use super::transition::{correlation, moved, Advanced, StepCtx};
use crate::saga::{
    after_refund, after_search, cancel_start, charge_call, read_back, AfterRefund, CancelStart, CancellingPayment,
    ChargeCall, Charging, ReadBack, RefundCalled, RefundingPayment, Saga,
};
use psp::{set, IntentStatus, PaymentIntent, PspError, Psps, StripeApi};
use shared::store::PaymentStore;
use shared::{Channel, OrderId, Outcome, PaymentStatus, PspName};
use tracing::{info, warn};

/// The Stripe client, for a payment of Stripe's; without one here a deployment fault, deferred.
pub(super) fn client<P: Psps>(psps: &P) -> Result<&P::Stripe, PspError> {
    psps.stripe()
        .ok_or_else(|| set::not_configured(&PspName::Stripe, "stripe"))
}

/// Charges the payment the saga saved: at the PSP with the key `<order>:charge` (the same on every retry,
/// however late), finalizes the PSP's synchronous answer and records the request. A payment the PSP already
/// answered for (its PaymentIntent bound by a webhook) is read, never charged again: that holds even after
/// the PSP has forgotten the idempotency key (Stripe keeps them 24 hours). `payment` is the saga's, as read
/// to route the step.
pub(super) async fn charge<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<Charging>,
    payment: shared::Payment,
) -> Result<Advanced, RunError> {
    let order = saga.order_id().clone();
    // Which call comes first is the core's decision (the protocol model runs the same one).
    let answer = match charge_call(payment.psp_reference.as_ref(), payment.created_at_ms, step.now) {
        ChargeCall::Retrieve(reference) => client(psps)?.retrieve(&reference).await,
        ChargeCall::SearchFirst => match client(psps)?.find_for_payment(&payment.id).await? {
            Some(first) => {
                warn!(order_id = %order, payment_id = %payment.id, intent = %first.id,
                      "charge retried after the PSP's key expired: the first PaymentIntent is used");
                Ok(first)
            }
            None => send_charge(psps, &saga, &payment).await,
        },
        ChargeCall::Charge => send_charge(psps, &saga, &payment).await,
    };
    let intent = match answer {
        Ok(intent) => intent,
        // Declined: the PaymentIntent waits for the customer's next attempt, and so does the saga.
        Err(PspError::Declined(mut error)) if error.payment_intent.is_some() => error
            .payment_intent
            .take()
            .map(|pi| *pi)
            .ok_or(PspError::Declined(error))?,
        Err(refused @ (PspError::Declined(_) | PspError::Refused { .. })) => {
            let (next, event) = saga.charge_failed(format!("charge refused: {refused}"), step.now);
            return moved(step.sagas, next, event, vec![]).await;
        }
        Err(e) => return Err(e.into()),
    };
    let reference = shared::PspReference::parse(intent.id.as_str())
        .map_err(|e| RunError::Psp(PspError::BadAnswer(format!("PaymentIntent id: {e}").into())))?;
    let customer_action = intent.status == IntentStatus::RequiresAction;
    match intent.observation(Channel::Sync, correlation(&order)) {
        // From the payment just read: no second read.
        Ok(Some(observation)) => {
            let observation = in_checkout_trace(observation, saga.record());
            step.payments.finalize_from(payment, &observation, None).await?;
        }
        Ok(None) => warn!(order_id = %order, psp_status = intent.status.as_str(), "charge answer says nothing new"),
        Err(unusable) => return Err(RunError::Psp(PspError::BadAnswer(unusable.into()))),
    }
    let (next, event) = saga.payment_requested(Some(reference), customer_action, step.now);
    moved(step.sagas, next, event, vec![]).await
}

/// Creates and confirms the PaymentIntent for `payment`, with the key `<order>:charge`.
async fn send_charge<P: Psps>(
    psps: &P,
    saga: &Saga<Charging>,
    payment: &shared::Payment,
) -> Result<PaymentIntent, PspError> {
    client(psps)?
        .charge(
            &format!("{}:charge", saga.order_id()),
            &psp_step::charge_request(saga, payment),
        )
        .await
}

/// Refunds the captured payment: all that is left on the charge (all of it, unless someone refunded part
/// at the PSP already), key `<order>:refund`, then reads the PaymentIntent back, whose charge has the
/// refunded total (the refund object has none). A refund the PSP refuses (nothing left: our earlier
/// attempt, whose answer was lost, after the PSP forgot its key; or a refund made at the PSP) is read
/// back too (and what the read-back says recorded on the payment): the money is back if the charge says so,
/// and then the saga goes on; if it is not, the refusal
/// (which no retry turns) ends the compensation as "refund impossible", as a disputed charge does at once,
/// with one escalation. The refund
/// the PSP answers is recorded on the payment and counts only once `succeeded`: a pending one stops the
/// saga here until its webhook says how it ended (a resume reads the payment and calls the PSP no more:
/// [`shared::saga_refund_settled`]); a failed one is an error (retried, then escalated) while recovery gives the money back, and
/// the step is done once that give-back succeeded (the saga's own refund stays `failed`).
pub(super) async fn refund<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<RefundingPayment>,
) -> Result<Advanced, RunError> {
    let payment_id = saga.payment_id().clone();
    let (reference, key) = psp_step::refund_of(&saga)?;
    // What each answer leads to is the core's decision (`after_refund`, `read_back`); the protocol model
    // takes the same.
    let refused = match client(psps)?.refund(&key, &reference, None).await {
        // Done only when the PSP says `succeeded` (issue 23): a pending refund is waited for (its webhook
        // records the outcome; the sweeper resumes the saga), a failed one is given back by recovery, whose
        // succeeded give-back ends the step.
        Ok(refund) => {
            let (status, settled) = observe::observe_refund(step.payments, &payment_id, saga.record(), &refund).await?;
            match after_refund(RefundCalled::Made(settled)) {
                AfterRefund::ReadBack { .. } | AfterRefund::Impossible(_) => None,
                AfterRefund::Wait => {
                    info!(order_id = %saga.order_id(), refund_id = %refund.id, %status,
                          "refund not done yet; waiting for the PSP's outcome");
                    return Ok(Advanced::Stopped);
                }
                AfterRefund::Undone => {
                    return Err(RunError::Invalid(format!(
                        "refund {} ended {status} (recovery gives the money back again)",
                        refund.id
                    )))
                }
            }
        }
        Err(refused @ PspError::Refused { .. }) => match after_refund(psp_step::refused_call(&refused)) {
            AfterRefund::Impossible(why) => return psp_step::refund_impossible(step, saga, why, &refused).await,
            AfterRefund::ReadBack { .. } | AfterRefund::Wait | AfterRefund::Undone => Some(refused),
        },
        Err(e) => return Err(e.into()),
    };
    read_back_refund(psps, step, saga, refused).await
}

/// `payment` with every refund Stripe made of the saga's PaymentIntent recorded on it (read again when one
/// was new to it): the refunds the saga's step would otherwise not know of before it creates its own.
pub(super) async fn with_stripe_refunds<P: Psps>(
    psps: &P,
    payments: &PaymentStore,
    saga: &Saga<RefundingPayment>,
    payment: shared::Payment,
) -> Result<shared::Payment, RunError> {
    let (reference, _) = psp_step::refund_of(saga)?;
    let listed = client(psps)?.list_refunds(&reference).await?;
    let unknown = psp::stripe::unrecorded(&payment, &listed);
    if unknown.is_empty() {
        return Ok(payment);
    }
    for refund in unknown {
        warn!(order_id = %saga.order_id(), refund_id = %refund.id, status = %refund.status,
              "a refund Stripe made that the payment had not recorded (its answer lost): recorded, not made again");
        observe::observe_refund(payments, saga.payment_id(), saga.record(), refund).await?;
    }
    observe::saga_payment(payments, saga.record()).await
}

/// The refund step's end at Stripe: the PaymentIntent read back and recorded, then refunded, or impossible
/// when the call was `refused` for good and the charge does not show the money back.
pub(super) async fn read_back_refund<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<RefundingPayment>,
    refused: Option<PspError>,
) -> Result<Advanced, RunError> {
    let payment_id = saga.payment_id().clone();
    let amount = saga.record().checkout.money.amount_minor();
    let (reference, _) = psp_step::refund_of(&saga)?;
    let intent = client(psps)?.retrieve(&reference).await?;
    // Recorded whatever the saga decides: the payment keeps the PSP's truth (a part refunded at the PSP
    // too) for the person an impossible refund is escalated to.
    observe::observe_intent(step.payments, &payment_id, saga.record(), &intent).await?;
    let decision = read_back(saga.record(), refused.is_some(), intent.amount_refunded());
    if let (ReadBack::Impossible(why), Some(refused)) = (decision, &refused) {
        // Refused for good and the money is not back: no retry turns it (invariant 12).
        warn!(order_id = %saga.order_id(), back = intent.amount_refunded().unwrap_or(0), amount,
              "refund refused and the charge not refunded");
        return psp_step::refund_impossible(step, saga, why, refused).await;
    }
    if refused.is_some() {
        warn!(order_id = %saga.order_id(), "refund refused: the charge is refunded already; going on");
    }
    let (next, event) = saga.refunded(amount, step.now);
    moved(step.sagas, next, event, vec![]).await
}

/// Compensates a charge that must take no money: a payment still open is canceled at the PSP (key
/// `<order>:cancel:<status>`) and failed here. If the PSP refuses because the payment succeeded meanwhile, the
/// saga continues from the capture (confirm the order; a cancelled order is then refunded) with the payment's
/// PSP reference, whichever path captured it. `payment` is the saga's, as read to route the step.
pub(super) async fn cancel<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<CancellingPayment>,
    payment: shared::Payment,
) -> Result<Advanced, RunError> {
    let payment_id = saga.payment_id().clone();
    let order = saga.order_id().clone();
    let mut status = payment.status;
    // Where the cancel starts is the core's decision (the protocol model takes the same).
    let mut start = cancel_start(saga.record(), &payment);
    if start == CancelStart::Search {
        start = after_search(made_by_the_charge(psps, &saga, &payment_id).await?);
    }
    let reference = match start {
        CancelStart::Cancel(reference) => {
            match cancel_at_psp(psps, step.payments, &saga, &reference, status).await? {
                Some(after) => status = after,
                None => return Ok(Advanced::Stopped),
            }
            Some(reference)
        }
        CancelStart::Ended(_) | CancelStart::Search | CancelStart::Fail => payment.psp_reference.clone(),
    };
    if !status.is_terminal() {
        let reason = saga.payment_failure_reason();
        // Fails a payment the PSP never took (canceled there, or refused before a PaymentIntent existed).
        // What the write leaves decides: a capture that won the race is not "no money taken".
        status = observe::observe(
            step.payments,
            &payment_id,
            saga.record(),
            Outcome::Failed { reason },
            None,
        )
        .await?;
    }
    if status == PaymentStatus::Captured {
        info!(order_id = %order, "the payment succeeded before the cancel; continuing from the capture");
        let reference = match reference {
            Some(reference) => reference,
            None => observe::captured_reference(step.payments, &payment_id).await?,
        };
        let (next, event) = saga.payment_succeeded(reference, step.now);
        return moved(step.sagas, next, event, vec![]).await;
    }
    let (next, event) = saga.payment_cancelled(step.now);
    moved(step.sagas, next, event, vec![]).await
}

/// The PaymentIntent a charge may have made although the payment never heard of it (the charge's answer
/// was a refusal or never came, and no webhook bound it yet): found by the payment's id at the PSP, so
/// the cancel reaches it and a charge given up is never taken later ([`CancelStart::Search`]).
async fn made_by_the_charge<P: Psps>(
    psps: &P,
    saga: &Saga<CancellingPayment>,
    payment_id: &shared::PaymentId,
) -> Result<Option<shared::PspReference>, RunError> {
    let Some(found) = client(psps)?.find_for_payment(payment_id).await? else {
        return Ok(None);
    };
    warn!(order_id = %saga.order_id(), intent = %found.id, "the failed charge made a PaymentIntent; cancelling it");
    shared::PspReference::parse(found.id.as_str())
        .map(Some)
        .map_err(|e| RunError::Psp(PspError::BadAnswer(format!("PaymentIntent id: {e}").into())))
}

/// Cancels `reference` at the PSP and applies what it answers: the payment's status afterwards, or `None`
/// while the money may still be taken (processing: saying "no money taken" now would keep it; the saga
/// waits for the PSP's outcome, the sweeper resumes it, a capture continues from there).
async fn cancel_at_psp<P: Psps>(
    psps: &P,
    payments: &PaymentStore,
    saga: &Saga<CancellingPayment>,
    reference: &shared::PspReference,
    status: PaymentStatus,
) -> Result<Option<PaymentStatus>, RunError> {
    let intent = cancel_intent(psps, saga.order_id(), reference).await?;
    let after = observe::observe_intent(payments, saga.payment_id(), saga.record(), &intent)
        .await?
        .unwrap_or(status);
    if !intent.status.state().may_still_take_money() {
        return Ok(Some(after));
    }
    info!(order_id = %saga.order_id(), psp_status = intent.status.as_str(),
          "the PaymentIntent cannot be canceled now; waiting for its outcome");
    Ok(None)
}

/// Cancels the PaymentIntent if it can still be canceled, and answers it as it then stands. It is read
/// first: one that succeeded, was canceled or is processing (which Stripe cannot cancel) is not asked to
/// cancel. The key names the status the cancel was decided on (`<order>:cancel:<status>`), because Stripe
/// replays a refused cancel's answer for its key: a later cancel from another status must not get it.
async fn cancel_intent<P: Psps>(
    psps: &P,
    order: &OrderId,
    reference: &shared::PspReference,
) -> Result<PaymentIntent, RunError> {
    let current = client(psps)?.retrieve(reference).await?;
    if !current.status.state().to_cancel() {
        return Ok(current);
    }
    let key = format!("{order}:cancel:{}", current.status.as_str());
    match client(psps)?.cancel(&key, reference).await {
        Ok(intent) => Ok(intent),
        // Refused with the PaymentIntent: it moved between the read and the cancel.
        Err(refused) => match refused.payment_intent().cloned() {
            Some(intent) => Ok(intent),
            None => Err(refused.into()),
        },
    }
}
