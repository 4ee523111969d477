//! The simulated PSP's state, with Stripe's rules: PaymentIntents that move through Stripe's statuses by
//! scenario, Charges that carry refunds, Refunds, Stripe's error objects, and Stripe's idempotency (the same
//! key with the same parameters replays the first answer, with other parameters is an `idempotency_error`).
//!
//! Objects are built here as Stripe documents them, independently of the client in `shared::psp`, so the
//! client is tested against Stripe's shapes and not against itself (`tests/fixtures.rs` compares them with
//! Stripe's published fixtures).
//!
//! A scenario is a timeline: the state the create answer shows, then steps. Steps due at once are applied
//! right after the answer is built and their webhooks go out in one batch with the first (so the delivery's
//! reordering and duplicates race them); later steps (the slow scenarios) are applied when due, by a timer or
//! by the next request that touches the intent.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How a charge plays out. Chosen by the payment method `pm_<scenario>` (as Stripe's test payment methods
/// pick outcomes), else the simulator's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// 3-D Secure: `requires_action`; the customer completes it at once: `succeeded`.
    RequiresAction,
    /// `processing`, then `succeeded`.
    Processing,
    /// `succeeded` at once.
    Succeeded,
    /// Blocked as fraudulent: `canceled` at once.
    Failed,
    /// Declined (HTTP 402 `card_error`, `requires_payment_method`); the customer gives up and the shop's
    /// front end cancels the PaymentIntent: `canceled`.
    Declined,
    /// `processing`, then `succeeded` without any webhook: only a status query finds out.
    Silent,
    /// A 3-D Secure challenge that stays `requires_action` for the slow delay, then `succeeded`.
    SlowAction,
    /// A 3-D Secure challenge the customer never completes: `requires_action` for good.
    AbandonedAction,
    /// Declined (`requires_payment_method` with the decline), then after the slow delay the customer retries
    /// with another card: `succeeded`.
    DeclineThenRetry,
    /// `processing` for the slow delay (a bank debit), then `succeeded`.
    SlowProcessing,
    /// `succeeded`, but the answer to the create request is lost (the connection drops): the client's retry
    /// with the same key gets the first answer replayed.
    LostAnswer,
}

impl Scenario {
    /// The scenarios a random charge picks from (not the slow ones: they outlast a demo).
    pub const QUICK: [Scenario; 6] = [
        Self::RequiresAction,
        Self::Processing,
        Self::Succeeded,
        Self::Failed,
        Self::Declined,
        Self::Silent,
    ];

    fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(Value::String(name.to_owned())).ok()
    }
}

/// How long the slow scenarios take.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// `slow_action`, `decline_then_retry`, `slow_processing`: minutes at a real PSP.
    pub slow: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            slow: Duration::from_secs(180),
        }
    }
}

/// A webhook the PSP sends: a Stripe Event.
#[derive(Debug, Clone)]
pub struct WebhookEvent {
    pub id: String,
    pub kind: &'static str,
    pub body: Value,
}

/// An answer of the API: HTTP status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    fn ok(body: Value) -> Self {
        Self { status: 200, body }
    }

    /// Stripe's error object.
    pub fn error(status: u16, kind: &str, code: Option<&str>, message: &str, extra: Value) -> Self {
        let mut error = json!({ "type": kind, "message": message });
        if let Some(code) = code {
            error["code"] = json!(code);
        }
        if let (Some(e), Some(x)) = (error.as_object_mut(), extra.as_object()) {
            e.extend(x.clone());
        }
        Self {
            status,
            body: json!({ "error": error }),
        }
    }
}

/// What a request did: the answer, the webhooks to send now, and when later steps fall due.
#[derive(Debug, Default)]
pub struct Effects {
    pub answer: Option<Answer>,
    pub webhooks: Vec<WebhookEvent>,
    /// (PaymentIntent id, due at epoch ms): wake the intent then.
    pub later: Vec<(String, i64)>,
    /// The answer must not reach the client (the connection drops after the work is done).
    pub drop_answer: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The customer completes the action, or retries with a good card, or the processing ends: money taken.
    Succeed,
    /// The front end cancels the PaymentIntent after a decline.
    Cancel,
}

