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
//! This module holds the loop (`Runner::drive`: each step retried, the one that still fails escalated) and
//! the one dispatch from a state to its step (`Runner::advance`). Each step is a plain function of its own
//! module that takes what it needs (the saga store, the payment store, its PSP's client, the escalation
//! queue) and ends with its transition saved (`transition`); none comes back here:
//!
//! | module | steps |
//! |---|---|
//! | `steps` | stock, the payment item, the wait for its outcome (and recovery past its deadline), the order; the refund routed to its PSP |
//! | `stripe` | charge, refund, cancel at Stripe |
//! | `capture` | Stripe's capture at confirmation (manual capture) |
//! | `adyen` | charge, 3-D Secure details, capture, refund, cancel at Adyen |
//! | `deadline` | a payment creation or a charge given up at its deadline |
//! | `escalate` | the first escalation of a saga, which sets it aside |
//! | `observe` | what the saga learns, applied through the one finalize; the payment's outcome as the order projection shows it |
//! | `psp_step` | what Stripe's and Adyen's steps share |
//!
//! Which PSP a checkout uses is one type, [`CheckoutPsp`]: the request's (or `SAGA_PSP`'s) when the payment
//! is created, then the one the payment recorded.

mod adyen;
mod capture;
mod deadline;
mod error;
mod escalate;
mod observe;
mod psp_step;
mod settings;
mod steps;
mod stripe;
mod transition;

pub use crate::saga::CheckoutPsp;
pub use error::RunError;
pub use settings::{action_name, default_checkout_psp, Settings, DEFAULT_ABANDON_AFTER};

use crate::orders;
use crate::saga::{passed, Escalation, Loaded, Next, OnDeadline, Saga, SagaRecord, SagaStore, SagaStoreError, Started};
use psp::Psps;
use recovery::{Recovery, RecoverySettings};
use shared::store::PaymentStore;
use shared::telemetry::ErrorChain;
use shared::{Config, OrderId, PaymentId};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{error, info, warn, Instrument};
use transition::{moved, Advanced, StepCtx};

/// Stripe keeps an idempotency key for 24 hours. A charge first tried longer ago than this (with a margin)
/// may have outlived its key, so before it is sent again the PSP is searched for the PaymentIntent of the
/// first attempt.
pub const PSP_KEY_TRUSTED_FOR: Duration = Duration::from_millis(crate::saga::PSP_KEY_TRUSTED_FOR_MS.unsigned_abs());

/// Load-and-advance rounds of one resume.
const MAX_ROUNDS: usize = 32;

/// Everything a saga step touches, built once per cold start ([`Runner::new`]).
pub struct Runner<P> {
    /// The sagas, each transition saved with its step's writes.
    pub sagas: SagaStore,
    /// The checkouts' payments, each PSP answer finalized on them.
    pub payments: PaymentStore,
    /// Every PSP client, routed by a payment's provider (a [`psp::PspSet`], or one Stripe client alone).
    pub psps: P,
    /// Recovery, asked about one payment past its deadline ([`Recovery::reconcile`]), on the same clients.
    pub recovery: Recovery<P>,
    /// Where a saga's first escalation goes.
    pub escalation: Escalation,
    /// Deadlines, retries, clock, the PSP of new checkouts.
    pub settings: Settings,
}

impl<P: Psps + Clone> Runner<P> {
    /// The runner over `config`'s table on `dynamodb`, calling `psps` (recovery gets a clone: a
    /// [`psp::PspSet`]'s clones share its breakers and paces), escalating to `escalation`: the one place it is
    /// put together.
    pub fn new(
        dynamodb: &aws_sdk_dynamodb::Client,
        config: &Config,
        psps: P,
        recovery: RecoverySettings,
        escalation: Escalation,
        settings: Settings,
    ) -> Self {
        Self {
            sagas: SagaStore::new(dynamodb.clone(), &config.table_name, config.open_shards),
            payments: PaymentStore::new(dynamodb.clone(), &config.table_name, config.open_shards),
            recovery: Recovery::new(dynamodb, config, psps.clone(), recovery),
            psps,
            escalation,
            settings,
        }
    }
}

