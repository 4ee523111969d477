//! The simulated Adyen account: its payments and the Checkout API v71's rules, as its OpenAPI description
//! (`Adyen/adyen-openapi`, `CheckoutService-v71.json`) and docs state them.
//!
//! - **Authentication**: `X-API-Key` must be the account's key (401, `errorType` `security`, code `000`);
//!   `merchantAccount` must be the account's (403, code `901` "Invalid Merchant Account").
//! - **Required fields**: `/payments` needs `amount` {`value`, `currency`}, `merchantAccount`, `reference`
//!   (at most 80 characters), `paymentMethod` and `returnUrl` (required for every payment in v71, not only
//!   redirect methods: Adyen's own example of a 422 is "Return URL is missing.", code `14_030`); captures and
//!   refunds need `amount` and `merchantAccount`; cancels and reversals `merchantAccount`; `POST /cancels`
//!   `merchantAccount` and `paymentReference`. A missing or mistyped field is a 422 `validation` error, and
//!   a body that is not JSON a 400 (code `702`). Errors are `{status, errorCode, message, errorType,
//!   pspReference}`.
//! - **Idempotency** (`Idempotency-Key`, at most 64 characters, else refused): the same key with the same
//!   request replays the first answer; with another request it is refused (422, the simulator's code `704`).
//!   Keys are per account, across endpoints, as Adyen keeps them. A refusal by validation is not kept.
//! - **Modifications are asynchronous**: a capture, cancel, refund or reversal of a known payment is answered
//!   201 `{"status": "received", ...}` with the modification's own `pspReference`; whether it worked arrives
//!   only as a notification ([`Notice`]), e.g. a capture of a cancelled payment is received and then
//!   notified `success: false`. An unknown payment is a 422 ("Original pspReference required for this
//!   operation.", code `167`).
//!
//! The error codes the published examples do not give are the simulator's own choice; callers branch on the
//! HTTP status and `errorType`, as Adyen's libraries do.

use super::cards::{Refusal, Scenario};
use crate::ledger::Answer;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

/// Characters an `Idempotency-Key` may have.
pub const MAX_KEY_CHARS: usize = 64;
/// Characters a payment's `reference` may have.
pub const MAX_REFERENCE_CHARS: usize = 80;
/// The message of the 422 for a payment without `returnUrl` (Adyen's published example).
pub const RETURN_URL_MISSING: &str = "Return URL is missing.";

/// One outcome Adyen reports by notification. `psp_reference` is the payment's for `AUTHORISATION`, the
/// modification's for the others (the payment's is then `original_reference`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub event_code: &'static str,
    pub psp_reference: String,
    pub original_reference: Option<String>,
    pub merchant_reference: String,
    pub value: u64,
    pub currency: String,
    pub success: bool,
    pub reason: Option<String>,
}

/// What a request did: the answer, whether it is a replay for its key, and the notifications it causes.
#[derive(Debug)]
pub struct Handled {
    pub answer: Answer,
    pub replayed: bool,
    pub notices: Vec<Notice>,
}

impl Handled {
    /// An answer that notifies nothing.
    pub fn answer(answer: Answer) -> Self {
        Self {
            answer,
            replayed: false,
            notices: Vec::new(),
        }
    }
}

/// Adyen's error object.
pub fn error(status: u16, code: &str, message: &str, kind: &str) -> Answer {
    let mut body = json!({ "status": status, "errorCode": code, "message": message, "errorType": kind });
    // Adyen gives a pspReference to requests it processed (422, 403, 500), not to a refused key or bad JSON.
    if !matches!(status, 400 | 401) {
        body["pspReference"] = json!(psp_reference());
    }
    Answer { status, body }
}

fn invalid(code: &str, message: &str) -> Answer {
    error(422, code, message, "validation")
}

fn required(field: &str) -> Answer {
    invalid("14_006", &format!("Required field '{field}' is not provided."))
}

/// A new 16-character pspReference (Adyen's are 16 letters and digits).
pub fn psp_reference() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_ascii_uppercase()
}

/// Where a payment stands at Adyen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// `RedirectShopper`: waiting for the shopper's 3-D Secure challenge (`/payments/details`).
    AwaitingShopper,
    Authorised,
    Refused,
    Cancelled,
}

#[derive(Debug, Clone)]
struct Payment {
    psp_reference: String,
    reference: String,
    value: u64,
    currency: String,
    scenario: Scenario,
    status: Status,
    captured: u64,
    refunded: u64,
}

