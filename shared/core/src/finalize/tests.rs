//! Every row of the transition table, plus the property that no sequence of observations breaks
//! invariants 1 to 3 of DESIGN.md.

use super::*;
use crate::client_view::ClientView;
use crate::fixtures::*;
use crate::observation::{Channel, Observation, Outcome};
use crate::payment::Payment;
use crate::status::PaymentStatus;
use proptest::prelude::*;

const NOW: i64 = 1_700_000_100_000;

/// A payment in `status`, reached the way production reaches it.
fn payment_in(status: PaymentStatus) -> Payment {
    let p = payment("pay_t");
    let steps: Vec<Outcome> = match status {
        PaymentStatus::Pending => vec![],
        PaymentStatus::RequiresAction => vec![requires_action()],
        PaymentStatus::Processing => vec![Outcome::Processing],
        PaymentStatus::AttemptFailed => vec![attempt_failed()],
        PaymentStatus::Authorized => vec![authorized(None)],
        PaymentStatus::Captured => vec![requires_action(), Outcome::Succeeded],
        PaymentStatus::Failed => vec![requires_action(), failed()],
        PaymentStatus::Refunded => vec![Outcome::Succeeded, refunded(1000, true)],
    };
    let p = steps.into_iter().fold(p, |p, outcome| {
        match decide(&p, &observe(Channel::Sync, outcome), NOW) {
            Decision::Apply(t) => t.payment,
            other => panic!("setup step not applied: {other:?}"),
        }
    });
    assert_eq!(p.status, status);
    p
}

#[derive(Debug, PartialEq)]
enum Expect {
    To(PaymentStatus, EventKind),
    Ignore(IgnoreReason),
    Defer(DeferReason),
}
use Expect::*;
use IgnoreReason::*;
use PaymentStatus as S;

fn run(status: PaymentStatus, outcome: Outcome) -> Expect {
    let current = payment_in(status);
    match decide(&current, &observe(Channel::Webhook, outcome), NOW) {
        Decision::Apply(t) => {
            assert_eq!(t.payment.version, current.version + 1);
            assert_eq!(t.event.version, t.payment.version);
            To(t.payment.status, t.event.kind)
        }
        Decision::Ignore(r) => Ignore(r),
        Decision::Defer(r) => Defer(r),
    }
}