#[derive(Debug, Clone)]
struct Intent {
    id: String,
    amount: u64,
    currency: String,
    status: &'static str,
    metadata: BTreeMap<String, String>,
    return_url: Option<String>,
    created: i64,
    last_payment_error: Option<Value>,
    cancellation_reason: Option<&'static str>,
    charge: Option<ChargeState>,
    steps: VecDeque<(i64, Step)>,
    /// Whether webhooks are sent for this intent (`silent` sends none).
    webhooks: bool,
    scenario: Scenario,
}

#[derive(Debug, Clone)]
struct ChargeState {
    id: String,
    amount_refunded: u64,
    created: i64,
}

/// Idempotency: the first request's parameters and answer, per key.
#[derive(Debug, Clone)]
struct Remembered {
    request: String,
    answer: Answer,
    at_ms: i64,
}

/// Stripe forgets an idempotency key 24 hours after its first use: the same key then does the work again.
pub const KEY_RETENTION_MS: i64 = 24 * 3600 * 1000;

#[derive(Default)]
struct State {
    intents: HashMap<String, Intent>,
    keys: HashMap<String, Remembered>,
    /// How far the idempotency keys' clock was moved ahead ([`Ledger::age_keys`]).
    keys_aged_ms: i64,
    seq: u64,
    /// Answers to force before any work: (status, remaining count).
    storm: Option<(u16, u32)>,
    /// Every request, by whether it carried the right Bearer key.
    authorized: u64,
    unauthorized: u64,
}

/// The simulated PSP account.
pub struct Ledger {
    state: Mutex<State>,
    api_key: String,
    timings: Timings,
    default_scenario: Option<Scenario>,
}

fn now_ms() -> i64 {
    shared::clock::now_ms()
}

/// The request as the idempotency check compares it: method, path and the sorted parameters.
fn fingerprint(method: &str, path: &str, params: &BTreeMap<String, String>) -> String {
    format!("{method} {path} {params:?}")
}

