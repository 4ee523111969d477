//! The actors: each one's local state (what survives between its steps, and is lost when it crashes) and
//! its steps. One step is one DynamoDB call or one PSP call; a crash can fall between any two.
//!
//! | actor | steps mirror |
//! |---|---|
//! | saga runner ([`RunnerPc`]) | `functions/checkout-saga/src/runner.rs`: `Runner::drive` (a deferred call waits, a failing step escalates: `escalate::step_failed`), `Runner::advance` and its steps, each a function of its module under `functions/checkout-saga/src/runner/` (`steps::reserve_stock`, `steps::create_payment`, `steps::await_payment`, `steps::confirm_order`, `steps::refund_payment`, `stripe::refund` with `psp_step::refund_impossible`, `steps::release_stock`), `stripe::charge` (with `send_charge`), `stripe::cancel` with `cancel_intent`, `observe::payment_outcome` |
//! | the sweeper ([`sweep`], [`look`]) | `functions/checkout-saga/src/sweeper.rs`: the shard's oldest due saga, one a run; a set-aside saga on its schedule (the core's `after_resume`, `set_aside_due`, `shared/core/src/saga.rs`) |
//! | time ([`late`], [`act_on_deadline`]) | a state's deadline passes (`saga::deadline`): `Runner::drive` gives a charge or a payment creation up (`deadline::charge_given_up`, `deadline::payment_not_created`), `escalate::waiting` escalates a wait once, and the sweeper's `Runner::act_on_deadline` does either for a saga deferred by the PSP |
//! | the PSP's faults ([`dispute`], [`key_rejected`], [`key_fixed`], [`deploy`], [`breaker_closes`]) | a cardholder's dispute, a rejected API key and its fix, a deploy that changes the charge request, the breaker's cool-down and probe |
//! | webhook intake ([`intake`]) | `functions/webhook-intake/src/handler.rs`: `intake`, then `functions/webhook-intake/src/payment.rs`'s steps `leased` (`read`, then `take_lease` at the version read) and `finalized` (`finalize`: its new version frees the lease) |
//! | recovery ([`RecoveryPc`], [`recovery_ask`], [`recovery_finalize`]) | `shared/recovery/src/reconcile.rs`: `Recovery::reconcile` / `reconcile_leased` (lease, read, the core's `recovery_step` of `shared/core/src/recovery.rs` choosing what to ask), then `shared/recovery/src/money.rs`'s `settle_money` (`give_back` when a refund is due) and `shared/recovery/src/ask.rs`'s `ask` (PSP status query, finalize) |
//! | customer ([`CustomerPc`]) | completes the 3-D Secure challenge at the PSP with the secret our client view gave; `POST /checkouts/{order}/cancel` (`functions/checkout-saga/src/api.rs`: `orders::cancel`, then `Runner::cancel_by_customer`) |
//! | order projection ([`relay`]) | the outbox relay and `shared/order-projection`: the projection catches up with the payment (best effort) |
//!
//! The saga's transitions are the real typestate ([`payments_core::saga`]): every step loads the stored
//! record with [`Loaded::from_record`] (the real consistency check) and moves it with the real transition
//! method, which the model saves with [`World::save_saga`]. What each step decides is the core's too: the
//! step a loaded saga runs ([`Loaded::next_step`]), the waiting saga's choice ([`awaited`]), the charge's
//! first call ([`charge_call`]), where the cancel starts and its search ([`cancel_start`], [`after_search`]),
//! the cancel's read ([`IntentState`]), a refund's answer and its read-back ([`after_refund`], [`read_back`]), the sweeper's ([`after_resume`]) and the breaker's
//! ([`payments_core::breaker::Failures::record`]).
//!
//! Three cancel steps are modelled ([`CancelMode`]): main's (the runner's `stripe::cancel` + `cancel_intent`: the
//! PaymentIntent read first, a processing one waited for, the status after our write deciding), and two
//! earlier ones that fail our payment while its PaymentIntent may still capture: the model's source of money
//! taken on a failed payment, and main's before the fix (broken).

use crate::ids;
use crate::model::{BreakerMode, CancelMode, Config, SweeperMode};
use crate::psp::{ChargeRefused, IntentStatus, IntentView, Psp, RefundAnswer, SearchRefused};
use crate::world::{Due, Holder, OrderStatus, StoredSaga, World};
use payments_core::breaker::{BreakerRule, Request};
use payments_core::recovery::{recovery_step, RecoveryStep};
use payments_core::saga::{
    after_refund, after_resume, after_search, awaited, cancel_start, charge_call, deadline, passed, read_back,
    set_aside_due, AfterRefund, AwaitDeadlines, Awaited, CancelStart, ChargeCall, Deadlines, IntentState, Loaded, Next,
    NextStep, OnDeadline, ReadBack, RefundCalled, RefundImpossible, SagaRecord, SagaStatus, Sweep,
};
use payments_core::saga::{
    CancellingPayment, Charging, PaymentCaptured, PaymentPending, RefundingPayment, Saga, SagaEvent, Started,
    StockReserved,
};
use payments_core::{decide, Channel, Decision, Observation, Outcome, PaymentId, PaymentStatus, PspName, RefundStep};

/// Where the runner is within the action of the saga it loaded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sub {
    /// `started`: reserve the stock and save `stock_reserved` in one transaction.
    Reserve,
    /// `stock_reserved`: create the payment and save its id (`payment_created`, to `charging`) in one
    /// transaction.
    CreatePayment,
    /// `charging` (`stripe::charge`): read the payment, then retrieve its bound PaymentIntent, or (created
    /// more than `PSP_KEY_TRUSTED_FOR` ago) search the PSP for its first one, or create and confirm one with
    /// the key `<order>:charge`.
    Charge,
    /// Finalize the PSP's answer.
    FinalizeCharge(PaymentId, IntentView),
    /// Save `payment_requested`.
    SaveRequested(IntentView),
    /// The PSP refused the charge: save `charge_failed`.
    SaveChargeFailed,
    /// `payment_pending`: save what the read decided (the core's [`awaited`], never [`Awaited::Wait`]).
    Await(Awaited),
    /// `payment_captured`: confirm the order (conditioned on `pending`) with `completed`, or fail.
    Confirm,
    /// `refunding_payment`: refund at the PSP (key `<order>:refund`).
    Refund,
    /// Read the PaymentIntent back and finalize its refunded total; `refused`: the refund was refused (not
    /// for a reason that makes it impossible), so only a read-back that shows the money back goes on.
    ObserveRefund { refused: bool },
    /// Save `refunded`.
    SaveRefunded,
    /// `cancelling_payment`: read our payment (main: and its PaymentIntent, `cancel_intent`'s read).
    CancelRead,
    /// Cancel the PaymentIntent; the key names the status read (main: `<order>:cancel:<status>`), or not
    /// (earlier: `<order>:cancel`).
    CancelCall(PaymentId, u8, Option<IntentStatus>),
    /// Finalize the PaymentIntent as the cancel (or main's read) left it.
    CancelObserve(PaymentId, IntentView),
    /// The payment is still open: fail it (finalize `failed`); the status before this write.
    CancelFail(PaymentId, PaymentStatus),
    /// Save `payment_succeeded` (the status was captured) or `payment_cancelled`.
    CancelSave(PaymentStatus),
    /// `releasing_stock`: put the stock back and save `compensated`.
    Release,
    /// Past its state's deadline (`Runner::drive`): `stock_reserved` saves `payment_not_created`,
    /// `charging` saves `charge_failed` (then the cancel reaches what the charge made).
    PastDeadline,
}

