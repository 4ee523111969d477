//! The orchestrator: loads a checkout saga, runs its next step or compensation, saves the transition with the
//! step's own writes, and repeats until the saga waits (for the payment's outcome) or ends.
//!
//! | state | action | on success | on failure |
//! |---|---|---|---|
//! | started | reserve stock (conditional decrement) | stock_reserved | out of stock: compensated |
//! | stock_reserved | create the payment and save its id in the saga (one transaction) | charging | retried, then escalated |
//! | charging | create and confirm a PaymentIntent for the saved payment (key `<order>:charge`; a payment whose PaymentIntent is known is read instead), finalize what it says | payment_pending (also after a decline: the customer may retry) | refused: cancelling_payment |
//! | payment_pending | read the payment's outcome from the order projection (fed by the queue; past the deadline the payment item itself) | payment_captured | failed, abandoned (still the customer's turn after `abandon_after`) or cancelled by the customer: cancelling_payment; past the deadline: handed to recovery |
//! | payment_captured | confirm the order (conditioned on `pending`) | completed | cancelled meanwhile: refunding_payment |
//! | refunding_payment | refund at the PSP (key `<order>:refund`), read the PaymentIntent back, finalize its refunded total | releasing_stock | retried, then escalated |
//! | cancelling_payment | cancel the PaymentIntent at the PSP (key `<order>:cancel:<status>`) if it can be canceled, make sure our payment is failed | releasing_stock; succeeded meanwhile: payment_captured; processing (Stripe cannot cancel it): waits for its outcome | retried, then escalated |
//! | releasing_stock | increment the stock | compensated | retried, then escalated |
//!
//! Every PSP call that moves money carries a key derived from (saga, step), reused on every retry and after
//! a crash, so it never charges or refunds twice. Transient failures are retried with exponential backoff and
//! full jitter; what still fails is escalated to the escalation queue (alarmed) and left for the sweeper.
//! While the PSP circuit breaker is open, a step that needs the PSP is neither retried nor escalated: the saga
//! waits as it is and the sweeper resumes it after the cool-down.

use crate::metrics;
use crate::{inventory, orders};
use shared::clock::Clock;
use shared::psp::{ChargeRequest, IntentStatus, PaymentIntent, Psp, PspError};
use shared::recovery::{Reconciled, Recovery};
use shared::retry::Backoff;
use shared::saga::{
    Charging, Checkout, Escalation, Loaded, PaymentCaptured, PaymentPending, ReleasingStock, Saga, SagaEvent,
    SagaRecord, SagaStore, SagaStoreError, Started, StockReserved,
};
use shared::store::{read_item, PaymentStore, StoreError};
use shared::telemetry::ErrorChain;
use shared::{CorrelationId, Metadata, NewPayment, Observation, OrderId, Outcome, Path, PaymentId, PaymentStatus};
use std::time::Duration;
use thiserror::Error;
use tracing::{error, info, warn, Instrument};

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Saga(#[from] SagaStoreError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Psp(#[from] PspError),
    #[error("{0}")]
    Invalid(String),
    /// The invocation's deadline came first; the saga is where the last completed step left it, and the
    /// sweeper resumes it.
    #[error("the invocation's deadline came before the saga settled")]
    OutOfTime,
    /// Retries did not help; the saga was sent to the escalation queue.
    #[error("saga {order_id} escalated after {attempts} attempts at {action}")]
    Escalated {
        order_id: String,
        action: &'static str,
        attempts: u32,
        #[source]
        error: Box<RunError>,
    },
}

impl RunError {
    /// Worth retrying at once: storage or the PSP failed for a moment.
    pub fn is_transient(&self) -> bool {
        match self {
            RunError::Saga(e) => e.is_transient(),
            RunError::Store(e) => e.is_transient(),
            RunError::Psp(e) => e.is_transient(),
            RunError::Invalid(_) | RunError::Escalated { .. } | RunError::OutOfTime => false,
        }
    }
}

/// Stripe keeps an idempotency key for 24 hours. A charge first tried longer ago than this (with a margin)
/// may have outlived its key, so before it is sent again the PSP is searched for the PaymentIntent of the
/// first attempt.
pub const PSP_KEY_TRUSTED_FOR: Duration = Duration::from_secs(23 * 3600);

