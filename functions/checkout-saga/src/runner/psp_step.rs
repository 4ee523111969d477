//! What Stripe's and Adyen's money steps share: the charge request, the refund's reference and key, a refusal
//! in the core's terms, and the end of a refund refused for good.

use super::error::RunError;
use super::transition::{moved, Advanced, StepCtx};
use crate::saga::{Charging, RefundCalled, RefundImpossible, RefundingPayment, Saga};
use psp::{ChargeRequest, PspError};
use shared::PspReference;
use tracing::{error, warn};

/// The refund step's PSP reference (every capture records one) and its key, `<order>:refund`: the same at
/// every PSP, on every retry and resume.
pub(super) fn refund_of(saga: &Saga<RefundingPayment>) -> Result<(PspReference, String), RunError> {
    let reference = saga
        .record()
        .psp_reference
        .clone()
        .ok_or_else(|| RunError::Invalid("captured payment without a PSP reference".into()))?;
    Ok((reference, format!("{}:refund", saga.order_id())))
}

/// A refused refund call in the core's terms (its PSP error code), for [`after_refund`](crate::saga::after_refund).
pub(super) fn refused_call(refused: &PspError) -> RefundCalled<'_> {
    match refused {
        PspError::Refused { error, .. } => RefundCalled::Refused {
            code: error.code.as_deref(),
        },
        _ => RefundCalled::Refused { code: None },
    }
}

/// The charge of `payment` for the saga's checkout, whichever PSP it goes to (Stripe's and Adyen's steps).
pub(super) fn charge_request<'a>(saga: &'a Saga<Charging>, payment: &'a shared::Payment) -> ChargeRequest<'a> {
    let checkout = &saga.record().checkout;
    ChargeRequest {
        payment_id: &payment.id,
        order_id: saga.order_id(),
        money: &checkout.money,
        payment_method: &checkout.payment_method,
    }
}

/// The PSP refused the refund for good (`why`): the saga records the reason and goes on to release the stock
/// (then ends compensated), and a person is told once. The escalation is sent only after the move is saved,
/// and the saga no longer refunds after it, so no retry, resume or sweep refunds or escalates it again (a
/// crash between the save and the send loses that one message; the saga keeps the reason, and the dispute
/// itself reaches the payment and alarms through the webhooks).
pub(super) async fn refund_impossible(
    step: StepCtx<'_>,
    saga: Saga<RefundingPayment>,
    why: RefundImpossible,
    refused: &PspError,
) -> Result<Advanced, RunError> {
    let order = saga.order_id().clone();
    warn!(order_id = %order, reason = why.reason(), error = %refused,
          "refund refused for good; the compensation goes on without it");
    let (next, event) = saga.refund_impossible(why, step.now);
    let record = next.record().clone();
    let advanced = moved(step.sagas, next, event, vec![]).await?;
    const ACTION: &str = "refund_payment";
    crate::metrics::escalated(&record, ACTION);
    let detail = format!("{}: {refused}", why.reason());
    if let Err(send) = step.escalation.escalate(&order, ACTION, 1, &detail).await {
        error!(order_id = %order, error = %shared::telemetry::ErrorChain(&send),
               "escalation of an impossible refund could not be sent");
    }
    Ok(advanced)
}