/// A saga runner (an inbox consumer or the sweeper resuming a saga).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RunnerPc {
    /// No saga loaded.
    Idle,
    /// Working on the saga as loaded, at `step`.
    At { saga: Box<StoredSaga>, step: Sub },
}

/// Recovery (the reconciler, or the saga handing a payment over past its deadline).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecoveryPc {
    Idle,
    /// Holds the lease and has the PSP's answer, taken at PSP time `at`.
    Asked(PaymentId, IntentView, u8),
}

/// Where the customer's cancel request is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CancelPc {
    #[default]
    NotYet,
    /// The order is cancelled; the request goes on to the saga.
    OrderCancelled,
    Done,
}

/// The customer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CustomerPc {
    /// Completed the 3-D Secure challenge.
    pub acted: bool,
    pub cancel: CancelPc,
}

/// The sub-step a runner starts a loaded saga's step with (`Runner::drive`): the core's table with
/// the deadlines ([`Loaded::step_at`]), which `Runner::advance` dispatches on: past its state's deadline a
/// payment creation or a charge is given up ([`Sub::PastDeadline`]). `late`: the state's deadline has passed
/// ([`World::late`]). `None` for a saga that waits (decided at its load) or has ended.
fn first_sub(late: bool, saga: &SagaRecord) -> Option<Sub> {
    let loaded = Loaded::from_record(saga.clone()).ok()?;
    Some(match loaded.step_at(&Deadlines::DEFAULT, model_now(late, saga)) {
        NextStep::PaymentNotCreated | NextStep::GiveUpCharge => Sub::PastDeadline,
        NextStep::ReserveStock => Sub::Reserve,
        NextStep::CreatePayment => Sub::CreatePayment,
        NextStep::Charge => Sub::Charge,
        NextStep::ConfirmOrder => Sub::Confirm,
        NextStep::RefundPayment => Sub::Refund,
        NextStep::CancelPayment => Sub::CancelRead,
        NextStep::ReleaseStock => Sub::Release,
        NextStep::AwaitPayment | NextStep::Done => return None,
    })
}

/// The time the model's clock stands for, for the core's deadlines of `saga`: its state's deadline
/// ([`deadline`] at the runner's defaults, [`Deadlines::DEFAULT`]) once `late`, else the moment it entered
/// the state. (`payment_pending`'s deadlines are the model's [`World::clock`], read by [`AwaitDeadlines`].)
fn model_now(late: bool, saga: &SagaRecord) -> i64 {
    match deadline(saga, &Deadlines::DEFAULT) {
        Some(d) if late => d.at_ms,
        _ => saga.updated_at_ms,
    }
}

/// What the core's [`passed`] says of `saga` at the time the model's clock stands for ([`model_now`]).
fn past_deadline(late: bool, saga: &SagaRecord) -> Option<OnDeadline> {
    passed(saga, &Deadlines::DEFAULT, model_now(late, saga))
}

fn at(late: bool, saga: &StoredSaga) -> RunnerPc {
    match first_sub(late, &saga.0) {
        Some(step) => RunnerPc::At {
            saga: Box::new(saga.clone()),
            step,
        },
        None => RunnerPc::Idle,
    }
}

/// `observe::payment_outcome` and `steps::await_payment`: what the saga does with the payment's outcome, by
/// the core's [`AwaitDeadlines`] and [`awaited`]. `None`: it waits (`Advanced::Stopped`).
fn await_decision(cfg: &Config, w: &World, saga: &SagaRecord) -> Option<Awaited> {
    let abandon_after = if cfg.never_abandon {
        i64::MAX
    } else {
        ids::ABANDON_AFTER_MS
    };
    let deadlines = AwaitDeadlines::of(saga, w.now_ms(), abandon_after);
    let projected = w.projection;
    let outcome = if deadlines.read_item(projected) {
        let payment = saga.payment_id.as_ref().and_then(|id| w.payment(id));
        payment.map(|p| p.status).or(projected)
    } else {
        projected
    };
    Some(awaited(saga, deadlines, outcome)).filter(|a| *a != Awaited::Wait)
}

/// `stripe::cancel`'s reads: our payment, where the core starts the cancel from ([`cancel_start`]: the
/// payment's PaymentIntent, or after a failed charge a search for one it may have made, [`after_search`]), and
/// (main) `cancel_intent`'s read of the PaymentIntent. What comes next; `Ok(None)` when main's cancel would only
/// wait (`Advanced::Stopped`: the PaymentIntent is processing and our payment already says so), which is no
/// step at all; `Err` when the search is refused for good (the step fails: escalated). The reads are one step:
/// a PaymentIntent change commutes with the payment's read and a payment write with the PSP's reads.
fn cancel_reads(cfg: &Config, w: &World, saga: &SagaRecord) -> Result<Option<Sub>, SearchRefused> {
    let Some(id) = saga.payment_id.clone() else {
        return Ok(None);
    };
    let Some(payment) = w.payment(&id) else {
        return Ok(None);
    };
    let mut start = cancel_start(saga, payment);
    if start == CancelStart::Search {
        start = after_search(w.psp.search(&id)?.map(|found| found.reference()));
    }
    let status = payment.status;
    let index = match start {
        CancelStart::Ended(status) => return Ok(Some(Sub::CancelSave(status))),
        CancelStart::Search | CancelStart::Fail => return Ok(Some(Sub::CancelFail(id, status))),
        CancelStart::Cancel(reference) => Psp::index_of(&reference),
    };
    let Some(index) = index else {
        return Ok(None);
    };
    if cfg.cancel != CancelMode::ReadsFirst {
        return Ok(Some(Sub::CancelCall(id, index, None)));
    }
    let Some(view) = w.psp.retrieve(index) else {
        return Ok(None);
    };
    let state: IntentState = view.status.state();
    if state.to_cancel() {
        return Ok(Some(Sub::CancelCall(id, index, Some(view.status))));
    }
    if state.may_still_take_money() {
        // Main waits for a processing PaymentIntent: a step only when its read tells our payment something.
        let Some(observation) = view.observation(Channel::Sync) else {
            return Ok(None);
        };
        return Ok(
            matches!(decide(payment, &observation, World::STAMP_MS), Decision::Apply(_))
                .then_some(Sub::CancelObserve(id, view)),
        );
    }
    Ok(Some(Sub::CancelObserve(id, view)))
}

/// The breaker's rule at the shared settings' defaults (`BreakerSettings::default().rule()`).
const BREAKER_RULE: BreakerRule = BreakerRule {
    failure_threshold: 5,
    window_ms: 60_000,
    cool_down_ms: 30_000,
};

/// Escalations are counted up to this (past the property's bound), so a loop that repeats them is a cycle of
/// finitely many states.
const COUNT_CAP: u8 = crate::model::MAX_IDLE_CALLS + 1;

