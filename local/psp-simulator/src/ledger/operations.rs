//! What the simulated PSP does: create (with a scenario's timeline), advance a PaymentIntent through its due
//! steps, search, cancel and refund, each as Stripe does it.

use super::answers::{answer, missing, no_such};
use super::objects::{charge_refunded_event, event, event_id, event_of, payment_intent, refund_object};
use super::{now_ms, Answer, ChargeState, Effects, Intent, Ledger, Scenario, State, Step, WebhookEvent};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};

/// `GET /v1/payment_intents/search`: the one query our client asks, `metadata['payment_id']:'<id>'`.
pub(super) fn search(state: &State, params: &BTreeMap<String, String>) -> Effects {
    let query = params.get("query").map(String::as_str).unwrap_or("");
    let Some(wanted) = query
        .strip_prefix("metadata['payment_id']:'")
        .and_then(|rest| rest.strip_suffix('\''))
    else {
        return answer(Answer::error(
            400,
            "invalid_request_error",
            Some("parameter_invalid_string"),
            "This simulator searches PaymentIntents by metadata['payment_id'] only.",
            json!({}),
        ));
    };
    let data: Vec<Value> = state
        .intents
        .values()
        .filter(|i| i.metadata.get("payment_id").map(String::as_str) == Some(wanted))
        .map(|i| payment_intent(i, false))
        .collect();
    answer(Answer::ok(json!({
        "object": "search_result",
        "url": "/v1/payment_intents/search",
        "has_more": false,
        "next_page": null,
        "data": data,
    })))
}

/// Applies the due steps; returns their webhooks.
pub(super) fn advance(intent: &mut Intent, now: i64) -> Vec<WebhookEvent> {
    let mut events = Vec::new();
    while intent.steps.front().is_some_and(|(at, _)| *at <= now) {
        let Some((_, step)) = intent.steps.pop_front() else {
            break;
        };
        match step {
            Step::Succeed => {
                intent.status = "succeeded";
                intent.last_payment_error = None;
                intent.charge = Some(ChargeState {
                    id: format!("ch_{}", intent.id.trim_start_matches("pi_")),
                    amount_refunded: 0,
                    created: now / 1000,
                });
            }
            Step::Cancel => {
                intent.status = "canceled";
                intent.cancellation_reason = Some("abandoned");
            }
        }
        if intent.webhooks {
            events.push(event_of(intent, now));
        }
    }
    events
}

pub(super) fn cancel(state: &mut State, id: &str, params: &BTreeMap<String, String>) -> Effects {
    let now = now_ms();
    let Some(intent) = state.intents.get_mut(id) else {
        return answer(no_such("payment_intent", id));
    };
    let mut webhooks = advance(intent, now);
    // As at Stripe: a processing PaymentIntent cannot be canceled (Stripe allows it only "in rare cases").
    if matches!(intent.status, "succeeded" | "canceled" | "processing") {
        let message = format!(
            "You cannot cancel this PaymentIntent because it has a status of {}.",
            intent.status
        );
        let pi = payment_intent(intent, false);
        return Effects {
            answer: Some(Answer::error(
                400,
                "invalid_request_error",
                Some("payment_intent_unexpected_state"),
                &message,
                json!({ "payment_intent": pi }),
            )),
            webhooks,
            ..Effects::default()
        };
    }
    intent.status = "canceled";
    intent.cancellation_reason = Some(match params.get("cancellation_reason").map(String::as_str) {
        Some("duplicate") => "duplicate",
        Some("fraudulent") => "fraudulent",
        Some("requested_by_customer") => "requested_by_customer",
        _ => "abandoned",
    });
    intent.steps.clear();
    if intent.webhooks {
        webhooks.push(event_of(intent, now));
    }
    Effects {
        answer: Some(Answer::ok(payment_intent(intent, false))),
        webhooks,
        ..Effects::default()
    }
}