/// Load-and-advance rounds of one resume.
const MAX_ROUNDS: usize = 32;

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a payment may stay unresolved before the saga hands it to recovery.
    pub payment_timeout: Duration,
    /// How long after the start a payment still waiting for the customer (a 3-D Secure challenge, a retry
    /// after a decline) is abandoned: the PaymentIntent is canceled and the checkout compensated.
    pub abandon_after: Duration,
    pub backoff: Backoff,
    /// The time the saga goes by (the system clock; moved ahead in tests).
    pub clock: Clock,
}

/// `CHECKOUT_ABANDON_AFTER_SECONDS`' default: a 3-D Secure challenge or a retry has 15 minutes.
pub const DEFAULT_ABANDON_AFTER: Duration = Duration::from_secs(15 * 60);

impl Default for Settings {
    fn default() -> Self {
        Self {
            payment_timeout: Duration::from_secs(120),
            abandon_after: DEFAULT_ABANDON_AFTER,
            backoff: Backoff::new(5, Duration::from_millis(100), Duration::from_secs(2)),
            clock: Clock::SYSTEM,
        }
    }
}

/// Everything a saga step touches, built once per cold start.
pub struct Runner<P> {
    pub sagas: SagaStore,
    /// Recovery: the payment store, the payment leases and the PSP client the saga's steps use too.
    pub recovery: Recovery<P>,
    pub escalation: Escalation,
    pub settings: Settings,
}

/// What one action did.
enum Advanced {
    /// The saga moved and was saved in this state; run its next action (no re-read needed).
    Moved(Box<Loaded>),
    /// Waiting for the payment's outcome (or already ended): the saga is as it was loaded.
    Stopped,
}

/// The saga's correlation id, `checkout-<order>` (hashed when that would be too long: every order id the
/// API takes yields a valid one).
fn correlation(order: &OrderId) -> CorrelationId {
    CorrelationId::derived("checkout", order.as_str())
}

impl<P: Psp> Runner<P> {
    fn table(&self) -> &str {
        self.sagas.table()
    }

    fn psp(&self) -> &P {
        &self.recovery.psp
    }

    fn payments(&self) -> &PaymentStore {
        &self.recovery.store
    }

    /// Starts a checkout: the saga and the pending order in one transaction, then runs it as far as it goes.
    /// Starting an order that exists already answers its current state.
    pub async fn start(&self, order_id: OrderId, checkout: Checkout) -> Result<SagaRecord, RunError> {
        let now = self.settings.clock.now_ms();
        let timeout_ms = i64::try_from(self.settings.payment_timeout.as_millis()).unwrap_or(i64::MAX);
        let (saga, event) = Saga::<Started>::begin(order_id.clone(), checkout, now, timeout_ms);
        let create_order = orders::create(self.table(), &order_id, now)?;
        let saved = self
            .settings
            .backoff
            .retry(
                |_| self.sagas.save(&saga, &event, vec![create_order.clone()]),
                SagaStoreError::is_transient,
            )
            .await;
        let record = match saved {
            Ok(()) => {
                info!(order_id = %order_id, "checkout saga started");
                metrics::after_transition(saga.record(), &event);
                self.drive(Loaded::Started(saga)).await?
            }
            // Started before (or our first attempt committed and its answer was lost).
            Err((SagaStoreError::Conflict(_) | SagaStoreError::StepCondition(_), _)) => {
                info!(order_id = %order_id, "checkout exists; resuming it");
                self.resume(&order_id).await?
            }
            Err((e, _)) => return Err(e.into()),
        };
        record.ok_or_else(|| RunError::Invalid(format!("saga {order_id} vanished")))
    }

    /// Runs the saga's next actions until it waits or ends. Each action is retried with backoff; one that
    /// still fails is escalated. `None` for an unknown saga.
    pub async fn resume(&self, order_id: &OrderId) -> Result<Option<SagaRecord>, RunError> {
        match self.sagas.load(order_id).await? {
            Some(loaded) => self.drive(loaded).await,
            None => Ok(None),
        }
    }