#[test]
fn transition_table() {
    let other_action = || {
        Outcome::RequiresAction(
            crate::payment::CustomerAction::new(
                None,
                Some(crate::secret::RedirectUrl::parse("https://bank.example/other").unwrap()),
            )
            .unwrap(),
        )
    };
    let rows: Vec<(PaymentStatus, Outcome, Expect)> = vec![
        // from pending
        (
            S::Pending,
            requires_action(),
            To(S::RequiresAction, EventKind::ActionRequired),
        ),
        (
            S::Pending,
            Outcome::Processing,
            To(S::Processing, EventKind::ProcessingStarted),
        ),
        (
            S::Pending,
            attempt_failed(),
            To(S::AttemptFailed, EventKind::AttemptFailed),
        ),
        (
            S::Pending,
            Outcome::Succeeded,
            To(S::Captured, EventKind::PaymentCaptured),
        ),
        (S::Pending, failed(), To(S::Failed, EventKind::PaymentFailed)),
        (
            S::Pending,
            refunded(400, false),
            Defer(DeferReason::RefundBeforeCapture),
        ),
        (
            S::Pending,
            refunded(400, true),
            To(S::Captured, EventKind::RefundRecorded),
        ),
        (
            S::Pending,
            refunded(1000, true),
            To(S::Refunded, EventKind::PaymentRefunded),
        ),
        // from requires_action
        (S::RequiresAction, requires_action(), Ignore(NoOp)),
        (
            S::RequiresAction,
            other_action(),
            To(S::RequiresAction, EventKind::ActionRequired),
        ),
        (
            S::RequiresAction,
            Outcome::Processing,
            To(S::Processing, EventKind::ProcessingStarted),
        ),
        (
            S::RequiresAction,
            attempt_failed(),
            To(S::AttemptFailed, EventKind::AttemptFailed),
        ),
        (
            S::RequiresAction,
            Outcome::Succeeded,
            To(S::Captured, EventKind::PaymentCaptured),
        ),
        (S::RequiresAction, failed(), To(S::Failed, EventKind::PaymentFailed)),
        (
            S::RequiresAction,
            refunded(1000, false),
            Defer(DeferReason::RefundBeforeCapture),
        ),
        // from processing
        (S::Processing, requires_action(), Ignore(Stale)),
        (S::Processing, Outcome::Processing, Ignore(NoOp)),
        (
            S::Processing,
            attempt_failed(),
            To(S::AttemptFailed, EventKind::AttemptFailed),
        ),
        (
            S::Processing,
            Outcome::Succeeded,
            To(S::Captured, EventKind::PaymentCaptured),
        ),
        (S::Processing, failed(), To(S::Failed, EventKind::PaymentFailed)),
        (
            S::Processing,
            refunded(1000, true),
            To(S::Refunded, EventKind::PaymentRefunded),
        ),
        // from attempt_failed
        (
            S::AttemptFailed,
            requires_action(),
            To(S::RequiresAction, EventKind::ActionRequired),
        ),
        (
            S::AttemptFailed,
            Outcome::Processing,
            To(S::Processing, EventKind::ProcessingStarted),
        ),
        (S::AttemptFailed, attempt_failed(), Ignore(NoOp)),
        (
            S::AttemptFailed,
            Outcome::AttemptFailed {
                reason: "insufficient_funds".into(),
                retry_token: None,
            },
            To(S::AttemptFailed, EventKind::AttemptFailed),
        ),
        (
            S::AttemptFailed,
            Outcome::Succeeded,
            To(S::Captured, EventKind::PaymentCaptured),
        ),
        (S::AttemptFailed, failed(), To(S::Failed, EventKind::PaymentFailed)),
        // from captured: only refunds move it; late news is stale
        (S::Captured, requires_action(), Ignore(Stale)),
        (S::Captured, Outcome::Processing, Ignore(Stale)),
        (S::Captured, attempt_failed(), Ignore(Stale)),
        (S::Captured, Outcome::Succeeded, Ignore(NoOp)),
        (S::Captured, failed(), Ignore(Stale)),
        (
            S::Captured,
            refunded(300, false),
            To(S::Captured, EventKind::RefundRecorded),
        ),
        (
            S::Captured,
            refunded(1000, false),
            To(S::Refunded, EventKind::PaymentRefunded),
        ),
        (
            S::Captured,
            refunded(1001, false),
            To(S::Captured, EventKind::AnomalyRecorded),
        ),
        // from failed: late evidence of money is an anomaly, everything else is stale or a no-op
        (S::Failed, requires_action(), Ignore(Stale)),
        (S::Failed, Outcome::Processing, Ignore(Stale)),
        (S::Failed, attempt_failed(), Ignore(Stale)),
        (S::Failed, Outcome::Succeeded, To(S::Failed, EventKind::AnomalyRecorded)),
        (S::Failed, failed(), Ignore(NoOp)),
        (
            S::Failed,
            refunded(1000, true),
            To(S::Failed, EventKind::AnomalyRecorded),
        ),
        // from refunded: nothing moves it
        (S::Refunded, requires_action(), Ignore(Stale)),
        (S::Refunded, Outcome::Processing, Ignore(Stale)),
        (S::Refunded, attempt_failed(), Ignore(Stale)),
        (S::Refunded, Outcome::Succeeded, Ignore(Stale)),
        (S::Refunded, failed(), Ignore(Stale)),
        (S::Refunded, refunded(1000, true), Ignore(NoOp)),
        (S::Refunded, refunded(500, true), Ignore(Stale)),
        // an anomaly reported by a path is recorded in any status and changes no status
        (
            S::Pending,
            Outcome::Anomaly {
                reason: "amount mismatch".into(),
            },
            To(S::Pending, EventKind::AnomalyRecorded),
        ),
        (
            S::Captured,
            Outcome::Anomaly {
                reason: "currency mismatch".into(),
            },
            To(S::Captured, EventKind::AnomalyRecorded),
        ),
    ];
    for (from, outcome, expected) in rows {
        let label = format!("{from} + {outcome:?}");
        assert_eq!(run(from, outcome), expected, "{label}");
    }
}

