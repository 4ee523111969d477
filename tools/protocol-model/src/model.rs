//! The stateright [`Model`]: the actions every actor and fault may take in a state, and the properties.
//!
//! Liveness: stateright's `eventually` only judges paths that end (a state with no successors or the depth
//! bound) and cannot tell a cycle from a join, so a livelock in a cycle would pass unseen. The liveness
//! property is therefore stated as an invariant over every reachable state: **from here, once faults stop
//! (no more crashes, lost answers, duplicates or new customer choices; crashed actors restart, which is the
//! sweeper and the PSP's retries; time passes), a fair run ends the saga and settles the money**. The fair
//! run ([`fair_run`]) gives every enabled non-fault action its turn, round-robin, and must reach a state
//! where the saga is terminal and nothing is left to do within [`FAIR_RUN_LIMIT`] steps. It does not rely
//! on the order projection (the relay is not part of it): a saga must end even if its projection never
//! catches up. The native `eventually` property "every saga ends or is set aside" is checked too; it is sound here for the
//! paths it sees because a terminal saga stays terminal (and a set-aside one stays so until it moves).

use crate::actors::{self, Actor, CancelPc, Delivery, RecoveryPc, RunnerPc};
use crate::ids;
use crate::psp::{Offer, Scenario};
use crate::world::{OrderStatus, World};
use payments_core::saga::{Loaded, SagaEventKind, SagaStatus};
use payments_core::ClientView;
use stateright::{Model, Property};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// How the saga compensates a charge that must take no money (`cancelling_payment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelMode {
    /// Main's cancel (the runner's `stripe::cancel`) with `cancel_intent`: the PaymentIntent is read first; one that
    /// succeeded or was canceled is used as is, one that is processing (Stripe cannot cancel it) is waited for
    /// (the saga stops, the sweeper resumes it), any other is canceled with the key `<order>:cancel:<status
    /// read>`; a payment still open after that is failed, and the status that write leaves decides.
    ReadsFirst,
    /// Cancels at once with the key `<order>:cancel` and fails our payment even when Stripe refused to cancel
    /// a processing PaymentIntent, going on with the status that write leaves: live, but money may then be
    /// taken on a failed payment. The model's source of such money (issue 12, item 3: recorded once, given
    /// back by recovery), which main's own cancel no longer produces.
    FailsWhileProcessing,
    /// Broken on purpose: main before the fix (af27798), as [`CancelMode::FailsWhileProcessing`] but going on
    /// with the status read *before* failing our payment, so a capture that won the race is compensated as
    /// if no money was taken.
    OldMain,
}

/// Refusals for good and deployment faults the PSP may answer with (each off unless set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// The cardholder may dispute the captured charge: its refund is refused for good (`charge_disputed`).
    pub dispute: bool,
    /// The PSP may answer 401 to every call (once) until the key is fixed: a deployment fault.
    pub key_rejected: bool,
    /// A deploy may change the charge request (once a charge was sent): a retried charge is refused
    /// (`idempotency_error`) while the first PaymentIntent may capture.
    pub charge_refused: bool,
    /// The first charge fails with a 500 that Stripe saves for its key and replays to every retry.
    pub saved_500: bool,
    /// The search a day later is refused for good (with `day_passes`).
    pub search_refused: bool,
    /// A 3-D Secure PaymentIntent offers a redirect URL our `RedirectPolicy` refuses, for good (with the
    /// client secret): [`crate::psp::Offer::RefusedUrl`].
    pub redirect_refused: bool,
}

/// What happens to a saga whose step was escalated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweeperMode {
    /// Main: the first escalation sets the saga aside ([`payments_core::saga::Saga::set_aside`]); no later
    /// failure escalates it again, and the sweeper ([`payments_core::saga::after_resume`]) looks at it only on
    /// its set-aside schedule, so it never crowds out its shard.
    SetsAside,
    /// Broken on purpose: the sweeper before the fix: an escalated saga stays due, the oldest of its shard,
    /// and every sweep resumes it (and it escalates again).
    Today,
}

