//! The steps of the saga's states that touch only our own items: reserve and release the stock, create the
//! payment, wait for its outcome (handing it to recovery past its deadline), confirm the order; and the
//! refund step, which goes to the payment's PSP (`stripe`, `adyen`). The runner's `advance` picks the
//! state's step; the PSP is the one the payment recorded when it was created (invariant 13): a saga's
//! charge, refund and cancel read the payment's provider first (one `GetItem`), so a checkout ends at the
//! PSP it started with whatever `SAGA_PSP` says later.

use super::error::RunError;
use super::transition::{correlation, moved, Advanced, StepCtx};
use super::{adyen, capture, observe, stripe};
use crate::saga::{
    after_refund, awaited, AfterRefund, AwaitDeadlines, Awaited, CheckoutPsp, PaymentCaptured, PaymentPending,
    RefundCalled, RefundingPayment, ReleasingStock, Saga, SagaStoreError, Started, StockReserved,
};
use crate::{inventory, orders};
use psp::Psps;
use recovery::{Reconciled, Recovery};
use shared::telemetry::ErrorChain;
use shared::{Metadata, NewPayment, OrderId, PaymentId, PaymentStatus, PspName};
use std::time::Duration;
use tracing::{info, warn};

/// The refund step at the payment's PSP. One owner per refund: once the payment's refunds ask the money
/// back (or one failed: recovery's), the saga creates no refund again ([`shared::saga_refund_settled`]).
/// Before it creates one at Stripe it reads the PaymentIntent's refunds there and records those the
/// payment does not know (an earlier attempt's answer and webhooks lost), so a resume after Stripe forgot
/// the step's key (24 hours) creates only what is missing. Adyen has no such read: there the saga's key
/// (`<order>:refund`) and the payment's records decide, and a failed refund is recovery's alone.
pub(super) async fn refund_payment<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    saga: Saga<RefundingPayment>,
) -> Result<Advanced, RunError> {
    let (psp, payment) = observe::payment_and_psp(step.payments, saga.record(), "refund").await?;
    let owed = saga.record().checkout.money.amount_minor();
    let settled = match shared::saga_refund_settled(&payment, owed) {
        None if psp == CheckoutPsp::Stripe => {
            let payment = stripe::with_stripe_refunds(psps, step.payments, &saga, payment).await?;
            shared::saga_refund_settled(&payment, owed)
        }
        settled => settled,
    };
    match (settled, psp) {
        (Some(settled), psp) => refund_settled(psps, psp, step, saga, settled).await,
        (None, CheckoutPsp::Stripe) => stripe::refund(psps, step, saga).await,
        (None, CheckoutPsp::Adyen) => adyen::refund(psps, step, saga).await,
    }
}