/// A runner's PSP call for the saga moved nothing: counted up to one past the property's bound
/// ([`crate::model::MAX_IDLE_CALLS`] and one a look of the sweeper's).
fn called_idle(next: &mut World) {
    let cap = crate::model::MAX_IDLE_CALLS
        .saturating_add(next.looks)
        .saturating_add(1);
    next.idle_calls = next.idle_calls.saturating_add(1).min(cap);
}

/// Attempts one resume makes at a step whose call keeps failing transiently (`Settings::default`'s backoff).
const ATTEMPTS: u8 = 5;

/// Why a runner's PSP call cannot be made now: `Some(true)` the PSP answered 401 (the call was made),
/// `Some(false)` the breaker is open (no call). The saga then waits as it is, neither retried nor escalated.
fn psp_blocked(w: &World) -> Option<bool> {
    if w.breaker.open {
        Some(false)
    } else if w.psp.key_rejected {
        Some(true)
    } else {
        None
    }
}

/// The runner's call was deferred (`RunError::Psp(e)` with `e.is_deferred()` in `Runner::drive`): the saga waits
/// for the breaker to close or the key to be fixed.
fn deferred(next: &mut World, i: usize, called: bool) {
    next.runners[i] = RunnerPc::Idle;
    next.due = Due::WaitsForPsp;
    if called {
        called_idle(next);
    }
}

/// The step keeps failing: `Runner::drive` escalates it. Today's runner escalates every time and today's
/// sweeper resumes it at its next run (it stays due, the oldest of its shard); the fixed runner escalates
/// only a saga not yet set aside, and sets it aside with the real transition ([`Loaded::set_aside`]).
fn escalate(cfg: &Config, next: &mut World, i: usize, saga: &StoredSaga, action: NextStep, called: bool) {
    next.runners[i] = RunnerPc::Idle;
    if called {
        called_idle(next);
    }
    escalate_once(cfg, next, saga, action);
}

/// After a move its state's deadline made (the core's `Saga::charge_given_up`, `Saga::payment_not_created`):
/// the saga stays set aside. Broken on purpose ([`Config::deadline_clears_set_aside`]): the code before the
/// fix ended the set-aside with that move, as with any other.
fn given_up_at_deadline(cfg: &Config, next: &mut World, saved: bool) {
    if saved && cfg.deadline_clears_set_aside {
        next.saga.0.set_aside = None;
    }
}

/// The escalation itself ([`escalate`] without the runner): today's sweeper escalates every time, main's
/// only a saga not yet set aside, and sets it aside.
fn escalate_once(cfg: &Config, next: &mut World, saga: &StoredSaga, action: NextStep) {
    match cfg.sweeper {
        SweeperMode::Today => {
            next.escalations = next.escalations.saturating_add(1).min(COUNT_CAP);
            next.due = Due::Escalated;
        }
        SweeperMode::SetsAside if saga.0.set_aside.is_none() => {
            next.escalations = next.escalations.saturating_add(1).min(COUNT_CAP);
            if let Ok(loaded) = Loaded::from_record(saga.0.clone()) {
                let (aside, event) = loaded.set_aside(action.name(), "kept failing".into(), World::STAMP_MS);
                next.save_record(saga.0.version, aside.record().clone(), event);
            }
        }
        SweeperMode::SetsAside => {}
    }
}

/// One resume's failed attempts at a charge with `key` (the first `replayed` or not, every next one the
/// answer Stripe saved for the key) counted by the breaker: the rule
/// ([`payments_core::breaker::Failures::record`]) or today's (every failure counts).
fn count_failures(cfg: &Config, next: &mut World, key: &str, replayed: bool) {
    let now = next.now_ms();
    let breaker = &mut next.breaker;
    match cfg.breaker {
        BreakerMode::Off => {}
        BreakerMode::Today => {
            breaker.counted = breaker.counted.saturating_add(ATTEMPTS);
            if u32::from(breaker.counted) >= BREAKER_RULE.failure_threshold {
                breaker.open = true;
                breaker.counted = 0;
                // Every failure the model makes is one request's: the poisoned charge key.
                breaker.opened_by_one_request = true;
            }
        }
        BreakerMode::PerRequest => {
            let fresh: &[i64] = if replayed { &[] } else { &[now] };
            if let Some(opening) = breaker.failures.record(&BREAKER_RULE, Request::Keyed(key), fresh, now) {
                breaker.open = true;
                breaker.opened_by_one_request |= opening.requests < 2;
            }
        }
    }
}

/// May a runner load the saga now? Not while it waits for the PSP or for today's sweeper, nor (fixed) while
/// the sweeper's decision ([`after_resume`]) keeps it set aside, but for the sweeper's look on its schedule
/// ([`look`]).
fn loadable(cfg: &Config, w: &World) -> bool {
    let record = &w.saga.0;
    w.due == Due::Free
        && (w.look_pending
            || !(cfg.sweeper == SweeperMode::SetsAside
                && matches!(after_resume(record, w.now_ms()), Sweep::SetAside { .. })))
}

/// `escalate::waiting`: a saga whose step stops (waits for the PSP's outcome) past its state's deadline is
/// escalated once and set aside (the core's [`passed`] says [`OnDeadline::Escalate`]); otherwise it waits.
/// `called`: the step made a PSP call (a read) that moved nothing and counts.
fn waiting(cfg: &Config, next: &mut World, i: usize, saga: &StoredSaga, action: NextStep, called: bool) {
    if saga.0.set_aside.is_none() && past_deadline(next.late, &saga.0) == Some(OnDeadline::Escalate) {
        escalate(cfg, next, i, saga, action, called);
    } else {
        next.runners[i] = RunnerPc::Idle;
        if called {
            called_idle(next);
        }
    }
}

/// One step of runner `i`. `lose`: the PSP's answer to this step's call is lost (the call happened); `None`
/// when the step makes no call that changes anything, or nothing changes. An idle runner loads the saga
/// ([`load`]); one at a loaded saga runs its step ([`Step::run`], one function per step kind).
pub fn runner_step(cfg: &Config, w: &World, i: usize, lose: bool) -> Option<World> {
    let calls_psp = matches!(
        w.runners.get(i)?,
        RunnerPc::At {
            step: Sub::Charge | Sub::Refund | Sub::ObserveRefund { .. } | Sub::CancelCall(..),
            ..
        }
    );
    if lose && (!calls_psp || w.losses_left == 0) {
        return None;
    }
    let pc = w.runners.get(i)?.clone();
    let RunnerPc::At { saga, step } = pc else {
        return load(cfg, w, i);
    };
    let mut next = w.clone();
    if calls_psp {
        if let Some(called) = psp_blocked(w) {
            if lose {
                return None;
            }
            deferred(&mut next, i, called);
            return Some(next);
        }
    }
    let loaded = Loaded::from_record(saga.0.clone()).ok()?;
    Step {
        cfg,
        i,
        lose,
        saga: &saga,
    }
    .run(&mut next, step, loaded)?;
    Some(next)
}

