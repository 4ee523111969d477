//! The decision on one refund report ([`Outcome::Refund`](crate::Outcome::Refund)): a refund returns money
//! only when the PSP says `succeeded`; a pending one is recorded and changes nothing else; a failed or
//! canceled one (also after `succeeded`) puts the money back with us, takes a `refunded` payment back to
//! `captured` and leaves a give-back for recovery. The sum of the refunds not undone never exceeds the
//! capture.

use super::{ignore, Change, Decision, DeferReason, IgnoreReason};
use crate::event::EventKind;
use crate::observation::RefundReport;
use crate::payment::{Payment, StrayCapture};
use crate::refund::{GiveBack, RefundEntry, RefundStatus, RefundTotals, MAX_GIVE_BACKS, MAX_REFUNDS_KEPT};
use crate::status::PaymentStatus::*;

/// What `report` does to `current` (see the module doc).
pub(super) fn on_refund(current: &Payment, report: &RefundReport) -> Result<Change, Decision> {
    let new = &report.refund;
    // The answer to the give-back due ends it, whatever it says: pending or succeeded, the money is on its
    // way; failed (or refused for good by the PSP, recorded so), that attempt is spent and its failure is the
    // next give-back's (or, past the bound, a person's): never the same give-back again.
    let ends_give_back =
        report.answers_give_back.is_some() && report.answers_give_back == current.give_back.map(|g| g.failure);
    let known = current.refunds.iter().find(|r| r.refund_id == new.refund_id);
    match known {
        Some(k) if k == new && !ends_give_back => return ignore(IgnoreReason::NoOp),
        Some(k) if k.status != new.status && !k.status.can_move_to(new.status) => return ignore(IgnoreReason::Stale),
        None if current.refunds.len() >= MAX_REFUNDS_KEPT => {
            return Ok(Change::Anomaly(format!(
                "more than {MAX_REFUNDS_KEPT} refunds on one payment"
            )))
        }
        _ => {}
    }
    match current.status {
        Captured | Refunded => {}
        Failed if current.stray_capture.is_some() => {}
        Failed => return Ok(Change::Anomaly("refund on a failed payment".into())),
        // A refund object does not prove the capture; the capture's own news comes first.
        _ => return Err(Decision::Defer(DeferReason::RefundBeforeCapture)),
    }
    let mut refunds = current.refunds.clone();
    match refunds.iter_mut().find(|r| r.refund_id == new.refund_id) {
        Some(entry) => entry.clone_from(new),
        None => refunds.push(new.clone()),
    }
    let asked = RefundTotals::of(&refunds).outstanding();
    let amount = current.money.amount_minor();
    if asked > amount {
        return Ok(Change::Anomaly(format!(
            "refunds of {asked} exceed the payment amount {amount}"
        )));
    }
    Ok(Change::Refund {
        refunds,
        report: report.clone(),
        ends_give_back,
    })
}

/// Records the refund on `next`: the refunds and the running total of the succeeded ones, the status that
/// total means, and for a failed refund the failure count and the give-back. Returns the event's kind and
/// reason.
pub(super) fn record_refund(
    next: &mut Payment,
    refunds: Vec<RefundEntry>,
    report: &RefundReport,
    ends_give_back: bool,
) -> (EventKind, Option<String>) {
    if ends_give_back {
        next.give_back = None;
    }
    next.refunds = refunds;
    // Refunds asked meanwhile (a give-back's own, its answer lost; one made in the Dashboard) leave less to
    // give back: recovery never asks the PSP for more than the charge has left.
    next.give_back = next.give_back.and_then(|g| {
        let amount_minor = g.amount_minor.min(unasked(next));
        (amount_minor > 0).then_some(GiveBack { amount_minor, ..g })
    });
    let succeeded = RefundTotals::of(&next.refunds).succeeded;
    next.refunded_minor = succeeded;
    let full = succeeded == next.money.amount_minor();
    match next.stray_capture {
        Some(stray) if next.status == Failed => {
            next.stray_capture = Some(StrayCapture {
                refunded: full,
                ..stray
            })
        }
        _ => next.status = if full { Refunded } else { Captured },
    }
    let entry = &report.refund;
    let what = format!("refund {} of {} {}", entry.refund_id, entry.amount_minor, entry.status);
    match entry.status {
        RefundStatus::Succeeded if full => (EventKind::PaymentRefunded, Some(what)),
        RefundStatus::Succeeded => (EventKind::RefundRecorded, Some(what)),
        s if s.is_pending() => (EventKind::RefundPending, Some(what)),
        _ => (EventKind::RefundFailed, Some(record_failure(next, entry, report, what))),
    }
}