fn authorized(capture_before_ms: Option<i64>) -> Outcome {
    Outcome::Authorized { capture_before_ms }
}

/// Manual capture (issue 34): an authorization is recorded as `authorized`, not as paid; only the capture
/// (captured) or its cancel or lapse (failed) moves it on, and late news of the way there is stale.
#[test]
fn an_authorization_is_held_until_it_is_captured_or_released() {
    let to_authorized = || To(S::Authorized, EventKind::PaymentAuthorized);
    let rows: Vec<(PaymentStatus, Outcome, Expect)> = vec![
        (S::Pending, authorized(Some(NOW)), to_authorized()),
        (S::RequiresAction, authorized(None), to_authorized()),
        (S::Processing, authorized(None), to_authorized()),
        (S::AttemptFailed, authorized(None), to_authorized()),
        (S::Authorized, authorized(None), Ignore(NoOp)),
        // The deadline learned later (a read with the charge after a webhook without it) is recorded.
        (S::Authorized, authorized(Some(NOW)), to_authorized()),
        (
            S::Authorized,
            Outcome::Succeeded,
            To(S::Captured, EventKind::PaymentCaptured),
        ),
        (S::Authorized, failed(), To(S::Failed, EventKind::PaymentFailed)),
        (S::Authorized, Outcome::Processing, Ignore(Stale)),
        (S::Authorized, requires_action(), Ignore(Stale)),
        (S::Authorized, attempt_failed(), Ignore(Stale)),
        (
            S::Authorized,
            refunded(1000, false),
            Defer(DeferReason::RefundBeforeCapture),
        ),
        (S::Captured, authorized(Some(NOW)), Ignore(Stale)),
        (S::Failed, authorized(Some(NOW)), Ignore(Stale)),
        (S::Refunded, authorized(None), Ignore(Stale)),
    ];
    for (from, outcome, expected) in rows {
        let label = format!("{from} + {outcome:?}");
        assert_eq!(run(from, outcome), expected, "{label}");
    }
    let held = payment_in(S::Authorized);
    let Decision::Apply(t) = decide(&held, &observe(Channel::Recovery, authorized(Some(NOW + 7))), NOW) else {
        panic!("the deadline is recorded");
    };
    assert_eq!(
        (t.payment.status, t.payment.capture_before_ms),
        (S::Authorized, Some(NOW + 7))
    );
    assert!(!t.payment.status.is_terminal(), "an authorization is not the end");
    let Decision::Apply(t) = decide(&t.payment, &observe(Channel::Webhook, Outcome::Succeeded), NOW) else {
        panic!("captured");
    };
    assert_eq!(t.payment.capture_before_ms, Some(NOW + 7), "kept for the record");
}

#[test]
fn partial_refunds_accumulate_and_reach_refunded_at_the_full_amount() {
    let p = payment_in(S::Captured);
    let Decision::Apply(t) = decide(&p, &observe(Channel::Webhook, refunded(300, false)), NOW) else {
        panic!()
    };
    assert_eq!((t.payment.status, t.payment.refunded_minor), (S::Captured, 300));
    // an older, smaller total arriving late is stale
    assert_eq!(
        decide(&t.payment, &observe(Channel::Webhook, refunded(200, false)), NOW),
        Decision::Ignore(Stale)
    );
    let Decision::Apply(t) = decide(&t.payment, &observe(Channel::Webhook, refunded(1000, false)), NOW) else {
        panic!()
    };
    assert_eq!((t.payment.status, t.payment.refunded_minor), (S::Refunded, 1000));
}

