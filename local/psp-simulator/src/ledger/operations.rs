//! What the simulated PSP does: create (with a scenario's timeline), advance a PaymentIntent through its due
//! steps, search, cancel and refund, each as Stripe does it (an authorization's capture and expiry: `capture`).

use super::answers::{answer, answer_with, missing, no_such};
use super::capture::{self, advance, CaptureMethod};
use super::objects::{charge_refunded_event, event, event_id, event_of, payment_intent, refund_object};
use super::{expands_charge, now_ms, Answer, Effects, Intent, Ledger, Scenario, State, Step, WebhookEvent};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};

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

/// `POST /v1/payment_intents/{id}/cancel`, after the due steps: refused for a PaymentIntent already final or
/// processing (as Stripe does), else canceled for the reason given (Stripe's own reasons; `abandoned` otherwise).
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
        let refused = Answer::error(
            400,
            "invalid_request_error",
            Some("payment_intent_unexpected_state"),
            &message,
            json!({ "payment_intent": pi }),
        );
        return answer_with(refused, webhooks);
    }
    intent.status = "canceled";
    capture::release(intent);
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
    answer_with(Answer::ok(payment_intent(intent, false)), webhooks)
}

/// `POST /v1/refunds` of a PaymentIntent's charge (all that is left, or `amount`), after its due steps: refused
/// as Stripe refuses it ([`refund_amount`]), failing as its scenario says ([`NewRefund::failing`]), else taken
/// from the charge with a `charge.refunded` webhook.
pub(super) fn refund(state: &mut State, params: &BTreeMap<String, String>) -> Effects {
    let now = now_ms();
    let Some(id) = params.get("payment_intent").cloned() else {
        return answer(missing("payment_intent"));
    };
    let refund_id = Ledger::next_id(state, "re");
    let Some(intent) = state.intents.get_mut(&id) else {
        return answer(no_such("payment_intent", &id));
    };
    let webhooks = advance(intent, now);
    let (Some(charge), "succeeded") = (intent.charge.as_mut(), intent.status) else {
        let refused = Answer::error(
            400,
            "invalid_request_error",
            Some("payment_intent_unexpected_state"),
            &format!("This PaymentIntent ({id}) does not have a successful charge to refund."),
            json!({}),
        );
        return answer_with(refused, webhooks);
    };
    let amount = match refund_amount(params, intent.amount - charge.amount_refunded) {
        Ok(amount) => amount,
        Err(refused) => return answer_with(refused, webhooks),
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
    let made = NewRefund {
        id: refund_id,
        charge_id: charge.id.clone(),
        amount,
        now,
    };
    if intent.scenario == Scenario::RefundFails {
        return made.failing(intent, &mut state.refunds, webhooks);
    }
    charge.amount_refunded += amount;
    made.succeeded(intent, &mut state.refunds, webhooks)
}

/// The refunds made, by id ([`State`]'s, for `GET /v1/refunds/{id}`).
type Refunds = HashMap<String, Value>;

/// A refund being made: its id, the charge it takes from, how much, and when.
struct NewRefund {
    id: String,
    charge_id: String,
    amount: u64,
    now: i64,
}

/// How much a refund takes when `left` is still unrefunded: the `amount` asked, else all of it (zero when
/// all is refunded already). An `amount` that is not a positive integer up to `left` is Stripe's
/// `amount_too_large`.
fn refund_amount(params: &BTreeMap<String, String>, left: u64) -> Result<u64, Answer> {
    match params.get("amount").map(|a| a.parse::<u64>()) {
        None => Ok(left),
        Some(Ok(a)) if a > 0 && a <= left => Ok(a),
        Some(_) => Err(Answer::error(
            400,
            "invalid_request_error",
            Some("amount_too_large"),
            &format!("Refund amount is greater than the unrefunded amount on the charge ({left})."),
            json!({ "param": "amount" }),
        )),
    }
}

impl NewRefund {
    /// A refund that succeeds (the charge's refunded amount already counts it): kept for
    /// `GET /v1/refunds/{id}`, answered `succeeded`, with a `charge.refunded` webhook.
    fn succeeded(self, intent: &Intent, refunds: &mut Refunds, mut webhooks: Vec<WebhookEvent>) -> Effects {
        let refund = json!({ "id": self.id, "object": "refund", "amount": self.amount,
            "balance_transaction": null, "charge": self.charge_id, "created": self.now / 1000,
            "currency": intent.currency, "metadata": {}, "payment_intent": intent.id, "reason": null,
            "receipt_number": null, "status": "succeeded" });
        if intent.webhooks {
            webhooks.push(charge_refunded_event(intent, self.now));
        }
        refunds.insert(self.id, refund.clone());
        answer_with(Answer::ok(refund), webhooks)
    }

    /// A refund of a [`Scenario::RefundFails`] charge: answered `pending`, then reported failed by webhooks,
    /// the charge's money untouched (as after Stripe returns a failed refund's funds to the balance). Kept as
    /// failed: its webhooks already report it failed, so that is what reading it back says.
    fn failing(self, intent: &Intent, refunds: &mut Refunds, mut webhooks: Vec<WebhookEvent>) -> Effects {
        let now = self.now;
        let refund = |status| refund_object(intent, &self.id, &self.charge_id, self.amount, status, now);
        refunds.insert(self.id.clone(), refund("failed"));
        if intent.webhooks {
            webhooks.push(event(event_id(), "refund.created", refund("pending"), now));
            webhooks.push(event(event_id(), "refund.updated", refund("failed"), now));
            webhooks.push(event(event_id(), "refund.failed", refund("failed"), now));
        }
        answer_with(Answer::ok(refund("pending")), webhooks)
    }
}

/// A create request that passed Stripe's checks: what the PaymentIntent is for and how it plays out.
struct CreateRequest<'p> {
    amount: u64,
    currency: &'p str,
    scenario: Scenario,
}

