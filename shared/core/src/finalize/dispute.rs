//! What a dispute report does to a payment. A dispute is about money taken: on a `captured` or `refunded`
//! payment (or a failed one that took stray money) each new fact is a new event and the status stays as it
//! is; before the capture is known the report waits for it (the PSP retries), and on a payment that took no
//! money it is an anomaly. Which facts are new is [`Dispute::after`]'s to say.

use super::{ignore, Change, Decision, DeferReason, IgnoreReason};
use crate::dispute::{Dispute, DisputeReport, Unchanged};
use crate::event::EventKind;
use crate::payment::Payment;
use crate::status::PaymentStatus::*;

/// The change `report` makes to `current`.
pub(super) fn on_dispute(current: &Payment, report: &DisputeReport) -> Result<Change, Decision> {
    match current.status {
        Captured | Refunded => {}
        Failed if current.stray_capture.is_some() => {}
        Failed => return Ok(Change::Anomaly("dispute on a payment that took no money".into())),
        // An authorization took no money yet: a dispute of it waits for the capture, as before one.
        Pending | RequiresAction | Processing | AttemptFailed | Authorized => {
            return Err(Decision::Defer(DeferReason::DisputeBeforeCapture))
        }
    }
    match Dispute::after(current.dispute.as_ref(), report) {
        Ok((dispute, kind)) => Ok(Change::Dispute(Box::new(dispute), kind)),
        Err(Unchanged::NoOp) => ignore(IgnoreReason::NoOp),
        Err(Unchanged::Stale) => ignore(IgnoreReason::Stale),
        Err(Unchanged::OtherDispute(reason)) => Ok(Change::Refused(reason)),
    }
}

/// Holds the dispute on the payment (its status unchanged); the event's reason says where the dispute stands.
pub(super) fn record_dispute(next: &mut Payment, dispute: Dispute, kind: EventKind) -> (EventKind, Option<String>) {
    let reason = dispute.summary();
    next.dispute = Some(dispute);
    (kind, Some(reason))
}