/// How the PSP circuit breaker counts failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerMode {
    /// Not modelled.
    Off,
    /// Main: [`payments_core::breaker::Failures::record`]: attempts per request, a replayed answer not counted.
    PerRequest,
    /// Broken on purpose: the breaker before the fix: every failure since the last success counts.
    Today,
}

/// What the model explores.
#[derive(Debug, Clone)]
pub struct Config {
    /// The customer's payment method scenarios: one initial state each.
    pub scenarios: Vec<Scenario>,
    /// Saga runners working at once (inbox consumer and sweeper).
    pub runners: usize,
    /// Crashes, in total, of any actor between any two of its steps.
    pub crashes: u8,
    /// Lost answers, in total: PSP answers to the runner and to recovery's refunds (and webhooks the PSP
    /// gives up on, with `webhooks_lost`).
    pub losses: u8,
    /// A lost answer may also be a webhook the PSP never delivers (it gave up after its retries). Off by
    /// default: the PSP delivers late, twice and out of order, but delivers.
    pub webhooks_lost: bool,
    /// Webhooks delivered twice.
    pub duplicates: u8,
    /// The customer may act (complete 3-D Secure) and cancel.
    pub customer: bool,
    /// A day may pass after the deadlines: Stripe prunes its idempotency keys (its search index has caught
    /// up), and a charge retried then is past `PSP_KEY_TRUSTED_FOR`.
    pub day_passes: bool,
    pub cancel: CancelMode,
    /// Main's charge searches the PSP for the payment's first PaymentIntent once the key may be forgotten.
    /// `false` is broken on purpose: a charge retried a day later creates a second PaymentIntent.
    pub search_after_a_day: bool,
    /// The saga's refund step (the runner's `stripe::refund`): a refund the PSP refuses because nothing is left on the
    /// charge (asked again under `<order>:refund` after Stripe forgot that key) reads the PaymentIntent back,
    /// as recovery's `give_back` does. Main: `true` (the model found the bug without it); `false` is the old
    /// main, broken on purpose: escalated forever.
    pub refused_refund_reads_back: bool,
    /// Broken on purpose: every charge attempt gets a fresh idempotency key.
    pub fresh_charge_key: bool,
    /// Broken on purpose: the saga never abandons a payment waiting for the customer (issue 12's first bug).
    pub never_abandon: bool,
    pub refusals: Refusals,
    pub sweeper: SweeperMode,
    pub breaker: BreakerMode,
    /// Main: the cancel step's `payment_succeeded` copies the payment's PSP reference. `false` is broken on
    /// purpose: the saga before the fix kept only the one the charge answered with.
    pub copies_reference: bool,
    /// A second order in the saga's shard that only the sweeper resumes (its limit: one saga a run, oldest
    /// first).
    pub bystander: bool,
    /// Broken on purpose (with `refusals.redirect_refused`): the client before 60fbc53 dropped the whole
    /// action with a refused redirect URL ([`crate::psp::Offer::RefusedUrlDropsAction`]).
    pub redirect_drops_action: bool,
    /// Time may pass the deadline of the saga's state (the core's `saga::deadline`; `payment_pending`'s are
    /// the clock's): a charge or a payment creation is given up, a cancel waiting for the PSP is escalated.
    /// Off by default: it multiplies the states by eight with every fault on (8.6 million), so the
    /// configurations that turn it on are cut to what a deadline changes.
    pub deadlines: bool,
    /// Broken on purpose (with `deadlines`): the code before the fix ended the set-aside when a deadline gave
    /// the charge up, so the cancel's failure (a search refused again) escalated the saga a second time.
    pub deadline_clears_set_aside: bool,
}

impl Default for Config {
    /// Main's protocol, every scenario, one runner, a customer, one fault of each kind.
    fn default() -> Self {
        Self {
            scenarios: Scenario::ALL.to_vec(),
            runners: 1,
            crashes: 1,
            losses: 1,
            duplicates: 1,
            webhooks_lost: false,
            customer: true,
            day_passes: false,
            cancel: CancelMode::ReadsFirst,
            search_after_a_day: true,
            refused_refund_reads_back: true,
            fresh_charge_key: false,
            never_abandon: false,
            refusals: Refusals::default(),
            sweeper: SweeperMode::SetsAside,
            breaker: BreakerMode::Off,
            copies_reference: true,
            bystander: false,
            redirect_drops_action: false,
            deadlines: false,
            deadline_clears_set_aside: false,
        }
    }
}