impl Ledger {
    /// `POST /v1/payment_intents`: refuses what Stripe refuses, else creates the PaymentIntent on its
    /// scenario's timeline, applies the steps due at once and answers with the PaymentIntent as created (a
    /// decline as Stripe's 402 `card_error` carrying it).
    pub(super) fn create(&self, state: &mut State, params: &BTreeMap<String, String>) -> Effects {
        let request = match self.create_request(params) {
            Ok(request) => request,
            Err(refused) => return answer(refused),
        };
        let now = now_ms();
        let mut intent = new_intent(Self::next_id(state, "pi"), &request, params, now);
        let slow = now + i64::try_from(self.timings.slow.as_millis()).unwrap_or(i64::MAX);
        let declined = start_timeline(&mut intent, now, slow);
        let (created, webhooks) = first_steps(&mut intent, now, expands_charge(params));
        let later = intent
            .steps
            .front()
            .map(|(at, _)| (intent.id.clone(), *at))
            .into_iter()
            .collect();
        state.intents.insert(intent.id.clone(), intent);
        Effects {
            answer: Some(create_answer(created, declined)),
            webhooks,
            later,
            drop_answer: request.scenario == Scenario::LostAnswer,
            replayed: false,
        }
    }

    /// Stripe's refusals of a create, checked in this order (the first broken rule answers): `amount` a
    /// positive integer, `currency` three lowercase letters (else `parameter_missing` naming the parameter),
    /// `confirm=true` (`parameter_invalid`: our client always confirms), and a `payment_method` this account
    /// knows ([`Ledger::scenario_for`]).
    fn create_request<'p>(&self, params: &'p BTreeMap<String, String>) -> Result<CreateRequest<'p>, Answer> {
        let amount = params
            .get("amount")
            .and_then(|a| a.parse::<u64>().ok())
            .filter(|a| *a > 0)
            .ok_or_else(|| missing("amount"))?;
        let currency = params
            .get("currency")
            .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_lowercase()))
            .ok_or_else(|| missing("currency"))?;
        if params.get("confirm").map(String::as_str) != Some("true") {
            return Err(Answer::error(
                400,
                "invalid_request_error",
                Some("parameter_invalid"),
                "This simulator only creates PaymentIntents with confirm=true.",
                json!({ "param": "confirm" }),
            ));
        }
        let method = params.get("payment_method").ok_or_else(|| missing("payment_method"))?;
        Ok(CreateRequest {
            amount,
            currency,
            scenario: self.scenario_for(method)?,
        })
    }

    /// The scenario a payment method plays: `pm_<scenario>` names it (as Stripe's test payment methods pick
    /// outcomes), another `pm_` takes the account's default or, without one, a random quick scenario; a
    /// method that is not a `pm_` is unknown here (`resource_missing`).
    fn scenario_for(&self, method: &str) -> Result<Scenario, Answer> {
        match method
            .strip_prefix("pm_")
            .and_then(Scenario::parse)
            .or(self.default_scenario)
        {
            Some(s) => Ok(s),
            None if method.starts_with("pm_") => {
                use rand::seq::IndexedRandom;
                Ok(*Scenario::QUICK.choose(&mut rand::rng()).unwrap_or(&Scenario::Succeeded))
            }
            None => Err(no_such("payment_method", method)),
        }
    }
}