#[test]
fn money_taken_on_a_failed_payment_is_one_anomaly_whatever_reports_it_and_its_refund_is_recorded() {
    let failed = payment_in(S::Failed);
    let first = applied(&failed, &webhook("evt_s1", 5_000, Outcome::Succeeded));
    assert_eq!(
        (first.payment.status, first.event.kind),
        (S::Failed, EventKind::AnomalyRecorded)
    );
    assert_eq!(first.payment.refund_due(), Some(first.payment.anomalies));
    assert!(
        first.payment.is_open(),
        "a refund is due: recovery must find the payment"
    );
    // The same fact again, from any path (another event id, the sync answer, recovery): recorded once.
    for again in [
        webhook("evt_s2", 6_000, Outcome::Succeeded),
        observe(Channel::Sync, Outcome::Succeeded),
        observe(Channel::Recovery, Outcome::Succeeded),
    ] {
        assert_eq!(decide(&first.payment, &again, NOW), Decision::Ignore(NoOp));
    }
    // Part of it back, then all of it: recorded as refunds with the anomaly named; the payment stays failed.
    let part = applied(&first.payment, &observe(Channel::Recovery, refunded(400, true)));
    assert_eq!(
        (part.payment.status, part.event.kind),
        (S::Failed, EventKind::RefundRecorded)
    );
    assert!(part.payment.refund_due().is_some());
    let all = applied(&part.payment, &webhook("evt_r", 7_000, refunded(1000, true)));
    assert_eq!(
        (all.payment.status, all.event.kind),
        (S::Failed, EventKind::PaymentRefunded)
    );
    assert_eq!(all.payment.refunded_minor, 1000);
    assert!(all
        .event
        .reason
        .as_deref()
        .unwrap()
        .contains("after the payment failed"));
    assert_eq!((all.payment.refund_due(), all.payment.is_open()), (None, false));
    // Later reports of the same money change nothing.
    assert_eq!(
        decide(&all.payment, &observe(Channel::Recovery, refunded(1000, true)), NOW),
        Decision::Ignore(NoOp)
    );
    assert_eq!(
        decide(&all.payment, &observe(Channel::Sync, Outcome::Succeeded), NOW),
        Decision::Ignore(NoOp)
    );
    assert_eq!(all.payment.anomalies, first.payment.anomalies);
}

#[test]
fn the_same_psp_event_id_applies_once() {
    let p = payment("pay_d");
    let obs = webhook("evt_1", 10, Outcome::Processing);
    let Decision::Apply(t) = decide(&p, &obs, NOW) else {
        panic!()
    };
    assert_eq!(decide(&t.payment, &obs, NOW), Decision::Ignore(Duplicate));
    // even when the content would change the payment again
    let again = webhook("evt_1", 10, Outcome::Succeeded);
    assert_eq!(decide(&t.payment, &again, NOW), Decision::Ignore(Duplicate));
}

#[test]
fn an_older_non_terminal_event_does_not_overwrite_a_newer_one() {
    let p = payment("pay_o");
    let Decision::Apply(t) = decide(&p, &webhook("evt_new", 2_000, attempt_failed()), NOW) else {
        panic!()
    };
    assert_eq!(
        decide(&t.payment, &webhook("evt_old", 1_000, requires_action()), NOW),
        Decision::Ignore(Stale)
    );
    // terminal evidence is applied whatever its time
    let Decision::Apply(t) = decide(&t.payment, &webhook("evt_cap", 500, Outcome::Succeeded), NOW) else {
        panic!()
    };
    assert_eq!(t.payment.status, S::Captured);
}

#[test]
fn the_terminal_transition_removes_secrets_and_the_event_never_holds_them() {
    for outcome in [Outcome::Succeeded, failed(), refunded(1000, true)] {
        let p = payment_in(S::RequiresAction);
        assert!(p.action.is_some());
        let Decision::Apply(t) = decide(&p, &observe(Channel::Sync, outcome), NOW) else {
            panic!()
        };
        assert!(t.payment.action.is_none() && t.payment.retry_token.is_none());
        let json = serde_json::to_string(&t.event).unwrap();
        assert!(!contains_fixture_secret(&json), "{json}");
    }
    let p = payment_in(S::AttemptFailed);
    assert!(p.retry_token.is_some());
    let Decision::Apply(t) = decide(&p, &observe(Channel::Recovery, failed()), NOW) else {
        panic!()
    };
    assert!(t.payment.retry_token.is_none());
}