/// The refund step when the payment's refunds already ask the money back ([`shared::saga_refund_settled`]):
/// no PSP call makes a refund; done is read back at Stripe or taken as recorded at Adyen (nothing to read),
/// waiting stops until the refund's webhook, undone is recovery's give-back (retried, then escalated).
async fn refund_settled<P: Psps>(
    psps: &P,
    psp: CheckoutPsp,
    step: StepCtx<'_>,
    saga: Saga<RefundingPayment>,
    settled: shared::RefundStep,
) -> Result<Advanced, RunError> {
    match (after_refund(RefundCalled::Made(settled)), psp) {
        (AfterRefund::ReadBack { .. }, CheckoutPsp::Stripe) => stripe::read_back_refund(psps, step, saga, None).await,
        (AfterRefund::ReadBack { .. }, CheckoutPsp::Adyen) => {
            let owed = saga.record().checkout.money.amount_minor();
            let (next, event) = saga.refunded(owed, step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        (AfterRefund::Wait, _) => {
            info!(order_id = %saga.order_id(), "refund asked already; waiting for the PSP's outcome");
            Ok(Advanced::Stopped)
        }
        (AfterRefund::Undone | AfterRefund::Impossible(_), _) => Err(RunError::Invalid(format!(
            "the refund of order {} failed: recovery gives the money back, the saga refunds no more",
            saga.order_id()
        ))),
    }
}

/// Reserves the stock (a conditional decrement in the step's transaction); not enough stock ends the saga.
pub(super) async fn reserve_stock(step: StepCtx<'_>, saga: Saga<Started>) -> Result<Advanced, RunError> {
    let c = &saga.record().checkout;
    let reserve = inventory::reserve(step.sagas.table(), &c.sku, c.quantity)?;
    let order_compensated = orders::compensated(step.sagas.table(), saga.order_id())?;
    let (next, event) = saga.clone().stock_reserved(step.now);
    match moved(step.sagas, next, event, vec![reserve]).await {
        Err(RunError::Saga(SagaStoreError::StepCondition(0))) => {
            let reason = format!("not enough stock of {}", saga.record().checkout.sku);
            let (next, event) = saga.reservation_failed(reason, step.now);
            moved(step.sagas, next, event, vec![order_compensated]).await
        }
        other => other,
    }
}

/// Creates the payment in the transaction that saves its id, so every later charge uses that payment, with
/// the checkout's PSP (its request's, else `SAGA_PSP`), recorded on it for good.
pub(super) async fn create_payment(
    step: StepCtx<'_>,
    new_checkouts: CheckoutPsp,
    saga: Saga<StockReserved>,
) -> Result<Advanced, RunError> {
    let psp = saga.record().checkout.psp.unwrap_or(new_checkouts);
    let new = new_payment(&saga, psp.name(), step.now)?;
    let (payment, writes) = step.payments.create_writes(new)?;
    let (next, event) = saga.payment_created(payment.id, step.now);
    moved(step.sagas, next, event, writes).await
}

/// Waits for the payment's outcome; past the payment deadline hands it to recovery once, and past the
/// abandonment deadline gives up on a customer who has not acted.
pub(super) async fn await_payment<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    recovery: &Recovery<P>,
    abandon_after: Duration,
    saga: Saga<PaymentPending>,
) -> Result<Advanced, RunError> {
    let payment_id = saga.payment_id().clone();
    let abandon_after_ms = i64::try_from(abandon_after.as_millis()).unwrap_or(i64::MAX);
    let deadlines = AwaitDeadlines::of(saga.record(), step.now, abandon_after_ms);
    let outcome = observe::payment_outcome(step.payments, saga.order_id(), &payment_id, deadlines).await?;
    if outcome == Some(PaymentStatus::Processing) && saga.record().customer_action {
        // Authorised after the customer's challenge, by a notification: Adyen's payments are captured here.
        adyen::capture_authorised(psps, step.payments, saga.record()).await?;
    }
    // What the saga does with it is the core's decision (the protocol model runs the same one).
    match awaited(saga.record(), deadlines, outcome) {
        Awaited::Captured => {
            // The charge's answer may have had no reference (Adyen's, while the shopper had to act): the
            // payment's, bound when it was learnt, is the one the refund needs.
            let reference = match saga.record().psp_reference.clone() {
                Some(reference) => reference,
                None => observe::captured_reference(step.payments, &payment_id).await?,
            };
            let (next, event) = saga.payment_captured(reference, step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        // Manual capture: the money is held; captured now, as the order is confirmed next (`capture`).
        Awaited::Authorized => Box::pin(capture::capture_authorized(psps, step, saga)).await,
        Awaited::Failed(status) => {
            let (next, event) = saga.payment_failed(format!("payment {status}"), step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        // Still the customer's turn long after the start: give up, cancel at the PSP, compensate.
        Awaited::Abandoned(status) => {
            let after = abandon_after;
            let (next, event) =
                saga.payment_failed(format!("abandoned: payment still {status} after {after:?}"), step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        Awaited::HandToRecovery => {
            hand_to_recovery(recovery, saga.order_id(), &payment_id).await;
            let (next, event) = saga.recovery_requested(step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        Awaited::Wait => Ok(Advanced::Stopped),
    }
}

/// Asks recovery about a payment past its deadline, once; the reconciler's schedule takes what this cannot.
async fn hand_to_recovery<P: Psps>(recovery: &Recovery<P>, order_id: &OrderId, payment_id: &PaymentId) {
    match recovery.reconcile(payment_id, correlation(order_id)).await {
        Ok(Reconciled::Busy) => warn!(order_id = %order_id, "payment busy; the reconciler's schedule takes it"),
        Ok(reconciled) => info!(order_id = %order_id, payment_id = %payment_id, ?reconciled,
                                "payment past the deadline handed to recovery"),
        // The payment is open, so the reconciler's schedule finds it anyway; the saga waits.
        Err(e) => warn!(order_id = %order_id, error = %ErrorChain(&e),
                        "recovery could not run now; the reconciler will"),
    }
}

/// Confirms the order (conditioned on `pending`); an order the customer cancelled meanwhile turns the
/// saga to its refund.
pub(super) async fn confirm_order(step: StepCtx<'_>, saga: Saga<PaymentCaptured>) -> Result<Advanced, RunError> {
    let confirm = orders::confirm(step.sagas.table(), saga.order_id())?;
    let (next, event) = saga.clone().order_confirmed(step.now);
    match moved(step.sagas, next, event, vec![confirm]).await {
        Err(RunError::Saga(SagaStoreError::StepCondition(0))) => {
            let (next, event) =
                saga.confirmation_failed("order no longer pending (cancelled by the customer)".into(), step.now);
            moved(step.sagas, next, event, vec![]).await
        }
        other => other,
    }
}

/// The last compensation: the stock back and the order compensated, in one transaction with the event.
pub(super) async fn release_stock(step: StepCtx<'_>, saga: Saga<ReleasingStock>) -> Result<Advanced, RunError> {
    let c = &saga.record().checkout;
    let writes = vec![
        inventory::release(step.sagas.table(), &c.sku, c.quantity)?,
        orders::compensated(step.sagas.table(), saga.order_id())?,
    ];
    let (next, event) = saga.stock_released(step.now);
    moved(step.sagas, next, event, writes).await
}

/// The checkout's payment: a fresh id, the checkout's money, the order in its metadata, and the PSP the
/// saga charges it through (`provider`).
fn new_payment(saga: &Saga<StockReserved>, provider: PspName, now: i64) -> Result<NewPayment, RunError> {
    let order = saga.order_id();
    let metadata = Metadata::parse([("checkout".to_owned(), order.to_string())].into())
        .map_err(|e| RunError::Invalid(format!("payment metadata: {e}")))?;
    Ok(NewPayment {
        id: PaymentId::generate(uuid::Uuid::new_v4().as_u128()),
        order_id: order.clone(),
        money: saga.record().checkout.money,
        provider,
        psp_reference: None,
        metadata,
        correlation_id: correlation(order),
        // The checkout's trace: the payment's events continue it through the relay to the consumers.
        trace_context: saga.record().trace_context.clone(),
        now_ms: now,
    })
}