/// Runner `i` loads the saga (`SagaStore::load`); in `payment_pending` it also reads the outcome and decides
/// at once, and in main's `cancelling_payment` it reads the payment and its PaymentIntent ([`load_cancelling`]),
/// so a saga that waits is no step at all.
fn load(cfg: &Config, w: &World, i: usize) -> Option<World> {
    let record = &w.saga.0;
    if record.status.is_terminal() || Loaded::from_record(record.clone()).is_err() || !loadable(cfg, w) {
        return None;
    }
    let mut next = w.clone();
    // The sweeper's look at a set-aside saga is this load.
    let looking = std::mem::take(&mut next.look_pending);
    let step = match record.status {
        SagaStatus::PaymentPending => Some(Sub::Await(await_decision(cfg, w, record)?)),
        SagaStatus::CancellingPayment if cfg.cancel == CancelMode::ReadsFirst => {
            return load_cancelling(cfg, w, next, i, looking);
        }
        _ => first_sub(w.late, record),
    };
    next.runners[i] = match step {
        Some(step) => RunnerPc::At {
            saga: Box::new(w.saga.clone()),
            step,
        },
        None => RunnerPc::Idle,
    };
    Some(next)
}

/// Main's load of a `cancelling_payment` saga with its reads ([`cancel_reads`]) into `next`: deferred while
/// the PSP cannot be called, on to the step the reads chose, escalated when the search is refused for good.
/// A saga that waits for a processing PaymentIntent is a step only past the state's deadline (escalated
/// once) or on the sweeper's look (`looking`: one read that moves nothing).
fn load_cancelling(cfg: &Config, w: &World, mut next: World, i: usize, looking: bool) -> Option<World> {
    if let Some(called) = psp_blocked(w) {
        deferred(&mut next, i, called);
        return Some(next);
    }
    match cancel_reads(cfg, w, &w.saga.0) {
        Ok(Some(step)) => {
            next.runners[i] = RunnerPc::At {
                saga: Box::new(w.saga.clone()),
                step,
            };
        }
        Ok(None) if past_deadline(w.late, &w.saga.0) == Some(OnDeadline::Escalate) || looking => {
            waiting(cfg, &mut next, i, &w.saga, NextStep::CancelPayment, true);
        }
        Ok(None) => return None,
        // `find_for_payment` refused for good (`PspError::Refused`): the step fails, escalated.
        Err(SearchRefused) => escalate(cfg, &mut next, i, &w.saga, NextStep::CancelPayment, true),
    }
    Some(next)
}

/// Runner `i`'s step at the saga as it loaded it: what each step kind's function below needs besides the
/// world it changes, so each is written as the runner's method it mirrors, with the same few moves (save and
/// go on, retry, go to a sub-step, escalate).
struct Step<'a> {
    cfg: &'a Config,
    i: usize,
    /// The PSP's answer to this step's call is lost.
    lose: bool,
    /// The saga as the runner loaded it (its version conditions every save).
    saga: &'a StoredSaga,
}