#[cfg(test)]
// Tests count versions freely (clippy.toml lets tests unwrap, expect, panic and index).
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use crate::dispute::{DisputeFact, DisputeReport, DisputeStatus};
    use crate::event::EventKind;
    use crate::finalize::{decide, Decision, DeferReason, IgnoreReason};
    use crate::fixtures::{failed, payment, refunded, webhook};
    use crate::ids::DisputeId;
    use crate::observation::Outcome;
    use crate::payment::Payment;
    use crate::status::PaymentStatus;

    const NOW: i64 = 1_700_000_100_000;

    fn dispute(status: DisputeStatus, fact: DisputeFact) -> Outcome {
        Outcome::Dispute(DisputeReport {
            id: DisputeId::parse("du_1").unwrap(),
            status,
            amount_minor: 1000,
            fact,
        })
    }

    /// `current` after the event `id` reporting `outcome`, which must apply.
    fn applied(current: &Payment, id: &str, outcome: Outcome) -> (Payment, EventKind) {
        match decide(current, &webhook(id, NOW, outcome), NOW) {
            Decision::Apply(t) => {
                assert_eq!(t.payment.version, current.version + 1);
                assert_eq!(t.event.dispute, t.payment.dispute, "the event carries the dispute");
                (t.payment, t.event.kind)
            }
            other => panic!("{id} not applied: {other:?}"),
        }
    }

    fn captured() -> Payment {
        applied(&payment("pay_d"), "evt_paid", Outcome::Succeeded).0
    }

    #[test]
    fn every_dispute_fact_on_a_captured_payment_is_a_new_event_and_the_status_stays() {
        use DisputeFact::*;
        use DisputeStatus::*;
        let steps = [
            ("evt_c", dispute(NeedsResponse, Created), EventKind::DisputeOpened),
            (
                "evt_w",
                dispute(NeedsResponse, FundsWithdrawn),
                EventKind::DisputeFundsWithdrawn,
            ),
            ("evt_u", dispute(UnderReview, Updated), EventKind::DisputeUpdated),
            ("evt_x", dispute(Won, Closed), EventKind::DisputeWon),
            (
                "evt_r",
                dispute(Won, FundsReinstated),
                EventKind::DisputeFundsReinstated,
            ),
        ];
        let mut p = captured();
        for (id, outcome, kind) in steps {
            let (next, got) = applied(&p, id, outcome);
            assert_eq!((got, next.status), (kind, PaymentStatus::Captured), "{id}");
            p = next;
        }
        let held = p.dispute.clone().unwrap();
        assert_eq!(
            (held.status, held.funds_withdrawn, held.funds_reinstated),
            (Won, true, true)
        );
    }

    #[test]
    fn a_dispute_on_a_refunded_payment_is_recorded_and_lost_closes_it() {
        let (refunded_payment, _) = applied(&captured(), "evt_ref", refunded(1000, true));
        let (p, kind) = applied(
            &refunded_payment,
            "evt_c",
            dispute(DisputeStatus::NeedsResponse, DisputeFact::Created),
        );
        assert_eq!((kind, p.status), (EventKind::DisputeOpened, PaymentStatus::Refunded));
        let (p, kind) = applied(&p, "evt_l", dispute(DisputeStatus::Lost, DisputeFact::Closed));
        assert_eq!((kind, p.status), (EventKind::DisputeLost, PaymentStatus::Refunded));
    }

    #[test]
    fn duplicates_and_repeated_facts_change_nothing() {
        let created = dispute(DisputeStatus::NeedsResponse, DisputeFact::Created);
        let (p, _) = applied(&captured(), "evt_c", created.clone());
        assert_eq!(
            decide(&p, &webhook("evt_c", NOW, created.clone()), NOW),
            Decision::Ignore(IgnoreReason::Duplicate)
        );
        // The same fact under another event id (Stripe's resend): no second event.
        assert_eq!(
            decide(&p, &webhook("evt_c2", NOW, created), NOW),
            Decision::Ignore(IgnoreReason::NoOp)
        );
        let (closed, _) = applied(&p, "evt_x", dispute(DisputeStatus::Lost, DisputeFact::Closed));
        assert_eq!(
            decide(
                &closed,
                &webhook(
                    "evt_late",
                    NOW,
                    dispute(DisputeStatus::UnderReview, DisputeFact::Updated)
                ),
                NOW
            ),
            Decision::Ignore(IgnoreReason::Stale)
        );
    }

    #[test]
    fn a_dispute_before_the_capture_waits_and_one_on_no_money_is_an_anomaly() {
        let created = || dispute(DisputeStatus::NeedsResponse, DisputeFact::Created);
        assert_eq!(
            decide(&payment("pay_p"), &webhook("evt_c", NOW, created()), NOW),
            Decision::Defer(DeferReason::DisputeBeforeCapture)
        );
        let (failed_payment, _) = applied(&payment("pay_f"), "evt_f", failed());
        let (p, kind) = applied(&failed_payment, "evt_c", created());
        assert_eq!(
            (kind, p.status, p.anomalies),
            (EventKind::AnomalyRecorded, PaymentStatus::Failed, 1)
        );
        assert_eq!(p.dispute, None);
    }

    #[test]
    fn another_dispute_on_the_same_payment_is_refused() {
        let (p, _) = applied(
            &captured(),
            "evt_c",
            dispute(DisputeStatus::NeedsResponse, DisputeFact::Created),
        );
        let other = Outcome::Dispute(DisputeReport {
            id: DisputeId::parse("du_2").unwrap(),
            status: DisputeStatus::NeedsResponse,
            amount_minor: 1000,
            fact: DisputeFact::Created,
        });
        match decide(&p, &webhook("evt_o", NOW, other), NOW) {
            Decision::Apply(t) => {
                assert_eq!(t.event.kind, EventKind::AnomalyRecorded);
                assert!(t.refused.is_some());
                assert_eq!(t.payment.dispute, p.dispute);
            }
            other => panic!("{other:?}"),
        }
    }
}
