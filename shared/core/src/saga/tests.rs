use super::*;
use crate::fixtures;
use crate::status::PaymentStatus;
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;

fn order() -> OrderId {
    OrderId::parse("order-1").expect("valid id")
}

fn pay() -> PaymentId {
    PaymentId::parse("pay_1").expect("valid id")
}

fn started() -> Saga<Started> {
    Saga::begin(order(), fixtures::checkout(), T0, 60_000).0
}

fn charging() -> Saga<Charging> {
    let (s, _) = started().stock_reserved(T0 + 1);
    s.payment_created(pay(), T0 + 2).0
}

fn captured() -> Saga<PaymentCaptured> {
    let (s, _) = charging().payment_requested(Some(PspReference::parse("pi_1").expect("valid")), false, T0 + 2);
    s.payment_captured(PspReference::parse("pi_1").expect("valid"), T0 + 3)
        .0
}

fn reload<S>(saga: &Saga<S>) -> Loaded {
    Loaded::from_record(saga.record().clone()).expect("a record the transitions made loads")
}

#[test]
fn the_happy_path_logs_one_event_per_step_with_consecutive_versions() {
    let (s, e1) = Saga::begin(order(), fixtures::checkout(), T0, 60_000);
    let (s, e2) = s.stock_reserved(T0 + 1);
    let (s, e3) = s.payment_created(pay(), T0 + 2);
    assert_eq!(
        s.payment_id(),
        &pay(),
        "the payment is the saga's before the PSP is asked"
    );
    assert_eq!(reload(&s).next_step(), NextStep::Charge);
    let (s, e4) = s.payment_requested(Some(PspReference::parse("pi_1").expect("valid")), false, T0 + 2);
    let (s, e5) = s.payment_captured(PspReference::parse("pi_1").expect("valid"), T0 + 3);
    let (s, e6) = s.order_confirmed(T0 + 4);
    let kinds: Vec<_> = [&e1, &e2, &e3, &e4, &e5, &e6]
        .iter()
        .map(|e| (e.version, e.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (1, SagaEventKind::SagaStarted),
            (2, SagaEventKind::StockReserved),
            (3, SagaEventKind::PaymentCreated),
            (4, SagaEventKind::PaymentRequested),
            (5, SagaEventKind::PaymentCaptured),
            (6, SagaEventKind::OrderConfirmed)
        ]
    );
    assert_eq!(s.record().status, SagaStatus::Completed);
    assert_eq!(reload(&s).next_step(), NextStep::Done);
}

#[test]
fn a_failure_after_capture_refunds_before_releasing() {
    let (s, failed) = captured().confirmation_failed("order cancelled".into(), T0 + 5);
    assert_eq!(
        (failed.kind, failed.step),
        (SagaEventKind::StepFailed, Step::ConfirmOrder)
    );
    assert_eq!(reload(&s).next_step(), NextStep::RefundPayment);
    let (s, refunded) = s.refunded(2500, T0 + 6);
    assert_eq!(reload(&s).next_step(), NextStep::ReleaseStock);
    let (s, released) = s.stock_released(T0 + 7);
    assert_eq!(
        (refunded.kind, released.kind),
        (SagaEventKind::PaymentRefunded, SagaEventKind::StockReleased)
    );
    assert_eq!(s.record().status, SagaStatus::Compensated);
}

