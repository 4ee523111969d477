//! The steps of the saga's states that touch only our own items: reserve and release the stock, create the
//! payment, wait for its outcome, confirm the order. `Runner::advance` picks the state's step; the steps
//! that call the PSP are in `psp` (Stripe) and `adyen`, chosen by the PSP the payment recorded when it was
//! created (invariant 13): a saga's charge, refund and cancel read the payment's provider first (one
//! `GetItem`), so a checkout ends at the PSP it started with whatever `SAGA_PSP` says later.

use super::{correlation, Advanced, RunError, Runner};
use crate::saga::{
    awaited, AwaitDeadlines, Awaited, Next, PaymentCaptured, PaymentPending, RefundingPayment, ReleasingStock, Saga,
    SagaRecord, SagaStoreError, Started, StockReserved,
};
use crate::{inventory, orders};
use psp::{set, Psps};
use reconciler::Reconciled;
use shared::telemetry::ErrorChain;
use shared::{Metadata, NewPayment, OrderId, Payment, PaymentId, PaymentStatus, PspName, PspReference};
use tracing::{info, warn};

/// The PSP whose steps a saga's payment takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    Stripe,
    Adyen,
}

impl<P: Psps> Runner<P> {
    /// One step of the saga, decided at `now` by the core (`Loaded::next_at`, deadlines included: the table
    /// `action_name`, `paymentsctl` and the protocol model use too); each step is its own method, the two a
    /// deadline gives up are in `deadline`.
    pub(super) async fn advance(&self, next: Next, now: i64) -> Result<Advanced, RunError> {
        match next {
            Next::ReserveStock(saga) => self.reserve_stock(saga, now).await,
            Next::CreatePayment(saga) => self.create_payment(saga, now).await,
            Next::PaymentNotCreated(saga) => self.payment_not_created(saga, now).await,
            // Boxed: inlined into every resume's future, it passes rustc's query depth limit.
            Next::GiveUpCharge(saga) => Box::pin(self.charge_given_up(saga, now)).await,
            Next::Charge(saga) => match self.via(saga.record(), "charge").await? {
                (Via::Stripe, payment) => self.charge(saga, payment, now).await,
                (Via::Adyen, payment) => self.adyen_charge(saga, payment, now).await,
            },
            Next::AwaitPayment(saga) => self.await_payment(saga, now).await,
            Next::ConfirmOrder(saga) => self.confirm_order(saga, now).await,
            // Boxed: inlined into every resume's future, it overflows the sweeper's stack.
            Next::RefundPayment(saga) => Box::pin(self.refund_payment(saga, now)).await,
            Next::CancelPayment(saga) => match self.via(saga.record(), "cancel").await? {
                (Via::Stripe, payment) => self.cancel_payment(saga, payment, now).await,
                (Via::Adyen, payment) => self.adyen_cancel(saga, payment, now).await,
            },
            Next::ReleaseStock(saga) => self.release_stock(saga, now).await,
            Next::Done(_) => Ok(Advanced::Stopped),
        }
    }

    /// The saga's payment as stored.
    pub(super) async fn saga_payment(&self, saga: &SagaRecord) -> Result<Payment, RunError> {
        let order = &saga.order_id;
        let id = saga
            .payment_id
            .as_ref()
            .ok_or_else(|| RunError::Invalid(format!("saga {order} has no payment")))?;
        self.payments()
            .get(id)
            .await?
            .ok_or_else(|| RunError::Invalid(format!("payment {id} of saga {order} vanished")))
    }

    /// Which PSP's steps the saga's payment takes, the provider it recorded, and the payment as read (the
    /// step's own, not read twice). A Standard Webhooks provider's payment is never the saga's; one would be a
    /// deployment fault, deferred and alarmed.
    pub(super) async fn via(&self, saga: &SagaRecord, operation: &str) -> Result<(Via, Payment), RunError> {
        let payment = self.saga_payment(saga).await?;
        match &payment.provider {
            PspName::Stripe => Ok((Via::Stripe, payment)),
            PspName::Adyen => Ok((Via::Adyen, payment)),
            other => Err(RunError::Psp(set::not_configured(other, operation))),
        }
    }

    /// The refund step at the payment's PSP. One owner per refund: once the payment's refunds ask the money
    /// back (or one failed: recovery's), the saga creates no refund again ([`shared::saga_refund_settled`]).
    /// Before it creates one at Stripe it reads the PaymentIntent's refunds there and records those the
    /// payment does not know (an earlier attempt's answer and webhooks lost), so a resume after Stripe forgot
    /// the step's key (24 hours) creates only what is missing. Adyen has no such read: there the saga's key
    /// (`<order>:refund`) and the payment's records decide, and a failed refund is recovery's alone.
    async fn refund_payment(&self, saga: Saga<RefundingPayment>, now: i64) -> Result<Advanced, RunError> {
        let (via, payment) = self.via(saga.record(), "refund").await?;
        let owed = saga.record().checkout.money.amount_minor();
        let settled = match shared::saga_refund_settled(&payment, owed) {
            None if via == Via::Stripe => {
                let payment = self.with_stripe_refunds(&saga, payment).await?;
                shared::saga_refund_settled(&payment, owed)
            }
            settled => settled,
        };
        match (settled, via) {
            (Some(step), via) => self.refund_settled(saga, step, via == Via::Adyen, now).await,
            (None, Via::Stripe) => self.refund(saga, now).await,
            (None, Via::Adyen) => self.adyen_refund(saga, now).await,
        }
    }

