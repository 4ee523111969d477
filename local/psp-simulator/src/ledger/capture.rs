//! Separate authorization and capture, as Stripe does it for a PaymentIntent created with
//! `capture_method=manual`: a successful confirm stops at `requires_capture` with an uncaptured charge whose
//! `payment_method_details.card.capture_before` is the end of the authorization ([`AUTHORIZATION_VALIDITY`]
//! after it, Stripe's 7 days for customer-initiated card payments), announced by
//! `payment_intent.amount_capturable_updated`. Then:
//!
//! | request or time | Stripe's answer, and here |
//! |---|---|
//! | `POST .../capture` while `requires_capture`, `amount_to_capture` up to `amount_capturable` (default: all of it) | `succeeded`, the charge captured (an uncaptured rest released as refunded), `payment_intent.succeeded` |
//! | `POST .../capture` in any other status | 400 `payment_intent_unexpected_state` (`already been captured` once succeeded) |
//! | `amount_to_capture` above `amount_capturable` | 400 `amount_too_large`, `param` `amount_to_capture` |
//! | `POST .../cancel` while `requires_capture` | `canceled`, the authorization released (`amount_capturable` 0), no Refund object |
//! | `capture_before` passed, uncaptured | `canceled` with `cancellation_reason` `automatic`, `payment_intent.canceled`; a capture is then refused for its status |
//!
//! Sources: Stripe's API reference (capture: "Capture the funds of an existing uncaptured PaymentIntent when
//! its status is requires_capture ... amount_to_capture ... less than or equal to ... amount_capturable";
//! cancel: "For PaymentIntents with a status of requires_capture, the remaining amount_capturable is
//! automatically refunded"), the OpenAPI description of `capture_before` ("a future timestamp after which the
//! charge will be automatically refunded if uncaptured") and `cancellation_reason` (`automatic` is Stripe's
//! own), and Stripe's capture refusal as integrations quote it.

use super::answers::{answer, answer_with, no_such};
use super::objects::{event_of, payment_intent};
use super::{now_ms, Answer, ChargeState, Effects, Intent, State, Step, WebhookEvent};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long an authorization holds before Stripe releases it: 7 days for customer-initiated card payments.
pub const AUTHORIZATION_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// A PaymentIntent's `capture_method`. `automatic_async` captures as `automatic` does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaptureMethod {
    #[default]
    Automatic,
    Manual,
}

impl CaptureMethod {
    /// From the create's `capture_method` (its enum already checked against Stripe's description).
    pub(super) fn from_param(value: Option<&str>) -> Self {
        match value {
            Some("manual") => Self::Manual,
            _ => Self::Automatic,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Automatic => "automatic",
            Self::Manual => "manual",
        }
    }
}

/// Applies the due steps, then an authorization's expiry once due; returns their webhooks.
pub(super) fn advance(intent: &mut Intent, now: i64) -> Vec<WebhookEvent> {
    let mut events = Vec::new();
    while intent.steps.front().is_some_and(|(at, _)| *at <= now) {
        let Some((_, step)) = intent.steps.pop_front() else {
            break;
        };
        match step {
            Step::Succeed => succeed(intent, now),
            Step::Cancel => {
                intent.status = "canceled";
                intent.cancellation_reason = Some("abandoned");
            }
        }
        if intent.webhooks {
            events.push(event_of(intent, now));
        }
    }
    events.extend(expire(intent, now));
    events
}

/// The confirm succeeded: with automatic capture the money is taken (`succeeded`), with manual capture it
/// is authorized (`requires_capture`, an uncaptured charge that holds until `capture_before`).
pub(super) fn succeed(intent: &mut Intent, now: i64) {
    let manual = intent.capture_method == CaptureMethod::Manual;
    intent.status = if manual { "requires_capture" } else { "succeeded" };
    intent.last_payment_error = None;
    intent.amount_capturable = if manual { intent.amount } else { 0 };
    let validity = i64::try_from(AUTHORIZATION_VALIDITY.as_secs()).unwrap_or(i64::MAX);
    intent.charge = Some(ChargeState {
        id: format!("ch_{}", intent.id.trim_start_matches("pi_")),
        amount_refunded: 0,
        created: now / 1000,
        captured: !manual,
        amount_captured: if manual { 0 } else { intent.amount },
        capture_before: manual.then(|| (now / 1000).saturating_add(validity)),
    });
}