#[test]
fn a_refund_refused_for_a_dispute_releases_the_stock_and_ends_compensated_without_the_money() {
    assert_eq!(
        RefundImpossible::from_psp_code(Some("charge_disputed")),
        Some(RefundImpossible::Disputed)
    );
    for other in [None, Some("charge_already_refunded"), Some("resource_missing")] {
        assert_eq!(RefundImpossible::from_psp_code(other), None, "{other:?} is read back");
    }
    let (s, _) = captured().confirmation_failed("order cancelled".into(), T0 + 5);
    let (s, impossible) = s.refund_impossible(RefundImpossible::Disputed, T0 + 6);
    assert_eq!(
        (impossible.kind, impossible.detail.as_deref()),
        (SagaEventKind::RefundImpossible, Some("refund impossible: disputed"))
    );
    assert_eq!(reload(&s).next_step(), NextStep::ReleaseStock);
    let (s, _) = s.stock_released(T0 + 7);
    let r = s.record();
    assert_eq!(
        (r.status, r.captured, r.refunded_minor, r.refund_impossible.as_deref()),
        (SagaStatus::Compensated, true, 0, Some("refund impossible: disputed"))
    );
    assert_eq!(reload(&s).next_step(), NextStep::Done, "terminal: never refunded again");
}

#[test]
fn a_refund_impossible_is_accepted_only_where_a_refused_refund_leaves_it() {
    let (s, _) = captured().confirmation_failed("order cancelled".into(), T0 + 5);
    let (s, _) = s.refund_impossible(RefundImpossible::Disputed, T0 + 6);
    let good = s.into_record();
    // Still refunding, or with part of the money refunded: not what the transition leaves.
    let mut r = good.clone();
    r.status = SagaStatus::RefundingPayment;
    assert!(Loaded::from_record(r).is_err());
    let mut r = good.clone();
    r.refunded_minor = 1000;
    assert!(Loaded::from_record(r).is_err());
    // Without the reason, captured money kept while releasing is refused as before.
    let mut r = good.clone();
    r.refund_impossible = None;
    assert!(Loaded::from_record(r).is_err());
    // On a saga that took no money.
    let (s, _) = charging().payment_requested(Some(PspReference::parse("pi_1").expect("valid")), false, T0 + 2);
    let (s, _) = s.payment_failed("declined".into(), T0 + 3);
    let (s, _) = s.payment_cancelled(T0 + 4);
    let mut r = s.into_record();
    r.refund_impossible = Some("refund impossible: disputed".into());
    assert!(Loaded::from_record(r).is_err());
}

#[test]
fn a_record_written_before_refund_impossible_existed_loads() {
    let mut stored = serde_json::to_value(captured().into_record()).unwrap();
    assert!(stored.get("refund_impossible").is_none(), "not written when absent");
    stored.as_object_mut().unwrap().remove("refund_impossible");
    let r: SagaRecord = serde_json::from_value(stored).unwrap();
    assert_eq!(r.refund_impossible, None);
    assert!(Loaded::from_record(r).is_ok());
}

#[test]
fn a_failed_payment_cancels_then_releases() {
    let (s, _) = charging().payment_requested(Some(PspReference::parse("pi_1").expect("valid")), false, T0 + 2);
    let (s, _) = s.payment_failed("card declined".into(), T0 + 3);
    assert_eq!(reload(&s).next_step(), NextStep::CancelPayment);
    let (s, compensated) = s.payment_cancelled(T0 + 4);
    assert_eq!(compensated.kind, SagaEventKind::StepCompensated);
    let (s, _) = s.stock_released(T0 + 5);
    assert!(Loaded::from_record(s.into_record()).is_ok());
}

#[test]
fn every_way_into_the_cancel_fails_the_payment_with_the_sagas_reason() {
    let pending = || {
        charging()
            .payment_requested(Some(PspReference::parse("pi_1").expect("valid")), false, T0 + 2)
            .0
    };
    let cancelling = [
        charging().charge_failed("charge refused".into(), T0 + 2).0,
        charging().charge_given_up("no answer".into(), T0 + 2).0,
        pending().payment_failed("card declined".into(), T0 + 3).0,
    ];
    let reasons: Vec<String> = cancelling.iter().map(Saga::payment_failure_reason).collect();
    assert_eq!(
        reasons,
        [
            "checkout cancelled: charge refused",
            "checkout cancelled: no answer",
            "checkout cancelled: card declined"
        ]
    );
}

