//! The simulated PSP's state, with Stripe's rules: PaymentIntents that move through Stripe's statuses by
//! scenario, Charges that carry refunds, Refunds, Stripe's error objects, and Stripe's idempotency (the same
//! key with the same parameters replays the first answer, with other parameters is an `idempotency_error`).
//!
//! Objects are built here as Stripe documents them, independently of the client in the `psp` crate, so the
//! client is tested against Stripe's shapes and not against itself (`tests/fixtures.rs` compares them with
//! Stripe's published fixtures).
//!
//! A scenario is a timeline: the state the create answer shows, then steps. Steps due at once are applied
//! right after the answer is built and their webhooks go out in one batch with the first (so the delivery's
//! reordering and duplicates race them); later steps (the slow scenarios) are applied when due, by a timer or
//! by the next request that touches the intent.
//!
//! Here: the ledger's state and its request dispatch; `operations` holds what each request does, `objects`
//! Stripe's object shapes and events, `answers` Stripe's error answers.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

mod answers;
mod capture;
mod disputes;
mod endpoints;
mod events;
mod health;
mod objects;
mod operations;
mod refunds;

mod keys;
mod rules;
pub use rules::{LoggedRequest, RETURN_URL_REQUIRED};

pub use answers::LOCK_TIMEOUT;
use answers::{answer, no_such, not_found, storm_answer};
use capture::advance;
pub use capture::{CaptureMethod, AUTHORIZATION_VALIDITY};
use objects::payment_intent;
use operations::{cancel, refund, search};
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
    /// `succeeded` at once, but every refund of it fails (the card expired): the refund is answered `pending`
    /// (replayed so for its key), then `refund.created` (pending), `refund.updated` and `refund.failed`
    /// (failed, `failure_reason` `expired_or_canceled_card`) are sent and the charge keeps its money.
    RefundFails,
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
    /// The answer is one saved for the idempotency key, replayed: sent with `Idempotent-Replayed: true`.
    pub replayed: bool,
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
    /// `capture_method`: with `manual`, a successful confirm stops at `requires_capture` (an authorization).
    capture_method: CaptureMethod,
    /// `amount_capturable`: what a capture may still take (the authorized amount while `requires_capture`).
    amount_capturable: u64,
}

#[derive(Debug, Clone)]
struct ChargeState {
    id: String,
    amount_refunded: u64,
    created: i64,
    /// `captured`: false for an authorization not (yet) captured.
    captured: bool,
    /// `amount_captured`.
    amount_captured: u64,
    /// `payment_method_details.card.capture_before` (epoch seconds) of an authorization (manual capture):
    /// past it, an uncaptured charge is released and its PaymentIntent canceled (`automatic`).
    capture_before: Option<i64>,
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
    /// Requests on a PaymentIntent still to answer `lock_timeout` ([`Ledger::lock`]): (intent id, count).
    locked: Option<(String, u32)>,
    /// Keyed POSTs still to fail with a 500 saved under their key ([`Ledger::fail_saved`]).
    saved_failures: u32,
    /// Requests still to hold before answering, and for how long ([`Ledger::hang`]).
    hang: Option<(Duration, u32)>,
    /// Every request, by whether it carried the right Bearer key.
    authorized: u64,
    unauthorized: u64,
    /// Disputes by charge id ([`Ledger::dispute`]).
    disputes: HashMap<String, disputes::SimDispute>,
    /// Every event created, in order (`GET /v1/events`).
    events: Vec<events::Recorded>,
    /// Every refund made, by id, as it stands now (`GET /v1/refunds/{id}`).
    refunds: HashMap<String, Value>,
    /// Share of webhooks lost on purpose ([`Ledger::lose_webhooks`]).
    loss_rate: f64,
    /// The account's webhook endpoints (`GET /v1/webhook_endpoints`), oldest first.
    webhook_endpoints: Vec<Value>,
    /// Event types Stripe fails to generate ([`Ledger::fail_event_generation`]).
    never_generated: Vec<&'static str>,
    /// The failure events made in their place, full (`GET /v2/core/events/{id}`).
    generation_failures: Vec<Value>,
}

