//! Manual capture at Stripe (`STRIPE_CAPTURE_METHOD=manual`): the charge only authorizes (the payment is
//! `authorized`, with the charge's `capture_before`), and the saga takes the money when it confirms the
//! order. A saga waiting for its payment that finds it authorized:
//!
//! | the authorization | what the saga does |
//! |---|---|
//! | past `capture_before` (`payments_core::saga::authorization_lapsed`) | `payment_failed` ("authorization expired"), and the cancel step releases it (or finds Stripe did: `canceled`, `automatic`); no refund |
//! | the order is no longer pending (the customer cancelled) | `payment_failed`, cancel: no money moved |
//! | otherwise | captures it (key `<order>:capture`, the same on every retry), applies the answer through the one finalize, and goes on from the capture: the order is confirmed next |
//!
//! A capture Stripe refuses with the PaymentIntent (captured already by a call whose answer was lost, or
//! canceled: the authorization lapsed) is applied as that PaymentIntent says. A capture that fails for a
//! moment is retried and escalated like any step, and the sweeper resumes the saga; Stripe's own deadline
//! ends the wait.

use super::error::RunError;
use super::transition::{moved, Advanced, StepCtx};
use super::{observe, stripe};
use crate::orders;
use crate::saga::{authorization_lapsed, CheckoutPsp, PaymentPending, Saga};
use psp::{PaymentIntent, Psps, StripeApi};
use shared::store::PaymentStore;
use shared::{Payment, PaymentStatus};
use tracing::info;

/// Why an authorization is released instead of captured.
enum NotCaptured {
    Lapsed(Option<i64>),
    OrderCancelled,
}

impl NotCaptured {
    fn reason(&self) -> String {
        match self {
            Self::Lapsed(Some(before)) => {
                format!("authorization expired: not captured before {before} (epoch ms, the charge's capture_before)")
            }
            Self::Lapsed(None) => "authorization expired".into(),
            Self::OrderCancelled => "cancelled by the customer before the capture".into(),
        }
    }
}

/// The payment is authorized: capture it as the order is confirmed, or release it (module table).
pub(super) async fn capture_authorized<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<PaymentPending>,
) -> Result<Advanced, RunError> {
    let (psp, payment) = observe::payment_and_psp(step.payments, saga.record(), "capture").await?;
    let after = match (psp, payment.status) {
        (CheckoutPsp::Stripe, PaymentStatus::Authorized) => match not_captured(step, &saga, &payment).await? {
            Some(not) => {
                let (next, event) = saga.payment_failed(not.reason(), step.now);
                return moved(step.sagas, next, event, vec![]).await;
            }
            None => capture(psps, step.payments, &saga, &payment).await?,
        },
        // Moved on since the projection was written (a capture whose saga step was cut), or not a Stripe
        // authorization (Adyen's are captured when authorised): what the payment holds now decides.
        (_, status) => status,
    };
    match after {
        PaymentStatus::Captured => {
            let reference = observe::captured_reference(step.payments, saga.payment_id()).await?;
            let (next, event) = saga.payment_captured(reference, step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        status @ (PaymentStatus::Failed | PaymentStatus::Refunded) => {
            let reason = format!("authorization not captured: the payment is {status} at the PSP");
            let (next, event) = saga.payment_failed(reason, step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        _ => Ok(Advanced::Stopped),
    }
}

/// Whether the authorization must be released rather than captured: lapsed, or its order cancelled.
async fn not_captured(
    step: StepCtx<'_>,
    saga: &Saga<PaymentPending>,
    payment: &Payment,
) -> Result<Option<NotCaptured>, RunError> {
    if authorization_lapsed(payment.capture_before_ms, step.now) {
        return Ok(Some(NotCaptured::Lapsed(payment.capture_before_ms)));
    }
    let order = orders::status(step.sagas.client(), step.sagas.table(), saga.order_id()).await?;
    Ok(match order {
        Some((status, _)) if status != "pending" => Some(NotCaptured::OrderCancelled),
        _ => None,
    })
}

/// Captures the authorization at Stripe (key `<order>:capture`) and applies the PaymentIntent it answers
/// (or the one a refusal carries); the payment's status afterwards.
async fn capture<P: Psps>(
    psps: &P,
    payments: &PaymentStore,
    saga: &Saga<PaymentPending>,
    payment: &Payment,
) -> Result<PaymentStatus, RunError> {
    let reference = payment
        .psp_reference
        .clone()
        .ok_or_else(|| RunError::Invalid(format!("authorized payment {} without a PSP reference", payment.id)))?;
    let key = format!("{}:capture", saga.order_id());
    let intent: PaymentIntent = match stripe::client(psps)?.capture(&key, &reference).await {
        Ok(intent) => intent,
        Err(refused) => match refused.payment_intent().cloned() {
            Some(intent) => intent,
            None => return Err(refused.into()),
        },
    };
    info!(order_id = %saga.order_id(), psp_status = intent.status.as_str(), "capture at confirmation answered");
    Ok(
        observe::observe_intent(payments, saga.payment_id(), saga.record(), &intent)
            .await?
            .unwrap_or(payment.status),
    )
}
