//! Refunds as the PSP reports them, one refund at a time.
//!
//! A Stripe refund is not done when it is created: it can stay `pending` (or `requires_action`) for days,
//! and a refund that was `pending` or even `succeeded` can later turn `failed` or `canceled`, which puts the
//! money back on our side. So a payment keeps each refund it heard of with its last status ([`RefundEntry`]),
//! counts as refunded only what the PSP says `succeeded`, and treats a failed refund as money still to give
//! back ([`GiveBack`]), which recovery does with a new idempotency key per failure, a bounded number of times.

use crate::ids::PaymentId;
use crate::payment::Payment;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How many refunds one payment keeps; a further one is an anomaly (no real checkout has this many).
pub const MAX_REFUNDS_KEPT: usize = 32;

/// How many failed refunds recovery gives back again on its own; after that the failure only alarms, for an
/// operator (a refund that keeps failing would otherwise be replayed forever).
pub const MAX_GIVE_BACKS: u32 = 3;

/// A Stripe Refund's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefundStatus {
    /// Asked for, not yet done.
    Pending,
    /// The customer must act before the money can go back (some non-card methods): still pending for us.
    RequiresAction,
    /// The money went back.
    Succeeded,
    /// The refund failed: the money is ours again.
    Failed,
    /// The refund was canceled: the money is ours again.
    Canceled,
}

impl RefundStatus {
    /// Every status, in the order above.
    pub const ALL: [RefundStatus; 5] = [
        Self::Pending,
        Self::RequiresAction,
        Self::Succeeded,
        Self::Failed,
        Self::Canceled,
    ];

    /// Stripe's name of the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::RequiresAction => "requires_action",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// The status Stripe names `value`, if it is one we know.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// Not done yet, not undone: the money is on its way back.
    pub fn is_pending(self) -> bool {
        matches!(self, Self::Pending | Self::RequiresAction)
    }

    /// The refund will not return the money.
    pub fn is_undone(self) -> bool {
        matches!(self, Self::Failed | Self::Canceled)
    }

    /// Can a refund reported `self` later be reported `next`? Pending moves anywhere, a success can still
    /// fail (Stripe: a card refund can fail after `succeeded`), failed and canceled are final.
    pub fn can_move_to(self, next: RefundStatus) -> bool {
        match self {
            Self::Pending | Self::RequiresAction => next != self,
            Self::Succeeded => next.is_undone(),
            Self::Failed | Self::Canceled => false,
        }
    }
}

impl fmt::Display for RefundStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One refund as the PSP reported it last: kept on the payment and recorded on the event that changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundEntry {
    /// The PSP's refund id (`re_...`).
    pub refund_id: String,
    /// This refund's amount (not the running total), in minor units.
    pub amount_minor: u64,
    pub status: RefundStatus,
}

/// Money a failed refund left with us, for recovery to give back: with the payment id, `failure` makes the
/// new refund's idempotency key, so each failure reported gets exactly one new attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiveBack {
    /// The payment's `refund_failures` count when this failure was recorded.
    pub failure: u32,
    pub amount_minor: u64,
}

/// A refund recovery makes to give money back: under `key` (the same on every look, so a retry after a lost
/// answer never refunds twice), of `amount_minor`, answering give-back `answers_give_back` when it is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveBackRefund {
    pub key: String,
    pub amount_minor: u64,
    pub answers_give_back: Option<u32>,
}

/// The idempotency key of the give-back of failure `failure`: one key per failure, whichever PSP.
pub fn give_back_key(payment: &PaymentId, failure: u32) -> String {
    format!("{payment}:refund-failure-{failure}")
}

/// The idempotency key of the refund of money taken after the payment failed (its anomaly `anomaly`).
pub fn stray_refund_key(payment: &PaymentId, anomaly: u32) -> String {
    format!("{payment}:anomaly-{anomaly}:refund")
}