/// A refund that will not return its money: counted, and given back again while the failures stay within
/// [`MAX_GIVE_BACKS`] (a further one only alarms, for an operator, and ends any give-back still due). A give-back not yet made takes this
/// failure's amount too, under this failure's number, never more than what no other refund asks back: the
/// failed refund may be that give-back's own (its answer lost, its failure heard first), whose money is
/// already counted.
fn record_failure(next: &mut Payment, entry: &RefundEntry, report: &RefundReport, what: String) -> String {
    next.refund_failures = next.refund_failures.saturating_add(1);
    let failure = next.refund_failures;
    let why = report.failure_reason.as_deref().unwrap_or("no reason given");
    if failure > MAX_GIVE_BACKS {
        // Past the bound nothing is given back again, not even a give-back still due: its attempt may have
        // been made with its answer lost, and its key (Stripe keeps one a day) made again later would be one
        // refund more than the bound (found by the protocol model, `refund_owner`).
        next.give_back = None;
        return format!("{what} ({why}); {failure} refunds failed: not given back again, for an operator");
    }
    let earlier = next.give_back.map_or(0, |g| g.amount_minor);
    let amount = earlier.saturating_add(entry.amount_minor).min(unasked(next));
    if amount == 0 {
        next.give_back = None;
        return format!("{what} ({why}); nothing left to give back (other refunds ask it all)");
    }
    next.give_back = Some(GiveBack {
        failure,
        amount_minor: amount,
    });
    format!("{what} ({why}); to be given back again (failure {failure})")
}

/// What no refund succeeded or pending asks back: the most a give-back may ask.
fn unasked(p: &Payment) -> u64 {
    p.money
        .amount_minor()
        .saturating_sub(RefundTotals::of(&p.refunds).outstanding())
}