/// An authorization whose `capture_before` passed is released: the PaymentIntent is `canceled`
/// (`automatic`), with its webhook. Nothing for any other PaymentIntent.
pub(super) fn expire(intent: &mut Intent, now: i64) -> Option<WebhookEvent> {
    let before = intent.charge.as_ref()?.capture_before?;
    if intent.status != "requires_capture" || now / 1000 < before {
        return None;
    }
    intent.status = "canceled";
    intent.cancellation_reason = Some("automatic");
    release(intent);
    intent.steps.clear();
    intent.webhooks.then(|| event_of(intent, now))
}

/// An authorization ended without a capture (canceled or expired): nothing is capturable any more, and the
/// charge shows its amount returned, as Stripe's does ("automatically refunded"; no Refund object is made).
pub(super) fn release(intent: &mut Intent) {
    if intent.amount_capturable == 0 {
        return;
    }
    intent.amount_capturable = 0;
    if let Some(charge) = intent.charge.as_mut() {
        charge.amount_refunded = intent.amount;
    }
}

/// `POST /v1/payment_intents/{id}/capture`, after the due steps (an expiry among them): refused as Stripe
/// refuses it (module table), else the charge captured for `amount_to_capture` (all that is capturable by
/// default) and the PaymentIntent `succeeded`.
pub(super) fn capture(state: &mut State, id: &str, params: &BTreeMap<String, String>) -> Effects {
    let now = now_ms();
    let Some(intent) = state.intents.get_mut(id) else {
        return answer(no_such("payment_intent", id));
    };
    let mut webhooks = advance(intent, now);
    if intent.status != "requires_capture" {
        return answer_with(unexpected_state(intent), webhooks);
    }
    let capturable = intent.amount_capturable;
    let amount = match params.get("amount_to_capture").map(|a| a.parse::<u64>()) {
        None => capturable,
        Some(Ok(a)) if (1..=capturable).contains(&a) => a,
        Some(_) => return answer_with(too_large(capturable), webhooks),
    };
    intent.status = "succeeded";
    intent.amount_capturable = 0;
    if let Some(charge) = intent.charge.as_mut() {
        charge.captured = true;
        charge.amount_captured = amount;
        // Stripe releases what a partial capture leaves, shown as refunded on the charge.
        charge.amount_refunded = intent.amount - amount;
    }
    if intent.webhooks {
        webhooks.push(event_of(intent, now));
    }
    answer_with(Answer::ok(payment_intent(intent, false)), webhooks)
}

/// Stripe's refusal of a capture of a PaymentIntent that is not `requires_capture`, carrying it.
fn unexpected_state(intent: &Intent) -> Answer {
    let message = if intent.status == "succeeded" {
        "This PaymentIntent could not be captured because it has already been captured.".to_owned()
    } else {
        format!(
            "This PaymentIntent could not be captured because it has a status of {}. Only a PaymentIntent with \
             one of the following statuses may be captured: requires_capture.",
            intent.status
        )
    };
    Answer::error(
        400,
        "invalid_request_error",
        Some("payment_intent_unexpected_state"),
        &message,
        json!({ "payment_intent": payment_intent(intent, false) }),
    )
}

/// A capture of more than is capturable (or of nothing).
fn too_large(capturable: u64) -> Answer {
    Answer::error(
        400,
        "invalid_request_error",
        Some("amount_too_large"),
        &format!("The amount to capture must be a positive integer up to amount_capturable ({capturable})."),
        json!({ "param": "amount_to_capture" }),
    )
}

impl super::Ledger {
    /// Moves every open authorization's `capture_before` back by `by` (a test's "a week later"): one then
    /// past it is released and its PaymentIntent canceled when next touched, as Stripe does when it lapses.
    pub fn age_authorizations(&self, by: Duration) {
        let by = i64::try_from(by.as_secs()).unwrap_or(i64::MAX);
        for intent in self.state().intents.values_mut() {
            if let Some(before) = intent.charge.as_mut().and_then(|c| c.capture_before.as_mut()) {
                *before = before.saturating_sub(by);
            }
        }
    }
}