/// One move of one actor, the PSP, time or a fault.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Runner `runner` takes its next step; `lose`: the PSP's answer to it is lost.
    Runner {
        runner: u8,
        lose: bool,
    },
    /// The PSP delivers webhook `webhook` to intake.
    Deliver {
        webhook: u8,
        how: Delivery,
    },
    /// Recovery takes open payment `payment`'s lease, gives back money taken on it if it failed, and asks
    /// the PSP; `lose`: the refund's answer is lost.
    RecoveryAsk {
        payment: u8,
        lose: bool,
    },
    /// Recovery finalizes the PSP's answer.
    RecoveryFinalize,
    /// The order projection catches up.
    Relay,
    CustomerActs,
    CustomerCancels,
    /// The customer's cancel request goes on to the saga.
    CustomerCancelsSaga,
    /// The PSP captures a processing PaymentIntent.
    PspSettles,
    /// A lease whose holder crashed expires.
    ExpireLease,
    /// Time passes the next deadline.
    Tick,
    /// A day passes.
    DayPasses,
    Crash(Actor),
    /// The cardholder disputes the captured charge.
    Dispute,
    /// The PSP starts answering 401.
    KeyRejected,
    /// The operator fixes the key.
    KeyFixed,
    /// A deploy changes the charge request.
    Deploy,
    /// The sweeper runs (one saga of the shard).
    Sweep,
    /// The sweeper looks at the set-aside saga on its schedule.
    Look,
    /// Time passes the deadline of the saga's state.
    Late,
    /// The sweeper acts on the passed deadline of a saga that waits for the PSP.
    ActOnDeadline,
    /// The breaker's open state ends.
    BreakerCloses,
}

impl Action {
    /// Part of a fair run: not a fault and not a new customer choice.
    pub fn is_fair(&self) -> bool {
        match self {
            Action::Runner { lose, .. } | Action::RecoveryAsk { lose, .. } => !lose,
            Action::Deliver { how, .. } => *how == Delivery::Once,
            Action::RecoveryFinalize
            | Action::CustomerCancelsSaga
            | Action::PspSettles
            | Action::ExpireLease
            | Action::Tick
            | Action::KeyFixed
            | Action::Sweep
            | Action::Look
            | Action::Late
            | Action::ActOnDeadline
            | Action::BreakerCloses => true,
            Action::Relay
            | Action::CustomerActs
            | Action::CustomerCancels
            | Action::DayPasses
            | Action::Crash(_)
            | Action::Dispute
            | Action::KeyRejected
            | Action::Deploy => false,
        }
    }
}

/// The model: a [`Config`] and the rules.
#[derive(Debug, Clone)]
pub struct ProtocolModel {
    pub config: Config,
    /// Verdicts of fair runs by state hash: a fair run is deterministic, so every state it passes through
    /// has the same verdict, and the checker meets most of them again.
    fair_verdicts: Arc<Mutex<HashMap<u64, bool>>>,
}

