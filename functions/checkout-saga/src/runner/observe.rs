//! What the saga learns about its payment: PSP answers and its own compensations applied through the one
//! finalize, and the payment's outcome read from the order projection (or the payment item past the deadline).

use super::error::RunError;
use super::transition::correlation;
use crate::saga::{AwaitDeadlines, CheckoutPsp, SagaRecord};
use psp::stripe::Refund;
use psp::{PaymentIntent, PspError};
use shared::store::{read_item, PaymentStore};
use shared::{
    Channel, Observation, OrderId, Outcome, Payment, PaymentId, PaymentStatus, PspReference, RefundStatus, RefundStep,
};

/// What the saga observed, in the checkout's trace: the payment's events it writes continue that trace.
pub(super) fn in_checkout_trace(mut observation: Observation, saga: &SagaRecord) -> Observation {
    observation.trace_context = saga.trace_context.clone();
    observation
}

/// Applies a PaymentIntent the saga read from the PSP through the one finalize.
/// The payment's status afterwards, when there was something to apply.
pub(super) async fn observe_intent(
    payments: &PaymentStore,
    payment_id: &PaymentId,
    saga: &SagaRecord,
    intent: &PaymentIntent,
) -> Result<Option<PaymentStatus>, RunError> {
    let Some(observation) = intent
        .observation(Channel::Sync, correlation(&saga.order_id))
        .map_err(|e| RunError::Psp(PspError::BadAnswer(e.into())))?
    else {
        return Ok(None);
    };
    let observation = in_checkout_trace(observation, saga);
    let outcome = payments.finalize(payment_id, &observation, None).await?;
    Ok(Some(outcome.payment.status))
}

/// Applies the refund the saga asked for, as the PSP answered, through the one finalize, and says where the
/// saga's refund step stands as the payment now knows it: the PSP replays its first answer for the refund's
/// key, so a refund answered `pending` is seen to succeed or fail by its webhooks (`refund.updated`,
/// `refund.failed`), which the payment has recorded (the answer's own status when the payment did not
/// record it). A failed refund that recovery gave back under its own key is done once that give-back
/// succeeded ([`shared::refund_step`]).
pub(super) async fn observe_refund(
    payments: &PaymentStore,
    payment_id: &PaymentId,
    saga: &SagaRecord,
    refund: &Refund,
) -> Result<(RefundStatus, RefundStep), RunError> {
    let observation = refund
        .observation(Channel::Sync, None, correlation(&saga.order_id))
        .map_err(|e| RunError::Psp(PspError::BadAnswer(e.into())))?;
    refund_recorded(
        payments,
        payment_id,
        saga,
        observation,
        RefundStatus::parse(&refund.status),
    )
    .await
}

/// Applies a refund report the saga got from its PSP (`observation`, an `Outcome::Refund`) through the one
/// finalize, and says where the saga's refund step stands as the payment now knows that refund: its
/// recorded status (a webhook's or notification's, which only moves forward), else `answered`.
pub(super) async fn refund_recorded(
    payments: &PaymentStore,
    payment_id: &PaymentId,
    saga: &SagaRecord,
    observation: Observation,
    answered: Option<RefundStatus>,
) -> Result<(RefundStatus, RefundStep), RunError> {
    let Outcome::Refund(report) = &observation.outcome else {
        return Err(RunError::Invalid("a refund step observed no refund".into()));
    };
    let refund_id = report.refund.refund_id.clone();
    let observation = in_checkout_trace(observation, saga);
    let payment = payments.finalize(payment_id, &observation, None).await?.payment;
    let known = payment.refunds.iter().find(|r| r.refund_id == refund_id);
    let own = known
        .map(|r| r.status)
        .or(answered)
        .ok_or_else(|| RunError::Invalid(format!("refund {refund_id} has an unknown status")))?;
    let owed = saga.checkout.money.amount_minor();
    Ok((own, shared::refund_step(own, &payment.refunds, owed)))
}

/// Applies what the saga itself learned from the PSP (a refund, a cancellation) through the one finalize.
/// The payment's status afterwards (which may be another path's, when that one won).
pub(super) async fn observe(
    payments: &PaymentStore,
    payment_id: &PaymentId,
    saga: &SagaRecord,
    outcome: Outcome,
    reference: Option<shared::PspReference>,
) -> Result<PaymentStatus, RunError> {
    let observation = Observation::new(Channel::Sync, outcome, correlation(&saga.order_id));
    let mut observation = in_checkout_trace(observation, saga);
    observation.psp_reference = reference;
    Ok(payments.finalize(payment_id, &observation, None).await?.payment.status)
}

/// The payment's status as the order projection has applied it from the queue, if any event arrived.
/// Past the payment's deadline (or the checkout's), a projection that shows no outcome is not trusted to be
/// complete (an event may have been lost on the way): the payment item itself is read
/// ([`AwaitDeadlines::read_item`]).
pub(super) async fn payment_outcome(
    payments: &PaymentStore,
    order: &OrderId,
    payment: &PaymentId,
    deadlines: AwaitDeadlines,
) -> Result<Option<PaymentStatus>, RunError> {
    let projected = projected_status(payments, order, payment).await?;
    if !deadlines.read_item(projected) {
        return Ok(projected);
    }
    Ok(payments.get(payment).await?.map(|p| p.status).or(projected))
}

/// The payment's status as the order projection shows it (`None` before its first event arrived): what
/// the saga waits on.
async fn projected_status(
    payments: &PaymentStore,
    order: &OrderId,
    payment: &PaymentId,
) -> Result<Option<PaymentStatus>, RunError> {
    let key = order_projection::key(order, payment);
    let item = read_item(payments.client(), payments.table(), key, "read order projection").await?;
    Ok(item
        .and_then(|i| i.get("payment_status").and_then(|v| v.as_s().ok()).cloned())
        .and_then(|s| PaymentStatus::parse(&s).ok()))
}

/// The saga's payment as stored.
pub(super) async fn saga_payment(payments: &PaymentStore, saga: &SagaRecord) -> Result<Payment, RunError> {
    let order = &saga.order_id;
    let id = saga
        .payment_id
        .as_ref()
        .ok_or_else(|| RunError::Invalid(format!("saga {order} has no payment")))?;
    payments
        .get(id)
        .await?
        .ok_or_else(|| RunError::Invalid(format!("payment {id} of saga {order} vanished")))
}

/// The PSP reference a captured payment recorded (every capture carries one: the PaymentIntent's id).
pub(super) async fn captured_reference(
    payments: &PaymentStore,
    payment_id: &PaymentId,
) -> Result<PspReference, RunError> {
    payments
        .get(payment_id)
        .await?
        .and_then(|p| p.psp_reference)
        .ok_or_else(|| RunError::Invalid(format!("payment {payment_id} captured without a PSP reference")))
}

/// The saga's payment as stored and the checkout PSP whose steps it takes (by the provider it recorded), for
/// `operation`. A Standard Webhooks provider's payment is never the saga's; one would be a deployment fault,
/// deferred and alarmed.
pub(super) async fn payment_and_psp(
    payments: &PaymentStore,
    saga: &SagaRecord,
    operation: &str,
) -> Result<(CheckoutPsp, Payment), RunError> {
    let payment = saga_payment(payments, saga).await?;
    let psp = CheckoutPsp::of(&payment.provider)
        .ok_or_else(|| RunError::Psp(psp::set::not_configured(&payment.provider, operation)))?;
    Ok((psp, payment))
}