    /// [`Runner::resume`], cut at `deadline` wherever it is, PSP calls and their retries included. Cutting is
    /// safe: every step is one transaction that a crash may interrupt at any point, and its PSP calls carry
    /// idempotency keys, so the next resume (the sweeper's) redoes exactly what did not complete.
    pub async fn resume_within(
        &self,
        order_id: &OrderId,
        deadline: tokio::time::Instant,
    ) -> Result<Option<SagaRecord>, RunError> {
        tokio::time::timeout_at(deadline, self.resume(order_id))
            .await
            .map_err(|_| RunError::OutOfTime)?
    }

    /// Runs actions from `loaded` on. A saved transition hands over its new state directly; the saga is read
    /// again only after a conflict (someone else moved it).
    async fn drive(&self, mut loaded: Loaded) -> Result<Option<SagaRecord>, RunError> {
        let order_id = loaded.record().order_id.clone();
        // A saga has at most 8 transitions; more rounds than this means something keeps moving it under us.
        for _ in 0..MAX_ROUNDS {
            let action = action_name(&loaded);
            let attempt = self
                .settings
                .backoff
                .retry(
                    |_| {
                        self.advance(loaded.clone())
                            .instrument(shared::telemetry::step_span(action))
                    },
                    RunError::is_transient,
                )
                .await;
            loaded = match attempt {
                Ok(Advanced::Moved(next)) => *next,
                Ok(Advanced::Stopped) => return Ok(Some(loaded.record().clone())),
                // The PSP is failing and its breaker open: no retries onto it, no escalation; the sweeper
                // resumes the saga after the cool-down.
                Err((RunError::Psp(e), _)) if e.is_deferred() => {
                    warn!(order_id = %order_id, action, error = %ErrorChain(&e), "PSP paused by the circuit breaker; saga deferred");
                    return Ok(Some(loaded.record().clone()));
                }
                // Someone else moved the saga (a retry whose first attempt committed, or another worker).
                Err((RunError::Saga(SagaStoreError::Conflict(_)), _)) => match self.sagas.load(&order_id).await? {
                    Some(current) => current,
                    None => return Ok(None),
                },
                Err((e, attempts)) => return Err(self.escalate(loaded.record(), action, attempts, e).await),
            };
        }
        Err(RunError::Invalid(format!(
            "saga {order_id} did not settle in {MAX_ROUNDS} rounds"
        )))
    }

    async fn escalate(&self, record: &SagaRecord, action: &'static str, attempts: u32, e: RunError) -> RunError {
        error!(order_id = %record.order_id, status = %record.status, action, attempts, error = %ErrorChain(&e),
               "saga step keeps failing; escalated");
        metrics::escalated(record, action);
        if let Err(send) = self
            .escalation
            .escalate(&record.order_id, action, attempts, &ErrorChain(&e).to_string())
            .await
        {
            // The sweeper finds the saga again (it is still open); the invocation fails loudly.
            error!(order_id = %record.order_id, error = %ErrorChain(&send), "escalation could not be sent");
        }
        RunError::Escalated {
            order_id: record.order_id.to_string(),
            action,
            attempts,
            error: Box::new(e),
        }
    }

    /// A saga the sweeper cannot process at all (its stored record does not load, or it never settles):
    /// logged, counted and sent to the escalation queue like a step that keeps failing, so a person looks
    /// at it. The sweeper then leaves it alone for a while (see `sweeper`).
    pub async fn escalate_unprocessable(&self, order_id: &OrderId, e: &RunError) {
        const ACTION: &str = "resume";
        let error = ErrorChain(e).to_string();
        error!(order_id = %order_id, error, "saga cannot be processed; escalated");
        metrics::escalated_order(order_id, ACTION);
        if let Err(send) = self.escalation.escalate(order_id, ACTION, 1, &error).await {
            error!(order_id = %order_id, error = %ErrorChain(&send), "escalation could not be sent");
        }
    }

    /// Saves a transition, emits its metrics, and reports the move.
    async fn moved<S>(
        &self,
        saga: Saga<S>,
        event: SagaEvent,
        writes: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
    ) -> Result<Advanced, RunError>
    where
        Loaded: From<Saga<S>>,
    {
        self.sagas.save(&saga, &event, writes).await?;
        info!(order_id = %event.order_id, version = event.version, event = event.kind.as_str(),
              status = %event.status, "saga moved");
        metrics::after_transition(saga.record(), &event);
        Ok(Advanced::Moved(Box::new(saga.into())))
    }