impl ProtocolModel {
    /// A model of `config`.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            fair_verdicts: Arc::default(),
        }
    }

    /// The liveness verdict for `w`: a fair run from it ends quiet and settled (cached along the run).
    pub fn fair_run_ends(&self, w: &World) -> bool {
        let hash = |w: &World| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            w.hash(&mut h);
            h.finish()
        };
        let verdicts = |f: &mut dyn FnMut(&mut HashMap<u64, bool>)| {
            // A poisoned lock only means another checker thread panicked; the map is still usable.
            let mut map = self.fair_verdicts.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut map);
        };
        let mut seen = Vec::new();
        let mut verdict = None;
        let mut state = w.clone();
        let mut actions = Vec::new();
        for turn in 0..FAIR_RUN_LIMIT {
            let h = hash(&state);
            verdicts(&mut |map| verdict = map.get(&h).copied());
            if verdict.is_some() {
                break;
            }
            seen.push(h);
            if quiet(&state) {
                verdict = Some(settled(&state));
                break;
            }
            match self.fair_step(&state, turn, &mut actions) {
                Some(next) => state = next,
                None => {
                    verdict = Some(quiet(&state) && settled(&state));
                    break;
                }
            }
        }
        let verdict = verdict.unwrap_or(false);
        verdicts(&mut |map| {
            for h in &seen {
                map.insert(*h, verdict);
            }
        });
        verdict
    }

    /// One step of a fair run: the `turn`th enabled fair action, round-robin. `None` when none is enabled.
    fn fair_step(&self, w: &World, turn: usize, actions: &mut Vec<Action>) -> Option<World> {
        actions.clear();
        self.candidate_actions(w, actions);
        let enabled: Vec<World> = actions
            .iter()
            .filter(|a| a.is_fair())
            .filter_map(|a| self.step(w, a))
            .collect();
        if enabled.is_empty() {
            return None;
        }
        let pick = turn % enabled.len();
        enabled.into_iter().nth(pick)
    }

    /// Every action that may be taken in `w` (some change nothing and are dropped by `next_state`), actor by
    /// actor. Their order is the order fair runs take them in (round-robin), so it is kept as it is.
    pub fn candidate_actions(&self, w: &World, actions: &mut Vec<Action>) {
        let c = &self.config;
        runner_actions(w, actions);
        delivery_actions(c, w, actions);
        recovery_actions(w, actions);
        actions.push(Action::Relay);
        customer_actions(c, w, actions);
        actions.push(Action::PspSettles);
        if w.lease.is_some() {
            actions.push(Action::ExpireLease);
        }
        time_actions(c, w, actions);
        let r = &c.refusals;
        for (on, action) in [
            (r.dispute, Action::Dispute),
            (r.key_rejected, Action::KeyRejected),
            (r.key_rejected, Action::KeyFixed),
            (r.charge_refused, Action::Deploy),
            (c.bystander || c.sweeper == SweeperMode::Today, Action::Sweep),
            (c.breaker != BreakerMode::Off, Action::BreakerCloses),
            (c.sweeper == SweeperMode::SetsAside, Action::Look),
            (c.deadlines, Action::Late),
            (c.deadlines, Action::ActOnDeadline),
        ] {
            if on {
                actions.push(action);
            }
        }
    }

    /// The state after `action`, `None` when it is not possible or changes nothing. Runners are
    /// interchangeable, so they are kept sorted (by hash): states that differ only in which runner does what
    /// are one state (symmetry reduction).
    pub fn step(&self, w: &World, action: &Action) -> Option<World> {
        let mut next = self.step_unsorted(w, action)?;
        if next.runners.len() > 1 {
            next.runners.sort_by_cached_key(|r| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                r.hash(&mut h);
                h.finish()
            });
        }
        Some(next)
    }

    fn step_unsorted(&self, w: &World, action: &Action) -> Option<World> {
        let c = &self.config;
        match *action {
            Action::Runner { runner, lose } => actors::runner_step(c, w, usize::from(runner), lose),
            Action::Deliver { webhook, how } => actors::intake(w, usize::from(webhook), how),
            Action::RecoveryAsk { payment, lose } => actors::recovery_ask(w, usize::from(payment), lose),
            Action::RecoveryFinalize => actors::recovery_finalize(w),
            Action::Relay => actors::relay(w),
            Action::CustomerActs => actors::customer_acts(w),
            Action::CustomerCancels => actors::customer_cancels(w),
            Action::CustomerCancelsSaga => actors::customer_cancels_saga(w),
            Action::PspSettles => actors::psp_settles(w),
            Action::ExpireLease => actors::expire_lease(w),
            Action::Tick => {
                let mut next = w.clone();
                next.clock += 1;
                (w.clock < 2).then_some(next)
            }
            Action::DayPasses => {
                let mut next = w.clone();
                next.day_passed = true;
                next.psp.prune_keys();
                Some(next)
            }
            Action::Crash(actor) => actors::crash(w, actor),
            Action::Dispute => actors::dispute(w),
            Action::KeyRejected => actors::key_rejected(w),
            Action::KeyFixed => actors::key_fixed(w),
            Action::Deploy => actors::deploy(w),
            Action::Sweep => actors::sweep(w),
            Action::BreakerCloses => actors::breaker_closes(w),
            Action::Look => actors::look(w),
            Action::Late => actors::late(w),
            Action::ActOnDeadline => actors::act_on_deadline(c, w),
        }
    }
}