/// What recovery refunds of `payment` at a PSP whose refunds end by notification (Adyen: nothing to read
/// back): money taken after it failed, all that no refund asks back yet; else what failed refunds left
/// ([`GiveBack`]). `None` when there is nothing to give back, or when the refunds already asked cover it
/// (their notifications tell how they end).
pub fn give_back_refund(payment: &Payment) -> Option<GiveBackRefund> {
    if let Some(anomaly) = payment.refund_due() {
        let unasked = payment
            .money
            .amount_minor()
            .saturating_sub(RefundTotals::of(&payment.refunds).outstanding());
        return (unasked > 0).then(|| GiveBackRefund {
            key: stray_refund_key(&payment.id, anomaly),
            amount_minor: unasked,
            answers_give_back: None,
        });
    }
    payment.give_back.map(|g| GiveBackRefund {
        key: give_back_key(&payment.id, g.failure),
        amount_minor: g.amount_minor,
        answers_give_back: Some(g.failure),
    })
}

/// Totals of a payment's refunds by what they mean for the money.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefundTotals {
    /// Reported `succeeded`: the money is back.
    pub succeeded: u64,
    /// Reported `pending` or `requires_action`.
    pub pending: u64,
}

impl RefundTotals {
    /// The totals of `entries`.
    pub fn of(entries: &[RefundEntry]) -> Self {
        entries.iter().fold(Self::default(), |t, e| match e.status {
            RefundStatus::Succeeded => Self {
                succeeded: t.succeeded.saturating_add(e.amount_minor),
                ..t
            },
            s if s.is_pending() => Self {
                pending: t.pending.saturating_add(e.amount_minor),
                ..t
            },
            _ => t,
        })
    }

    /// What the refunds ask back in all, done or not: never more than the capture.
    pub fn outstanding(self) -> u64 {
        self.succeeded.saturating_add(self.pending)
    }
}

/// Where a saga's refund of a capture stands, from the refunds the payment has heard of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundStep {
    /// The money is back: the saga's refund succeeded, or the payment's succeeded refunds (a give-back of
    /// the saga's failed refund, under recovery's key) cover what the saga refunds.
    Done,
    /// The saga's refund is on its way (`pending`, `requires_action`): its webhook says how it ends.
    Waiting,
    /// The saga's refund failed (or was canceled) and no refund has returned the money yet: recovery gives
    /// it back; the saga is not done.
    Undone,
}

/// The saga's refund step, whose own refund the payment knows as `own`, of `refunds` (all the payment's
/// refunds), refunding `owed_minor`. The money question is settled by whichever refund returned the money:
/// recovery gives a failed refund back under a new key, so the saga's own refund stays `failed` forever and
/// must not hold the saga (issue 23 item 7: every wait ends).
pub fn refund_step(own: RefundStatus, refunds: &[RefundEntry], owed_minor: u64) -> RefundStep {
    if own == RefundStatus::Succeeded || RefundTotals::of(refunds).succeeded >= owed_minor {
        RefundStep::Done
    } else if own.is_pending() {
        RefundStep::Waiting
    } else {
        RefundStep::Undone
    }
}

/// One owner per refund: whether the saga's refund step may call the PSP for `payment`, refunding
/// `owed_minor`. It refunds only while no refund of the payment failed and its refunds do not already ask it
/// all back (`None`: call). Once one failed, the money is recovery's to give back (one key per failure, at most
/// [`MAX_GIVE_BACKS`]), and a resume never creates a refund again, however late (Stripe forgets a key after
/// 24 hours: the saga's key replayed days later would make a new refund on the failing card). `Some` is the
/// step as the payment's refunds stand: done once succeeded refunds cover it, waiting while they are asked
/// and nothing failed, undone (recovery's) otherwise.
pub fn saga_refund_settled(payment: &Payment, owed_minor: u64) -> Option<RefundStep> {
    let totals = RefundTotals::of(&payment.refunds);
    let failed = payment.refund_failures > 0;
    if !failed && totals.outstanding() < owed_minor {
        return None;
    }
    Some(if totals.succeeded >= owed_minor {
        RefundStep::Done
    } else if failed {
        RefundStep::Undone
    } else {
        RefundStep::Waiting
    })
}

