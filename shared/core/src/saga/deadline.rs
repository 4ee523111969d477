//! Every wait of a saga ends (invariant 8) and every loop has an end (invariant 12): each state has a
//! deadline, and past it someone acts; a saga escalated once is set aside instead of being retried into the
//! same failure on every sweep.
//!
//! | state | counted from | deadline | past it |
//! |---|---|---|---|
//! | started, payment_captured, releasing_stock | entering the state | `step_ms` | escalate once, set aside |
//! | stock_reserved | entering the state | `step_ms` | compensate: release the stock (no payment exists yet) |
//! | charging | entering the state | `charge_ms` | compensate: cancel what the charge made at the PSP |
//! | payment_pending | the start | `payment_deadline_ms`, then `abandon_after_ms` | hand to recovery once; then abandon |
//! | refunding_payment, cancelling_payment | entering the state | `compensation_ms` | escalate once, set aside |
//! | completed, compensated | | none | |
//!
//! A saga enters its state at its last transition (`updated_at_ms`); being set aside is no transition of
//! state and keeps that time, so a set-aside saga's deadline does not move.
//!
//! **Set aside.** The first escalation of a saga is recorded on it ([`SetAside`], with the event
//! `SagaSetAside`): later failures of the same step escalate no more, and the sweeper looks at it only on a
//! doubling schedule from the escalation ([`set_aside_due`]: 5, 10, 20 minutes, ... at most a day apart), so it
//! calls the PSP a bounded number of times a day and never crowds out the other sagas of its shard. News
//! (a payment event) and an operator's retry still resume it; its next move ends the set-aside, except a
//! move a deadline made (a charge or a payment creation given up, [`Saga::charge_given_up`]): a deadline is
//! no news that healed anything, so the saga stays set aside and the compensation's failures (the cancel's
//! search refused as the charge's was) escalate no more: a saga is escalated once until someone acts.

use super::{
    CancellingPayment, Charging, Loaded, ReleasingStock, Saga, SagaEvent, SagaEventKind, SagaRecord, SagaStatus, Step,
    StockReserved,
};
use serde::{Deserialize, Serialize};

/// How long a saga may stay in each state (milliseconds); see the module's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// A step on our own items (reserve, create the payment, confirm the order, release the stock): only a
    /// broken table keeps it failing.
    pub step_ms: i64,
    /// The charge's answer from the PSP: past it the charge is given up and compensated.
    pub charge_ms: i64,
    /// A refund or a cancel at the PSP (a refund `pending` for days, a payment `processing` that cannot be
    /// canceled): past it a person is told once.
    pub compensation_ms: i64,
    /// A payment still waiting for the customer this long after the start is abandoned.
    pub abandon_after_ms: i64,
}

impl Deadlines {
    /// The defaults: an hour for a step of ours, ten minutes for the charge, a day for a compensation at the
    /// PSP, fifteen minutes for the customer.
    pub const DEFAULT: Deadlines = Deadlines {
        step_ms: 3_600_000,
        charge_ms: 600_000,
        compensation_ms: 86_400_000,
        abandon_after_ms: 900_000,
    };
}

/// What is done once a deadline has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDeadline {
    /// Give the step up and compensate what was done (stock_reserved, charging).
    Compensate,
    /// Ask recovery about the payment, once (payment_pending).
    HandToRecovery,
    /// Give up on a customer who has not acted: cancel at the PSP and compensate (payment_pending).
    Abandon,
    /// Tell a person once and set the saga aside (see [`SetAside`]).
    Escalate,
}

/// The deadline that applies to a saga now: when, and what is done past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub at_ms: i64,
    pub then: OnDeadline,
}