#[test]
fn client_view_offers_action_and_retry_only_while_open() {
    let view = ClientView::from(&payment_in(S::RequiresAction));
    assert!(view.carries_secret());
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["status"], "requires_action");
    assert_eq!(json["client_secret"], SECRET);
    assert_eq!(json["redirect_url"], REDIRECT);

    let retry = serde_json::to_value(ClientView::from(&payment_in(S::AttemptFailed))).unwrap();
    assert_eq!(retry["retry_token"], RETRY);
    assert_eq!(retry["decline_reason"], "card_declined");

    // Even a corrupted terminal item that still holds secrets yields a view without them.
    let mut leaked = payment_in(S::Captured);
    leaked.action = Some(action());
    let view = ClientView::from(&leaked);
    assert!(!view.carries_secret());
    assert!(!contains_fixture_secret(&serde_json::to_string(&view).unwrap()));
}

// ---- the property ---------------------------------------------------------------------------------------

fn arb_outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(requires_action()),
        Just(Outcome::Processing),
        Just(Outcome::Authorized {
            capture_before_ms: Some(NOW)
        }),
        Just(Outcome::Succeeded),
        Just(attempt_failed()),
        Just(Outcome::AttemptFailed {
            reason: "do_not_honor".into(),
            retry_token: None
        }),
        Just(failed()),
        (0u64..=1200, any::<bool>()).prop_map(|(t, p)| refunded(t, p)),
        Just(Outcome::Anomaly {
            reason: "mismatch".into()
        }),
    ]
}

fn arb_observation() -> impl Strategy<Value = Observation> {
    (
        prop_oneof![Just(Channel::Sync), Just(Channel::Webhook), Just(Channel::Recovery)],
        arb_outcome(),
        proptest::option::of((0u8..6, 0i64..10_000)),
    )
        .prop_map(|(path, outcome, event)| {
            let obs = observe(path, outcome);
            match (path, event) {
                (Channel::Webhook, Some((id, at))) => {
                    obs.with_event(crate::ids::PspEventId::parse(format!("evt_{id}")).unwrap(), at)
                }
                _ => obs,
            }
        })
}

fn reference(id: &str) -> crate::ids::PspReference {
    crate::ids::PspReference::parse(id).unwrap()
}

fn applied(current: &Payment, obs: &Observation) -> Transition {
    match decide(current, obs, NOW) {
        Decision::Apply(t) => *t,
        other => panic!("expected an apply, got {other:?}"),
    }
}

#[test]
fn an_observation_about_other_money_or_another_psp_payment_is_refused_and_binds_nothing() {
    let fresh = payment_in(S::Pending);
    let mut other_amount = webhook("evt_a", 5_000, Outcome::Succeeded);
    other_amount.claims.amount_minor = Some(999);
    other_amount.psp_reference = Some(reference("pi_A"));
    let t = applied(&fresh, &other_amount);
    assert_eq!(
        (t.payment.status, t.event.kind),
        (S::Pending, EventKind::AnomalyRecorded)
    );
    assert!(t.refused.as_deref().unwrap().contains("amount 999"));
    assert_eq!(
        t.payment.psp_reference, None,
        "a refused observation binds no PSP reference"
    );
    assert_eq!(t.payment.last_psp_event_at_ms, None, "nor moves the event clock");
    assert!(!t.payment.has_seen(&crate::ids::PspEventId::parse("evt_a").unwrap()));

    let mut other_currency = observe(Channel::Recovery, Outcome::Succeeded);
    other_currency.claims.currency = Some(crate::money::Currency::parse("USD").unwrap());
    assert!(applied(&fresh, &other_currency)
        .refused
        .unwrap()
        .contains("currency USD"));

    // Bound to pi_A by the first applied observation; news about pi_B is refused on every path, also
    // when the decision is taken again after a version conflict (decide checks, not the caller).
    let mut bind = observe(Channel::Sync, Outcome::Processing);
    bind.psp_reference = Some(reference("pi_A"));
    let bound = applied(&fresh, &bind).payment;
    assert_eq!(bound.psp_reference, Some(reference("pi_A")));
    for path in [Channel::Sync, Channel::Webhook, Channel::Recovery] {
        let mut other = observe(path, Outcome::Succeeded);
        other.psp_reference = Some(reference("pi_B"));
        let t = applied(&bound, &other);
        assert_eq!(t.payment.status, S::Processing, "{path}");
        assert!(t.refused.unwrap().contains("pi_B"), "{path}");
    }
    // The same news about the bound payment applies.
    let mut same = observe(Channel::Webhook, Outcome::Succeeded);
    same.psp_reference = Some(reference("pi_A"));
    same.claims.amount_minor = Some(bound.money.amount_minor());
    assert_eq!(applied(&bound, &same).payment.status, S::Captured);
}

