//! What recovery does with every PaymentIntent status against every local status (the table below), and the
//! property that recovery never moves a payment backward nor takes away an action the PSP still requires.

use super::*;
use payments_core::fixtures::{self, attempt_failed, failed, observe, payment, refunded, REDIRECT, SECRET};
use proptest::prelude::*;
use serde_json::json;
use shared::{decide, Channel, Decision, EventKind, IgnoreReason, Payment, PaymentStatus};

const NOW: i64 = 1_700_000_100_000;

/// A payment (10.00 EUR) in `status`, reached the way production reaches it.
fn payment_in(status: PaymentStatus) -> Payment {
    let steps = match status {
        PaymentStatus::Pending => vec![],
        PaymentStatus::RequiresAction => vec![fixtures::requires_action()],
        PaymentStatus::Processing => vec![Outcome::Processing],
        PaymentStatus::AttemptFailed => vec![attempt_failed()],
        PaymentStatus::Authorized => vec![Outcome::Authorized {
            capture_before_ms: None,
        }],
        PaymentStatus::Captured => vec![Outcome::Succeeded],
        PaymentStatus::Failed => vec![failed()],
        PaymentStatus::Refunded => vec![Outcome::Succeeded, refunded(1000, true)],
    };
    steps.into_iter().fold(payment("pay_r"), |p, outcome| {
        match decide(&p, &observe(Channel::Sync, outcome), NOW) {
            Decision::Apply(t) => t.payment,
            other => panic!("setup: {other:?}"),
        }
    })
}

