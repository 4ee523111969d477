//! The orchestrator: loads a checkout saga, runs its next step or compensation, saves the transition with the
//! step's own writes, and repeats until the saga waits (for the payment's outcome) or ends.
//!
//! | state | action | on success | on failure | deadline (from entering the state) |
//! |---|---|---|---|---|
//! | started | reserve stock (conditional decrement) | stock_reserved | out of stock: compensated | step: escalated once |
//! | stock_reserved | create the payment and save its id in the saga (one transaction) | charging | retried, then escalated | step: releasing_stock (no payment made) |
//! | charging | create and confirm a PaymentIntent for the saved payment (key `<order>:charge`; a payment whose PaymentIntent is known is read instead), finalize what it says | payment_pending (also after a decline: the customer may retry) | refused: cancelling_payment; otherwise retried, then escalated | charge: cancelling_payment ("no answer to the charge") |
//! | payment_pending | read the payment's outcome from the order projection (fed by the queue; past the deadline the payment item itself) | payment_captured | failed, abandoned (still the customer's turn after `abandon_after`) or cancelled by the customer: cancelling_payment | the payment's: handed to recovery once; then `abandon_after` |
//! | payment_captured | confirm the order (conditioned on `pending`) | completed | cancelled meanwhile: refunding_payment | step: escalated once |
//! | refunding_payment | refund at the PSP (key `<order>:refund`), the refund recorded on the payment, done only once `succeeded` (a `pending` one waits for its webhook, each resume reading the payment; a failed one is retried, then escalated, and recovery gives the money back under its own key, whose success ends the step: the payment's succeeded refunds cover the amount), read the PaymentIntent back, finalize its refunded total | releasing_stock | refused for good (`charge_disputed` at once; any other refusal the read-back does not show refunded): releasing_stock with `refund_impossible` and one escalation; otherwise retried, then escalated | compensation: escalated once |
//! | cancelling_payment | cancel the PaymentIntent at the PSP (key `<order>:cancel:<status>`) if it can be canceled (one the payment never heard of, after a failed charge, found by the payment's id), make sure our payment is failed | releasing_stock; succeeded meanwhile: payment_captured with the payment's PSP reference; processing (Stripe cannot cancel it): waits for its outcome | retried, then escalated | compensation: escalated once |
//! | releasing_stock | increment the stock | compensated | retried, then escalated | step: escalated once |
//!
//! The deadlines and what happens past them are the core's (`payments_core::saga::deadline`). A saga is
//! escalated once: its first escalation (a step that kept failing, or a wait past its deadline) is recorded on
//! it (`SagaSetAside`) and it is set aside: later failures of that step are logged, not escalated, and the
//! sweeper looks at it on a doubling schedule (at most a day apart) until it moves (news, an operator's
//! `paymentsctl escalations retry`, a PSP that answers again).
//!
//! Every PSP call that moves money carries a key derived from (saga, step), reused on every retry and after
//! a crash, so it never charges or refunds twice. Transient failures are retried with exponential backoff and
//! full jitter; what still fails is escalated to the escalation queue (alarmed, once) and left for the sweeper.
//! While the PSP circuit breaker is open, or the PSP refuses our API key (a deployment fault, never the
//! customer's refusal), a step that needs the PSP is neither retried nor escalated: the saga waits as it is and
//! the sweeper resumes it later (after the cool-down, or once the key is fixed; `PspAuthFailed` alarms).
//!
//! A checkout's PSP is chosen by its request (`psp`, stored on the saga's checkout; without one `SAGA_PSP`,
//! [`Settings::new_checkouts`]) and recorded on the payment when it is created; every later step about it goes to that PSP (invariant 13). The table above is
//! Stripe's; an Adyen payment takes the same states, deadlines and compensations through `adyen`
//! (authorise and capture, refund, cancel, or cancel by our reference; no status read, its outcomes by
//! notification).
//!
//! With manual capture at Stripe (`STRIPE_CAPTURE_METHOD=manual`) `charging` only authorizes (the payment is
//! `authorized`), and `payment_pending` captures it (key `<order>:capture`) before the order is confirmed, or,
//! when the order was cancelled or the authorization lapsed (`capture_before`), fails it so that
//! `cancelling_payment` releases it: a compensation before the capture moves no money and makes no refund.
//!
//! This module holds the loop, its retries and escalation; each state's step is in `steps` (stock, payment
//! item, order), `stripe` (charge, refund, cancel at Stripe), `capture` (Stripe's capture at confirmation) or
//! `adyen` (the same at Adyen), what the saga learns
//! goes through `observe`, and what is done at a deadline or the first escalation is in `deadline`.