impl Step<'_> {
    /// Runs `step` on the loaded saga, changing `next`. `None`: no step (a read whose answer is lost changes
    /// nothing; the loaded record is not in the state the step belongs to, which cannot happen: steps follow
    /// loads).
    fn run(&self, next: &mut World, step: Sub, loaded: Loaded) -> Option<()> {
        let now = World::STAMP_MS;
        match (step, loaded) {
            (Sub::Reserve, Loaded::Started(s)) => self.reserve(next, s),
            (Sub::CreatePayment, Loaded::StockReserved(s)) => self.create_payment(next, s),
            (Sub::Charge, Loaded::Charging(s)) => self.charge(next, s)?,
            (Sub::FinalizeCharge(id, view), Loaded::Charging(_)) => {
                if let Some(observation) = view.observation(Channel::Sync) {
                    next.finalize(&id, &observation, None)?;
                }
                self.goto(next, Sub::SaveRequested(view));
            }
            (Sub::SaveRequested(view), Loaded::Charging(s)) => {
                let action = view.status == IntentStatus::RequiresAction;
                self.save_and_go_on(next, s.payment_requested(Some(view.reference()), action, now));
            }
            (Sub::SaveChargeFailed, Loaded::Charging(s)) => {
                self.save_and_go_on(next, s.charge_failed("charge refused".into(), now));
            }
            (Sub::Await(decision), Loaded::PaymentPending(s)) => self.awaited(next, s, decision)?,
            (Sub::Confirm, Loaded::PaymentCaptured(s)) => self.confirm(next, s),
            (Sub::Refund, Loaded::RefundingPayment(s)) => self.refund(next, s)?,
            (Sub::ObserveRefund { refused }, Loaded::RefundingPayment(s)) => self.observe_refund(next, s, refused)?,
            (Sub::SaveRefunded, Loaded::RefundingPayment(s)) => self.save_and_go_on(next, s.refunded(ids::AMOUNT, now)),
            (Sub::CancelRead, Loaded::CancellingPayment(s)) => self.cancel_read(next, &s),
            (Sub::CancelCall(id, index, read), Loaded::CancellingPayment(_)) => self.cancel_call(next, id, index, read),
            (Sub::CancelObserve(id, view), Loaded::CancellingPayment(_)) => self.cancel_observe(next, id, &view)?,
            (Sub::CancelFail(id, before), Loaded::CancellingPayment(s)) => self.cancel_fail(next, &s, &id, before)?,
            (Sub::CancelSave(status), Loaded::CancellingPayment(s)) => self.cancel_save(next, s, status)?,
            (Sub::PastDeadline, Loaded::StockReserved(s)) => {
                let given_up = s.payment_not_created("no payment created within the step's deadline".into(), now);
                self.give_up(next, given_up);
            }
            (Sub::PastDeadline, Loaded::Charging(s)) => {
                let given_up = s.charge_given_up("no answer to the charge within its deadline".into(), now);
                self.give_up(next, given_up);
            }
            (Sub::Release, Loaded::ReleasingStock(s)) => {
                let saved = self.save(next, s.stock_released(now));
                if saved {
                    next.available += ids::QUANTITY;
                }
                self.moved(next, saved);
            }
            // The loaded record is not in the state the step belongs to: cannot happen (steps follow loads).
            _ => return None,
        }
        Some(())
    }

    /// Saves a transition of the loaded saga (conditioned on the version it was loaded at); `false` on a
    /// conflict.
    fn save<S>(&self, next: &mut World, (saga, event): (Saga<S>, SagaEvent)) -> bool {
        next.save_saga(self.saga.0.version, saga, event)
    }

    /// After a save: go on from the new state without a re-read (`Advanced::Moved`); after a conflict: reload.
    fn moved(&self, next: &mut World, saved: bool) {
        next.runners[self.i] = if saved {
            at(next.late, &next.saga)
        } else {
            RunnerPc::Idle
        };
    }

    /// A transition with nothing else to do: [`Step::save`] it, then [`Step::moved`].
    fn save_and_go_on<S>(&self, next: &mut World, transition: (Saga<S>, SagaEvent)) {
        let saved = self.save(next, transition);
        self.moved(next, saved);
    }

    /// A move its state's deadline made: saved, the set-aside kept ([`given_up_at_deadline`]), then on.
    fn give_up<S>(&self, next: &mut World, transition: (Saga<S>, SagaEvent)) {
        let saved = self.save(next, transition);
        given_up_at_deadline(self.cfg, next, saved);
        self.moved(next, saved);
    }

    /// A lost answer: the backoff retries the same action from the same loaded saga.
    fn retry(&self, next: &mut World) {
        next.losses_left -= 1;
        next.runners[self.i] = at(next.late, self.saga);
    }

    /// On to sub-step `step` of the same loaded saga.
    fn goto(&self, next: &mut World, step: Sub) {
        next.runners[self.i] = RunnerPc::At {
            saga: Box::new(self.saga.clone()),
            step,
        };
    }

    /// The step keeps failing: [`escalate`]d as `action`; `called`: it made a PSP call that moved nothing.
    fn escalate(&self, next: &mut World, action: NextStep, called: bool) {
        escalate(self.cfg, next, self.i, self.saga, action, called);
    }

    /// `steps::reserve_stock`: reserve the stock and save `stock_reserved` in one transaction, or fail the
    /// reservation when the shelf is short.
    fn reserve(&self, next: &mut World, s: Saga<Started>) {
        let now = World::STAMP_MS;
        if next.available >= s.record().checkout.quantity {
            let saved = self.save(next, s.stock_reserved(now));
            if saved {
                next.available -= ids::QUANTITY;
            }
            self.moved(next, saved);
        } else {
            self.save_and_go_on(next, s.reservation_failed("out of stock".into(), now));
        }
    }

    /// `steps::create_payment`: `PaymentStore::create_writes` in the saga's transaction, both or neither.
    fn create_payment(&self, next: &mut World, s: Saga<StockReserved>) {
        let id = ids::payment(next.payments.len() + 1);
        let saved = self.save(next, s.payment_created(id.clone(), World::STAMP_MS));
        if saved {
            next.create_payment(&id);
        }
        self.moved(next, saved);
    }

    /// `stripe::charge`: the payment's read and the PSP call are one step (a webhook binding the
    /// PaymentIntent between them leaves the call a replay of the key, or, a day later, the search finds it).
    /// The core's [`charge_call`] says whether to retrieve, search first or charge; [`Step::charged`] takes the
    /// answer. `None`: a read whose answer is lost, or a refused search whose answer is lost (no step).
    fn charge(&self, next: &mut World, s: Saga<Charging>) -> Option<()> {
        let id = s.payment_id().clone();
        let payment = next.payment(&id)?.clone();
        let call = match charge_call(payment.psp_reference.as_ref(), payment.created_at_ms, next.wall_ms()) {
            ChargeCall::SearchFirst if !self.cfg.search_after_a_day => ChargeCall::Charge,
            call => call,
        };
        let found = match call {
            ChargeCall::Retrieve(reference) => Some(next.psp.retrieve(Psp::index_of(&reference)?)?),
            ChargeCall::SearchFirst => match next.psp.search(&id) {
                Ok(found) => found,
                // Refused for good (`PspError::Refused` from `find_for_payment`): escalated.
                Err(_) if self.lose => return None,
                Err(_) => {
                    self.escalate(next, NextStep::Charge, true);
                    return Some(());
                }
            },
            ChargeCall::Charge => None,
        };
        let order = ids::order();
        let key = if self.cfg.fresh_charge_key {
            format!("{order}:charge:{}", next.psp.intents.len())
        } else {
            format!("{order}:charge")
        };
        let answer = match found {
            // A read: its answer lost changes nothing (no step).
            Some(_) if self.lose => return None,
            Some(view) => Ok(view),
            None => next.psp.charge(&key, &id),
        };
        if self.lose {
            self.retry(next);
        } else {
            self.charged(next, id, &key, answer);
        }
        Some(())
    }

    /// The charge's answer (not lost), made with `key`: on to finalize it, or the refused charge saved, or
    /// the step escalated.
    fn charged(&self, next: &mut World, id: PaymentId, key: &str, answer: Result<IntentView, ChargeRefused>) {
        match answer {
            // A PaymentIntent our client cannot read (`PspError::BadAnswer`): the resume's attempts get it
            // again, and the step is escalated.
            Ok(view) if view.status == IntentStatus::RequiresAction && view.observation(Channel::Sync).is_none() => {
                self.escalate(next, NextStep::Charge, true);
            }
            Ok(view) => self.goto(next, Sub::FinalizeCharge(id, view)),
            Err(ChargeRefused::KeyReused) => self.goto(next, Sub::SaveChargeFailed),
            // A 500, replayed to every retry: the resume's attempts fail, the breaker counts them, and the step
            // is escalated.
            Err(ChargeRefused::ServerError { replayed }) => {
                count_failures(self.cfg, next, key, replayed);
                self.escalate(next, NextStep::Charge, true);
            }
        }
    }

    /// `steps::await_payment`: saves what the load's read decided (the core's [`awaited`]).
    fn awaited(&self, next: &mut World, s: Saga<PaymentPending>, decision: Awaited) -> Option<()> {
        let now = World::STAMP_MS;
        match decision {
            Awaited::Captured => {
                // The saga's reference, else the payment's as the capture bound it (the runner's read).
                let bound = next.payment(s.payment_id()).and_then(|p| p.psp_reference.clone());
                let reference = s.record().psp_reference.clone().or(bound)?;
                self.save_and_go_on(next, s.payment_captured(reference, now));
            }
            Awaited::Failed(status) => self.save_and_go_on(next, s.payment_failed(format!("payment {status}"), now)),
            Awaited::Abandoned(status) => {
                let reason = format!("abandoned: payment still {status}");
                self.save_and_go_on(next, s.payment_failed(reason, now));
            }
            Awaited::HandToRecovery => self.save_and_go_on(next, s.recovery_requested(now)),
            // The model charges with automatic capture (issue 34's manual capture is tested against the
            // simulator): no payment of it is ever authorized, so its saga never captures one.
            Awaited::Authorized | Awaited::Wait => return None,
        }
        Some(())
    }

    /// `steps::confirm_order`: one transaction, the order's update conditioned on `pending` and the saga's;
    /// an order the customer cancelled meanwhile fails the confirmation.
    fn confirm(&self, next: &mut World, s: Saga<PaymentCaptured>) {
        let now = World::STAMP_MS;
        let saved = if next.order == OrderStatus::Pending {
            let saved = self.save(next, s.order_confirmed(now));
            if saved {
                next.order = OrderStatus::Confirmed;
            }
            saved
        } else {
            let reason = "order no longer pending (cancelled by the customer)";
            self.save(next, s.confirmation_failed(reason.into(), now))
        };
        self.moved(next, saved);
    }

    /// `stripe::refund` (key `<order>:refund`): what the core's [`after_refund`] makes of the PSP's answer.
    /// `None`: a refund that cannot be asked for, whose (retried) answer is lost: no step.
    fn refund(&self, next: &mut World, s: Saga<RefundingPayment>) -> Option<()> {
        let Some(index) = s.record().psp_reference.as_ref().and_then(Psp::index_of) else {
            // "captured payment without a PSP reference" (`RunError::Invalid`): retried, then escalated.
            if self.lose {
                return None;
            }
            self.escalate(next, NextStep::RefundPayment, false);
            return Some(());
        };
        let answer = next.psp.refund(&format!("{}:refund", ids::order()), index, None);
        if self.lose {
            self.retry(next);
            return Some(());
        }
        let called = match answer {
            RefundAnswer::Accepted => RefundCalled::Made(RefundStep::Done),
            RefundAnswer::Refused(code) => RefundCalled::Refused { code: Some(code) },
        };
        match after_refund(called) {
            AfterRefund::Impossible(why) => self.refund_impossible(next, s, why),
            AfterRefund::ReadBack { refused } if !refused || self.cfg.refused_refund_reads_back => {
                self.goto(next, Sub::ObserveRefund { refused });
            }
            // The old main: refused (`charge_already_refunded`), retried, then escalated; the sweeper resumes
            // it and asks again. (A pending or failed refund is not modelled.)
            AfterRefund::ReadBack { .. } | AfterRefund::Wait | AfterRefund::Undone => {
                self.escalate(next, NextStep::RefundPayment, true);
            }
        }
        Some(())
    }

    /// The refund's read-back: the PaymentIntent's refunded total finalized on our payment, then the core's
    /// [`read_back`] decides (`refused`: only a read-back that shows the money back goes on).
    fn observe_refund(&self, next: &mut World, s: Saga<RefundingPayment>, refused: bool) -> Option<()> {
        let index = s.record().psp_reference.as_ref().and_then(Psp::index_of)?;
        if self.lose {
            self.retry(next);
            return Some(());
        }
        let view = next.psp.retrieve(index)?;
        if let Some(observation) = view.observation(Channel::Sync) {
            next.finalize(s.payment_id(), &observation, None)?;
        }
        // Recorded above whatever the core decides from it.
        match read_back(s.record(), refused, Some(view.refunded)) {
            ReadBack::Impossible(why) => self.refund_impossible(next, s, why),
            ReadBack::Refunded => self.goto(next, Sub::SaveRefunded),
        }
        Some(())
    }

    /// `psp_step::refund_impossible`: the refund is refused for good (`why`); the compensation goes on without
    /// it (`releasing_stock`) and a person is told once, after the move is saved.
    fn refund_impossible(&self, next: &mut World, s: Saga<RefundingPayment>, why: RefundImpossible) {
        let saved = self.save(next, s.refund_impossible(why, World::STAMP_MS));
        if saved {
            next.escalations = next.escalations.saturating_add(1).min(COUNT_CAP);
        }
        self.moved(next, saved);
    }

    /// `stripe::cancel`'s reads ([`cancel_reads`]) as a step of their own (the earlier cancels, which
    /// do not read at the load).
    fn cancel_read(&self, next: &mut World, s: &Saga<CancellingPayment>) {
        match cancel_reads(self.cfg, next, s.record()) {
            Ok(Some(step)) => self.goto(next, step),
            // Main: the PaymentIntent is processing; the saga waits (the sweeper resumes it).
            Ok(None) => waiting(self.cfg, next, self.i, self.saga, NextStep::CancelPayment, false),
            Err(SearchRefused) => self.escalate(next, NextStep::CancelPayment, true),
        }
    }

    /// Cancels PaymentIntent `index`, the key naming the status `read` (main: `<order>:cancel:<status>`) or
    /// not (earlier: `<order>:cancel`); a refusal comes with the PaymentIntent, which moved meanwhile.
    fn cancel_call(&self, next: &mut World, id: PaymentId, index: u8, read: Option<IntentStatus>) {
        let order = ids::order();
        let key = match read {
            Some(status) => format!("{order}:cancel:{}", status.as_str()),
            None => format!("{order}:cancel"),
        };
        let answer = next.psp.cancel(&key, index);
        if self.lose {
            self.retry(next);
        } else {
            // Refused with the PaymentIntent: it moved (succeeded, processing) meanwhile.
            let view = answer.unwrap_or_else(|refused| refused);
            self.goto(next, Sub::CancelObserve(id, view));
        }
    }

    /// Finalizes the PaymentIntent as the cancel (or main's read) left it, then saves or fails our payment
    /// by its status ([`after_status`]); main waits while the PaymentIntent may still take money.
    fn cancel_observe(&self, next: &mut World, id: PaymentId, view: &IntentView) -> Option<()> {
        let status = match view.observation(Channel::Sync) {
            Some(observation) => next.finalize(&id, &observation, None)?.status,
            None => next.payment(&id)?.status,
        };
        if self.cfg.cancel == CancelMode::ReadsFirst && view.status.state().may_still_take_money() {
            // Main: saying "no money taken" now would keep it; the saga waits for the outcome.
            waiting(self.cfg, next, self.i, self.saga, NextStep::CancelPayment, false);
        } else {
            self.goto(next, after_status(id, status));
        }
        Some(())
    }

    /// Fails our still open payment (`before`: its status before this write), then on to save the saga's
    /// cancel with the status main goes on with.
    fn cancel_fail(
        &self,
        next: &mut World,
        s: &Saga<CancellingPayment>,
        id: &PaymentId,
        before: PaymentStatus,
    ) -> Option<()> {
        let reason = s.payment_failure_reason();
        let observation = Observation::new(Channel::Sync, Outcome::Failed { reason }, psp_correlation());
        let after = next.finalize(id, &observation, None)?.status;
        // Main goes on with the status this finalize leaves (a capture that won continues from the capture);
        // main before the fix went on with the status read before it.
        let status = if self.cfg.cancel == CancelMode::OldMain {
            before
        } else {
            after
        };
        self.goto(next, Sub::CancelSave(status));
        Some(())
    }

    /// Saves the cancel's end: `payment_succeeded` with the payment's reference when it was captured (to be
    /// refunded), else `payment_cancelled`.
    fn cancel_save(&self, next: &mut World, s: Saga<CancellingPayment>, status: PaymentStatus) -> Option<()> {
        let now = World::STAMP_MS;
        let saved = if status == PaymentStatus::Captured {
            // The reference as the capture recorded it on the payment, whichever path captured it.
            let reference = next.payment(s.payment_id())?.psp_reference.clone()?;
            let saved = self.save(next, s.payment_succeeded(reference, now));
            if saved && !self.cfg.copies_reference {
                // Broken on purpose: the saga before the fix kept only the charge answer's reference.
                next.saga.0.psp_reference = None;
            }
            saved
        } else {
            self.save(next, s.payment_cancelled(now))
        };
        self.moved(next, saved);
        Some(())
    }
}