pub(super) fn refund(state: &mut State, params: &BTreeMap<String, String>) -> Effects {
    let now = now_ms();
    let Some(id) = params.get("payment_intent").cloned() else {
        return answer(missing("payment_intent"));
    };
    let refund_id = Ledger::next_id(state, "re");
    let Some(intent) = state.intents.get_mut(&id) else {
        return answer(no_such("payment_intent", &id));
    };
    let mut webhooks = advance(intent, now);
    let (Some(charge), "succeeded") = (intent.charge.as_mut(), intent.status) else {
        return Effects {
            answer: Some(Answer::error(
                400,
                "invalid_request_error",
                Some("payment_intent_unexpected_state"),
                &format!("This PaymentIntent ({id}) does not have a successful charge to refund."),
                json!({}),
            )),
            webhooks,
            ..Effects::default()
        };
    };
    let left = intent.amount - charge.amount_refunded;
    let amount = match params.get("amount").map(|a| a.parse::<u64>()) {
        None => left,
        Some(Ok(a)) if a > 0 && a <= left => a,
        Some(_) => {
            return Effects {
                answer: Some(Answer::error(
                    400,
                    "invalid_request_error",
                    Some("amount_too_large"),
                    &format!("Refund amount is greater than the unrefunded amount on the charge ({left})."),
                    json!({ "param": "amount" }),
                )),
                webhooks,
                ..Effects::default()
            }
        }
    };
    if amount == 0 {
        return answer(Answer::error(
            400,
            "invalid_request_error",
            Some("charge_already_refunded"),
            "This charge has already been refunded.",
            json!({}),
        ));
    }
    if intent.scenario == Scenario::RefundFails {
        let charge_id = charge.id.clone();
        // Answered `pending`, but its webhooks already report it failed: that is what reading it back says.
        let failed = refund_object(intent, &refund_id, &charge_id, amount, "failed", now);
        state.refunds.insert(refund_id.clone(), failed);
        return failing_refund(intent, &refund_id, &charge_id, amount, now, webhooks);
    }
    charge.amount_refunded += amount;
    let charge_id = charge.id.clone();
    let refund = json!({ "id": refund_id, "object": "refund", "amount": amount, "balance_transaction": null,
        "charge": charge_id, "created": now / 1000, "currency": intent.currency, "metadata": {},
        "payment_intent": intent.id, "reason": null, "receipt_number": null, "status": "succeeded" });
    if intent.webhooks {
        webhooks.push(charge_refunded_event(intent, now));
    }
    state.refunds.insert(refund_id, refund.clone());
    Effects {
        answer: Some(Answer::ok(refund)),
        webhooks,
        ..Effects::default()
    }
}

/// A refund of a [`Scenario::RefundFails`] charge: answered `pending`, then reported failed by webhooks, the
/// charge's money untouched (as after Stripe returns a failed refund's funds to the balance).
fn failing_refund(
    intent: &Intent,
    refund_id: &str,
    charge_id: &str,
    amount: u64,
    now: i64,
    mut webhooks: Vec<WebhookEvent>,
) -> Effects {
    let refund = |status| refund_object(intent, refund_id, charge_id, amount, status, now);
    if intent.webhooks {
        webhooks.push(event(event_id(), "refund.created", refund("pending"), now));
        webhooks.push(event(event_id(), "refund.updated", refund("failed"), now));
        webhooks.push(event(event_id(), "refund.failed", refund("failed"), now));
    }
    Effects {
        answer: Some(Answer::ok(refund("pending"))),
        webhooks,
        ..Effects::default()
    }
}