    /// Runs the one action of the saga's state.
    /// One step of the saga: the core's `Loaded` names the state, each state's step is its own method.
    async fn advance(&self, loaded: Loaded) -> Result<Advanced, RunError> {
        let now = self.settings.clock.now_ms();
        match loaded {
            Loaded::Started(saga) => self.reserve_stock(saga, now).await,
            Loaded::StockReserved(saga) => self.create_payment(saga, now).await,
            Loaded::Charging(saga) => self.charge(saga, now).await,
            Loaded::PaymentPending(saga) => self.await_payment(saga, now).await,
            Loaded::PaymentCaptured(saga) => self.confirm_order(saga, now).await,
            Loaded::RefundingPayment(saga) => self.refund(saga, now).await,
            Loaded::CancellingPayment(saga) => self.cancel_payment(saga, now).await,
            Loaded::ReleasingStock(saga) => self.release_stock(saga, now).await,
            Loaded::Completed(_) | Loaded::Compensated(_) => Ok(Advanced::Stopped),
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

    /// Creates the payment in the transaction that saves its id, so every later charge uses that payment.
    async fn create_payment(&self, saga: Saga<StockReserved>, now: i64) -> Result<Advanced, RunError> {
        let new = new_payment(&saga, now)?;
        let (payment, writes) = self.payments().create_writes(new)?;
        let (next, event) = saga.payment_created(payment.id, now);
        self.moved(next, event, writes).await
    }

    /// Waits for the payment's outcome; past the payment deadline hands it to recovery once, and past the
    /// abandonment deadline gives up on a customer who has not acted.
    async fn await_payment(&self, saga: Saga<PaymentPending>, now: i64) -> Result<Advanced, RunError> {
        let payment_id = saga.payment_id().clone();
        let past_deadline = now >= saga.record().payment_deadline_ms;
        let abandoned = self.abandoned(saga.record(), now);
        match self
            .payment_outcome(saga.order_id(), &payment_id, past_deadline || abandoned)
            .await?
        {
            Some(PaymentStatus::Captured) => {
                let (next, event) = saga.payment_captured(now);
                self.moved(next, event, vec![]).await
            }
            Some(status @ (PaymentStatus::Failed | PaymentStatus::Refunded)) => {
                let (next, event) = saga.payment_failed(format!("payment {status}"), now);
                self.moved(next, event, vec![]).await
            }
            // Still the customer's turn long after the start: give up, cancel at the PSP, compensate.
            Some(status @ (PaymentStatus::Pending | PaymentStatus::RequiresAction | PaymentStatus::AttemptFailed))
                if abandoned =>
            {
                let reason = format!(
                    "abandoned: payment still {status} after {:?}",
                    self.settings.abandon_after
                );
                let (next, event) = saga.payment_failed(reason, now);
                self.moved(next, event, vec![]).await
            }
            _ if past_deadline && !saga.record().recovery_requested => {
                self.hand_to_recovery(saga.order_id(), &payment_id).await;
                let (next, event) = saga.recovery_requested(now);
                self.moved(next, event, vec![]).await
            }
            _ => Ok(Advanced::Stopped),
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

    /// Charges the payment the saga saved: at the PSP with the key `<order>:charge` (the same on every retry,
    /// however late), finalizes the PSP's synchronous answer and records the request. A payment the PSP already
    /// answered for (its PaymentIntent bound by a webhook) is read, never charged again: that holds even after
    /// the PSP has forgotten the idempotency key (Stripe keeps them 24 hours).
    async fn charge(&self, saga: Saga<Charging>, now: i64) -> Result<Advanced, RunError> {
        let order = saga.order_id().clone();
        let payment = self
            .payments()
            .get(saga.payment_id())
            .await?
            .ok_or_else(|| RunError::Invalid(format!("payment {} of saga {order} vanished", saga.payment_id())))?;
        let answer = match payment.psp_reference.clone() {
            Some(reference) => self.psp().retrieve(&reference).await,
            None if self.key_may_be_forgotten(&payment, now) => match self.psp().find_for_payment(&payment.id).await? {
                Some(first) => {
                    warn!(order_id = %order, payment_id = %payment.id, intent = %first.id,
                          "charge retried after the PSP's key expired: the first PaymentIntent is used");
                    Ok(first)
                }
                None => self.send_charge(&saga, &payment).await,
            },
            None => self.send_charge(&saga, &payment).await,
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
                let (next, event) = saga.charge_failed(format!("charge refused: {refused}"), now);
                return self.moved(next, event, vec![]).await;
            }
            Err(e) => return Err(e.into()),
        };
        let reference = shared::PspReference::parse(intent.id.as_str())
            .map_err(|e| RunError::Psp(PspError::BadAnswer(format!("PaymentIntent id: {e}").into())))?;
        let customer_action = intent.status == IntentStatus::RequiresAction;
        match intent.observation(Path::Sync, correlation(&order)) {
            // From the payment just read: no second read.
            Ok(Some(observation)) => {
                self.payments().finalize_from(payment, &observation, None).await?;
            }
            Ok(None) => warn!(order_id = %order, psp_status = intent.status.as_str(), "charge answer says nothing new"),
            Err(unusable) => return Err(RunError::Psp(PspError::BadAnswer(unusable.into()))),
        }
        let (next, event) = saga.payment_requested(Some(reference), customer_action, now);
        self.moved(next, event, vec![]).await
    }

    /// Creates and confirms the PaymentIntent for `payment`, with the key `<order>:charge`.
    async fn send_charge(&self, saga: &Saga<Charging>, payment: &shared::Payment) -> Result<PaymentIntent, PspError> {
        let checkout = &saga.record().checkout;
        let request = ChargeRequest {
            payment_id: &payment.id,
            order_id: saga.order_id(),
            money: &checkout.money,
            payment_method: &checkout.payment_method,
        };
        self.psp()
            .charge(&format!("{}:charge", saga.order_id()), &request)
            .await
    }

    /// Was the payment created so long ago that the PSP may have forgotten the charge's idempotency key?
    fn key_may_be_forgotten(&self, payment: &shared::Payment, now: i64) -> bool {
        let trusted = i64::try_from(PSP_KEY_TRUSTED_FOR.as_millis()).unwrap_or(i64::MAX);
        now.saturating_sub(payment.created_at_ms) >= trusted
    }

    /// Refunds the captured payment: all that is left on the charge (all of it, unless someone refunded part
    /// at the PSP already), key `<order>:refund`, then reads the PaymentIntent back, whose charge has the
    /// refunded total (the refund object has none). A refund the PSP refuses (nothing left: our earlier
    /// attempt, whose answer was lost, after the PSP forgot its key; or a refund made at the PSP) is read
    /// back too: the money is back if the charge says so, and only then does the saga go on.
    async fn refund(&self, saga: Saga<shared::saga::RefundingPayment>, now: i64) -> Result<Advanced, RunError> {
        let payment_id = saga.payment_id().clone();
        let amount = saga.record().checkout.money.amount_minor();
        let reference = saga
            .record()
            .psp_reference
            .clone()
            .ok_or_else(|| RunError::Invalid("captured payment without a PSP reference".into()))?;
        let refused = match self
            .psp()
            .refund(&format!("{}:refund", saga.order_id()), &reference, None)
            .await
        {
            Ok(refund) if refund.is_accepted() => None,
            Ok(refund) => {
                return Err(RunError::Invalid(format!(
                    "refund {} ended {}",
                    refund.id, refund.status
                )))
            }
            Err(refused @ PspError::Refused { .. }) => Some(refused),
            Err(e) => return Err(e.into()),
        };
        let intent = self.psp().retrieve(&reference).await?;
        if let Some(refused) = refused {
            let back = intent.amount_refunded().unwrap_or(0);
            if back < amount {
                return Err(RunError::Invalid(format!(
                    "refund refused ({refused}) with {back} of {amount} refunded"
                )));
            }
            warn!(order_id = %saga.order_id(), "refund refused: the charge is refunded already; going on");
        }
        self.observe_intent(&payment_id, saga.order_id(), &intent).await?;
        let (next, event) = saga.refunded(amount, now);
        self.moved(next, event, vec![]).await
    }

    /// Past the abandonment deadline (counted from the start)?
    fn abandoned(&self, record: &SagaRecord, now: i64) -> bool {
        let after = i64::try_from(self.settings.abandon_after.as_millis()).unwrap_or(i64::MAX);
        now >= record.started_at_ms.saturating_add(after)
    }

    /// Compensates a charge that must take no money: a payment still open is canceled at the PSP (key
    /// `<order>:cancel:<status>`) and failed here. If the PSP refuses because the payment succeeded meanwhile, the
    /// saga continues from the capture (confirm the order; a cancelled order is then refunded).
    async fn cancel_payment(
        &self,
        saga: Saga<shared::saga::CancellingPayment>,
        now: i64,
    ) -> Result<Advanced, RunError> {
        let payment_id = saga.payment_id().clone();
        let order = saga.order_id().clone();
        let payment = self
            .payments()
            .get(&payment_id)
            .await?
            .ok_or_else(|| RunError::Invalid(format!("payment {payment_id} of saga {order} vanished")))?;
        let mut status = payment.status;
        if !status.is_terminal() {
            if let Some(reference) = payment.psp_reference.clone() {
                let intent = self.cancel_intent(&order, &reference).await?;
                status = self
                    .observe_intent(&payment_id, &order, &intent)
                    .await?
                    .unwrap_or(status);
                if !matches!(intent.status, IntentStatus::Canceled | IntentStatus::Succeeded) {
                    // The money may still be taken: saying "no money taken" now would keep it. The saga waits
                    // here for the PSP's outcome (the sweeper resumes it; a capture continues from there).
                    info!(order_id = %order, psp_status = intent.status.as_str(),
                          "the PaymentIntent cannot be canceled now; waiting for its outcome");
                    return Ok(Advanced::Stopped);
                }
            }
        }
        if !status.is_terminal() {
            let reason = saga
                .record()
                .failure
                .as_ref()
                .map(|f| format!("checkout cancelled: {}", f.reason))
                .unwrap_or_default();
            // Fails a payment the PSP never took (canceled there, or refused before a PaymentIntent existed).
            // What the write leaves decides: a capture that won the race is not "no money taken".
            status = self
                .observe(&payment_id, &order, Outcome::Failed { reason }, None)
                .await?;
        }
        if status == PaymentStatus::Captured {
            info!(order_id = %order, "the payment succeeded before the cancel; continuing from the capture");
            let (next, event) = saga.payment_succeeded(now);
            return self.moved(next, event, vec![]).await;
        }
        let (next, event) = saga.payment_cancelled(now);
        self.moved(next, event, vec![]).await
    }

    /// Cancels the PaymentIntent if it can still be canceled, and answers it as it then stands. It is read
    /// first: one that succeeded, was canceled or is processing (which Stripe cannot cancel) is not asked to
    /// cancel. The key names the status the cancel was decided on (`<order>:cancel:<status>`), because Stripe
    /// replays a refused cancel's answer for its key: a later cancel from another status must not get it.
    async fn cancel_intent(
        &self,
        order: &OrderId,
        reference: &shared::PspReference,
    ) -> Result<PaymentIntent, RunError> {
        let current = self.psp().retrieve(reference).await?;
        if matches!(
            current.status,
            IntentStatus::Canceled | IntentStatus::Succeeded | IntentStatus::Processing
        ) {
            return Ok(current);
        }
        let key = format!("{order}:cancel:{}", current.status.as_str());
        match self.psp().cancel(&key, reference).await {
            Ok(intent) => Ok(intent),
            // Refused with the PaymentIntent: it moved between the read and the cancel.
            Err(refused) => match refused.payment_intent().cloned() {
                Some(intent) => Ok(intent),
                None => Err(refused.into()),
            },
        }
    }

    /// The customer cancels the order: a saga still waiting for its payment cancels the PaymentIntent rather
    /// than waiting for money it would have to refund. (Once the money is taken, the confirmation fails and
    /// the payment is refunded.) `None` for an unknown saga.
    pub async fn cancel_by_customer(&self, order_id: &OrderId) -> Result<Option<SagaRecord>, RunError> {
        match self.sagas.load(order_id).await? {
            Some(Loaded::PaymentPending(saga)) => {
                let (next, event) =
                    saga.payment_failed("cancelled by the customer".into(), self.settings.clock.now_ms());
                match self.moved(next, event, vec![]).await {
                    Ok(Advanced::Moved(next)) => self.drive(*next).await,
                    Ok(Advanced::Stopped) => self.resume(order_id).await,
                    // Moved by someone else meanwhile: carry on from where it is.
                    Err(RunError::Saga(SagaStoreError::Conflict(_))) => self.resume(order_id).await,
                    Err(e) => Err(e),
                }
            }
            // Not waiting for the payment: the saga's own steps see the cancelled order (the confirmation fails
            // and a captured payment is refunded).
            Some(other) => Ok(Some(other.record().clone())),
            None => Ok(None),
        }
    }

    /// Applies a PaymentIntent the saga read from the PSP through the one finalize.
    /// The payment's status afterwards, when there was something to apply.
    async fn observe_intent(
        &self,
        payment_id: &PaymentId,
        order: &OrderId,
        intent: &PaymentIntent,
    ) -> Result<Option<PaymentStatus>, RunError> {
        let Some(observation) = intent
            .observation(Path::Sync, correlation(order))
            .map_err(|e| RunError::Psp(PspError::BadAnswer(e.into())))?
        else {
            return Ok(None);
        };
        let outcome = self.payments().finalize(payment_id, &observation, None).await?;
        Ok(Some(outcome.payment.status))
    }

    /// Applies what the saga itself learned from the PSP (a refund, a cancellation) through the one finalize.
    /// The payment's status afterwards (which may be another path's, when that one won).
    async fn observe(
        &self,
        payment_id: &PaymentId,
        order: &OrderId,
        outcome: Outcome,
        reference: Option<shared::PspReference>,
    ) -> Result<PaymentStatus, RunError> {
        let mut observation = Observation::new(Path::Sync, outcome, correlation(order));
        observation.psp_reference = reference;
        Ok(self
            .payments()
            .finalize(payment_id, &observation, None)
            .await?
            .payment
            .status)
    }

    /// The payment's status as the order projection has applied it from the queue, if any event arrived.
    /// Past the payment's deadline (or the checkout's), a projection that shows no outcome is not trusted to be
    /// complete (an event may have been lost on the way): the payment item itself is read.
    async fn payment_outcome(
        &self,
        order: &OrderId,
        payment: &PaymentId,
        past_deadline: bool,
    ) -> Result<Option<PaymentStatus>, RunError> {
        let key = order_projection::key(order, payment);
        let item = read_item(self.sagas.client(), self.table(), key, "read order projection").await?;
        let projected = item
            .and_then(|i| i.get("payment_status").and_then(|v| v.as_s().ok()).cloned())
            .and_then(|s| PaymentStatus::parse(&s).ok());
        if !past_deadline || projected.is_some_and(PaymentStatus::is_terminal) {
            return Ok(projected);
        }
        Ok(self.payments().get(payment).await?.map(|p| p.status).or(projected))
    }
}

/// The checkout's payment: a fresh id, the checkout's money, the order in its metadata.
fn new_payment(saga: &Saga<StockReserved>, now: i64) -> Result<NewPayment, RunError> {
    let order = saga.order_id();
    let metadata = Metadata::parse([("checkout".to_owned(), order.to_string())].into())
        .map_err(|e| RunError::Invalid(format!("payment metadata: {e}")))?;
    Ok(NewPayment {
        id: PaymentId::generate(uuid::Uuid::new_v4().as_u128()),
        order_id: order.clone(),
        money: saga.record().checkout.money,
        psp_reference: None,
        metadata,
        correlation_id: correlation(order),
        trace_context: None,
        now_ms: now,
    })
}

fn action_name(loaded: &Loaded) -> &'static str {
    match loaded {
        Loaded::Started(_) => "reserve_stock",
        Loaded::StockReserved(_) => "create_payment",
        Loaded::Charging(_) => "charge",
        Loaded::PaymentPending(_) => "await_payment",
        Loaded::PaymentCaptured(_) => "confirm_order",
        Loaded::RefundingPayment(_) => "refund_payment",
        Loaded::CancellingPayment(_) => "cancel_payment",
        Loaded::ReleasingStock(_) => "release_stock",
        Loaded::Completed(_) | Loaded::Compensated(_) => "none",
    }
}