mod adyen;
mod capture;
mod deadline;
mod observe;
mod steps;
mod stripe;

use crate::metrics;
use crate::orders;
pub use crate::saga::CheckoutPsp;
use crate::saga::{
    Checkout, Deadlines, Escalation, Loaded, NextStep, Saga, SagaEvent, SagaRecord, SagaStore, SagaStoreError, Started,
};
use psp::{set, PspError, Psps};
use reconciler::Recovery;
use shared::clock::WallClock;
use shared::retry::Backoff;
use shared::store::{PaymentStore, StoreError};
use shared::telemetry::ErrorChain;
use shared::{CorrelationId, OrderId, PspName};
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
pub const PSP_KEY_TRUSTED_FOR: Duration = Duration::from_millis(crate::saga::PSP_KEY_TRUSTED_FOR_MS.unsigned_abs());

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
    pub clock: WallClock,
    /// How long a step on our own items may keep failing (past it: escalated once, or, before the payment
    /// exists, compensated).
    pub step_deadline: Duration,
    /// How long the charge may go unanswered before it is given up and compensated.
    pub charge_deadline: Duration,
    /// How long a refund or a cancel at the PSP may wait or fail before a person is told (once).
    pub compensation_deadline: Duration,
    /// `SAGA_PSP`: the PSP a new checkout's payment is created for and charged through when its request names
    /// none (`POST /checkouts`' `psp`), and the one of sagas started before checkouts named theirs.
    pub new_checkouts: CheckoutPsp,
}

/// `SAGA_PSP`: the PSP a checkout goes to when its request names none, `stripe` (default) or `adyen`.
pub fn default_checkout_psp(env: &shared::Env) -> Result<CheckoutPsp, shared::ConfigError> {
    match env.optional("SAGA_PSP").as_deref().map(str::trim) {
        None => Ok(CheckoutPsp::Stripe),
        Some(name) => CheckoutPsp::parse(name).ok_or_else(|| shared::ConfigError::Invalid {
            name: "SAGA_PSP",
            expected: "stripe or adyen",
            value: name.to_owned(),
        }),
    }
}

impl Settings {
    /// Every state's deadline, for the core's decision (`payments_core::saga::deadline`).
    pub fn deadlines(&self) -> Deadlines {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Deadlines {
            step_ms: ms(self.step_deadline),
            charge_ms: ms(self.charge_deadline),
            compensation_ms: ms(self.compensation_deadline),
            abandon_after_ms: ms(self.abandon_after),
        }
    }

    /// The step the runner takes for `loaded` now: the core's `Loaded::step_at` with these deadlines and this
    /// clock, the step `Runner::advance` is handed (a payment creation or a charge past its deadline given
    /// up). What [`action_name`] names and `paymentsctl` prints.
    pub fn next_step(&self, loaded: &Loaded) -> NextStep {
        loaded.step_at(&self.deadlines(), self.clock.now_ms())
    }

    /// The runner's settings a deployment sets (`SAGA_PAYMENT_TIMEOUT_SECONDS`, default 120;
    /// `CHECKOUT_ABANDON_AFTER_SECONDS`, default 900; `SAGA_PSP`, default `stripe`), the rest the defaults: what
    /// the saga's functions run with and `paymentsctl` decides a saga's next step by.
    pub fn from_env(env: &shared::Env) -> Result<Self, shared::ConfigError> {
        let defaults = Self::default();
        let new_checkouts = default_checkout_psp(env)?;
        Ok(Self {
            payment_timeout: env.seconds("SAGA_PAYMENT_TIMEOUT_SECONDS", defaults.payment_timeout)?,
            abandon_after: env.seconds("CHECKOUT_ABANDON_AFTER_SECONDS", defaults.abandon_after)?,
            new_checkouts,
            ..defaults
        })
    }
}

/// `CHECKOUT_ABANDON_AFTER_SECONDS`' default: a 3-D Secure challenge or a retry has 15 minutes.
pub const DEFAULT_ABANDON_AFTER: Duration = Duration::from_secs(15 * 60);