#[test]
fn out_of_stock_ends_without_compensations() {
    let (s, e) = started().reservation_failed("out of stock".into(), T0 + 1);
    assert_eq!(
        (e.kind, s.record().status),
        (SagaEventKind::StepFailed, SagaStatus::Compensated)
    );
    assert_eq!(reload(&s).next_step(), NextStep::Done);
}

#[test]
fn stored_states_that_skip_a_step_are_refused() {
    // Confirmed without a payment.
    let mut r = started().into_record();
    r.status = SagaStatus::Completed;
    r.version = 9;
    assert!(Loaded::from_record(r.clone()).is_err());
    // Releasing stock after a capture that was not refunded.
    let mut r = captured().into_record();
    r.status = SagaStatus::ReleasingStock;
    r.failure = Some(Failure {
        step: Step::ConfirmOrder,
        reason: "x".into(),
    });
    assert!(Loaded::from_record(r.clone()).is_err());
    r.refunded_minor = 2500;
    assert!(Loaded::from_record(r.clone()).is_ok());
    // Cancelling (no refund) a payment that took money.
    r.status = SagaStatus::CancellingPayment;
    r.refunded_minor = 0;
    assert!(Loaded::from_record(r).is_err());
}

/// One random walk through the transitions: each value picks among the transitions valid in the state.
fn walk(choices: &[u8]) -> (SagaRecord, Vec<SagaEvent>) {
    let (saga, first) = started_with_events();
    let mut events = vec![first];
    let mut state = Loaded::Started(saga);
    let mut now = T0;
    for &c in choices {
        now += 1;
        let (next, event) = match state {
            Loaded::Started(s) if c % 4 == 0 => {
                let (s, e) = s.reservation_failed("out of stock".into(), now);
                (Loaded::Compensated(s), e)
            }
            Loaded::Started(s) => {
                let (s, e) = s.stock_reserved(now);
                (Loaded::StockReserved(s), e)
            }
            Loaded::StockReserved(s) => {
                let (s, e) = s.payment_created(pay(), now);
                (Loaded::Charging(s), e)
            }
            Loaded::Charging(s) if c % 4 == 0 => {
                let (s, e) = s.charge_failed("refused".into(), now);
                (Loaded::CancellingPayment(s), e)
            }
            Loaded::Charging(s) => {
                let (s, e) = s.payment_requested(Some(PspReference::parse("pi_1").expect("valid")), c % 3 == 0, now);
                (Loaded::PaymentPending(s), e)
            }
            Loaded::PaymentPending(s) => match c % 3 {
                0 => {
                    let (s, e) = s.recovery_requested(now);
                    (Loaded::PaymentPending(s), e)
                }
                1 => {
                    let (s, e) = s.payment_failed("declined".into(), now);
                    (Loaded::CancellingPayment(s), e)
                }
                _ => {
                    let (s, e) = s.payment_captured(PspReference::parse("pi_1").expect("valid"), now);
                    (Loaded::PaymentCaptured(s), e)
                }
            },
            Loaded::PaymentCaptured(s) if c % 2 == 0 => {
                let (s, e) = s.confirmation_failed("cancelled".into(), now);
                (Loaded::RefundingPayment(s), e)
            }
            Loaded::PaymentCaptured(s) => {
                let (s, e) = s.order_confirmed(now);
                (Loaded::Completed(s), e)
            }
            Loaded::RefundingPayment(s) if c % 3 == 0 => {
                let (s, e) = s.refund_impossible(RefundImpossible::Disputed, now);
                (Loaded::ReleasingStock(s), e)
            }
            Loaded::RefundingPayment(s) => {
                let (s, e) = s.refunded(2500, now);
                (Loaded::ReleasingStock(s), e)
            }
            Loaded::CancellingPayment(s) if c % 3 == 0 => {
                // The PSP refused the cancel: the payment succeeded meanwhile.
                let (s, e) = s.payment_succeeded(PspReference::parse("pi_1").expect("valid"), now);
                (Loaded::PaymentCaptured(s), e)
            }
            Loaded::CancellingPayment(s) => {
                let (s, e) = s.payment_cancelled(now);
                (Loaded::ReleasingStock(s), e)
            }
            Loaded::ReleasingStock(s) => {
                let (s, e) = s.stock_released(now);
                (Loaded::Compensated(s), e)
            }
            done @ (Loaded::Completed(_) | Loaded::Compensated(_)) => {
                state = done;
                break;
            }
        };
        events.push(event);
        // Every intermediate record must load back into the state it was in.
        let record = next.record().clone();
        assert_eq!(Loaded::from_record(record), Ok(next.clone()));
        state = next;
    }
    (state.record().clone(), events)
}