/// A new PaymentIntent for a checked request, in Stripe's initial status, with the `metadata[...]`
/// parameters as its metadata (our payment id travels there) and no steps yet.
fn new_intent(id: String, request: &CreateRequest, params: &BTreeMap<String, String>, now: i64) -> Intent {
    let metadata: BTreeMap<String, String> = params
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("metadata[")
                .and_then(|k| k.strip_suffix(']'))
                .map(|k| (k.to_owned(), v.clone()))
        })
        .collect();
    Intent {
        id,
        amount: request.amount,
        currency: request.currency.to_owned(),
        status: "requires_payment_method",
        metadata,
        return_url: params.get("return_url").cloned(),
        created: now / 1000,
        last_payment_error: None,
        cancellation_reason: None,
        charge: None,
        steps: VecDeque::new(),
        webhooks: request.scenario != Scenario::Silent,
        scenario: request.scenario,
        capture_method: CaptureMethod::from_param(params.get("capture_method").map(String::as_str)),
        amount_capturable: 0,
    }
}

/// The scenario's timeline, one row per scenario: the status the create answer shows and the step that
/// follows (due `now`, or `slow` for the slow scenarios). Returns the card error of a declined scenario, which
/// the PaymentIntent keeps as its `last_payment_error` and the create answer carries.
fn start_timeline(intent: &mut Intent, now: i64, slow: i64) -> Option<Value> {
    use Scenario::*;
    let (status, step) = match intent.scenario {
        Succeeded | LostAnswer | RefundFails => ("requires_payment_method", Some((now, Step::Succeed))),
        Failed => ("canceled", None),
        RequiresAction => ("requires_action", Some((now, Step::Succeed))),
        SlowAction => ("requires_action", Some((slow, Step::Succeed))),
        AbandonedAction => ("requires_action", None),
        Processing | Silent => ("processing", Some((now, Step::Succeed))),
        SlowProcessing => ("processing", Some((slow, Step::Succeed))),
        Declined => ("requires_payment_method", Some((now, Step::Cancel))),
        DeclineThenRetry => ("requires_payment_method", Some((slow, Step::Succeed))),
    };
    intent.status = status;
    intent.steps.extend(step);
    if intent.scenario == Failed {
        intent.cancellation_reason = Some("fraudulent");
    }
    let declined = matches!(intent.scenario, Declined | DeclineThenRetry).then(|| {
        json!({ "type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds",
                "message": "Your card has insufficient funds." })
    });
    intent.last_payment_error.clone_from(&declined);
    declined
}

/// The PaymentIntent the create answer shows, and the webhooks of its first status and of the steps due at
/// once. Succeeded at once: the answer already shows it (Stripe answers a confirmed card payment with its
/// final status). Otherwise the answer shows the first status and the due steps follow right after, their
/// webhooks in one batch with the first. `expand`: the answer shows the charge expanded (`expand[]`).
fn first_steps(intent: &mut Intent, now: i64, expand: bool) -> (Value, Vec<WebhookEvent>) {
    let mut webhooks = Vec::new();
    if matches!(
        intent.scenario,
        Scenario::Succeeded | Scenario::LostAnswer | Scenario::RefundFails
    ) {
        webhooks.extend(advance(intent, now));
    }
    let created = payment_intent(intent, expand);
    if intent.webhooks && webhooks.is_empty() {
        webhooks.push(event_of(intent, now));
    }
    webhooks.extend(advance(intent, now));
    (created, webhooks)
}

/// The create answer: the PaymentIntent as created, or for a decline Stripe's 402 `card_error` whose error
/// object carries the decline and the PaymentIntent.
fn create_answer(created: Value, declined: Option<Value>) -> Answer {
    match declined {
        Some(error) => {
            let mut extra = error;
            extra["payment_intent"] = created;
            let message = extra["message"].as_str().unwrap_or("declined").to_owned();
            Answer::error(402, "card_error", Some("card_declined"), &message, extra)
        }
        None => Answer::ok(created),
    }
}