#[cfg(test)]
// Tests count versions freely.
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use crate::event::EventKind::{self, *};
    use crate::finalize::{decide, Decision, DeferReason, IgnoreReason};
    use crate::fixtures::*;
    use crate::observation::{Channel, Outcome};
    use crate::payment::Payment;
    use crate::refund::{GiveBack, RefundStatus::*, MAX_GIVE_BACKS};
    use crate::status::PaymentStatus::{self, Captured, Refunded};
    use crate::ClientView;

    const NOW: i64 = 1_700_000_100_000;

    fn apply(p: &Payment, outcome: Outcome) -> (Payment, EventKind, crate::PaymentEvent) {
        match decide(p, &observe(Channel::Webhook, outcome), NOW) {
            Decision::Apply(t) => {
                assert_eq!(
                    t.payment.version,
                    p.version + 1,
                    "every change is a new version and event"
                );
                (t.payment, t.event.kind, t.event)
            }
            other => panic!("expected an apply, got {other:?}"),
        }
    }

    fn captured() -> Payment {
        apply(&payment("pay_r"), Outcome::Succeeded).0
    }

    fn state(p: &Payment) -> (PaymentStatus, u64, bool) {
        (p.status, p.refunded_minor, p.is_open())
    }

    #[test]
    fn a_pending_refund_is_recorded_and_the_payment_is_refunded_only_when_it_succeeds() {
        let (pending, kind, event) = apply(&captured(), refund("re_1", 1000, Pending));
        assert_eq!(kind, RefundPending);
        assert_eq!(
            state(&pending),
            (Captured, 0, true),
            "not refunded yet; open so recovery reads it again"
        );
        assert_eq!(
            event.refund.as_ref().map(|r| (r.amount_minor, r.status)),
            Some((1000, Pending))
        );
        let view = serde_json::to_value(ClientView::from(&pending)).unwrap();
        assert_eq!(
            (view["status"].as_str(), view["refund_pending_minor"].as_u64()),
            (Some("captured"), Some(1000))
        );

        let requires_action = apply(&captured(), refund("re_1", 1000, RequiresAction));
        assert_eq!(
            (requires_action.1, requires_action.0.refunded_minor),
            (RefundPending, 0)
        );

        let (done, kind, event) = apply(&pending, refund("re_1", 1000, Succeeded));
        assert_eq!((kind, state(&done)), (PaymentRefunded, (Refunded, 1000, false)));
        assert_eq!(event.refunded_minor, 1000);
        assert_eq!(
            decide(&done, &observe(Channel::Webhook, refund("re_1", 1000, Succeeded)), NOW),
            Decision::Ignore(IgnoreReason::NoOp)
        );
        assert_eq!(
            decide(&done, &observe(Channel::Webhook, refund("re_1", 1000, Pending)), NOW),
            Decision::Ignore(IgnoreReason::Stale),
            "a late pending never undoes a success"
        );
    }

    #[test]
    fn partial_refunds_keep_each_amount_and_the_running_total_and_never_exceed_the_capture() {
        let (one, kind, e1) = apply(&captured(), refund("re_1", 300, Succeeded));
        assert_eq!((kind, state(&one)), (RefundRecorded, (Captured, 300, false)));
        assert_eq!((e1.refund.unwrap().amount_minor, e1.refunded_minor), (300, 300));
        let (two, _, _) = apply(&one, refund("re_2", 500, Pending));
        let (three, kind, e3) = apply(&two, refund("re_2", 500, Succeeded));
        assert_eq!((kind, state(&three)), (RefundRecorded, (Captured, 800, false)));
        assert_eq!((e3.refund.unwrap().amount_minor, e3.refunded_minor), (500, 800));
        let (over, kind, event) = apply(&three, refund("re_3", 201, Pending));
        assert_eq!((kind, state(&over)), (AnomalyRecorded, (Captured, 800, false)));
        assert!(
            event.reason.unwrap().contains("exceed"),
            "pending refunds count toward the capture"
        );
        assert!(over.refunds.iter().all(|r| r.refund_id != "re_3"), "never recorded");
        let (full, kind, _) = apply(&three, refund("re_3", 200, Succeeded));
        assert_eq!((kind, state(&full)), (PaymentRefunded, (Refunded, 1000, false)));
    }

    #[test]
    fn a_refund_failing_after_success_reopens_the_money_question_as_a_new_event() {
        let (refunded, _, _) = apply(&captured(), refund("re_1", 1000, Succeeded));
        // Invariant 2: the closed payment changes only by the PSP's report, as a new event.
        let (failed, kind, event) = apply(&refunded, refund("re_1", 1000, Failed));
        assert_eq!((kind, state(&failed)), (RefundFailed, (Captured, 0, true)));
        assert_eq!(event.previous_status, Some(Refunded));
        assert!(event.reason.as_deref().unwrap().contains("expired_or_canceled_card"));
        assert_eq!(
            failed.give_back,
            Some(GiveBack {
                failure: 1,
                amount_minor: 1000
            })
        );
        let view = serde_json::to_value(ClientView::from(&failed)).unwrap();
        assert_eq!(view["refunds_failed"].as_u64(), Some(1));
        assert_eq!(
            decide(
                &failed,
                &observe(Channel::Webhook, refund("re_1", 1000, Succeeded)),
                NOW
            ),
            Decision::Ignore(IgnoreReason::Stale),
            "failed is final"
        );
        let (canceled, kind, _) = apply(
            &apply(&captured(), refund("re_1", 400, Pending)).0,
            refund("re_1", 400, Canceled),
        );
        assert_eq!((kind, state(&canceled)), (RefundFailed, (Captured, 0, true)));
    }

    #[test]
    fn recovery_answer_ends_the_give_back_once_and_failures_beyond_the_bound_only_alarm() {
        let mut p = apply(
            &apply(&captured(), refund("re_1", 1000, Pending)).0,
            refund("re_1", 1000, Failed),
        )
        .0;
        for n in 1..=MAX_GIVE_BACKS + 1 {
            let due = p.give_back;
            let id = format!("re_retry_{n}");
            let mut answer = refund(&id, 1000, Pending);
            if let Outcome::Refund(r) = &mut answer {
                r.answers_give_back = due.map(|g| g.failure);
            }
            let (answered, kind, _) = match decide(&p, &observe(Channel::Recovery, answer), NOW) {
                Decision::Apply(t) => (t.payment, t.event.kind, ()),
                other => panic!("{other:?}"),
            };
            assert_eq!((kind, answered.give_back), (RefundPending, None));
            p = apply(&answered, refund(&id, 1000, Failed)).0;
            assert_eq!(p.refund_failures, n + 1);
            assert_eq!(p.give_back.is_some(), n < MAX_GIVE_BACKS, "failure {}", n + 1);
        }
        // After the bound nothing is given back again, and the payment stays open for an operator (listed,
        // alarmed) instead of leaving the index with the money still ours.
        assert_eq!(p.give_back, None);
        assert!(p.refund_for_operator() && p.is_open(), "{p:?}");
        // The operator refunds by hand at the PSP: its success ends the question, and the payment closes.
        let (done, kind, _) = apply(&p, refund("re_by_hand", 1000, Succeeded));
        assert_eq!(kind, PaymentRefunded);
        assert!(!done.refund_for_operator() && !done.is_open(), "{done:?}");
    }

    #[test]
    fn a_give_back_whose_own_refund_fails_first_gives_the_same_money_back_once() {
        let p = apply(&captured(), refund("re_1", 1000, Failed)).0;
        assert_eq!(p.give_back.map(|g| (g.failure, g.amount_minor)), Some((1, 1000)));
        // Recovery's refund for failure 1 was made but its answer lost; the PSP reports it pending (the money
        // is on its way: nothing left to give back), then failed.
        let pending = apply(&p, refund("re_g1", 1000, Pending)).0;
        assert_eq!(pending.give_back, None);
        let (again, kind, _) = apply(&pending, refund("re_g1", 1000, Failed));
        assert_eq!(kind, RefundFailed);
        assert_eq!(
            again.give_back.map(|g| (g.failure, g.amount_minor)),
            Some((2, 1000)),
            "the capture once, not 2000"
        );
        // Two partial refunds failing before any give-back: both amounts.
        let (one, _, _) = apply(&captured(), refund("re_a", 300, Failed));
        let (two, _, _) = apply(&one, refund("re_b", 200, Failed));
        assert_eq!(two.give_back.map(|g| (g.failure, g.amount_minor)), Some((2, 500)));
        // Other refunds asking back all the rest: nothing left to give back.
        let (part, _, _) = apply(&captured(), refund("re_x", 400, Pending));
        let (rest, _, _) = apply(&part, refund("re_y", 600, Succeeded));
        let (failed, kind, _) = apply(&rest, refund("re_x", 400, Failed));
        assert_eq!(
            (kind, failed.give_back),
            (
                RefundFailed,
                Some(GiveBack {
                    failure: 1,
                    amount_minor: 400
                })
            )
        );
        let (all, _, _) = apply(&failed, refund("re_z", 400, Succeeded));
        assert_eq!((all.status, all.give_back, all.is_open()), (Refunded, None, false));
    }

    #[test]
    fn a_refund_before_the_capture_waits_and_one_on_a_failed_payment_is_an_anomaly() {
        assert_eq!(
            decide(
                &payment("pay_r"),
                &observe(Channel::Webhook, refund("re_1", 10, Pending)),
                NOW
            ),
            Decision::Defer(DeferReason::RefundBeforeCapture)
        );
        let failed_payment = apply(&payment("pay_r"), failed()).0;
        assert_eq!(apply(&failed_payment, refund("re_1", 10, Succeeded)).1, AnomalyRecorded);
    }

    #[test]
    fn once_refunds_are_reported_one_by_one_a_cumulative_total_decides_nothing() {
        let (pending, _, _) = apply(&captured(), refund("re_1", 1000, Pending));
        assert_eq!(
            decide(&pending, &observe(Channel::Webhook, refunded(1000, true)), NOW),
            Decision::Ignore(IgnoreReason::NoOp),
            "charge.refunded's total counts the pending refund too"
        );
        // A total applied first (no refund heard of yet) is corrected by the refund's own report.
        let (early, _, _) = apply(&captured(), refunded(1000, true));
        assert_eq!(early.status, Refunded);
        let (corrected, kind, _) = apply(&early, refund("re_1", 1000, Pending));
        assert_eq!((kind, state(&corrected)), (RefundPending, (Captured, 0, true)));
    }
}