/// A payment as Adyen holds it (no API reads it back, as Adyen has none: for the demos' final checks, and
/// the simulator's admin route `GET /_sim/references/{reference}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PaymentView {
    pub status: Status,
    /// Minor units captured and refunded (a capture or refund that failed after it was received is not).
    pub captured: u64,
    pub refunded: u64,
}

/// The first request and answer seen with an idempotency key.
#[derive(Debug, Clone)]
struct Remembered {
    request: (String, Value),
    answer: Answer,
}

#[derive(Default)]
struct State {
    payments: HashMap<String, Payment>,
    /// Merchant reference → the latest payment with it (`POST /cancels`).
    by_reference: HashMap<String, String>,
    /// `redirectResult` → payment, while its challenge is open.
    challenges: HashMap<String, String>,
    keys: HashMap<String, Remembered>,
    /// Statuses the next requests are answered with before any work (an outage).
    storm: VecDeque<u16>,
}

/// The account: its key, its merchant account, its state.
pub struct AdyenLedger {
    api_key: String,
    merchant_account: String,
    state: Mutex<State>,
}

/// The request body's amount: `{value, currency}` with a non-negative integer and a 3-letter currency code.
fn amount(body: &Value) -> Result<(u64, String), Answer> {
    let amount = body
        .get("amount")
        .filter(|a| a.is_object())
        .ok_or_else(|| required("amount"))?;
    let value = amount.get("value").ok_or_else(|| required("amount.value"))?;
    let value = value
        .as_u64()
        .ok_or_else(|| invalid("137", "Invalid amount specified"))?;
    let currency = amount
        .get("currency")
        .and_then(Value::as_str)
        .ok_or_else(|| required("amount.currency"))?;
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(invalid("138", "Unsupported currency specified"));
    }
    Ok((value, currency.to_owned()))
}

fn text<'b>(body: &'b Value, field: &str) -> Result<&'b str, Answer> {
    body.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| required(field))
}

impl AdyenLedger {
    /// An account whose API key is `api_key` and whose merchant account is `merchant_account`.
    pub fn new(api_key: impl Into<String>, merchant_account: impl Into<String>) -> Self {
        Self {
            api_key: api_key.into(),
            merchant_account: merchant_account.into(),
            state: Mutex::new(State::default()),
        }
    }

    /// The merchant account notifications name (`merchantAccountCode`).
    pub fn merchant_account(&self) -> &str {
        &self.merchant_account
    }

    /// The payment whose pspReference is `psp_reference`, as it stands.
    pub fn view(&self, psp_reference: &str) -> Option<PaymentView> {
        self.lock().payments.get(psp_reference).map(|p| PaymentView {
            status: p.status,
            captured: p.captured,
            refunded: p.refunded,
        })
    }

    /// The latest payment whose merchant `reference` is `reference`, or (an admin read, not Adyen's rule)
    /// whose reference is `reference` with a stage (ours: `<payment id>@<stage>`), as it stands.
    pub fn view_by_reference(&self, reference: &str) -> Option<PaymentView> {
        let psp = {
            let state = self.lock();
            let staged = |key: &String| key.rsplit_once('@').is_some_and(|(id, _)| id == reference);
            state
                .by_reference
                .get(reference)
                .or_else(|| {
                    state
                        .by_reference
                        .iter()
                        .find(|(key, _)| staged(key))
                        .map(|(_, psp)| psp)
                })
                .cloned()?
        };
        self.view(&psp)
    }