/// The preconditions of each next step, stated independently of `check`.
fn preconditions_hold(r: &SagaRecord, action: NextStep) -> bool {
    let failed_at = r.failure.as_ref().map(|f| f.step);
    match action {
        NextStep::ReserveStock => r.payment_id.is_none() && !r.captured && r.failure.is_none(),
        // The payment is created once: a saga that has one never creates another.
        // Given up before a payment exists: only stock to give back.
        NextStep::CreatePayment | NextStep::PaymentNotCreated => {
            r.payment_id.is_none() && !r.captured && r.failure.is_none()
        }
        // Charging the payment the saga saved (or giving that charge up): never with a PSP answer already in.
        NextStep::Charge | NextStep::GiveUpCharge => {
            r.payment_id.is_some() && r.psp_reference.is_none() && !r.captured && r.failure.is_none()
        }
        NextStep::AwaitPayment => r.payment_id.is_some() && !r.captured && r.failure.is_none(),
        NextStep::ConfirmOrder => r.payment_id.is_some() && r.captured && r.failure.is_none(),
        NextStep::RefundPayment => {
            r.payment_id.is_some()
                && r.captured
                && r.refunded_minor == 0
                && r.refund_impossible.is_none()
                && failed_at == Some(Step::ConfirmOrder)
        }
        NextStep::CancelPayment => r.payment_id.is_some() && !r.captured && r.failure.is_some(),
        // Stock goes back only after the money did, or after its refund was found impossible.
        NextStep::ReleaseStock => r.failure.is_some() && (!r.captured || money_settled(r)),
        NextStep::Done => {
            r.status.is_terminal() && (r.status != SagaStatus::Compensated || !r.captured || money_settled(r))
        }
    }
}

/// All of the captured money refunded, or none of it with the refund found impossible.
fn money_settled(r: &SagaRecord) -> bool {
    r.refunded_minor == r.checkout.money.amount_minor() || (r.refunded_minor == 0 && r.refund_impossible.is_some())
}

fn started_with_events() -> (Saga<Started>, SagaEvent) {
    Saga::begin(order(), fixtures::checkout(), T0, 60_000)
}

fn arb_status() -> impl Strategy<Value = SagaStatus> {
    proptest::sample::select(SagaStatus::ALL.to_vec())
}

fn arb_step() -> impl Strategy<Value = Step> {
    proptest::sample::select(Step::ALL.to_vec())
}

prop_compose! {
    /// Any record at all, most of them inconsistent.
    fn arb_record()(
        status in arb_status(),
        version in 0u64..12,
        payment in any::<bool>(),
        reference in any::<bool>(),
        captured in any::<bool>(),
        refunded in prop_oneof![Just(0u64), Just(2500u64), 1u64..5000],
        recovery in any::<bool>(),
        failure in proptest::option::of(arb_step()),
        impossible in any::<bool>(),
    ) -> SagaRecord {
        let mut r = started().into_record();
        r.status = status;
        r.version = version;
        r.payment_id = payment.then(pay);
        r.psp_reference = reference.then(|| PspReference::parse("pi_1").expect("valid"));
        r.captured = captured;
        r.refunded_minor = refunded;
        r.recovery_requested = recovery;
        r.failure = failure.map(|step| Failure { step, reason: "x".into() });
        r.refund_impossible = impossible.then(|| RefundImpossible::Disputed.reason().to_owned());
        r
    }
}