/// Each runner's step, with its answer lost while losses are left, and its crash while it holds a saga.
fn runner_actions(w: &World, actions: &mut Vec<Action>) {
    for runner in 0..u8::try_from(w.runners.len()).unwrap_or(0) {
        actions.push(Action::Runner { runner, lose: false });
        if w.losses_left > 0 {
            actions.push(Action::Runner { runner, lose: true });
        }
        if w.crashes_left > 0 && w.runners[usize::from(runner)] != RunnerPc::Idle {
            actions.push(Action::Crash(Actor::Runner(runner)));
        }
    }
}

/// Each queued webhook delivered once, and (while the faults last) twice, never (the PSP gives up, when the
/// configuration lets it) or into an intake that crashes.
fn delivery_actions(c: &Config, w: &World, actions: &mut Vec<Action>) {
    for webhook in 0..u8::try_from(w.psp.webhooks.len()).unwrap_or(0) {
        for (on, how) in [
            (true, Delivery::Once),
            (w.duplicates_left > 0, Delivery::Twice),
            (c.webhooks_lost && w.losses_left > 0, Delivery::Lost),
            (w.crashes_left > 0, Delivery::Crashed),
        ] {
            if on {
                actions.push(Action::Deliver { webhook, how });
            }
        }
    }
}

/// Idle recovery asks the PSP about any payment (its answer maybe lost); recovery holding an answer
/// finalizes it, or crashes.
fn recovery_actions(w: &World, actions: &mut Vec<Action>) {
    if w.recovery == RecoveryPc::Idle {
        for payment in 0..u8::try_from(w.payments.len()).unwrap_or(0) {
            actions.push(Action::RecoveryAsk { payment, lose: false });
            if w.losses_left > 0 {
                actions.push(Action::RecoveryAsk { payment, lose: true });
            }
        }
    } else {
        actions.push(Action::RecoveryFinalize);
        if w.crashes_left > 0 {
            actions.push(Action::Crash(Actor::Recovery));
        }
    }
}

/// The customer acts and cancels (when the configuration has one); a cancel under way goes on to the saga,
/// or crashes between the order and the saga.
fn customer_actions(c: &Config, w: &World, actions: &mut Vec<Action>) {
    if c.customer {
        actions.push(Action::CustomerActs);
        actions.push(Action::CustomerCancels);
    }
    if w.customer.cancel == CancelPc::OrderCancelled {
        actions.push(Action::CustomerCancelsSaga);
        if w.crashes_left > 0 {
            actions.push(Action::Crash(Actor::Customer));
        }
    }
}

/// The model's clock ticks up to 2 (the payment timeout, then the abandonment deadline), and then a day may
/// pass once (when the configuration lets it).
fn time_actions(c: &Config, w: &World, actions: &mut Vec<Action>) {
    if w.clock < 2 {
        actions.push(Action::Tick);
    }
    if c.day_passes && !w.day_passed && w.clock == 2 {
        actions.push(Action::DayPasses);
    }
}

/// The example of money taken on a failed payment, recorded as refunded (the payment still failed) and
/// given back at the PSP. Main's own cancel never takes money on a failed payment, so only
/// [`CancelMode::FailsWhileProcessing`] (or [`CancelMode::OldMain`]) reaches it.
pub const MONEY_ON_FAILED_REFUNDED: &str = "money on a failed payment refunded, recorded on it";

/// Our code never asks for a refund of more than is left on the charge (the PSP would refuse it).
pub const NO_REFUND_BEYOND_LEFT: &str = "no refund asked for beyond what is left";

/// A saga is escalated at most once (then it ends, or waits set aside for a person).
pub const ESCALATED_ONCE: &str = "a saga is escalated at most once";

/// PSP calls for one saga that move nothing are bounded: a few, and one a look of the sweeper's at a set-aside
/// saga (at most [`crate::actors::looks_a_day`] in the day after its escalation, by the core's schedule).
pub const CALLS_BOUNDED: &str = "no PSP call for one saga repeats without bound";