/// The deadline that applies to `record` in its state; `None` once it ended.
pub fn deadline(record: &SagaRecord, limits: &Deadlines) -> Option<Deadline> {
    use SagaStatus as S;
    let entered = record.updated_at_ms;
    let (at_ms, then) = match record.status {
        S::Completed | S::Compensated => return None,
        S::Started | S::PaymentCaptured | S::ReleasingStock => {
            (entered.saturating_add(limits.step_ms), OnDeadline::Escalate)
        }
        S::StockReserved => (entered.saturating_add(limits.step_ms), OnDeadline::Compensate),
        S::Charging => (entered.saturating_add(limits.charge_ms), OnDeadline::Compensate),
        S::PaymentPending if !record.recovery_requested => (record.payment_deadline_ms, OnDeadline::HandToRecovery),
        S::PaymentPending => (
            record.started_at_ms.saturating_add(limits.abandon_after_ms),
            OnDeadline::Abandon,
        ),
        S::RefundingPayment | S::CancellingPayment => {
            (entered.saturating_add(limits.compensation_ms), OnDeadline::Escalate)
        }
    };
    Some(Deadline { at_ms, then })
}

/// What is due for `record` at `now_ms`: the action of its deadline once that has passed.
pub fn passed(record: &SagaRecord, limits: &Deadlines, now_ms: i64) -> Option<OnDeadline> {
    deadline(record, limits).filter(|d| now_ms >= d.at_ms).map(|d| d.then)
}

/// The first escalation of a saga, kept on it until its next move: what kept failing, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAside {
    /// The runner's name of the step that kept failing (`charge`, `refund_payment`, ...).
    pub action: String,
    /// What failed, as escalated.
    pub reason: String,
    pub at_ms: i64,
}

/// The first look at a set-aside saga comes this long after its escalation (a PSP down for a few seconds
/// heals by then); each next one twice as long after it.
pub const SET_ASIDE_FIRST_LOOK_MS: i64 = 300_000;

/// A set-aside saga is looked at at least once a day (and so calls the PSP at most a few times a day).
pub const SET_ASIDE_MAX_RECHECK_MS: i64 = 86_400_000;

/// When the sweeper next looks at a saga set aside at `at_ms`: `at_ms` plus 1, 2, 4, ... times
/// [`SET_ASIDE_FIRST_LOOK_MS`] (the first such time after `now_ms`), never more than
/// [`SET_ASIDE_MAX_RECHECK_MS`] after `now_ms`. Bounded for any clock (a corrupt time included).
pub fn set_aside_due(at_ms: i64, now_ms: i64) -> i64 {
    let mut span = SET_ASIDE_FIRST_LOOK_MS;
    let mut due = at_ms.saturating_add(span);
    // 64 doublings pass any i64 time; the cap below holds whatever this finds.
    for _ in 0..64 {
        if due > now_ms {
            break;
        }
        span = span.saturating_mul(2);
        due = at_ms.saturating_add(span);
    }
    let cap = now_ms.saturating_add(SET_ASIDE_MAX_RECHECK_MS);
    if due <= now_ms {
        // A time so far back (corrupt) that no doubling reaches now.
        return cap;
    }
    due.min(cap)
}

/// What the sweeper does with a saga after it resumed it (or tried to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Ended: it left the open-items index with its last write.
    Done,
    /// Still waiting or failed without an escalation: due again on the normal (capped) back-off.
    Defer,
    /// Set aside after its escalation: due again at this time ([`set_aside_due`]).
    SetAside { due_ms: i64 },
}

/// The sweeper's decision for a saga as it stands after a resume, at `now_ms`.
pub fn after_resume(record: &SagaRecord, now_ms: i64) -> Sweep {
    match &record.set_aside {
        _ if record.status.is_terminal() => Sweep::Done,
        Some(aside) => Sweep::SetAside {
            due_ms: set_aside_due(aside.at_ms, now_ms),
        },
        None => Sweep::Defer,
    }
}

/// The step a saga in `status` is at, for the log entry of its escalation.
fn current_step(status: SagaStatus) -> Step {
    use SagaStatus as S;
    match status {
        S::Started | S::ReleasingStock | S::Compensated => Step::ReserveStock,
        S::StockReserved | S::Charging | S::RefundingPayment | S::CancellingPayment => Step::Charge,
        S::PaymentPending => Step::AwaitPayment,
        S::PaymentCaptured | S::Completed => Step::ConfirmOrder,
    }
}