fn after_status(id: PaymentId, status: PaymentStatus) -> Sub {
    if status.is_terminal() {
        Sub::CancelSave(status)
    } else {
        Sub::CancelFail(id, status)
    }
}

fn psp_correlation() -> payments_core::CorrelationId {
    ids::valid(payments_core::CorrelationId::parse("model"))
}

/// How the PSP delivers one webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Delivered and answered 2xx: it leaves the queue.
    Once,
    /// Delivered, and a copy stays to be delivered again later.
    Twice,
    /// Never delivered (the PSP gave up).
    Lost,
    /// Intake took the payment's lease and crashed: no 2xx, the webhook stays queued, the lease stays until
    /// it expires.
    Crashed,
}

/// Webhook intake handles webhook `k` (`leased` and `applied`, steps 3 and 4 of `intake`): takes the payment's lease (held: a 5xx,
/// the webhook stays queued and nothing changes), finalizes; the write frees the lease by moving the payment's
/// version (`shared/src/lease.rs`; that rule has its own model, [`crate::lease`]). A deferred decision is a 5xx
/// too. Lease, read and finalize are one step: the read is joined with the lease
/// in the code, the finalize decides again on a version conflict, and nobody else takes the lease
/// meanwhile, so no other step can fall between them with a different outcome; a crash between them is
/// [`Delivery::Crashed`].
pub fn intake(w: &World, k: usize, how: Delivery) -> Option<World> {
    let webhook = w.psp.webhooks.get(k)?.clone();
    let mut next = w.clone();
    match how {
        Delivery::Lost => {
            if next.losses_left == 0 {
                return None;
            }
            next.losses_left -= 1;
            next.psp.webhooks.remove(k);
            return Some(next);
        }
        Delivery::Twice if next.duplicates_left == 0 => return None,
        Delivery::Twice => next.duplicates_left -= 1,
        Delivery::Crashed if next.crashes_left == 0 => return None,
        Delivery::Crashed => next.crashes_left -= 1,
        Delivery::Once => {
            next.psp.webhooks.remove(k);
        }
    }
    if w.lease.is_some() {
        return None;
    }
    let payment = w.psp.intents.get(usize::from(webhook.intent.index))?.payment.clone();
    w.payment(&payment)?;
    next.lease = Some((payment.clone(), Holder::Intake));
    if how == Delivery::Crashed {
        return Some(next);
    }
    let observation = webhook.observation()?;
    let done = next.finalize(&payment, &observation, Some(Holder::Intake))?;
    if done.deferred && how == Delivery::Once {
        next.psp.webhooks.push(webhook);
    }
    Some(next)
}