    /// The next `count` requests (with a valid key) are answered `status` without any work.
    pub fn storm(&self, status: u16, count: usize) {
        self.lock().storm.extend(std::iter::repeat_n(status, count));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One request: `path` as sent (`/v71/...`), the `X-API-Key` and `Idempotency-Key` headers, the body.
    pub fn handle(&self, method: &str, path: &str, api_key: Option<&str>, key: Option<&str>, body: &[u8]) -> Handled {
        if api_key != Some(self.api_key.as_str()) {
            return Handled::answer(error(401, "000", "HTTP Status Response - Unauthorized", "security"));
        }
        let mut state = self.lock();
        if let Some(status) = state.storm.pop_front() {
            return Handled::answer(error(status, "000", "Service temporarily unavailable", "internal"));
        }
        if key.is_some_and(|k| k.chars().count() > MAX_KEY_CHARS) {
            return Handled::answer(invalid("702", "Idempotency-Key longer than 64 characters"));
        }
        let body: Value = match serde_json::from_slice(body) {
            Ok(body @ Value::Object(_)) => body,
            _ => {
                return Handled::answer(error(
                    400,
                    "702",
                    "Unexpected input: expected a JSON object",
                    "validation",
                ))
            }
        };
        let request = (format!("{method} {path}"), body);
        if let Some(seen) = key.and_then(|k| state.keys.get(k)) {
            if seen.request != request {
                return Handled::answer(invalid("704", "Idempotency-Key already used with another request"));
            }
            return Handled {
                answer: seen.answer.clone(),
                replayed: true,
                notices: Vec::new(),
            };
        }
        let handled = self.route(&mut state, &request.0, &request.1);
        // Only work done is kept under the key: a refused request may be corrected and sent again.
        if let (Some(key), true) = (key, (200..300).contains(&handled.answer.status)) {
            let answer = handled.answer.clone();
            state.keys.insert(key.to_owned(), Remembered { request, answer });
        }
        handled
    }

    fn route(&self, state: &mut State, request: &str, body: &Value) -> Handled {
        let parts: Vec<&str> = request.split(['/', ' ']).filter(|p| !p.is_empty()).collect();
        let outcome = match parts.as_slice() {
            ["POST", "v71", "payments"] => self.pay(state, body),
            ["POST", "v71", "payments", "details"] => details(state, body),
            ["POST", "v71", "payments", psp, operation] => self.modify(state, psp, operation, body),
            ["POST", "v71", "cancels"] => self.cancel_by_reference(state, body),
            _ => Err(error(404, "000", "Not Found", "validation")),
        };
        outcome.unwrap_or_else(Handled::answer)
    }

    fn account(&self, body: &Value) -> Result<(), Answer> {
        if text(body, "merchantAccount")? != self.merchant_account {
            return Err(error(403, "901", "Invalid Merchant Account", "security"));
        }
        Ok(())
    }

    fn pay(&self, state: &mut State, body: &Value) -> Result<Handled, Answer> {
        let (value, currency) = amount(body)?;
        self.account(body)?;
        let reference = text(body, "reference")?;
        if reference.chars().count() > MAX_REFERENCE_CHARS {
            return Err(invalid("14_019", "Field 'reference' is longer than 80 characters"));
        }
        let method = body
            .get("paymentMethod")
            .filter(|m| m.get("type").and_then(Value::as_str).is_some())
            .ok_or_else(|| required("paymentMethod"))?;
        let return_url = body
            .get("returnUrl")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| invalid("14_030", RETURN_URL_MISSING))?;
        let mut payment = Payment {
            psp_reference: psp_reference(),
            reference: reference.to_owned(),
            value,
            currency,
            scenario: Scenario::of(method),
            status: Status::AwaitingShopper,
            captured: 0,
            refunded: 0,
        };
        state
            .by_reference
            .insert(payment.reference.clone(), payment.psp_reference.clone());
        if payment.scenario.challenge {
            let token = format!("sim{}", uuid::Uuid::new_v4().simple());
            state.challenges.insert(token.clone(), payment.psp_reference.clone());
            let answer = redirect(&payment, return_url, &token);
            state.payments.insert(payment.psp_reference.clone(), payment);
            return Ok(Handled::answer(answer));
        }
        let refusal = payment.scenario.refusal;
        let handled = decide(&mut payment, refusal);
        state.payments.insert(payment.psp_reference.clone(), payment);
        Ok(handled)
    }

    /// `/payments/{pspReference}/{captures|cancels|refunds|reversals}`.
    fn modify(&self, state: &mut State, psp: &str, operation: &str, body: &Value) -> Result<Handled, Answer> {
        let money = match operation {
            "captures" | "refunds" => Some(amount(body)?),
            "cancels" | "reversals" => None,
            _ => return Err(error(404, "000", "Not Found", "validation")),
        };
        self.account(body)?;
        let payment = state
            .payments
            .get_mut(psp)
            .ok_or_else(|| invalid("167", "Original pspReference required for this operation."))?;
        let modification = psp_reference();
        let has_amount = money.is_some();
        let notices = match (operation, money) {
            ("captures", Some(money)) => capture(payment, &modification, money),
            ("refunds", Some(money)) => refund(payment, &modification, money),
            ("cancels", _) => vec![cancel(payment, &modification, "CANCELLATION")],
            _ => vec![cancel_or_refund(payment, &modification, "CANCEL_OR_REFUND")],
        };
        let mut answer = json!({
            "merchantAccount": self.merchant_account,
            "paymentPspReference": psp,
            "pspReference": modification,
            "status": "received",
        });
        if let Some(reference) = body.get("reference") {
            answer["reference"] = reference.clone();
        }
        if let Some(amount) = body.get("amount").filter(|_| has_amount) {
            answer["amount"] = amount.clone();
        }
        Ok(Handled {
            answer: Answer {
                status: 201,
                body: answer,
            },
            replayed: false,
            notices,
        })
    }