impl<S> Saga<S> {
    /// The saga's first escalation (`action` kept failing with `reason`): recorded on it, in the same state and
    /// with the time it entered that state, so its deadline does not move. The next move ends it.
    pub fn set_aside(self, action: &str, reason: String, now_ms: i64) -> (Saga<S>, SagaEvent) {
        let entered = self.record.updated_at_ms;
        let (status, step) = (self.record.status, current_step(self.record.status));
        let detail = format!("{action}: {reason}");
        let (mut saga, event) = self.step::<S>(status, SagaEventKind::SagaSetAside, step, Some(detail), now_ms);
        saga.record.updated_at_ms = entered;
        saga.record.set_aside = Some(SetAside {
            action: action.to_owned(),
            reason,
            at_ms: now_ms,
        });
        (saga, event)
    }
}

impl Loaded {
    /// [`Saga::set_aside`] for a saga in any state.
    pub fn set_aside(self, action: &str, reason: String, now_ms: i64) -> (Loaded, SagaEvent) {
        fn typed<S>(saga: Saga<S>, action: &str, reason: String, now_ms: i64) -> (Loaded, SagaEvent)
        where
            Loaded: From<Saga<S>>,
        {
            let (saga, event) = saga.set_aside(action, reason, now_ms);
            (saga.into(), event)
        }
        match self {
            Loaded::Started(s) => typed(s, action, reason, now_ms),
            Loaded::StockReserved(s) => typed(s, action, reason, now_ms),
            Loaded::Charging(s) => typed(s, action, reason, now_ms),
            Loaded::PaymentPending(s) => typed(s, action, reason, now_ms),
            Loaded::PaymentCaptured(s) => typed(s, action, reason, now_ms),
            Loaded::Completed(s) => typed(s, action, reason, now_ms),
            Loaded::CancellingPayment(s) => typed(s, action, reason, now_ms),
            Loaded::RefundingPayment(s) => typed(s, action, reason, now_ms),
            Loaded::ReleasingStock(s) => typed(s, action, reason, now_ms),
            Loaded::Compensated(s) => typed(s, action, reason, now_ms),
        }
    }
}

impl<S> Saga<S> {
    /// A move its state's deadline made: a set-aside saga stays set aside (its escalation stands for what the
    /// move leads to), where any other move ends the set-aside.
    fn at_deadline<T>(self, moved: impl FnOnce(Self) -> (Saga<T>, SagaEvent)) -> (Saga<T>, SagaEvent) {
        let aside = self.record.set_aside.clone();
        let (mut saga, event) = moved(self);
        saga.record.set_aside = aside;
        (saga, event)
    }
}

impl Saga<StockReserved> {
    /// The payment could not be created before the step's deadline: nothing was charged, so the only
    /// compensation is the stock. A set-aside saga stays set aside.
    pub fn payment_not_created(self, reason: String, now_ms: i64) -> (Saga<ReleasingStock>, SagaEvent) {
        self.at_deadline(|s| s.fail(SagaStatus::ReleasingStock, Step::Charge, reason, now_ms))
    }
}