#[cfg(test)]
mod tests {
    use super::RefundStatus::*;
    use super::*;

    fn entry(id: &str, amount_minor: u64, status: RefundStatus) -> RefundEntry {
        RefundEntry {
            refund_id: id.into(),
            amount_minor,
            status,
        }
    }

    #[test]
    fn the_saga_refunds_only_until_a_refund_failed_then_recovery_owns_the_money() {
        let mut p = crate::fixtures::payment("pay_owner");
        let owed = p.money.amount_minor();
        assert_eq!(
            saga_refund_settled(&p, owed),
            None,
            "nothing asked yet: the saga refunds"
        );
        p.refunds = vec![entry("re_saga", owed, Pending)];
        assert_eq!(
            saga_refund_settled(&p, owed),
            Some(RefundStep::Waiting),
            "asked: no second refund"
        );
        p.refunds = vec![entry("re_saga", owed, Failed)];
        p.refund_failures = 1;
        assert_eq!(
            saga_refund_settled(&p, owed),
            Some(RefundStep::Undone),
            "failed: recovery's"
        );
        p.refunds.push(entry("re_give_back", owed, Pending));
        assert_eq!(saga_refund_settled(&p, owed), Some(RefundStep::Undone));
        p.refunds[1].status = Succeeded;
        assert_eq!(saga_refund_settled(&p, owed), Some(RefundStep::Done));
    }

    #[test]
    fn the_sagas_refund_is_done_when_it_succeeded() {
        let refunds = [entry("re_saga", 2500, Succeeded)];
        assert_eq!(refund_step(Succeeded, &refunds, 2500), RefundStep::Done);
    }

    #[test]
    fn a_failed_sagas_refund_is_done_once_its_give_back_succeeded() {
        let refunds = [entry("re_saga", 2500, Failed), entry("re_give_back", 2500, Succeeded)];
        assert_eq!(refund_step(Failed, &refunds, 2500), RefundStep::Done);
        // A give-back of only part of it does not settle the money.
        let part = [entry("re_saga", 2500, Failed), entry("re_give_back", 1000, Succeeded)];
        assert_eq!(refund_step(Failed, &part, 2500), RefundStep::Undone);
    }

    #[test]
    fn a_failed_sagas_refund_whose_give_back_is_pending_is_not_done() {
        let refunds = [entry("re_saga", 2500, Failed), entry("re_give_back", 2500, Pending)];
        assert_eq!(refund_step(Failed, &refunds, 2500), RefundStep::Undone);
        assert_eq!(refund_step(Canceled, &refunds[..1], 2500), RefundStep::Undone);
    }

    #[test]
    fn a_pending_sagas_refund_waits() {
        for own in [Pending, RequiresAction] {
            let refunds = [entry("re_saga", 2500, own)];
            assert_eq!(refund_step(own, &refunds, 2500), RefundStep::Waiting);
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_none() {
        for s in RefundStatus::ALL {
            assert_eq!(RefundStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(RefundStatus::parse("refunded"), None);
    }

    #[test]
    fn failed_and_canceled_are_final_and_a_success_can_still_fail() {
        for next in RefundStatus::ALL {
            assert!(!Failed.can_move_to(next) && !Canceled.can_move_to(next));
            assert_eq!(Succeeded.can_move_to(next), next.is_undone(), "succeeded -> {next}");
            assert_eq!(Pending.can_move_to(next), next != Pending);
        }
    }

    #[test]
    fn totals_count_succeeded_and_pending_apart_and_failed_not_at_all() {
        let e = |id: &str, amount, status| RefundEntry {
            refund_id: id.into(),
            amount_minor: amount,
            status,
        };
        let t = RefundTotals::of(&[
            e("re_1", 100, Succeeded),
            e("re_2", 200, Pending),
            e("re_3", 400, Failed),
            e("re_4", 50, RequiresAction),
            e("re_5", 7, Canceled),
        ]);
        assert_eq!(
            t,
            RefundTotals {
                succeeded: 100,
                pending: 250
            }
        );
        assert_eq!(t.outstanding(), 350);
    }
}