impl Ledger {
    pub(super) fn create(&self, state: &mut State, params: &BTreeMap<String, String>) -> Effects {
        let Some(amount) = params
            .get("amount")
            .and_then(|a| a.parse::<u64>().ok())
            .filter(|a| *a > 0)
        else {
            return answer(missing("amount"));
        };
        let Some(currency) = params
            .get("currency")
            .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_lowercase()))
        else {
            return answer(missing("currency"));
        };
        if params.get("confirm").map(String::as_str) != Some("true") {
            return answer(Answer::error(
                400,
                "invalid_request_error",
                Some("parameter_invalid"),
                "This simulator only creates PaymentIntents with confirm=true.",
                json!({ "param": "confirm" }),
            ));
        }
        let Some(method) = params.get("payment_method") else {
            return answer(missing("payment_method"));
        };
        let scenario = match method
            .strip_prefix("pm_")
            .and_then(Scenario::parse)
            .or(self.default_scenario)
        {
            Some(s) => s,
            None if method.starts_with("pm_") => {
                use rand::seq::IndexedRandom;
                *Scenario::QUICK.choose(&mut rand::rng()).unwrap_or(&Scenario::Succeeded)
            }
            None => return answer(no_such("payment_method", method)),
        };
        let now = now_ms();
        let metadata: BTreeMap<String, String> = params
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("metadata[")
                    .and_then(|k| k.strip_suffix(']'))
                    .map(|k| (k.to_owned(), v.clone()))
            })
            .collect();
        let mut intent = Intent {
            id: Self::next_id(state, "pi"),
            amount,
            currency: currency.clone(),
            status: "requires_payment_method",
            metadata,
            return_url: params.get("return_url").cloned(),
            created: now / 1000,
            last_payment_error: None,
            cancellation_reason: None,
            charge: None,
            steps: VecDeque::new(),
            webhooks: scenario != Scenario::Silent,
            scenario,
        };
        let slow = now + i64::try_from(self.timings.slow.as_millis()).unwrap_or(i64::MAX);
        let mut webhooks = Vec::new();
        let mut declined = None;
        match scenario {
            Scenario::Succeeded | Scenario::LostAnswer | Scenario::RefundFails => {
                intent.steps.push_back((now, Step::Succeed))
            }
            Scenario::Failed => {
                intent.status = "canceled";
                intent.cancellation_reason = Some("fraudulent");
            }
            Scenario::RequiresAction | Scenario::SlowAction | Scenario::AbandonedAction => {
                intent.status = "requires_action";
                match scenario {
                    Scenario::RequiresAction => intent.steps.push_back((now, Step::Succeed)),
                    Scenario::SlowAction => intent.steps.push_back((slow, Step::Succeed)),
                    _ => {}
                }
            }
            Scenario::Processing | Scenario::Silent | Scenario::SlowProcessing => {
                intent.status = "processing";
                let at = if scenario == Scenario::SlowProcessing {
                    slow
                } else {
                    now
                };
                intent.steps.push_back((at, Step::Succeed));
            }
            Scenario::Declined | Scenario::DeclineThenRetry => {
                let error = json!({ "type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds",
                                    "message": "Your card has insufficient funds." });
                intent.last_payment_error = Some(error.clone());
                declined = Some(error);
                if scenario == Scenario::Declined {
                    intent.steps.push_back((now, Step::Cancel));
                } else {
                    intent.steps.push_back((slow, Step::Succeed));
                }
            }
        }
        // Succeeded at once: the answer already shows it (Stripe answers a confirmed card payment with its
        // final status). Otherwise the answer shows the first status and the due steps follow right after.
        if matches!(
            scenario,
            Scenario::Succeeded | Scenario::LostAnswer | Scenario::RefundFails
        ) {
            webhooks.extend(advance(&mut intent, now));
        }
        let id = intent.id.clone();
        let created = payment_intent(&intent, false);
        if intent.webhooks && webhooks.is_empty() {
            webhooks.push(event_of(&intent, now));
        }
        webhooks.extend(advance(&mut intent, now));
        let later = intent
            .steps
            .front()
            .map(|(at, _)| (id.clone(), *at))
            .into_iter()
            .collect();
        state.intents.insert(id, intent);
        let answer = match declined {
            Some(error) => {
                let mut extra = error;
                extra["payment_intent"] = created;
                let message = extra["message"].as_str().unwrap_or("declined").to_owned();
                Answer::error(402, "card_error", Some("card_declined"), &message, extra)
            }
            None => Answer::ok(created),
        };
        Effects {
            answer: Some(answer),
            webhooks,
            later,
            drop_answer: scenario == Scenario::LostAnswer,
            replayed: false,
        }
    }
}