/// The simulated PSP account.
pub struct Ledger {
    state: Mutex<State>,
    /// The account's keys (rolled by [`Ledger::roll_key`]).
    keys: Mutex<keys::Keys>,
    /// The requests received, oldest first ([`Ledger::requests`]).
    requests: Mutex<VecDeque<LoggedRequest>>,
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

/// A path's segments (`/v1/refunds/re_1` is `["v1", "refunds", "re_1"]`), which the routes match on.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// What answers a request before any work, counting it as authorized or not: a wrong key (`unauthorized`,
/// already decided), a rule Stripe checks first ([`rules::refusal`]), or a forced storm answer (429/5xx).
fn refused_before_work(
    state: &mut State,
    unauthorized: Option<Answer>,
    method: &str,
    path: &str,
    idempotency_key: Option<&str>,
    params: &BTreeMap<String, String>,
) -> Option<Answer> {
    if unauthorized.is_some() {
        state.unauthorized += 1;
        return unauthorized;
    }
    state.authorized += 1;
    if let Some(refused) = rules::refusal(method, path, idempotency_key, params) {
        return Some(refused);
    }
    if let Some((intent, left)) = &mut state.locked {
        if segments(path).contains(&intent.as_str()) || params.values().any(|v| v == intent) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                state.locked = None;
            }
            return Some(answers::lock_timeout());
        }
    }
    let (status, left) = state.storm?;
    state.storm = (left > 1).then_some((status, left - 1));
    Some(storm_answer(status))
}

/// The answer to a key seen before: the first answer replayed (`Idempotent-Replayed: true`) when `request`
/// has the first request's parameters, else Stripe's `idempotency_error`.
fn replay(first: &Remembered, request: &str) -> Effects {
    if first.request != request {
        return answer(Answer::error(
            400,
            "idempotency_error",
            None,
            "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            json!({}),
        ));
    }
    Effects {
        replayed: true,
        ..answer(first.answer.clone())
    }
}

/// Whether the request asks for the PaymentIntent's charge expanded (`expand[]=latest_charge`).
fn expands_charge(params: &BTreeMap<String, String>) -> bool {
    params
        .iter()
        .any(|(k, v)| k.starts_with("expand[") && v == "latest_charge")
}

/// The GET routes: search, events, a refund, a PaymentIntent (its due steps applied first, as the next
/// request that touches it does).
fn read(state: &mut State, method: &str, path: &str, params: &BTreeMap<String, String>) -> Effects {
    match (method, segments(path).as_slice()) {
        ("GET", ["v1", "payment_intents", "search"]) => search(state, params),
        ("GET", ["v1", "events"]) => events::list(&state.events, params),
        ("GET", ["v2", "core", "events", id]) => health::get(&state.generation_failures, id),
        ("GET", ["v1", "disputes", id]) => disputes::get(state, id),
        ("GET", ["v1", "webhook_endpoints"]) => endpoints::list(&state.webhook_endpoints, params),
        ("GET", ["v1", "webhook_endpoints", id]) => endpoints::get(&state.webhook_endpoints, id),
        ("GET", ["v1", "refunds"]) => refunds::list(&state.refunds, &state.intents, params),
        ("GET", ["v1", "refunds", id]) => match state.refunds.get(*id) {
            Some(refund) => answer(Answer::ok(refund.clone())),
            None => answer(no_such("refund", id)),
        },
        ("GET", ["v1", "payment_intents", id]) => {
            let expand = expands_charge(params);
            match state.intents.get_mut(*id) {
                Some(intent) => Effects {
                    webhooks: advance(intent, now_ms()),
                    ..answer(Answer::ok(payment_intent(intent, expand)))
                },
                None => answer(no_such("payment_intent", id)),
            }
        }
        _ => answer(not_found(path)),
    }
}