impl Default for Settings {
    fn default() -> Self {
        Self {
            payment_timeout: Duration::from_secs(120),
            abandon_after: DEFAULT_ABANDON_AFTER,
            backoff: Backoff::new(5, Duration::from_millis(100), Duration::from_secs(2)),
            clock: WallClock::SYSTEM,
            step_deadline: from_ms(Deadlines::DEFAULT.step_ms),
            charge_deadline: from_ms(Deadlines::DEFAULT.charge_ms),
            compensation_deadline: from_ms(Deadlines::DEFAULT.compensation_ms),
            new_checkouts: CheckoutPsp::Stripe,
        }
    }
}

fn from_ms(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Everything a saga step touches, built once per cold start.
pub struct Runner<P> {
    pub sagas: SagaStore,
    /// Recovery: the payment store, the payment leases and the PSP clients the saga's steps use too (a
    /// [`psp::PspSet`], or one Stripe client alone).
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

impl<P: Psps> Runner<P> {
    fn table(&self) -> &str {
        self.sagas.table()
    }

    /// Every PSP client, routed by a payment's provider.
    fn psps(&self) -> &P {
        &self.recovery.psp
    }

    /// The Stripe client, for a payment of Stripe's; without one here a deployment fault, deferred.
    fn stripe(&self) -> Result<&P::Stripe, PspError> {
        self.psps()
            .stripe()
            .ok_or_else(|| set::not_configured(&PspName::Stripe, "stripe"))
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
        // The request's trace is the checkout's: kept with the saga for the payment it creates later.
        let saga = saga.in_trace(shared::telemetry::current_traceparent());
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
                match self.sagas.load(&order_id).await? {
                    // Set aside after its escalation: a repeated start answers its state and calls nobody; the
                    // sweeper's schedule, news and an operator resume it.
                    Some(loaded) if loaded.record().set_aside.is_some() => Some(loaded.record().clone()),
                    Some(loaded) => self.drive(loaded).await?,
                    None => None,
                }
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
            let action = action_name(&self.settings, &loaded);
            let attempt = self
                .settings
                .backoff
                .retry(
                    |_| {
                        // The saga's next step as the core gives it now, deadlines included: past its state's
                        // deadline a payment not created or a charge not answered in time is given up.
                        let now = self.settings.clock.now_ms();
                        let next = loaded.clone().next_at(&self.settings.deadlines(), now);
                        self.advance(next, now).instrument(shared::telemetry::step_span(action))
                    },
                    RunError::is_transient,
                )
                .await;
            loaded = match attempt {
                Ok(Advanced::Moved(next)) => *next,
                Ok(Advanced::Stopped) => return self.waiting(loaded, action).await,
                // The PSP's breaker is open or it refused our key: no retries onto it, no escalation, no
                // compensation; the sweeper resumes the saga later.
                Err((RunError::Psp(e), _)) if e.is_deferred() => {
                    warn!(order_id = %order_id, action, error = %ErrorChain(&e), "PSP call deferred; saga waits");
                    return Ok(Some(loaded.record().clone()));
                }
                // Someone else moved the saga (a retry whose first attempt committed, or another worker).
                Err((RunError::Saga(SagaStoreError::Conflict(_)), _)) => match self.sagas.load(&order_id).await? {
                    Some(current) => current,
                    None => return Ok(None),
                },
                Err((e, attempts)) => return Err(self.escalate(loaded, action, attempts, e).await),
            };
        }
        Err(RunError::Invalid(format!(
            "saga {order_id} did not settle in {MAX_ROUNDS} rounds"
        )))
    }

    /// A step that kept failing: escalated and set aside the first time; once set aside, later failures of
    /// the saga (a sweep on its schedule, news, a repeated start) are logged but not escalated again.
    async fn escalate(&self, loaded: Loaded, action: &'static str, attempts: u32, e: RunError) -> RunError {
        let record = loaded.record().clone();
        let error = ErrorChain(&e).to_string();
        if let Some(aside) = &record.set_aside {
            warn!(order_id = %record.order_id, status = %record.status, action, attempts, error,
                  set_aside_at_ms = aside.at_ms, "saga step still failing; set aside, not escalated again");
        } else {
            error!(order_id = %record.order_id, status = %record.status, action, attempts, error,
                   "saga step keeps failing; escalated");
            metrics::escalated(&record, action);
            self.set_aside_and_tell(loaded, action, attempts, error).await;
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
}

/// The name of the step the runner takes for `loaded` now under `settings` (in its spans, metrics and
/// escalations): [`Settings::next_step`], the core's one table with the deadlines, which `Runner::advance`
/// dispatches on and `paymentsctl escalations retry --dry-run` prints.
pub fn action_name(settings: &Settings, loaded: &Loaded) -> &'static str {
    settings.next_step(loaded).name()
}