proptest! {
    /// Every record the transitions produce loads into its own state, and the event versions are 1, 2, 3, ...
    #[test]
    fn walks_through_the_transitions_always_reload(choices in proptest::collection::vec(any::<u8>(), 0..12)) {
        let (record, events) = walk(&choices);
        let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
        prop_assert_eq!(versions, (1..=record.version).collect::<Vec<_>>());
        prop_assert!(Loaded::from_record(record).is_ok());
    }

    /// Whatever a stored record says, a saga that loads never runs a step out of order: the next action's
    /// preconditions hold (stated here independently of `check`).
    /// The step is the one the runner takes ([`Loaded::step_at`]), at any time before or past the deadlines.
    #[test]
    fn no_loaded_saga_runs_a_step_out_of_order(record in arb_record(), later in 0i64..200_000_000) {
        let Ok(loaded) = Loaded::from_record(record.clone()) else { return Ok(()) };
        let step = loaded.step_at(&Deadlines::DEFAULT, record.updated_at_ms + later);
        prop_assert!(preconditions_hold(&record, step), "{:?} -> {:?}", record, step);
    }

    /// The same over records that are one field away from a real one (the near misses an old or buggy
    /// writer would leave behind).
    #[test]
    fn no_near_miss_runs_a_step_out_of_order(
        choices in proptest::collection::vec(any::<u8>(), 0..12),
        noise in arb_record(),
        field in 0usize..7,
        later in 0i64..200_000_000,
    ) {
        let (mut r, _) = walk(&choices);
        match field {
            0 => r.status = noise.status,
            1 => r.payment_id = noise.payment_id,
            2 => r.captured = noise.captured,
            3 => r.refunded_minor = noise.refunded_minor,
            4 => r.failure = noise.failure,
            5 => r.refund_impossible = noise.refund_impossible,
            _ => r.version = noise.version,
        }
        if let Ok(loaded) = Loaded::from_record(r.clone()) {
            prop_assert_eq!(loaded.record().status, r.status);
            let step = loaded.step_at(&Deadlines::DEFAULT, r.updated_at_ms + later);
            prop_assert!(preconditions_hold(&r, step), "{:?} -> {:?}", r, step);
        }
    }
}

#[test]
fn walks_reach_every_status() {
    let mut seen = std::collections::HashSet::new();
    for seed in 0u32..2000 {
        let choices: Vec<u8> = (0..10)
            .map(|i| ((seed.wrapping_mul(2654435761) >> (i * 3)) & 0xff) as u8)
            .collect();
        for n in 0..=choices.len() {
            seen.insert(walk(&choices[..n]).0.status);
        }
    }
    assert_eq!(seen.len(), SagaStatus::ALL.len(), "seen: {seen:?}");
}

#[test]
fn every_state_has_one_next_step_and_the_typed_step_keeps_the_saga() {
    let steps: Vec<NextStep> = SagaStatus::ALL
        .iter()
        .map(|s| fixtures::saga_in(*s).next_step())
        .collect();
    assert_eq!(
        steps,
        vec![
            NextStep::ReserveStock,
            NextStep::CreatePayment,
            NextStep::Charge,
            NextStep::AwaitPayment,
            NextStep::ConfirmOrder,
            NextStep::Done,
            NextStep::CancelPayment,
            NextStep::RefundPayment,
            NextStep::ReleaseStock,
            NextStep::Done,
        ]
    );
    for status in SagaStatus::ALL {
        let loaded = fixtures::saga_in(status);
        let record = loaded.record().clone();
        let next = loaded.next();
        let kept = match &next {
            Next::ReserveStock(s) => s.record(),
            Next::CreatePayment(s) | Next::PaymentNotCreated(s) => s.record(),
            Next::Charge(s) | Next::GiveUpCharge(s) => s.record(),
            Next::AwaitPayment(s) => s.record(),
            Next::ConfirmOrder(s) => s.record(),
            Next::RefundPayment(s) => s.record(),
            Next::CancelPayment(s) => s.record(),
            Next::ReleaseStock(s) => s.record(),
            Next::Done(s) => {
                assert!(s.is_terminal());
                &record
            }
        };
        assert_eq!(kept, &record, "{status}");
    }
}