impl<P: Psps> Runner<P> {
    /// What a step decided at `now` writes through: this runner's stores and escalation queue.
    fn step(&self, now: i64) -> StepCtx<'_> {
        StepCtx {
            sagas: &self.sagas,
            payments: &self.payments,
            escalation: &self.escalation,
            now,
        }
    }

    /// Starts a checkout: the saga and the pending order in one transaction, then runs it as far as it goes.
    /// Starting an order that exists already answers its current state.
    pub async fn start(&self, order_id: OrderId, checkout: crate::saga::Checkout) -> Result<SagaRecord, RunError> {
        let now = self.settings.clock.now_ms();
        let timeout_ms = i64::try_from(self.settings.payment_timeout.as_millis()).unwrap_or(i64::MAX);
        let (saga, event) = Saga::<Started>::begin(order_id.clone(), checkout, now, timeout_ms);
        // The request's trace is the checkout's: kept with the saga for the payment it creates later.
        let saga = saga.in_trace(shared::telemetry::current_traceparent());
        let create_order = orders::create(self.sagas.table(), &order_id, now)?;
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
                crate::metrics::after_transition(saga.record(), &event);
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
    pub async fn resume_within(&self, order_id: &OrderId, deadline: Instant) -> Result<Option<SagaRecord>, RunError> {
        tokio::time::timeout_at(deadline, self.resume(order_id))
            .await
            .map_err(|_| RunError::OutOfTime)?
    }

    /// Runs steps from `loaded` on. A saved transition hands over its new state directly; the saga is read
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
                Ok(Advanced::Stopped) => {
                    let step = self.step(self.settings.clock.now_ms());
                    return escalate::waiting(step, &self.settings, loaded, action).await;
                }
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
                Err((e, attempts)) => {
                    let step = self.step(self.settings.clock.now_ms());
                    return Err(escalate::step_failed(step, loaded, action, attempts, e).await);
                }
            };
        }
        Err(RunError::Invalid(format!(
            "saga {order_id} did not settle in {MAX_ROUNDS} rounds"
        )))
    }

    /// One step of the saga, decided at `now` by the core (`Loaded::next_at`, deadlines included: the table
    /// `action_name`, `paymentsctl` and the protocol model use too): the one place a state is matched to its
    /// step (a charge and a cancel to the steps of the PSP their payment recorded; the refund and the capture
    /// route inside theirs, after what the payment already holds).
    async fn advance(&self, next: Next, now: i64) -> Result<Advanced, RunError> {
        let (step, psps) = (self.step(now), &self.psps);
        let settings = &self.settings;
        match next {
            Next::ReserveStock(saga) => steps::reserve_stock(step, saga).await,
            Next::CreatePayment(saga) => steps::create_payment(step, settings.new_checkouts, saga).await,
            Next::PaymentNotCreated(saga) => deadline::payment_not_created(step, settings, saga).await,
            // Boxed: inlined into every resume's future, it passes rustc's query depth limit.
            Next::GiveUpCharge(saga) => Box::pin(deadline::charge_given_up(psps, step, settings, saga)).await,
            Next::Charge(saga) => {
                let (psp, payment) = observe::payment_and_psp(step.payments, saga.record(), "charge").await?;
                match psp {
                    CheckoutPsp::Stripe => stripe::charge(psps, step, saga, payment).await,
                    CheckoutPsp::Adyen => adyen::charge(psps, step, saga, payment).await,
                }
            }
            Next::AwaitPayment(saga) => {
                let abandon_after = settings.abandon_after;
                steps::await_payment(psps, step, &self.recovery, abandon_after, saga).await
            }
            Next::ConfirmOrder(saga) => steps::confirm_order(step, saga).await,
            // Boxed: inlined into every resume's future, it overflows the sweeper's stack.
            Next::RefundPayment(saga) => Box::pin(steps::refund_payment(psps, step, saga)).await,
            Next::CancelPayment(saga) => {
                let (psp, payment) = observe::payment_and_psp(step.payments, saga.record(), "cancel").await?;
                match psp {
                    CheckoutPsp::Stripe => stripe::cancel(psps, step, saga, payment).await,
                    CheckoutPsp::Adyen => adyen::cancel(psps, step, saga, payment).await,
                }
            }
            Next::ReleaseStock(saga) => steps::release_stock(step, saga).await,
            Next::Done(_) => Ok(Advanced::Stopped),
        }
    }

    /// For the sweeper, a saga its resume left open (or that a cut or failed resume left as it was): past
    /// its state's deadline it is acted on now, never only deferred to its next look: compensated (while
    /// time is left before `deadline`; else the next resume does it first) or escalated once and set aside.
    /// The saga as it then stands.
    pub async fn act_on_deadline(&self, loaded: Loaded, deadline: Instant) -> Result<SagaRecord, RunError> {
        let before = loaded.record().clone();
        let (limits, now) = (self.settings.deadlines(), self.settings.clock.now_ms());
        match loaded.clone().next_at(&limits, now) {
            given_up @ (Next::PaymentNotCreated(_) | Next::GiveUpCharge(_)) if Instant::now() < deadline => {
                // Boxed: every step's future is in `advance`'s, too large to inline into the sweeper's.
                let acted = tokio::time::timeout_at(deadline, Box::pin(self.advance(given_up, now))).await;
                Ok(match acted.map_err(|_| RunError::OutOfTime)?? {
                    Advanced::Moved(next) => next.record().clone(),
                    Advanced::Stopped => before,
                })
            }
            _ if passed(&before, &limits, now) == Some(OnDeadline::Escalate) && before.set_aside.is_none() => {
                let action = action_name(&self.settings, &loaded);
                Ok(escalate::escalate_past_deadline(self.step(now), loaded, action).await)
            }
            _ => Ok(before),
        }
    }

    /// Finishes an Adyen payment's 3-D Secure challenge with what the shopper's return brought
    /// (`redirectResult`, see `adyen`), then runs the saga on from Adyen's answer. `None` for an unknown order;
    /// a saga no longer waiting for the customer is answered as it is.
    pub async fn complete_challenge(
        &self,
        order: &OrderId,
        redirect_result: &str,
    ) -> Result<Option<SagaRecord>, RunError> {
        let step = self.step(self.settings.clock.now_ms());
        match adyen::complete_challenge(&self.psps, step, order, redirect_result).await? {
            adyen::Challenge::Unknown => Ok(None),
            adyen::Challenge::AsIs(record) => Ok(Some(*record)),
            adyen::Challenge::Answered => self.resume(order).await,
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
                match moved(&self.sagas, next, event, vec![]).await {
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

    /// The payment item as it stands now: what `GET /checkouts/{order}` shows. Not the projection, which
    /// trails the payment by the outbox's delivery: a saga that ended on a lapsed authorization (the cancel step
    /// failed the payment) would show the authorization the projection last heard of.
    pub async fn payment_now(&self, payment: &PaymentId) -> Result<Option<shared::Payment>, RunError> {
        Ok(self.payments.get(payment).await?)
    }

    /// A saga the sweeper cannot process at all (its stored record does not load, or it never settles):
    /// logged, counted and sent to the escalation queue like a step that keeps failing, so a person looks
    /// at it. The sweeper then leaves it alone for a while (see `sweeper`).
    pub async fn escalate_unprocessable(&self, order_id: &OrderId, e: &RunError) {
        const ACTION: &str = "resume";
        let error = ErrorChain(e).to_string();
        error!(order_id = %order_id, error, "saga cannot be processed; escalated");
        crate::metrics::escalated_order(order_id, ACTION);
        if let Err(send) = self.escalation.escalate(order_id, ACTION, 1, &error).await {
            error!(order_id = %order_id, error = %ErrorChain(&send), "escalation could not be sent");
        }
    }
}