/// Recovery, step 1 (`Recovery::reconcile` / `reconcile_leased`): take the lease of open payment `k` (stale:
/// past the payment timeout; open: `Payment::is_open`, not terminal or money to give back) and ask the PSP.
/// Money taken on a failed payment is given back first (recovery's `give_back`: all that is left, key
/// `<payment>:anomaly-<n>:refund`, a refusal read back too); `lose`: that refund's answer is lost (the
/// reconciliation ends in an error and releases the lease). Taking the lease, the refund and the status query
/// are one step: no other step reads the lease but intake, which a held lease only turns away, and nothing
/// but our own refund moves a captured PaymentIntent. A status query that would change nothing now is no step
/// (the lease is released at once); a lost answer to it is the same.
pub fn recovery_ask(w: &World, k: usize, lose: bool) -> Option<World> {
    // The breaker open or the key rejected: recovery is deferred (`Reconciled::Deferred`), nothing changes.
    if w.recovery != RecoveryPc::Idle || w.clock == 0 || w.lease.is_some() || psp_blocked(w).is_some() {
        return None;
    }
    let payment = &w.payments.get(k)?.0;
    if !payment.is_open() {
        return None;
    }
    // The real choice of what to ask (`payments_core::recovery::recovery_step`, as `Recovery::reconcile` makes
    // it): recovery holds Stripe's client, and every payment of the model is Stripe's. Expiry is past the
    // model's time marks (days), so a payment with nothing to ask only waits.
    let RecoveryStep::Ask(reference) = recovery_step(payment, Some(&PspName::Stripe), w.wall_ms(), i64::MAX) else {
        return None;
    };
    let index = Psp::index_of(&reference)?;
    let refund_due = payment.refund_due();
    if lose && (refund_due.is_none() || w.losses_left == 0) {
        return None;
    }
    let mut next = w.clone();
    if let Some(anomaly) = refund_due {
        next.psp
            .refund(&format!("{}:anomaly-{anomaly}:refund", payment.id), index, None);
        if lose {
            next.losses_left -= 1;
            return Some(next);
        }
    }
    let view = next.psp.retrieve(index)?;
    let at = next.psp.time;
    let observation = recovery_observation(&view, at)?;
    if refund_due.is_none() && !matches!(decide(payment, &observation, World::STAMP_MS), Decision::Apply(_)) {
        return None;
    }
    next.lease = Some((payment.id.clone(), Holder::Recovery));
    next.recovery = RecoveryPc::Asked(payment.id.clone(), view, at);
    Some(next)
}

fn recovery_observation(view: &IntentView, at: u8) -> Option<Observation> {
    let mut observation = view.observation(Channel::Recovery)?;
    // Stamped with the query's time: no event the PSP sent before it is newer.
    observation.occurred_at_ms = Some(i64::from(at) * 1000);
    Some(observation)
}

/// Recovery, step 2: finalize the PSP's answer under the lease (freed by the write's new version).
pub fn recovery_finalize(w: &World) -> Option<World> {
    let RecoveryPc::Asked(id, view, at) = &w.recovery else {
        return None;
    };
    let mut next = w.clone();
    next.finalize(id, &recovery_observation(view, *at)?, Some(Holder::Recovery))?;
    next.recovery = RecoveryPc::Idle;
    Some(next)
}

/// The order projection catches up with the saga's payment.
pub fn relay(w: &World) -> Option<World> {
    let status = w.payment(w.saga_payment_id()?)?.status;
    if w.projection == Some(status) {
        return None;
    }
    let mut next = w.clone();
    next.projection = Some(status);
    Some(next)
}

/// The customer completes the 3-D Secure challenge with the client secret our client view of a payment
/// shows (`ClientView::from`), at the PaymentIntent it belongs to.
pub fn customer_acts(w: &World) -> Option<World> {
    if w.customer.acted || !w.psp.intents.iter().any(|i| i.status == IntentStatus::RequiresAction) {
        return None;
    }
    let index = w.payments.iter().find_map(|p| {
        let view = payments_core::ClientView::from(&p.0);
        match view {
            payments_core::ClientView::RequiresAction(_) if view.carries_secret() => {
                p.0.psp_reference.as_ref().and_then(Psp::index_of)
            }
            _ => None,
        }
    })?;
    let mut next = w.clone();
    next.customer.acted = true;
    next.psp.complete_action(index).then_some(next)
}

/// `POST /checkouts/{order}/cancel`, first step: `orders::cancel` (conditioned on `pending`).
pub fn customer_cancels(w: &World) -> Option<World> {
    if w.customer.cancel != CancelPc::NotYet {
        return None;
    }
    let mut next = w.clone();
    if w.order == OrderStatus::Pending {
        next.order = OrderStatus::Cancelled;
        next.customer.cancel = CancelPc::OrderCancelled;
    } else {
        next.customer.cancel = CancelPc::Done;
    }
    Some(next)
}

/// Second step: `Runner::cancel_by_customer` (a saga waiting for its payment fails it: the runner then
/// cancels the PaymentIntent). Load and save are one step here.
pub fn customer_cancels_saga(w: &World) -> Option<World> {
    if w.customer.cancel != CancelPc::OrderCancelled {
        return None;
    }
    let mut next = w.clone();
    next.customer.cancel = CancelPc::Done;
    if let Ok(Loaded::PaymentPending(s)) = Loaded::from_record(w.saga.0.clone()) {
        let version = s.record().version;
        let (n, e) = s.payment_failed("cancelled by the customer".into(), World::STAMP_MS);
        next.save_saga(version, n, e);
    }
    Some(next)
}

/// The PSP captures a processing PaymentIntent.
pub fn psp_settles(w: &World) -> Option<World> {
    let index = w
        .psp
        .intents
        .iter()
        .position(|i| i.status == IntentStatus::Processing)?;
    let mut next = w.clone();
    next.psp.settle(u8::try_from(index).ok()?).then_some(next)
}