/// A PaymentIntent of 10.00 EUR in `status`; `extra` overrides fields.
fn intent(status: &str, extra: serde_json::Value) -> PaymentIntent {
    let mut pi = json!({ "id": "pi_r", "object": "payment_intent", "amount": 1000, "currency": "eur",
                         "status": status, "client_secret": SECRET, "metadata": {}, "livemode": false });
    if let (Some(o), Some(e)) = (pi.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    serde_json::from_value(pi).expect("a PaymentIntent")
}

fn redirect() -> serde_json::Value {
    json!({ "next_action": { "type": "redirect_to_url", "redirect_to_url": { "url": REDIRECT } } })
}

/// An authorization read with its charge, which says until when it holds.
fn held() -> serde_json::Value {
    json!({ "latest_charge": { "id": "ch_r", "object": "charge", "amount": 1000, "amount_refunded": 0,
                               "captured": false, "currency": "eur", "payment_intent": "pi_r",
                               "payment_method_details": { "type": "card", "card": { "capture_before": 1_700_604_800 } } } })
}

fn charge(refunded: u64) -> serde_json::Value {
    json!({ "latest_charge": { "id": "ch_r", "object": "charge", "amount": 1000, "amount_refunded": refunded,
                               "captured": true, "currency": "eur", "payment_intent": "pi_r" } })
}

/// What recovery does: `-` (the PSP's status tells nothing), an ignore reason, `refused`, `anomaly`, or the
/// status the payment moves to.
fn recover(current: &Payment, pi: &PaymentIntent) -> String {
    let Some(mut observation) = pi
        .observation(Channel::Recovery, fixtures::correlation())
        .expect("usable")
    else {
        return "-".into();
    };
    observation.occurred_at_ms = Some(NOW);
    match decide(current, &observation, NOW) {
        Decision::Apply(t) if t.refused.is_some() => "refused".into(),
        Decision::Apply(t) if t.event.kind == EventKind::AnomalyRecorded => "anomaly".into(),
        Decision::Apply(t) => t.payment.status.as_str().into(),
        Decision::Ignore(IgnoreReason::NoOp) => "noop".into(),
        Decision::Ignore(IgnoreReason::Stale) => "stale".into(),
        other => format!("{other:?}"),
    }
}

#[test]
fn every_stripe_status_against_every_local_status() {
    use PaymentStatus::*;
    let declined = json!({ "last_payment_error": { "type": "card_error", "code": "card_declined",
                                                   "decline_code": "insufficient_funds" } });
    let mut other_action = redirect();
    other_action["next_action"]["redirect_to_url"]["url"] = json!("https://psp.example/3ds/second-try");
    let columns = [
        Pending,
        RequiresAction,
        Processing,
        AttemptFailed,
        Authorized,
        Captured,
        Failed,
        Refunded,
    ];
    #[rustfmt::skip]
    let rows: Vec<(&str, PaymentIntent, [&str; 8])> = vec![
        //                                                         pending            requires_action    processing         attempt_failed     authorized    captured    failed     refunded
        ("requires_payment_method", intent("requires_payment_method", json!({})),
                                                                 ["-", "-", "-", "-", "-", "-", "-", "-"]),
        ("requires_payment_method after a decline", intent("requires_payment_method", declined),
                                                                 ["attempt_failed", "attempt_failed", "attempt_failed", "attempt_failed", "stale", "stale", "stale", "stale"]),
        ("requires_confirmation", intent("requires_confirmation", json!({})),
                                                                 ["-", "-", "-", "-", "-", "-", "-", "-"]),
        ("requires_action, the action we hold", intent("requires_action", redirect()),
                                                                 ["requires_action", "noop", "requires_action", "requires_action", "stale", "stale", "stale", "stale"]),
        ("requires_action, a new action", intent("requires_action", other_action),
                                                                 ["requires_action", "requires_action", "requires_action", "requires_action", "stale", "stale", "stale", "stale"]),
        ("processing", intent("processing", json!({})),
                                                                 ["processing", "noop", "noop", "noop", "stale", "stale", "stale", "stale"]),
        ("requires_capture", intent("requires_capture", json!({})),
                                                                 ["authorized", "authorized", "authorized", "authorized", "noop", "stale", "stale", "stale"]),
        ("requires_capture, capture_before known", intent("requires_capture", held()),
                                                                 ["authorized", "authorized", "authorized", "authorized", "authorized", "stale", "stale", "stale"]),
        ("succeeded", intent("succeeded", charge(0)),
                                                                 ["captured", "captured", "captured", "captured", "captured", "noop", "anomaly", "stale"]),
        ("succeeded, charge not expanded", intent("succeeded", json!({ "latest_charge": "ch_r" })),
                                                                 ["captured", "captured", "captured", "captured", "captured", "noop", "anomaly", "stale"]),
        ("succeeded, 4.00 refunded", intent("succeeded", charge(400)),
                                                                 ["captured", "captured", "captured", "captured", "captured", "captured", "anomaly", "stale"]),
        ("succeeded, refunded in full", intent("succeeded", charge(1000)),
                                                                 ["refunded", "refunded", "refunded", "refunded", "refunded", "refunded", "anomaly", "noop"]),
        ("canceled", intent("canceled", json!({ "cancellation_reason": "abandoned" })),
                                                                 ["failed", "failed", "failed", "failed", "failed", "stale", "noop", "stale"]),
        ("succeeded, another amount", intent("succeeded", json!({ "amount": 1200 })),
                                                                 ["refused", "refused", "refused", "refused", "refused", "refused", "refused", "refused"]),
        ("succeeded, another currency", intent("succeeded", json!({ "currency": "usd" })),
                                                                 ["refused", "refused", "refused", "refused", "refused", "refused", "refused", "refused"]),
    ];
    let mut wrong = Vec::new();
    for (name, pi, expected) in &rows {
        for (local, want) in columns.iter().zip(expected) {
            let got = recover(&payment_in(*local), pi);
            if got != *want {
                wrong.push(format!(
                    "Stripe {name} on a {local} payment: expected {want}, got {got}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_payment_whose_customer_is_in_a_challenge_keeps_its_secret_while_stripe_says_requires_action() {
    let current = payment_in(PaymentStatus::RequiresAction);
    let pi = intent("requires_action", redirect());
    assert_eq!(recover(&current, &pi), "noop");
    let view = shared::ClientView::from(&current);
    let shown = serde_json::to_string(&view).unwrap();
    assert!(shown.contains(SECRET) && shown.contains(REDIRECT), "{shown}");
    // A processing payment gets the PSP's action back, secret and URL included.
    let mut observation = pi
        .observation(Channel::Recovery, fixtures::correlation())
        .unwrap()
        .unwrap();
    observation.occurred_at_ms = Some(NOW);
    let Decision::Apply(t) = decide(&payment_in(PaymentStatus::Processing), &observation, NOW) else {
        panic!("applied")
    };
    assert_eq!(t.payment.action, Some(fixtures::action()));
}

/// A redirect URL our policy refuses drops only itself: the client secret serves the action, so the answer
/// is not "bad"; without a secret it is.
#[test]
fn a_refused_redirect_url_keeps_the_client_secret() {
    let mut pi = intent("requires_action", redirect());
    let only = shared::RedirectPolicy::from_values(false, Some("bank.example"));
    let kept = customer_action_with(pi.client_secret.as_ref(), pi.next_action.as_ref(), &only).unwrap();
    assert!(kept.client_secret().is_some() && kept.redirect_url().is_none());
    let any = shared::RedirectPolicy::from_values(false, None);
    let both = customer_action_with(pi.client_secret.as_ref(), pi.next_action.as_ref(), &any).unwrap();
    assert!(both.redirect_url().is_some());
    pi.client_secret = None;
    assert!(customer_action_with(None, pi.next_action.as_ref(), &only).is_err());
    // Plain http to another host is refused under every policy: the observation still requires action.
    let mut plain = intent("requires_action", redirect());
    plain.next_action = serde_json::from_value(
        json!({ "type": "redirect_to_url", "redirect_to_url": { "url": "http://evil.example/3ds" } }),
    )
    .unwrap();
    let observation = plain
        .observation(Channel::Sync, fixtures::correlation())
        .unwrap()
        .unwrap();
    assert!(
        matches!(observation.outcome, shared::Outcome::RequiresAction(_)),
        "{observation:?}"
    );
}

#[test]
fn stripe_objects_as_published_read_into_ours() {
    let fixtures: serde_json::Value =
        serde_json::from_str(include_str!("../../../../../tests/fixtures/stripe-fixtures.json")).unwrap();
    let pi: PaymentIntent = serde_json::from_value(fixtures["payment_intent"].clone()).unwrap();
    assert_eq!((pi.amount, pi.status), (1099, IntentStatus::RequiresPaymentMethod));
    assert!(
        !format!("{pi:?}").contains("secret_Dm43"),
        "the client secret never shows in Debug"
    );
    let refund: Refund = serde_json::from_value(fixtures["refund"].clone()).unwrap();
    assert!(refund.is_accepted());
    let charge: Charge = serde_json::from_value(fixtures["charge"].clone()).unwrap();
    assert_eq!(charge.amount_refunded, 0);
    // A status Stripe adds later changes nothing.
    assert_eq!(intent("requires_reauthorization", json!({})).outcome().unwrap(), None);
}

fn arb_local() -> impl Strategy<Value = Payment> {
    proptest::sample::select(PaymentStatus::ALL.to_vec()).prop_map(payment_in)
}

fn arb_intent() -> impl Strategy<Value = PaymentIntent> {
    (
        proptest::sample::select(IntentStatus::ALL.to_vec()),
        any::<bool>(),
        0u64..=1000,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(status, same_action, refunded, declined, expanded)| {
            let mut extra = if same_action {
                redirect()
            } else {
                json!({ "client_secret": "pi_r_secret_other", "next_action": { "type": "use_stripe_sdk" } })
            };
            if declined {
                extra["last_payment_error"] = json!({ "type": "card_error", "decline_code": "do_not_honor" });
            }
            if expanded {
                extra["latest_charge"] = charge(refunded)["latest_charge"].clone();
            }
            intent(status.as_str(), extra)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Recovery never moves a payment backward (terminal stays terminal, only moves in the transition table)
    /// and, while Stripe says `requires_action`, a non-terminal payment ends up holding exactly Stripe's
    /// action; an action or retry the customer holds is never dropped by a status that does not end the
    /// payment.
    #[test]
    fn recovery_never_regresses_nor_drops_a_required_action(current in arb_local(), pi in arb_intent()) {
        let Some(mut observation) = pi.observation(Channel::Recovery, fixtures::correlation()).unwrap() else {
            return Ok(());
        };
        observation.occurred_at_ms = Some(NOW);
        let next = match decide(&current, &observation, NOW) {
            Decision::Apply(t) => t.payment,
            _ => current.clone(),
        };
        prop_assert!(next.status == current.status || current.status.can_move_to(next.status),
            "{} -> {}", current.status, next.status);
        prop_assert!(!current.status.is_terminal() || next.status.is_terminal());
        // An authorization is past every action (Stripe never asks one of a `requires_capture` PaymentIntent).
        if pi.status == IntentStatus::RequiresAction && !next.status.is_terminal()
            && current.status != PaymentStatus::Authorized {
            prop_assert_eq!(next.status, PaymentStatus::RequiresAction);
            prop_assert_eq!(next.action.as_ref(), Some(&pi.action().unwrap()));
        }
        // An authorization (`requires_capture`) ends the attempt too: the customer did what was asked.
        let ends_attempt = matches!(pi.status, IntentStatus::Succeeded | IntentStatus::Canceled
            | IntentStatus::RequiresAction | IntentStatus::RequiresPaymentMethod | IntentStatus::RequiresCapture);
        if !ends_attempt {
            prop_assert_eq!(&next.action, &current.action, "action dropped by {:?}", pi.status);
            prop_assert_eq!(&next.retry_token, &current.retry_token, "retry dropped by {:?}", pi.status);
        }
    }
}