/// Calls that moved nothing a saga may make in the model: a deferral (401) and an escalation, each once, and
/// a lost answer's retry.
pub const MAX_IDLE_CALLS: u8 = 3;

/// Captured money always has the reference a refund needs.
pub const REFUNDABLE: &str = "no captured money without a reference to refund it";

/// The breaker opens on the PSP failing, never on one request's failures.
pub const BREAKER_ON_THE_PSP: &str = "the breaker never opens on one request's failures";

/// The example of a saga set aside after its one escalation.
pub const SET_ASIDE: &str = "set aside after one escalation";

/// The example of a compensation that ended without the refund the PSP refused for good.
pub const REFUND_REFUSED_FOR_GOOD: &str = "compensated without a refund refused for good";

/// The example of a set-aside saga the sweeper looked at all day on the core's schedule, each look one PSP
/// call at most, escalated once.
pub const LOOKED_ALL_DAY: &str = "a set-aside saga looked at on its schedule all day, escalated once";

/// The liveness property's name.
pub const LIVENESS: &str = "a fair run from here ends the saga and settles the money";

/// Steps a fair run may take before it counts as never ending.
pub const FAIR_RUN_LIMIT: usize = 200;

/// Nothing is left to do: the saga ended, every webhook was delivered, no payment has money to give back,
/// every actor idle.
pub fn quiet(w: &World) -> bool {
    (w.saga.0.status.is_terminal() || w.saga.0.set_aside.is_some())
        && !w.bystander_waiting
        && !w.psp.key_rejected
        && !w.breaker.open
        && w.psp.webhooks.is_empty()
        && w.payments.iter().all(|p| p.0.refund_due().is_none())
        && w.runners.iter().all(|r| *r == RunnerPc::Idle)
        && w.recovery == RecoveryPc::Idle
        && w.customer.cancel != CancelPc::OrderCancelled
}

/// Runs `w` on with fair actions only, round-robin, until [`quiet`] or no action is possible; the state it
/// ends in, or `None` past [`FAIR_RUN_LIMIT`] steps. (The uncached run, for traces.)
pub fn fair_run(model: &ProtocolModel, w: &World) -> Option<World> {
    let mut w = w.clone();
    let mut actions = Vec::new();
    for turn in 0..FAIR_RUN_LIMIT {
        if quiet(&w) {
            return Some(w);
        }
        match model.fair_step(&w, turn, &mut actions) {
            Some(next) => w = next,
            None => return Some(w),
        }
    }
    None
}

/// The money and the stock at the end: a completed order kept exactly one capture and sold the stock; a
/// compensated one gave every capture back (but one whose refund was refused for good: a dispute, told to a
/// person once) and put the stock back; a saga still open was set aside after exactly one escalation (a person
/// acts on it).
pub fn settled(w: &World) -> bool {
    let kept_one = w.psp.captures() == 1
        && w.psp.intents.iter().all(|i| !i.captured() || i.refunded == 0)
        && w.order == OrderStatus::Confirmed;
    let impossible = w.saga.0.refund_impossible.is_some() && w.escalations == 1;
    let gave_back = w
        .psp
        .intents
        .iter()
        .all(|i| !i.captured() || i.refunded == ids::AMOUNT || (impossible && i.disputed))
        && w.available == ids::INITIAL_STOCK;
    match w.saga.0.status {
        SagaStatus::Completed => kept_one,
        SagaStatus::Compensated => gave_back,
        _ => w.saga.0.set_aside.is_some() && w.escalations == 1,
    }
}

/// Stock the saga holds: reserved from `stock_reserved` until released, sold once completed.
pub fn held_stock(w: &World) -> u32 {
    let reserved = w.saga_log.iter().any(|(k, _)| *k == SagaEventKind::StockReserved);
    let released = w.saga_log.iter().any(|(k, _)| *k == SagaEventKind::StockReleased);
    if reserved && !released {
        ids::QUANTITY
    } else {
        0
    }
}