impl Ledger {
    /// An account whose secret key is `api_key`.
    pub fn new(api_key: impl Into<String>, timings: Timings, default_scenario: Option<Scenario>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            api_key: api_key.into(),
            timings,
            default_scenario,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn next_id(state: &mut State, prefix: &str) -> String {
        state.seq += 1;
        format!("{prefix}_sim{:08}{:04x}", state.seq, rand::random::<u16>())
    }

    /// The next `count` requests are answered with `status` (429 or 5xx) and do nothing.
    pub fn storm(&self, status: u16, count: u32) {
        self.state().storm = (count > 0).then_some((status, count));
    }

    /// Moves the idempotency keys' clock ahead by `by` (a test's "a day later"): keys then older than 24 hours
    /// are forgotten, as at Stripe. The PaymentIntents' own timers do not move.
    pub fn age_keys(&self, by: std::time::Duration) {
        self.state().keys_aged_ms += i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
    }

    /// Requests seen with the right Bearer key, and without it.
    pub fn auth_counts(&self) -> (u64, u64) {
        let s = self.state();
        (s.authorized, s.unauthorized)
    }

    /// Every PaymentIntent created for our payment id (a retried charge must not add one), charges expanded.
    pub fn intents_for(&self, payment_id: &str) -> Vec<Value> {
        let now = now_ms();
        let mut state = self.state();
        let ids: Vec<String> = state
            .intents
            .values()
            .filter(|i| i.metadata.get("payment_id").map(String::as_str) == Some(payment_id))
            .map(|i| i.id.clone())
            .collect();
        ids.iter()
            .filter_map(|id| {
                let intent = state.intents.get_mut(id)?;
                let _ = advance(intent, now);
                Some(payment_intent(intent, true))
            })
            .collect()
    }

    /// Handles one API request. `authorization` is the `Authorization` header, `params` the form body (POST)
    /// or query (GET).
    pub fn handle(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        idempotency_key: Option<&str>,
        params: &BTreeMap<String, String>,
    ) -> Effects {
        let mut state = self.state();
        if authorization.and_then(|h| h.strip_prefix("Bearer ")) != Some(self.api_key.as_str()) {
            state.unauthorized += 1;
            return answer(Answer::error(
                401,
                "invalid_request_error",
                None,
                "Invalid API Key provided. Send your secret key as a Bearer token.",
                json!({}),
            ));
        }
        state.authorized += 1;
        if let Some((status, left)) = state.storm {
            state.storm = (left > 1).then_some((status, left - 1));
            return answer(storm_answer(status));
        }
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if method == "POST" {
            let Some(key) = idempotency_key else {
                // Stripe accepts POSTs without a key; this simulator insists, since our client must send one.
                return answer(Answer::error(
                    400,
                    "invalid_request_error",
                    Some("parameter_missing"),
                    "This simulator requires an Idempotency-Key on every POST.",
                    json!({}),
                ));
            };
            let request = fingerprint(method, path, params);
            let keys_now = now_ms().saturating_add(state.keys_aged_ms);
            state
                .keys
                .retain(|_, k| keys_now.saturating_sub(k.at_ms) < KEY_RETENTION_MS);
            if let Some(first) = state.keys.get(key) {
                if first.request != request {
                    return answer(Answer::error(
                        400,
                        "idempotency_error",
                        None,
                        "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                        json!({}),
                    ));
                }
                return answer(first.answer.clone());
            }
            let effects = match segments.as_slice() {
                ["v1", "payment_intents"] => self.create(&mut state, params),
                ["v1", "payment_intents", id, "cancel"] => cancel(&mut state, id, params),
                ["v1", "refunds"] => refund(&mut state, params),
                _ => return answer(not_found(path)),
            };
            if let Some(a) = &effects.answer {
                state.keys.insert(
                    key.to_owned(),
                    Remembered {
                        request,
                        answer: a.clone(),
                        at_ms: keys_now,
                    },
                );
            }
            return effects;
        }
        match (method, segments.as_slice()) {
            ("GET", ["v1", "payment_intents", "search"]) => search(&state, params),
            ("GET", ["v1", "payment_intents", id]) => {
                let expand = params
                    .iter()
                    .any(|(k, v)| k.starts_with("expand[") && v == "latest_charge");
                match state.intents.get_mut(*id) {
                    Some(intent) => {
                        let webhooks = advance(intent, now_ms());
                        Effects {
                            answer: Some(Answer::ok(payment_intent(intent, expand))),
                            webhooks,
                            ..Effects::default()
                        }
                    }
                    None => answer(no_such("payment_intent", id)),
                }
            }
            _ => answer(not_found(path)),
        }
    }

    /// Applies the steps of `id` that are due (the timer of a slow scenario).
    pub fn wake(&self, id: &str) -> Vec<WebhookEvent> {
        let mut state = self.state();
        state
            .intents
            .get_mut(id)
            .map(|intent| advance(intent, now_ms()))
            .unwrap_or_default()
    }

    fn create(&self, state: &mut State, params: &BTreeMap<String, String>) -> Effects {
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
            Scenario::Succeeded | Scenario::LostAnswer => intent.steps.push_back((now, Step::Succeed)),
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
        if scenario == Scenario::Succeeded || scenario == Scenario::LostAnswer {
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
        }
    }
}

/// `GET /v1/payment_intents/search`: the one query our client asks, `metadata['payment_id']:'<id>'`.
fn search(state: &State, params: &BTreeMap<String, String>) -> Effects {
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

fn answer(answer: Answer) -> Effects {
    Effects {
        answer: Some(answer),
        ..Effects::default()
    }
}

fn storm_answer(status: u16) -> Answer {
    if status == 429 {
        Answer::error(
            429,
            "invalid_request_error",
            Some("rate_limit"),
            "Too many requests hit the API too quickly.",
            json!({}),
        )
    } else {
        Answer::error(status, "api_error", None, "An unknown error occurred.", json!({}))
    }
}

fn missing(param: &str) -> Answer {
    Answer::error(
        400,
        "invalid_request_error",
        Some("parameter_missing"),
        &format!("Missing or invalid required param: {param}."),
        json!({ "param": param }),
    )
}

fn no_such(object: &str, id: &str) -> Answer {
    Answer::error(
        404,
        "invalid_request_error",
        Some("resource_missing"),
        &format!("No such {object}: '{id}'"),
        json!({ "param": "id" }),
    )
}

fn not_found(path: &str) -> Answer {
    Answer::error(
        404,
        "invalid_request_error",
        None,
        &format!("Unrecognized request URL ({path})."),
        json!({}),
    )
}

/// Applies the due steps; returns their webhooks.
fn advance(intent: &mut Intent, now: i64) -> Vec<WebhookEvent> {
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

fn cancel(state: &mut State, id: &str, params: &BTreeMap<String, String>) -> Effects {
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

fn refund(state: &mut State, params: &BTreeMap<String, String>) -> Effects {
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
    charge.amount_refunded += amount;
    let charge_id = charge.id.clone();
    let refund = json!({ "id": refund_id, "object": "refund", "amount": amount, "balance_transaction": null,
        "charge": charge_id, "created": now / 1000, "currency": intent.currency, "metadata": {},
        "payment_intent": intent.id, "reason": null, "receipt_number": null, "status": "succeeded" });
    if intent.webhooks {
        webhooks.push(charge_refunded_event(intent, now));
    }
    Effects {
        answer: Some(Answer::ok(refund)),
        webhooks,
        ..Effects::default()
    }
}

/// The Charge object of a succeeded intent.
fn charge_object(intent: &Intent, charge: &ChargeState) -> Value {
    json!({ "id": charge.id, "object": "charge", "amount": intent.amount, "amount_captured": intent.amount,
        "amount_refunded": charge.amount_refunded, "captured": true, "created": charge.created,
        "currency": intent.currency, "livemode": false, "metadata": intent.metadata, "paid": true,
        "payment_intent": intent.id, "refunded": charge.amount_refunded == intent.amount, "status": "succeeded" })
}

/// The PaymentIntent object as Stripe returns it (the fields every integration reads, with Stripe's names
/// and types), with `latest_charge` expanded when asked.
fn payment_intent(intent: &Intent, expand_charge: bool) -> Value {
    let next_action = (intent.status == "requires_action").then(|| {
        json!({ "type": "redirect_to_url", "redirect_to_url": {
            "url": format!("https://psp.example/3ds/{}", intent.id),
            "return_url": intent.return_url.clone().unwrap_or_else(|| "https://shop.example/return".into()) } })
    });
    let latest_charge = match &intent.charge {
        Some(charge) if expand_charge => charge_object(intent, charge),
        Some(charge) => json!(charge.id),
        None => Value::Null,
    };
    let amount_received = if intent.status == "succeeded" { intent.amount } else { 0 };
    json!({
        "id": intent.id, "object": "payment_intent", "amount": intent.amount, "amount_capturable": 0,
        "amount_received": amount_received, "capture_method": "automatic",
        "cancellation_reason": intent.cancellation_reason,
        "client_secret": format!("{}_secret_sim{}", intent.id, intent.created),
        "confirmation_method": "automatic", "created": intent.created, "currency": intent.currency,
        "last_payment_error": intent.last_payment_error, "latest_charge": latest_charge, "livemode": false,
        "metadata": intent.metadata, "next_action": next_action, "payment_method": format!("pm_{}", scenario_name(intent.scenario)),
        "payment_method_types": ["card"], "status": intent.status,
    })
}

fn scenario_name(s: Scenario) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn event(id: String, kind: &'static str, object: Value, now: i64) -> WebhookEvent {
    let body = json!({ "id": id, "object": "event", "api_version": shared::psp::client::STRIPE_API_VERSION,
        "created": now / 1000, "livemode": false, "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null }, "type": kind, "data": { "object": object } });
    WebhookEvent { id, kind, body }
}

fn event_id() -> String {
    format!("evt_sim{}", uuid::Uuid::new_v4().simple())
}

/// The webhook for the intent's current status.
fn event_of(intent: &Intent, now: i64) -> WebhookEvent {
    let kind = match (intent.status, intent.last_payment_error.is_some()) {
        ("succeeded", _) => "payment_intent.succeeded",
        ("canceled", _) => "payment_intent.canceled",
        ("processing", _) => "payment_intent.processing",
        ("requires_action", _) => "payment_intent.requires_action",
        (_, true) => "payment_intent.payment_failed",
        _ => "payment_intent.created",
    };
    event(event_id(), kind, payment_intent(intent, false), now)
}

fn charge_refunded_event(intent: &Intent, now: i64) -> WebhookEvent {
    let object = intent
        .charge
        .as_ref()
        .map(|c| charge_object(intent, c))
        .unwrap_or(Value::Null);
    event(event_id(), "charge.refunded", object, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Ledger {
        Ledger::new("sk_test_k", Timings::default(), None)
    }

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn create(l: &Ledger, key: &str, method: &str) -> Effects {
        let p = params(&[
            ("amount", "1000"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("payment_method", method),
            ("metadata[payment_id]", "pay_1"),
        ]);
        l.handle("POST", "/v1/payment_intents", Some("Bearer sk_test_k"), Some(key), &p)
    }

    #[test]
    fn a_repeated_key_replays_the_first_answer_and_other_parameters_are_an_idempotency_error() {
        let l = ledger();
        let first = create(&l, "k1", "pm_requires_action");
        assert_eq!(first.webhooks.len(), 2, "requires_action, then succeeded at once");
        let again = create(&l, "k1", "pm_requires_action");
        assert_eq!(again.answer, first.answer);
        assert!(again.webhooks.is_empty());
        let other = create(&l, "k1", "pm_succeeded").answer.unwrap();
        assert_eq!(
            (other.status, other.body["error"]["type"].as_str()),
            (400, Some("idempotency_error"))
        );
        assert_eq!(l.intents_for("pay_1").len(), 1);
    }

    #[test]
    fn refunds_are_bounded_by_the_charge_and_partial_refunds_add_up() {
        let l = ledger();
        let pi = create(&l, "k", "pm_succeeded").answer.unwrap().body["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let refund = |key: &str, amount: Option<&str>| {
            let mut p = params(&[("payment_intent", pi.as_str())]);
            if let Some(a) = amount {
                p.insert("amount".into(), a.into());
            }
            l.handle("POST", "/v1/refunds", Some("Bearer sk_test_k"), Some(key), &p)
                .answer
                .unwrap()
        };
        assert_eq!(refund("r1", Some("400")).body["amount"], 400);
        assert_eq!(
            refund("r1", Some("400")).body["amount"],
            400,
            "replayed, not refunded again"
        );
        assert_eq!(refund("r2", Some("700")).body["error"]["code"], "amount_too_large");
        assert_eq!(refund("r3", None).body["amount"], 600, "the rest");
        let got = l.handle(
            "GET",
            &format!("/v1/payment_intents/{pi}"),
            Some("Bearer sk_test_k"),
            None,
            &params(&[("expand[]", "latest_charge")]),
        );
        assert_eq!(got.answer.unwrap().body["latest_charge"]["amount_refunded"], 1000);
    }

    #[test]
    fn requests_without_the_key_are_refused() {
        let l = ledger();
        let e = l.handle(
            "GET",
            "/v1/payment_intents/pi_x",
            Some("Bearer sk_wrong"),
            None,
            &BTreeMap::new(),
        );
        assert_eq!(e.answer.unwrap().status, 401);
        assert_eq!(l.auth_counts(), (0, 1));
    }
}