    /// `POST /cancels`: the payment is named by our own reference (its pspReference may never have reached
    /// us). Notified as `TECHNICAL_CANCEL`; a reference Adyen has no payment for is notified `success: false`.
    fn cancel_by_reference(&self, state: &mut State, body: &Value) -> Result<Handled, Answer> {
        self.account(body)?;
        let reference = text(body, "paymentReference")?;
        let modification = psp_reference();
        let found = state.by_reference.get(reference).cloned();
        let notice = match found.and_then(|psp| state.payments.get_mut(&psp)) {
            Some(payment) => {
                state.challenges.retain(|_, psp| *psp != payment.psp_reference);
                cancel_or_refund(payment, &modification, "TECHNICAL_CANCEL")
            }
            None => Notice {
                event_code: "TECHNICAL_CANCEL",
                psp_reference: modification.clone(),
                original_reference: None,
                merchant_reference: reference.to_owned(),
                value: 0,
                currency: String::new(),
                success: false,
                reason: Some("Unknown payment reference".into()),
            },
        };
        let mut answer = json!({
            "merchantAccount": self.merchant_account,
            "paymentReference": reference,
            "pspReference": modification,
            "status": "received",
        });
        if let Some(own) = body.get("reference") {
            answer["reference"] = own.clone();
        }
        Ok(Handled {
            answer: Answer {
                status: 201,
                body: answer,
            },
            replayed: false,
            notices: vec![notice],
        })
    }
}

/// The `RedirectShopper` answer: the simulated issuer approves at once and sends the shopper back to
/// `returnUrl` with the `redirectResult` that `/payments/details` takes. Without `pspReference`, as Adyen
/// answers a payment waiting for the shopper (`RedirectShopper`, `IdentifyShopper`, `ChallengeShopper`: "you
/// will get this value in the /payments/details response"); the `AUTHORISATION` notification carries it too.
fn redirect(payment: &Payment, return_url: &str, token: &str) -> Answer {
    let separator = if return_url.contains('?') { '&' } else { '?' };
    Answer {
        status: 200,
        body: json!({
            "resultCode": "RedirectShopper",
            "merchantReference": payment.reference,
            "action": {
                "type": "redirect",
                "paymentMethodType": "scheme",
                "method": "GET",
                "url": format!("{return_url}{separator}redirectResult={token}"),
            },
        }),
    }
}

/// The payment's final answer (`Authorised` or `Refused`) and its `AUTHORISATION` notification.
fn decide(payment: &mut Payment, refusal: Option<Refusal>) -> Handled {
    payment.status = if refusal.is_some() {
        Status::Refused
    } else {
        Status::Authorised
    };
    let mut body = json!({
        "pspReference": payment.psp_reference,
        "resultCode": if refusal.is_some() { "Refused" } else { "Authorised" },
        "merchantReference": payment.reference,
        "amount": { "value": payment.value, "currency": payment.currency },
    });
    if let Some(r) = refusal {
        body["refusalReason"] = json!(r.reason);
        body["refusalReasonCode"] = json!(r.code);
    }
    let notice = Notice {
        event_code: "AUTHORISATION",
        psp_reference: payment.psp_reference.clone(),
        original_reference: None,
        merchant_reference: payment.reference.clone(),
        value: payment.value,
        currency: payment.currency.clone(),
        success: refusal.is_none(),
        reason: refusal.map(|r| r.reason.to_owned()),
    };
    Handled {
        answer: Answer { status: 200, body },
        replayed: false,
        notices: vec![notice],
    }
}

/// `/payments/details` with `details.redirectResult`: the challenge ends, the payment is decided.
fn details(state: &mut State, body: &Value) -> Result<Handled, Answer> {
    let result = body
        .get("details")
        .and_then(|d| d.get("redirectResult"))
        .and_then(Value::as_str)
        .ok_or_else(|| required("details.redirectResult"))?;
    let psp = state
        .challenges
        .remove(result)
        .ok_or_else(|| invalid("14_018", "Invalid payload provided"))?;
    let payment = state
        .payments
        .get_mut(&psp)
        .ok_or_else(|| invalid("14_018", "Invalid payload provided"))?;
    let refusal = payment.scenario.refusal;
    Ok(decide(payment, refusal))
}

fn notice(payment: &Payment, event_code: &'static str, modification: &str, value: u64, failed: Option<&str>) -> Notice {
    Notice {
        event_code,
        psp_reference: modification.to_owned(),
        original_reference: Some(payment.psp_reference.clone()),
        merchant_reference: payment.reference.clone(),
        value,
        currency: payment.currency.clone(),
        success: failed.is_none(),
        reason: failed.map(str::to_owned),
    }
}