    /// Reserves the stock (a conditional decrement in the step's transaction); not enough stock ends the saga.
    async fn reserve_stock(&self, saga: Saga<Started>, now: i64) -> Result<Advanced, RunError> {
        let c = &saga.record().checkout;
        let reserve = inventory::reserve(self.table(), &c.sku, c.quantity)?;
        let order_compensated = orders::compensated(self.table(), saga.order_id())?;
        let (next, event) = saga.clone().stock_reserved(now);
        match self.moved(next, event, vec![reserve]).await {
            Err(RunError::Saga(SagaStoreError::StepCondition(0))) => {
                let reason = format!("not enough stock of {}", saga.record().checkout.sku);
                let (next, event) = saga.reservation_failed(reason, now);
                self.moved(next, event, vec![order_compensated]).await
            }
            other => other,
        }
    }

    /// Creates the payment in the transaction that saves its id, so every later charge uses that payment, with
    /// the checkout's PSP (its request's, else `SAGA_PSP`), recorded on it for good.
    async fn create_payment(&self, saga: Saga<StockReserved>, now: i64) -> Result<Advanced, RunError> {
        let psp = saga.record().checkout.psp.unwrap_or(self.settings.new_checkouts);
        let new = new_payment(&saga, psp.name(), now)?;
        let (payment, writes) = self.payments().create_writes(new)?;
        let (next, event) = saga.payment_created(payment.id, now);
        self.moved(next, event, writes).await
    }

    /// Waits for the payment's outcome; past the payment deadline hands it to recovery once, and past the
    /// abandonment deadline gives up on a customer who has not acted.
    async fn await_payment(&self, saga: Saga<PaymentPending>, now: i64) -> Result<Advanced, RunError> {
        let payment_id = saga.payment_id().clone();
        let abandon_after = i64::try_from(self.settings.abandon_after.as_millis()).unwrap_or(i64::MAX);
        let deadlines = AwaitDeadlines::of(saga.record(), now, abandon_after);
        let outcome = self.payment_outcome(saga.order_id(), &payment_id, deadlines).await?;
        if outcome == Some(PaymentStatus::Processing) && saga.record().customer_action {
            // Authorised after the customer's challenge, by a notification: Adyen's payments are captured here.
            self.capture_authorised(saga.record()).await?;
        }
        // What the saga does with it is the core's decision (the protocol model runs the same one).
        match awaited(saga.record(), deadlines, outcome) {
            Awaited::Captured => {
                // The charge's answer may have had no reference (Adyen's, while the shopper had to act): the
                // payment's, bound when it was learnt, is the one the refund needs.
                let reference = match saga.record().psp_reference.clone() {
                    Some(reference) => reference,
                    None => self.captured_reference(&payment_id).await?,
                };
                let (next, event) = saga.payment_captured(reference, now);
                self.moved(next, event, vec![]).await
            }
            // Manual capture: the money is held; captured now, as the order is confirmed next (`capture`).
            Awaited::Authorized => Box::pin(self.capture_authorized(saga, now)).await,
            Awaited::Failed(status) => {
                let (next, event) = saga.payment_failed(format!("payment {status}"), now);
                self.moved(next, event, vec![]).await
            }
            // Still the customer's turn long after the start: give up, cancel at the PSP, compensate.
            Awaited::Abandoned(status) => {
                let after = self.settings.abandon_after;
                let (next, event) =
                    saga.payment_failed(format!("abandoned: payment still {status} after {after:?}"), now);
                self.moved(next, event, vec![]).await
            }
            Awaited::HandToRecovery => {
                self.hand_to_recovery(saga.order_id(), &payment_id).await;
                let (next, event) = saga.recovery_requested(now);
                self.moved(next, event, vec![]).await
            }
            Awaited::Wait => Ok(Advanced::Stopped),
        }
    }

    /// Asks recovery about a payment past its deadline, once; the reconciler's schedule takes what this cannot.
    async fn hand_to_recovery(&self, order_id: &OrderId, payment_id: &PaymentId) {
        match self.recovery.reconcile(payment_id, correlation(order_id)).await {
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
    async fn confirm_order(&self, saga: Saga<PaymentCaptured>, now: i64) -> Result<Advanced, RunError> {
        let confirm = orders::confirm(self.table(), saga.order_id())?;
        let (next, event) = saga.clone().order_confirmed(now);
        match self.moved(next, event, vec![confirm]).await {
            Err(RunError::Saga(SagaStoreError::StepCondition(0))) => {
                let (next, event) =
                    saga.confirmation_failed("order no longer pending (cancelled by the customer)".into(), now);
                self.moved(next, event, vec![]).await
            }
            other => other,
        }
    }

    /// The last compensation: the stock back and the order compensated, in one transaction with the event.
    async fn release_stock(&self, saga: Saga<ReleasingStock>, now: i64) -> Result<Advanced, RunError> {
        let c = &saga.record().checkout;
        let writes = vec![
            inventory::release(self.table(), &c.sku, c.quantity)?,
            orders::compensated(self.table(), saga.order_id())?,
        ];
        let (next, event) = saga.stock_released(now);
        self.moved(next, event, writes).await
    }
}

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