/// A lease whose holder crashed expires (its TTL is longer than any live holder's work).
pub fn expire_lease(w: &World) -> Option<World> {
    let (id, holder) = w.lease.as_ref()?;
    let live = match holder {
        Holder::Intake => false,
        Holder::Recovery => matches!(&w.recovery, RecoveryPc::Asked(p, ..) if p == id),
    };
    if live {
        return None;
    }
    let mut next = w.clone();
    next.lease = None;
    Some(next)
}

/// Which actor crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    Runner(u8),
    Recovery,
    Customer,
}

/// `actor` crashes: its local state is gone. A webhook it held was not answered 2xx and comes again; a
/// lease it held stays until it expires.
pub fn crash(w: &World, actor: Actor) -> Option<World> {
    if w.crashes_left == 0 {
        return None;
    }
    let mut next = w.clone();
    next.crashes_left -= 1;
    match actor {
        Actor::Runner(i) => {
            let pc = next.runners.get_mut(usize::from(i))?;
            if *pc == RunnerPc::Idle {
                return None;
            }
            *pc = RunnerPc::Idle;
        }
        Actor::Recovery => {
            if w.recovery == RecoveryPc::Idle {
                return None;
            }
            next.recovery = RecoveryPc::Idle;
        }
        Actor::Customer => {
            if w.customer.cancel != CancelPc::OrderCancelled {
                return None;
            }
            next.customer.cancel = CancelPc::Done;
        }
    }
    Some(next)
}

/// The cardholder disputes the captured charge: every refund of it is refused for good from now on.
pub fn dispute(w: &World) -> Option<World> {
    let index = w.psp.intents.iter().position(|i| i.captured() && !i.disputed)?;
    let mut next = w.clone();
    next.psp.dispute(u8::try_from(index).ok()?).then_some(next)
}

/// A deploy with a rejected API key: the PSP answers 401 to every call until it is fixed (once).
pub fn key_rejected(w: &World) -> Option<World> {
    if w.psp.key_rejected || w.psp.key_rejections > 0 {
        return None;
    }
    let mut next = w.clone();
    next.psp.key_rejected = true;
    next.psp.key_rejections = 1;
    Some(next)
}

/// The operator fixes the key (`PspAuthFailed` alarms): a saga waiting for it is due again.
pub fn key_fixed(w: &World) -> Option<World> {
    if !w.psp.key_rejected {
        return None;
    }
    let mut next = w.clone();
    next.psp.key_rejected = false;
    if !next.breaker.open && next.due == Due::WaitsForPsp {
        next.due = Due::Free;
    }
    Some(next)
}

/// The breaker's open state ends (its cool-down, then a probe that succeeds: nothing else fails in the
/// model): a saga waiting for it is due again.
pub fn breaker_closes(w: &World) -> Option<World> {
    if !w.breaker.open {
        return None;
    }
    let mut next = w.clone();
    next.breaker.open = false;
    next.breaker.failures.succeeded();
    if !next.psp.key_rejected && next.due == Due::WaitsForPsp {
        next.due = Due::Free;
    }
    Some(next)
}

/// A deploy changes the charge request (its return URL) once a charge was sent: a retry under the first
/// attempt's key is refused (`idempotency_error`), for good.
pub fn deploy(w: &World) -> Option<World> {
    if w.psp.request_changed || !w.psp.keys.keys().any(|k| k.ends_with(":charge")) {
        return None;
    }
    let mut next = w.clone();
    next.psp.request_changed = true;
    Some(next)
}

/// The sweeper's run (`sweeper::sweep`, one saga a run in the model): the oldest due saga of the shard. The
/// saga is older than the other order; it is due when today's sweeper left it due after an escalation (a
/// waiting saga is deferred, a set-aside one waits for its schedule), and then it is resumed again and the
/// other order is not.
pub fn sweep(w: &World) -> Option<World> {
    let mut next = w.clone();
    if w.due == Due::Escalated {
        next.due = Due::Free;
    } else if w.bystander_waiting {
        next.bystander_waiting = false;
    } else {
        return None;
    }
    Some(next)
}

/// The sweeper's looks at a set-aside saga in the day after its escalation, by the core's schedule
/// ([`set_aside_due`]: 5, 10, 20 minutes, ... after it).
pub fn looks_a_day() -> u8 {
    let mut looks = 0u8;
    let mut at = set_aside_due(0, 0);
    while at < ids::DAY_MS && looks < u8::MAX {
        looks += 1;
        at = set_aside_due(0, at);
    }
    looks
}

/// The sweeper looks at the set-aside saga on its schedule (the core's [`after_resume`] keeps it set aside
/// until then): a runner may load it once ([`World::look_pending`]). The looks of the day after the escalation
/// ([`looks_a_day`]), each one PSP call at most.
pub fn look(w: &World) -> Option<World> {
    let record = &w.saga.0;
    if w.look_pending || w.looks >= looks_a_day() {
        return None;
    }
    if !matches!(after_resume(record, w.now_ms()), Sweep::SetAside { .. }) {
        return None;
    }
    let mut next = w.clone();
    next.looks += 1;
    next.look_pending = true;
    Some(next)
}

/// Time passes the deadline of the saga's state (the core's [`deadline`], at the runner's defaults); not
/// `payment_pending`'s, which the model's clock ticks through.
pub fn late(w: &World) -> Option<World> {
    let record = &w.saga.0;
    if w.late || record.status == SagaStatus::PaymentPending {
        return None;
    }
    deadline(record, &Deadlines::DEFAULT)?;
    let mut next = w.clone();
    next.late = true;
    Some(next)
}

/// The sweeper's act on a passed deadline (`Runner::act_on_deadline`, after a resume that left the saga
/// open): a saga waiting for the PSP (the breaker open, the key refused) is not deferred past its state's
/// deadline. By the core's [`passed`]: a charge or a payment creation is given up (the charge's reason names
/// the deployment fault), a wait is escalated once and set aside.
pub fn act_on_deadline(cfg: &Config, w: &World) -> Option<World> {
    if w.due != Due::WaitsForPsp {
        return None;
    }
    let record = &w.saga.0;
    let loaded = Loaded::from_record(record.clone()).ok()?;
    let mut next = w.clone();
    let (version, now) = (record.version, model_now(w.late, record));
    // The step the runner takes by the core (`Loaded::next_at`): a given-up one is compensated.
    let saved = match loaded.clone().next_at(&Deadlines::DEFAULT, now) {
        Next::PaymentNotCreated(s) => {
            let (n, e) = s.payment_not_created("no payment created within the step's deadline".into(), World::STAMP_MS);
            next.save_saga(version, n, e)
        }
        Next::GiveUpCharge(s) => {
            let reason = "deployment fault past the charge's deadline (key refused or breaker open)";
            let (n, e) = s.charge_given_up(reason.into(), World::STAMP_MS);
            next.save_saga(version, n, e)
        }
        _ if past_deadline(w.late, record) == Some(OnDeadline::Escalate) && record.set_aside.is_none() => {
            escalate_once(cfg, &mut next, &w.saga, loaded.step_at(&Deadlines::DEFAULT, now));
            return Some(next);
        }
        _ => return None,
    };
    if !saved {
        return None;
    }
    given_up_at_deadline(cfg, &mut next, saved);
    // Moved: resumed at the next sweep (and deferred again while the fault lasts).
    next.due = Due::Free;
    Some(next)
}