/// The saga's log: every compensation after the step it compensates, none twice, and in reverse order
/// (the refund, or its refusal for good, before the release, nothing after the release; a charge that took money is never compensated
/// as one that took none).
pub fn compensations_in_order(w: &World) -> bool {
    let mut seen: Vec<SagaEventKind> = Vec::new();
    for (kind, _step) in &w.saga_log {
        let before = |k: SagaEventKind| seen.contains(&k);
        let ok = match kind {
            SagaEventKind::PaymentRefunded => {
                before(SagaEventKind::PaymentCaptured)
                    && !before(SagaEventKind::PaymentRefunded)
                    && !before(SagaEventKind::StockReleased)
            }
            SagaEventKind::StepCompensated => {
                before(SagaEventKind::StockReserved)
                    && !before(SagaEventKind::PaymentCaptured)
                    && !before(SagaEventKind::StepCompensated)
                    && !before(SagaEventKind::StockReleased)
            }
            SagaEventKind::StockReleased => {
                before(SagaEventKind::StockReserved)
                    && !before(SagaEventKind::StockReleased)
                    && (!before(SagaEventKind::PaymentCaptured)
                        || before(SagaEventKind::PaymentRefunded)
                        || before(SagaEventKind::RefundImpossible))
                    && !before(SagaEventKind::OrderConfirmed)
            }
            // Nothing moves forward once compensation started releasing, or after the order was confirmed.
            _ => !before(SagaEventKind::StockReleased) && !before(SagaEventKind::OrderConfirmed),
        };
        if !ok {
            return false;
        }
        seen.push(*kind);
    }
    true
}