#[test]
fn a_refused_event_does_not_shadow_the_real_one_with_the_same_id() {
    let fresh = payment_in(S::Pending);
    let mut forged = webhook("evt_1", 5_000, Outcome::Succeeded);
    forged.claims.amount_minor = Some(1);
    let after = applied(&fresh, &forged).payment;
    let real = webhook("evt_1", 5_000, Outcome::Succeeded);
    assert_eq!(applied(&after, &real).payment.status, S::Captured);
}

#[test]
fn a_refused_event_is_recorded_once_however_often_it_is_delivered() {
    let fresh = payment_in(S::Pending);
    // Refused by the payment (other money) and by the endpoint (the path's anomaly): each once per event id.
    let mut other_money = webhook("evt_m", 5_000, Outcome::Succeeded);
    other_money.claims.amount_minor = Some(1);
    let endpoint = webhook(
        "evt_e",
        5_000,
        Outcome::Anomaly {
            reason: "livemode".into(),
        },
    );
    for refused in [other_money, endpoint] {
        let first = applied(&fresh, &refused);
        assert_eq!(
            (first.event.kind, first.payment.anomalies),
            (EventKind::AnomalyRecorded, 1)
        );
        assert_eq!(
            decide(&first.payment, &refused, NOW),
            Decision::Ignore(Duplicate),
            "a redelivery"
        );
        // Another event with the same problem is news: recorded too.
        let mut other = refused.clone();
        other.psp_event_id = Some(crate::ids::PspEventId::parse("evt_other").unwrap());
        assert_eq!(applied(&first.payment, &other).payment.anomalies, 2);
        // Still no place in the dedup window: the real event with that id applies (another endpoint's).
        let real = webhook(
            refused.psp_event_id.as_ref().unwrap().as_str(),
            5_000,
            Outcome::Succeeded,
        );
        assert_eq!(applied(&first.payment, &real).payment.status, S::Captured);
    }
}