impl Ledger {
    /// An account whose secret key is `api_key`.
    pub fn new(api_key: impl Into<String>, timings: Timings, default_scenario: Option<Scenario>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            keys: Mutex::new(keys::Keys::new(api_key.into())),
            requests: Mutex::default(),
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

    /// The next `count` requests on PaymentIntent `intent` (its id in the path, or a parameter naming it, as a
    /// refund's `payment_intent`) find it locked by another request or a Stripe process (a webhook's handler
    /// touching it): answered 429 `lock_timeout` with `Stripe-Should-Retry: true`, and they do nothing.
    pub fn lock(&self, intent: &str, count: u32) {
        self.state().locked = (count > 0).then(|| (intent.to_owned(), count));
    }

    /// The next `count` keyed POSTs fail with a 500 `api_error` after their work began, and the answer is saved
    /// under their key as Stripe saves it: the same key gets the 500 replayed (`Idempotent-Replayed: true`)
    /// until the key is forgotten 24 hours later.
    pub fn fail_saved(&self, count: u32) {
        self.state().saved_failures = count;
    }

    /// The next `count` requests are held `delay` before they are handled and answered (a PSP that hangs:
    /// a client whose timeout is shorter gives up first).
    pub fn hang(&self, delay: Duration, count: u32) {
        self.state().hang = (count > 0).then_some((delay, count));
    }

    /// How long to hold the request now arriving ([`Ledger::hang`]), counting it.
    pub fn take_hang(&self) -> Option<Duration> {
        let mut state = self.state();
        let (delay, left) = state.hang?;
        state.hang = (left > 1).then_some((delay, left - 1));
        Some(delay)
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

    /// Every refund made of the PaymentIntent `payment_intent`, as it stands now (a test's count of them).
    pub fn refunds_of(&self, payment_intent: &str) -> Vec<Value> {
        self.state()
            .refunds
            .values()
            .filter(|r| r["payment_intent"] == payment_intent)
            .cloned()
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
        if let Some(effects) = self.dispute_admin(method, path, params) {
            return effects;
        }
        if let Some(effects) = self.admin(method, path, params) {
            return effects;
        }
        self.log(method, path, params);
        let unauthorized = self.keys().refusal(authorization, now_ms());
        let mut state = self.state();
        if let Some(refused) = refused_before_work(&mut state, unauthorized, method, path, idempotency_key, params) {
            return answer(refused);
        }
        if method == "POST" {
            return self.keyed_post(&mut state, path, idempotency_key, params);
        }
        read(&mut state, method, path, params)
    }

    /// A POST under its idempotency key, as Stripe keeps them: a key seen with other parameters is an
    /// `idempotency_error`, with the same ones replays the first answer; otherwise the work is done (or a
    /// saved failure injected) and its answer remembered for [`KEY_RETENTION_MS`].
    fn keyed_post(
        &self,
        state: &mut State,
        path: &str,
        idempotency_key: Option<&str>,
        params: &BTreeMap<String, String>,
    ) -> Effects {
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
        let request = fingerprint("POST", path, params);
        let keys_now = now_ms().saturating_add(state.keys_aged_ms);
        state
            .keys
            .retain(|_, k| keys_now.saturating_sub(k.at_ms) < KEY_RETENTION_MS);
        if let Some(first) = state.keys.get(key) {
            return replay(first, &request);
        }
        let effects = if state.saved_failures > 0 {
            state.saved_failures -= 1;
            answer(storm_answer(500))
        } else {
            match self.post(state, path, params) {
                Some(effects) => effects,
                None => return answer(not_found(path)),
            }
        };
        if let Some(a) = &effects.answer {
            let remembered = Remembered {
                request,
                answer: a.clone(),
                at_ms: keys_now,
            };
            state.keys.insert(key.to_owned(), remembered);
        }
        effects
    }

    /// Does the work of a POST, or `None` for a path this simulator does not serve.
    fn post(&self, state: &mut State, path: &str, params: &BTreeMap<String, String>) -> Option<Effects> {
        Some(match segments(path).as_slice() {
            ["v1", "payment_intents"] => self.create(state, params),
            ["v1", "payment_intents", id, "cancel"] => cancel(state, id, params),
            ["v1", "payment_intents", id, "capture"] => capture::capture(state, id, params),
            ["v1", "refunds"] => disputes::refused_refund(state, params).unwrap_or_else(|| refund(state, params)),
            ["v1", "webhook_endpoints"] => endpoints::create(state, params),
            _ => return None,
        })
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
}

#[cfg(test)]
mod tests;