impl Model for ProtocolModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let c = &self.config;
        c.scenarios
            .iter()
            .map(|s| {
                let mut w = World::new(*s, c.runners, c.crashes, c.losses, c.duplicates);
                w.psp.charge_fails = c.refusals.saved_500;
                w.psp.search_refused = c.refusals.search_refused;
                w.psp.offer = match (c.refusals.redirect_refused, c.redirect_drops_action) {
                    (false, _) => Offer::Secret,
                    (true, false) => Offer::RefusedUrl,
                    (true, true) => Offer::RefusedUrlDropsAction,
                };
                w.bystander_waiting = c.bystander;
                w
            })
            .collect()
    }

    fn actions(&self, state: &World, actions: &mut Vec<Action>) {
        self.candidate_actions(state, actions);
    }

    fn next_state(&self, last_state: &World, action: Action) -> Option<World> {
        self.step(last_state, &action)
    }

    /// The properties in three groups: what the money, the stock and the records never do
    /// ([`money_and_records`]), what a saga's runs never do ([`saga_runs`]), and how every run ends with the
    /// examples it must reach ([`ends_and_examples`]); in this order, which the report lists them in.
    fn properties(&self) -> Vec<Property<Self>> {
        [money_and_records(), saga_runs(), ends_and_examples()]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// What holds in every state for the money, the stock and the records: charged once at most, refunded no
/// more than captured, stock conserved, compensations in order, no secret on an ended payment, money on a
/// failed payment recorded once.
fn money_and_records() -> Vec<Property<ProtocolModel>> {
    vec![
        Property::always("never charged twice for one order", |_: &ProtocolModel, w: &World| {
            w.psp.captures() <= 1
        }),
        Property::always("never refunded more than captured", |_: &ProtocolModel, w: &World| {
            w.psp
                .intents
                .iter()
                .all(|i| i.refunded <= if i.captured() { ids::AMOUNT } else { 0 })
                && w.payments.iter().all(|p| p.0.refunded_minor <= ids::AMOUNT)
        }),
        Property::always(NO_REFUND_BEYOND_LEFT, |_: &ProtocolModel, w: &World| {
            w.psp.refused_refunds == 0
        }),
        Property::always("stock conserved", |_: &ProtocolModel, w: &World| {
            w.available + held_stock(w) == ids::INITIAL_STOCK
        }),
        Property::always(
            "compensations after their steps, in reverse order",
            |_: &ProtocolModel, w: &World| compensations_in_order(w),
        ),
        Property::always("no secret on a terminal payment", |_: &ProtocolModel, w: &World| {
            w.payments.iter().all(|p| {
                let p = &p.0;
                !p.status.is_terminal()
                    || (p.action.is_none() && p.retry_token.is_none() && !ClientView::from(p).carries_secret())
            })
        }),
        Property::always(
            "money taken on a failed payment is recorded once",
            |_: &ProtocolModel, w: &World| w.late_successes_recorded <= 1,
        ),
    ]
}

/// What holds in every state for the saga's runs: its record loads, it is escalated once at most, calls that
/// move nothing are bounded, captured money keeps its reference, one request never opens the breaker, and a
/// fair run from here ends.
fn saga_runs() -> Vec<Property<ProtocolModel>> {
    vec![
        Property::always("every stored saga loads", |_: &ProtocolModel, w: &World| {
            Loaded::from_record(w.saga.0.clone()).is_ok()
        }),
        Property::always(ESCALATED_ONCE, |_: &ProtocolModel, w: &World| w.escalations <= 1),
        Property::always(CALLS_BOUNDED, |_: &ProtocolModel, w: &World| {
            w.idle_calls <= MAX_IDLE_CALLS.saturating_add(w.looks)
        }),
        Property::always(REFUNDABLE, |_: &ProtocolModel, w: &World| {
            !w.saga.0.captured || w.saga.0.psp_reference.is_some()
        }),
        Property::always(BREAKER_ON_THE_PSP, |_: &ProtocolModel, w: &World| {
            !w.breaker.opened_by_one_request
        }),
        Property::always(
            "a fair run from here ends the saga and settles the money",
            |m: &ProtocolModel, w: &World| m.fair_run_ends(w),
        ),
    ]
}

/// Every saga ends or is set aside, and the examples every configuration must reach or, for those it
/// cannot, name (so the checks are not vacuous).
fn ends_and_examples() -> Vec<Property<ProtocolModel>> {
    vec![
        Property::eventually("every saga ends or is set aside", |_: &ProtocolModel, w: &World| {
            w.saga.0.status.is_terminal() || w.saga.0.set_aside.is_some()
        }),
        Property::sometimes("completed", |_: &ProtocolModel, w: &World| {
            w.saga.0.status == SagaStatus::Completed
        }),
        Property::sometimes("compensated after a refund", |_: &ProtocolModel, w: &World| {
            w.saga.0.status == SagaStatus::Compensated && w.saga.0.refunded_minor == ids::AMOUNT
        }),
        Property::sometimes("a success raced the cancel", |_: &ProtocolModel, w: &World| {
            let log = &w.saga_log;
            let failed = log.iter().position(|(k, _)| *k == SagaEventKind::StepFailed);
            failed.is_some_and(|f| log[f..].iter().any(|(k, _)| *k == SagaEventKind::PaymentCaptured))
        }),
        Property::sometimes(MONEY_ON_FAILED_REFUNDED, |_: &ProtocolModel, w: &World| {
            w.payments.iter().any(|p| {
                let p = &p.0;
                p.status == payments_core::PaymentStatus::Failed
                    && p.stray_capture.is_some_and(|s| s.refunded)
                    && p.refunded_minor == ids::AMOUNT
            }) && w.psp.intents.iter().any(|i| i.captured() && i.refunded == ids::AMOUNT)
        }),
        Property::sometimes("abandoned and canceled at the PSP", |_: &ProtocolModel, w: &World| {
            w.saga.0.status == SagaStatus::Compensated
                && w.psp
                    .intents
                    .iter()
                    .any(|i| i.status == crate::psp::IntentStatus::Canceled)
        }),
        Property::sometimes(SET_ASIDE, |_: &ProtocolModel, w: &World| {
            w.saga.0.set_aside.is_some() && w.escalations == 1
        }),
        Property::sometimes(REFUND_REFUSED_FOR_GOOD, |_: &ProtocolModel, w: &World| {
            w.saga.0.status == SagaStatus::Compensated && w.saga.0.refund_impossible.is_some()
        }),
        Property::sometimes(LOOKED_ALL_DAY, |_: &ProtocolModel, w: &World| {
            w.saga.0.set_aside.is_some() && w.looks == actors::looks_a_day() && w.escalations == 1
        }),
    ]
}