fn capture(payment: &mut Payment, modification: &str, (value, currency): (u64, String)) -> Vec<Notice> {
    let refused = match payment.status {
        _ if currency != payment.currency => Some("Currency does not match the payment"),
        Status::Authorised if payment.captured.saturating_add(value) <= payment.value => None,
        Status::Authorised => Some("Insufficient balance on payment"),
        _ => Some("Payment is not authorised"),
    };
    if refused.is_some() {
        return vec![notice(payment, "CAPTURE", modification, value, refused)];
    }
    let mut notices = vec![notice(payment, "CAPTURE", modification, value, None)];
    if payment.scenario.capture_fails || payment.scenario.recaptured {
        // Accepted, then refused by the scheme: the money does not move. Adyen reports the event that
        // happened, the capture's failure: `success: true`, the why in `reason` (as for `REFUND_FAILED`; the
        // intake acknowledges and ignores a `CAPTURE_FAILED` with `success: false`).
        let reason = if payment.scenario.recaptured {
            "Capture rejected by card scheme because of a technical issue"
        } else {
            "Capture failed"
        };
        notices.push(late(payment, "CAPTURE_FAILED", modification, value, reason));
    }
    if payment.scenario.recaptured {
        // Adyen fixes a technical failure and captures again: a `CAPTURE` under the capture's reference.
        notices.push(Notice {
            reason: Some("Transaction Recaptured".into()),
            ..notice(payment, "CAPTURE", modification, value, None)
        });
    }
    if !payment.scenario.capture_fails {
        payment.captured += value;
    }
    notices
}

/// A late failure of a modification accepted earlier (`success: true`, the why in `reason`), without the
/// payment's `originalReference` when the scenario leaves it out (Adyen does not require it there).
fn late(payment: &Payment, event_code: &'static str, modification: &str, value: u64, reason: &str) -> Notice {
    let mut late = notice(payment, event_code, modification, value, None);
    late.reason = Some(reason.to_owned());
    if payment.scenario.late_without_original {
        late.original_reference = None;
    }
    late
}

fn refund(payment: &mut Payment, modification: &str, (value, currency): (u64, String)) -> Vec<Notice> {
    let left = payment.captured.saturating_sub(payment.refunded);
    let refused = match () {
        _ if currency != payment.currency => Some("Currency does not match the payment"),
        _ if value > left => Some("Insufficient balance on payment"),
        _ => None,
    };
    if refused.is_some() {
        return vec![notice(payment, "REFUND", modification, value, refused)];
    }
    let mut notices = vec![notice(payment, "REFUND", modification, value, None)];
    let fails_once = std::mem::take(&mut payment.scenario.refund_fails_once);
    if payment.scenario.refund_fails || fails_once {
        // Adyen reports the event that happened, the refund's failure: `success: true`, the why in `reason`
        // (as the intake reads it: `REFUND_FAILED` with `success: false` is acknowledged and ignored).
        notices.push(late(payment, "REFUND_FAILED", modification, value, "Refund failed"));
    } else if payment.scenario.refund_reversed {
        // Refunded, then reversed: the money came back to the merchant's account.
        notices.push(late(
            payment,
            "REFUNDED_REVERSED",
            modification,
            value,
            "Refund reversed",
        ));
    } else {
        payment.refunded += value;
    }
    notices
}

/// Cancels an authorisation not captured (or a challenge not completed); refused once money moved.
fn cancel(payment: &mut Payment, modification: &str, event_code: &'static str) -> Notice {
    let refused = match payment.status {
        Status::Authorised | Status::AwaitingShopper if payment.captured == 0 => None,
        Status::Authorised | Status::AwaitingShopper => Some("Payment already captured"),
        Status::Cancelled => Some("Payment already cancelled"),
        Status::Refused => Some("Payment was refused"),
    };
    if refused.is_none() {
        payment.status = Status::Cancelled;
    }
    notice(payment, event_code, modification, payment.value, refused)
}

/// A reversal: cancelled if nothing was captured, else what is left of the capture refunded.
fn cancel_or_refund(payment: &mut Payment, modification: &str, event_code: &'static str) -> Notice {
    if payment.captured == 0 || payment.status != Status::Authorised {
        return cancel(payment, modification, event_code);
    }
    let left = payment.captured.saturating_sub(payment.refunded);
    if payment.scenario.refund_fails || left == 0 {
        return notice(payment, event_code, modification, left, Some("Refund failed"));
    }
    payment.refunded = payment.captured;
    notice(payment, event_code, modification, left, None)
}