impl Saga<Charging> {
    /// The charge unanswered before its deadline: given up and compensated as a refused charge is
    /// ([`Saga::charge_failed`]), but a set-aside saga stays set aside: the cancel that follows asks the PSP
    /// what already failed for good (a refused search), and that was escalated.
    pub fn charge_given_up(self, reason: String, now_ms: i64) -> (Saga<CancellingPayment>, SagaEvent) {
        self.at_deadline(|s| s.charge_failed(reason, now_ms))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::ids::{OrderId, PaymentId, PspReference, Sku};
    use crate::money::{Currency, Money};
    use crate::saga::{check, Checkout};

    const T0: i64 = 1_700_000_000_000;

    fn started() -> Saga<super::super::Started> {
        let checkout = Checkout {
            sku: Sku::parse("sku-1").unwrap(),
            quantity: 1,
            money: Money::new(2500, Currency::parse("EUR").unwrap()).unwrap(),
            payment_method: "pm_succeeded".into(),
            psp: None,
        };
        Saga::begin(OrderId::parse("order-1").unwrap(), checkout, T0, 120_000).0
    }

    fn pay() -> PaymentId {
        PaymentId::parse("pay_1").unwrap()
    }

    #[test]
    fn every_open_state_has_a_deadline_and_its_action() {
        let l = Deadlines::DEFAULT;
        let s = started();
        assert_eq!(
            deadline(s.record(), &l),
            Some(Deadline {
                at_ms: T0 + l.step_ms,
                then: OnDeadline::Escalate
            })
        );
        let (s, _) = s.stock_reserved(T0 + 1);
        assert_eq!(passed(s.record(), &l, T0 + 1 + l.step_ms), Some(OnDeadline::Compensate));
        assert_eq!(
            passed(s.record(), &l, T0 + l.step_ms),
            None,
            "counted from entering the state"
        );
        let (s, _) = s.payment_created(pay(), T0 + 2);
        assert_eq!(
            passed(s.record(), &l, T0 + 2 + l.charge_ms),
            Some(OnDeadline::Compensate)
        );
        let (s, _) = s.payment_requested(Some(PspReference::parse("pi_1").unwrap()), false, T0 + 3);
        assert_eq!(passed(s.record(), &l, T0 + 120_000), Some(OnDeadline::HandToRecovery));
        let (s, _) = s.recovery_requested(T0 + 120_000);
        assert_eq!(passed(s.record(), &l, T0 + 120_001), None);
        assert_eq!(
            passed(s.record(), &l, T0 + l.abandon_after_ms),
            Some(OnDeadline::Abandon)
        );
        let (s, _) = s.payment_captured(PspReference::parse("pi_1").unwrap(), T0 + 5);
        assert_eq!(passed(s.record(), &l, T0 + 5 + l.step_ms), Some(OnDeadline::Escalate));
        let (s, _) = s.confirmation_failed("cancelled".into(), T0 + 6);
        assert_eq!(passed(s.record(), &l, T0 + 6 + l.compensation_ms - 1), None);
        assert_eq!(
            passed(s.record(), &l, T0 + 6 + l.compensation_ms),
            Some(OnDeadline::Escalate)
        );
        let (s, _) = s.refunded(2500, T0 + 7);
        assert_eq!(passed(s.record(), &l, T0 + 7 + l.step_ms), Some(OnDeadline::Escalate));
        let (s, _) = s.stock_released(T0 + 8);
        assert_eq!(deadline(s.record(), &l), None, "ended");
    }

    #[test]
    fn a_set_aside_saga_keeps_its_state_and_deadline_and_its_next_move_ends_it() {
        let l = Deadlines::DEFAULT;
        let (s, _) = started().stock_reserved(T0 + 1);
        let (s, _) = s.payment_created(pay(), T0 + 2);
        let before = deadline(s.record(), &l);
        let (s, event) = s.set_aside("charge", "PSP unavailable".into(), T0 + 50);
        assert_eq!(
            (event.kind, event.step, event.status),
            (SagaEventKind::SagaSetAside, Step::Charge, SagaStatus::Charging)
        );
        assert_eq!(s.record().version, 4);
        assert_eq!(deadline(s.record(), &l), before, "being set aside moves no deadline");
        assert!(check(s.record()).is_ok());
        assert_eq!(
            after_resume(s.record(), T0 + 60),
            Sweep::SetAside {
                due_ms: T0 + 50 + SET_ASIDE_FIRST_LOOK_MS
            }
        );
        let (s, _) = s.charge_failed("charge refused".into(), T0 + l.charge_ms);
        assert_eq!(s.record().set_aside, None, "the move ends it");
        assert_eq!(after_resume(s.record(), T0), Sweep::Defer);
    }

    /// The protocol model's finding: a charge set aside after its search was refused, then given up at its
    /// deadline, was escalated again when the cancel's search was refused too. Giving up at a deadline keeps
    /// the set-aside (and its schedule), so later failures escalate no more.
    #[test]
    fn giving_up_at_a_deadline_keeps_the_set_aside() {
        let l = Deadlines::DEFAULT;
        let (s, _) = started().stock_reserved(T0 + 1);
        let (aside, _) = s.clone().set_aside("reserve_stock", "table refused".into(), T0 + 10);
        let (released, event) = aside.payment_not_created("no payment".into(), T0 + l.step_ms);
        assert_eq!(event.kind, SagaEventKind::StepFailed);
        assert_eq!(released.record().status, SagaStatus::ReleasingStock);
        assert!(released.record().set_aside.is_some(), "{:?}", released.record());
        assert!(check(released.record()).is_ok());
        let (charging, _) = s.payment_created(pay(), T0 + 2);
        let (aside, _) = charging.set_aside("charge", "search refused".into(), T0 + 50);
        let kept = aside.record().set_aside.clone();
        let (given_up, event) = aside.charge_given_up("no answer".into(), T0 + 2 + l.charge_ms);
        assert_eq!(
            (event.kind, event.status),
            (SagaEventKind::StepFailed, SagaStatus::CancellingPayment)
        );
        assert_eq!(
            given_up.record().set_aside,
            kept,
            "the same escalation, on its schedule"
        );
        assert!(check(given_up.record()).is_ok());
        assert_eq!(
            after_resume(given_up.record(), T0 + 60),
            Sweep::SetAside {
                due_ms: T0 + 50 + SET_ASIDE_FIRST_LOOK_MS
            }
        );
        assert_eq!(
            given_up.record().updated_at_ms,
            T0 + 2 + l.charge_ms,
            "the cancel's deadline counts from now"
        );
        let (cancelled, _) = given_up.payment_cancelled(T0 + 3 + l.charge_ms);
        assert_eq!(cancelled.record().set_aside, None, "news ends it");
    }

    #[test]
    fn a_set_aside_saga_is_looked_at_on_a_doubling_schedule_at_most_a_day_apart() {
        let h = SET_ASIDE_FIRST_LOOK_MS;
        assert_eq!(set_aside_due(T0, T0), T0 + h);
        assert_eq!(set_aside_due(T0, T0 + h), T0 + 2 * h);
        assert_eq!(set_aside_due(T0, T0 + 3 * h), T0 + 4 * h);
        let late = T0 + 100 * 86_400_000;
        assert_eq!(set_aside_due(T0, late), late + SET_ASIDE_MAX_RECHECK_MS);
        // Looks at 5, 10, 20, ... minutes (10 of them in the first day), then a day apart: a bounded number of
        // PSP calls.
        let mut now = T0;
        let mut looks = 0;
        while now < T0 + 10 * 86_400_000 {
            now = set_aside_due(T0, now);
            looks += 1;
        }
        assert!(looks <= 10 + 10, "{looks}");
        for corrupt in [i64::MIN, i64::MAX, -1] {
            let due = set_aside_due(corrupt, T0);
            assert!(due > T0 && due <= T0 + SET_ASIDE_MAX_RECHECK_MS, "{corrupt}: {due}");
        }
    }

    #[test]
    fn stock_reserved_past_its_deadline_releases_the_stock_without_a_payment() {
        let (s, _) = started().stock_reserved(T0 + 1);
        let (s, event) = s.payment_not_created("no payment before the deadline".into(), T0 + 2);
        assert_eq!((event.kind, event.step), (SagaEventKind::StepFailed, Step::Charge));
        assert!(check(s.record()).is_ok(), "{:?}", check(s.record()));
        let (s, _) = s.stock_released(T0 + 3);
        assert!(check(s.record()).is_ok());
    }
}