#[test]
fn recovery_gives_a_processing_payment_the_action_the_psp_asks_for_and_never_takes_one_away() {
    let processing = payment_in(S::Processing);
    assert_eq!(
        decide(&processing, &observe(Channel::Webhook, requires_action()), NOW),
        Decision::Ignore(Stale),
        "a webhook saying so is older news"
    );
    let t = applied(&processing, &observe(Channel::Recovery, requires_action()));
    assert_eq!(
        (t.payment.status, t.event.kind),
        (S::RequiresAction, EventKind::ActionRequired)
    );
    assert!(t.payment.action.is_some());

    for status in [S::RequiresAction, S::AttemptFailed] {
        let current = payment_in(status);
        assert_eq!(
            decide(&current, &observe(Channel::Recovery, Outcome::Processing), NOW),
            Decision::Ignore(NoOp),
            "{status}: the customer's action or retry stays"
        );
    }
    assert_eq!(
        applied(
            &payment_in(S::Pending),
            &observe(Channel::Recovery, Outcome::Processing)
        )
        .payment
        .status,
        S::Processing
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Invariants 1-3: versions are 1, 2, 3, ...; a terminal payment never becomes non-terminal; no view of a
    /// terminal payment carries a secret. Also: every applied move is in the transition table.
    #[test]
    fn any_sequence_of_observations_keeps_the_invariants(observations in proptest::collection::vec(arb_observation(), 1..40)) {
        let mut current = payment("pay_prop");
        let mut seen_terminal = false;
        for obs in &observations {
            match decide(&current, obs, NOW) {
                Decision::Apply(t) => {
                    prop_assert_eq!(t.payment.version, current.version + 1);
                    prop_assert_eq!(t.event.version, t.payment.version);
                    prop_assert_eq!(t.event.previous_status, Some(current.status));
                    let moved = t.payment.status != current.status;
                    prop_assert!(!moved || current.status.can_move_to(t.payment.status),
                        "{} -> {} is not in the table", current.status, t.payment.status);
                    if let Some(id) = &obs.psp_event_id {
                        // A refused observation takes no place in the dedup window; every other one does.
                        prop_assert_eq!(t.payment.has_seen(id), t.refused.is_none());
                    }
                    prop_assert!(!contains_fixture_secret(&serde_json::to_string(&t.event).unwrap()));
                    current = t.payment;
                }
                Decision::Ignore(_) | Decision::Defer(_) => {}
            }
            if seen_terminal {
                prop_assert!(current.status.is_terminal(), "terminal payment became {}", current.status);
            }
            seen_terminal |= current.status.is_terminal();
            if current.status.is_terminal() {
                prop_assert!(current.action.is_none() && current.retry_token.is_none());
                let view = ClientView::from(&current);
                prop_assert!(!view.carries_secret());
                prop_assert!(!contains_fixture_secret(&serde_json::to_string(&view).unwrap()));
            }
            prop_assert!(current.refunded_minor <= current.money.amount_minor());
        }
    }
}

/// Adyen's `CAPTURE_FAILED` after the capture: the payment keeps `captured` and is flagged (open for an
/// operator); the failure's redelivery changes nothing; Adyen's re-capture under the capture's own id is news
/// (the failure forgot it, with or without the payment's reference) and clears the flag.
#[test]
fn a_capture_failed_at_the_scheme_flags_the_captured_payment_until_a_new_capture() {
    let capture = "CAPTURE-true-8835511210681017-7914073381342284";
    let captured = applied(&payment("pay_cf"), &webhook(capture, 1_000, Outcome::Succeeded)).payment;
    let failure = Outcome::CaptureFailed {
        reason: "the capture failed at the card scheme".into(),
        capture_event: Some(crate::ids::PspEventId::parse("CAPTURE-true-8835511210681017").unwrap()),
    };
    let failed_at = webhook("CAPTURE_FAILED-true-8835511210681017", 2_000, failure.clone());
    let t = applied(&captured, &failed_at);
    assert_eq!(
        (t.payment.status, t.event.kind, t.event.capture_failed.as_deref()),
        (
            S::Captured,
            EventKind::CaptureFailed,
            Some("the capture failed at the card scheme")
        )
    );
    assert!(t.payment.capture_lost() && t.payment.is_open(), "{:?}", t.payment);
    assert!(!t.payment.has_seen(&crate::ids::PspEventId::parse(capture).unwrap()));
    assert_eq!(decide(&t.payment, &failed_at, NOW), Decision::Ignore(Duplicate));
    let again = webhook("CAPTURE_FAILED-true-other", 2_500, failure.clone());
    assert_eq!(decide(&t.payment, &again, NOW), Decision::Ignore(NoOp), "flagged once");

    let recaptured = applied(&t.payment, &webhook(capture, 3_000, Outcome::Succeeded));
    assert_eq!(
        (
            recaptured.payment.status,
            recaptured.event.kind,
            recaptured.payment.capture_failed.clone()
        ),
        (S::Captured, EventKind::PaymentCaptured, None)
    );
    assert!(!recaptured.payment.is_open());
    assert_eq!(
        decide(&recaptured.payment, &webhook(capture, 3_000, Outcome::Succeeded), NOW),
        Decision::Ignore(Duplicate)
    );
    // No money was to come on a failed payment: nothing to flag.
    assert_eq!(decide(&payment_in(S::Failed), &again, NOW), Decision::Ignore(NoOp));
}
