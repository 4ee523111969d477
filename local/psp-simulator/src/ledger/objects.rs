//! Stripe's objects as the API and webhooks show them: the PaymentIntent with its latest charge, the Charge,
//! and the events (`payment_intent.*`, `charge.refunded`).

use super::{ChargeState, Intent, Scenario, WebhookEvent};
use serde_json::{json, Value};

/// The Charge object of a succeeded (or authorized) intent; an authorization's card details carry its
/// `capture_before`.
fn charge_object(intent: &Intent, charge: &ChargeState) -> Value {
    let card = json!({ "capture_before": charge.capture_before });
    json!({ "id": charge.id, "object": "charge", "amount": intent.amount, "amount_captured": charge.amount_captured,
        "amount_refunded": charge.amount_refunded, "captured": charge.captured, "created": charge.created,
        "currency": intent.currency, "livemode": false, "metadata": intent.metadata, "paid": true,
        "payment_intent": intent.id, "payment_method_details": { "type": "card", "card": card },
        "refunded": charge.amount_refunded == intent.amount, "status": "succeeded" })
}

/// The PaymentIntent object as Stripe returns it (the fields every integration reads, with Stripe's names
/// and types), with `latest_charge` expanded when asked.
pub(super) fn payment_intent(intent: &Intent, expand_charge: bool) -> Value {
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
    let amount_received = match (&intent.charge, intent.status) {
        (Some(charge), "succeeded") => charge.amount_captured,
        _ => 0,
    };
    json!({
        "id": intent.id, "object": "payment_intent", "amount": intent.amount,
        "amount_capturable": intent.amount_capturable, "amount_received": amount_received,
        "capture_method": intent.capture_method.as_str(),
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

pub(super) fn event(id: String, kind: &'static str, object: Value, now: i64) -> WebhookEvent {
    let body = json!({ "id": id, "object": "event", "api_version": psp::stripe::STRIPE_API_VERSION,
        "created": now / 1000, "livemode": false, "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null }, "type": kind, "data": { "object": object } });
    WebhookEvent { id, kind, body }
}

pub(super) fn event_id() -> String {
    format!("evt_sim{}", uuid::Uuid::new_v4().simple())
}

/// The webhook for the intent's current status.
pub(super) fn event_of(intent: &Intent, now: i64) -> WebhookEvent {
    let kind = match (intent.status, intent.last_payment_error.is_some()) {
        ("succeeded", _) => "payment_intent.succeeded",
        ("canceled", _) => "payment_intent.canceled",
        ("processing", _) => "payment_intent.processing",
        ("requires_action", _) => "payment_intent.requires_action",
        ("requires_capture", _) => "payment_intent.amount_capturable_updated",
        (_, true) => "payment_intent.payment_failed",
        _ => "payment_intent.created",
    };
    event(event_id(), kind, payment_intent(intent, false), now)
}

/// A Refund object as Stripe shows it (the fields of Stripe's fixture); a failed one says why.
pub(super) fn refund_object(
    intent: &Intent,
    refund_id: &str,
    charge_id: &str,
    amount: u64,
    status: &str,
    now: i64,
) -> Value {
    let failure_reason = (status == "failed").then_some("expired_or_canceled_card");
    json!({ "id": refund_id, "object": "refund", "amount": amount, "balance_transaction": null,
        "charge": charge_id, "created": now / 1000, "currency": intent.currency, "metadata": {},
        "payment_intent": intent.id, "reason": null, "receipt_number": null, "status": status,
        "failure_reason": failure_reason })
}

pub(super) fn charge_refunded_event(intent: &Intent, now: i64) -> WebhookEvent {
    let object = intent
        .charge
        .as_ref()
        .map(|c| charge_object(intent, c))
        .unwrap_or(Value::Null);
    event(event_id(), "charge.refunded", object, now)
}