/// The step the runner takes ([`Loaded::step_at`]) is the state's step until the state's deadline, and past it
/// the deadline's where that gives the step up (the core's `passed`): `stock_reserved` releases the stock
/// without a payment, `charging` gives the charge up, set aside or not. Every other state keeps its step.
#[test]
fn past_its_deadline_a_saga_gives_up_the_payment_creation_or_the_charge_and_nothing_else() {
    let limits = Deadlines::DEFAULT;
    for status in SagaStatus::ALL {
        let fresh = fixtures::saga_in(status);
        let aside =
            (!status.is_terminal()).then(|| fresh.clone().set_aside("charge", "kept failing".into(), T0 + 60).0);
        for loaded in std::iter::once(fresh).chain(aside) {
            let r = loaded.record().clone();
            let at = deadline(&r, &limits).map_or(i64::MAX, |d| d.at_ms);
            let past = match status {
                SagaStatus::StockReserved => NextStep::PaymentNotCreated,
                SagaStatus::Charging => NextStep::GiveUpCharge,
                _ => loaded.next_step(),
            };
            assert_eq!(
                loaded.step_at(&limits, r.updated_at_ms),
                loaded.next_step(),
                "{status}: at its entry"
            );
            assert_eq!(
                loaded.step_at(&limits, at.saturating_sub(1)),
                loaded.next_step(),
                "{status}: before"
            );
            assert_eq!(loaded.step_at(&limits, at), past, "{status}: at its deadline");
            assert_eq!(
                loaded.step_at(&limits, at.saturating_add(86_400_000)),
                past,
                "{status}: long past"
            );
            match loaded.clone().next_at(&limits, at) {
                Next::PaymentNotCreated(s) => assert_eq!(s.record(), &r),
                Next::GiveUpCharge(s) => assert_eq!(s.record(), &r),
                other => assert_eq!(other, loaded.clone().next(), "{status}"),
            }
        }
    }
    let charging = fixtures::saga_in(SagaStatus::Charging);
    let entered = charging.record().updated_at_ms;
    assert_eq!(
        charging.step_at(&limits, entered + limits.charge_ms - 1),
        NextStep::Charge
    );
    assert_eq!(
        charging.step_at(&limits, entered + limits.charge_ms),
        NextStep::GiveUpCharge
    );
    let longer = Deadlines {
        charge_ms: 2 * limits.charge_ms,
        ..limits
    };
    assert_eq!(
        charging.step_at(&longer, entered + limits.charge_ms),
        NextStep::Charge,
        "the deployment's deadlines decide"
    );
    assert_eq!(
        (NextStep::PaymentNotCreated.name(), NextStep::GiveUpCharge.name()),
        ("payment_not_created", "give_up_charge")
    );
}

#[test]
fn a_waiting_saga_acts_on_the_outcome_then_on_its_deadlines() {
    let pending = charging()
        .payment_requested(Some(PspReference::parse("pi_1").expect("valid")), false, T0 + 2)
        .0;
    let r = pending.record().clone();
    let early = AwaitDeadlines::of(&r, T0 + 3, 900_000);
    assert_eq!(
        early,
        AwaitDeadlines {
            past_deadline: false,
            abandoned: false
        }
    );
    assert!(!early.read_item(None), "before the deadlines the projection is trusted");
    assert_eq!(awaited(&r, early, Some(PaymentStatus::Captured)), Awaited::Captured);
    assert_eq!(
        awaited(&r, early, Some(PaymentStatus::Refunded)),
        Awaited::Failed(PaymentStatus::Refunded)
    );
    assert_eq!(awaited(&r, early, Some(PaymentStatus::RequiresAction)), Awaited::Wait);
    assert_eq!(awaited(&r, early, None), Awaited::Wait);

    let late = AwaitDeadlines::of(&r, r.payment_deadline_ms, 900_000);
    assert_eq!(
        late,
        AwaitDeadlines {
            past_deadline: true,
            abandoned: false
        }
    );
    assert!(late.read_item(None) && late.read_item(Some(PaymentStatus::Pending)));
    assert!(
        !late.read_item(Some(PaymentStatus::Failed)),
        "a terminal projection is complete"
    );
    assert_eq!(awaited(&r, late, Some(PaymentStatus::Pending)), Awaited::HandToRecovery);
    let handed = pending.clone().recovery_requested(T0 + 70_000).0;
    assert_eq!(awaited(handed.record(), late, None), Awaited::Wait, "handed over once");

    let gone = AwaitDeadlines::of(&r, T0 + 900_000, 900_000);
    assert!(gone.abandoned);
    assert_eq!(
        awaited(&r, gone, Some(PaymentStatus::RequiresAction)),
        Awaited::Abandoned(PaymentStatus::RequiresAction)
    );
    assert_eq!(awaited(&r, gone, Some(PaymentStatus::Captured)), Awaited::Captured);
}

/// Manual capture (issue 34): an authorized payment is captured by the saga itself, whatever its deadlines
/// (never abandoned, never handed to recovery), unless its authorization lapsed.
#[test]
fn a_waiting_saga_captures_an_authorization_until_it_lapses() {
    let pending = charging()
        .payment_requested(Some(PspReference::parse("pi_1").expect("valid")), false, T0 + 2)
        .0;
    let r = pending.record().clone();
    for now in [T0 + 3, r.payment_deadline_ms, T0 + 900_000] {
        let deadlines = AwaitDeadlines::of(&r, now, 900_000);
        assert_eq!(
            awaited(&r, deadlines, Some(PaymentStatus::Authorized)),
            Awaited::Authorized,
            "at {now}"
        );
    }
    assert!(
        !authorization_lapsed(None, T0),
        "no known deadline: the PSP's answer says"
    );
    assert!(!authorization_lapsed(Some(T0 + 1), T0));
    assert!(authorization_lapsed(Some(T0), T0), "due at the deadline itself");
}

#[test]
fn a_charge_reads_a_bound_payment_intent_and_searches_once_the_key_may_be_forgotten() {
    let reference = PspReference::parse("pi_1").expect("valid reference");
    assert_eq!(
        charge_call(Some(&reference), T0, T0 + PSP_KEY_TRUSTED_FOR_MS),
        ChargeCall::Retrieve(reference)
    );
    assert_eq!(
        charge_call(None, T0, T0 + PSP_KEY_TRUSTED_FOR_MS - 1),
        ChargeCall::Charge
    );
    assert_eq!(
        charge_call(None, T0, T0 + PSP_KEY_TRUSTED_FOR_MS),
        ChargeCall::SearchFirst
    );
}

#[test]
fn the_cancel_asks_only_an_open_payment_intent_and_waits_for_one_that_may_still_take_money() {
    use IntentState::*;
    assert_eq!(
        [Open, Processing, Succeeded, Canceled].map(IntentState::to_cancel),
        [true, false, false, false]
    );
    assert_eq!(
        [Open, Processing, Succeeded, Canceled].map(IntentState::may_still_take_money),
        [true, true, false, false]
    );
}
