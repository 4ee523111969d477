//! The simulated PSP's state: payment intents by scenario, idempotent by key, with the webhook events each
//! one produces, refunds, and status queries for recovery.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;

/// How a charge plays out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// 3-D Secure: the sync answer asks for an action; the customer completes it; succeeded.
    RequiresAction,
    /// The sync answer says processing; succeeded later.
    Processing,
    /// Succeeded at once.
    Succeeded,
    /// Failed at once (cancelled).
    Failed,
    /// Declined; the customer gives up: payment_failed, then canceled.
    Declined,
    /// Processing, and no webhook ever comes: only recovery (a status query) finds the outcome.
    Silent,
}

impl Scenario {
    pub const ALL: [Scenario; 6] = [
        Self::RequiresAction,
        Self::Processing,
        Self::Succeeded,
        Self::Failed,
        Self::Declined,
        Self::Silent,
    ];
}

/// One payment intent at the PSP.
#[derive(Debug, Clone, Serialize)]
pub struct Intent {
    pub id: String,
    pub payment_id: String,
    pub amount_minor: u64,
    pub currency: String,
    /// The PSP's final status: succeeded, canceled, processing.
    pub status: String,
    pub amount_refunded: u64,
    pub scenario: Scenario,
}

/// A webhook the PSP will send, in the order it happened.
#[derive(Debug, Clone)]
pub struct WebhookEvent {
    pub id: String,
    pub kind: &'static str,
    pub body: Value,
}

#[derive(Default)]
pub struct Psp {
    intents: Mutex<HashMap<String, Intent>>,
    by_key: Mutex<HashMap<String, String>>,
    refunds_by_key: Mutex<HashMap<String, u64>>,
    seq: Mutex<u64>,
}

fn now_secs() -> i64 {
    shared::clock::now_ms() / 1000
}

impl Psp {
    pub fn new() -> Self {
        Self::default()
    }

    fn next_id(&self, prefix: &str) -> String {
        let mut seq = self.seq.lock().expect("lock");
        *seq += 1;
        format!("{prefix}_sim{:08}{:04x}", *seq, rand::random::<u16>())
    }

    /// The synchronous answer as the payments API's `sync-result` body.
    pub fn sync_answer(intent: &Intent) -> Value {
        let pi = &intent.id;
        match intent.scenario {
            Scenario::RequiresAction => json!({ "outcome": "requires_action", "psp_reference": pi,
                "client_secret": format!("{pi}_secret_sim"), "redirect_url": format!("https://psp.example/3ds/{pi}") }),
            Scenario::Processing | Scenario::Silent => json!({ "outcome": "processing", "psp_reference": pi }),
            Scenario::Succeeded => json!({ "outcome": "succeeded", "psp_reference": pi }),
            Scenario::Failed => json!({ "outcome": "failed", "reason": "card_declined_final", "psp_reference": pi }),
            Scenario::Declined => {
                json!({ "outcome": "attempt_failed", "decline_code": "insufficient_funds", "psp_reference": pi })
            }
        }
    }

    fn event(&self, kind: &'static str, intent: &Intent, extra: Value) -> WebhookEvent {
        let id = self.next_id("evt");
        let mut object = json!({ "id": intent.id, "object": "payment_intent", "amount": intent.amount_minor,
            "currency": intent.currency.to_lowercase(), "metadata": { "payment_id": intent.payment_id },
            "client_secret": format!("{}_secret_sim", intent.id) });
        if let (Some(o), Some(e)) = (object.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        let body = json!({ "id": id, "object": "event", "type": kind, "created": now_secs(), "livemode": false,
                           "data": { "object": object } });
        WebhookEvent { id, kind, body }
    }

    /// Creates (or, for a known idempotency key, returns again) a payment intent. New intents come with the
    /// webhooks they cause; a repeated key causes none: a retry never charges twice.
    pub fn charge(
        &self,
        key: &str,
        payment_id: &str,
        amount_minor: u64,
        currency: &str,
        scenario: Scenario,
    ) -> (Intent, Vec<WebhookEvent>) {
        if let Some(id) = self.by_key.lock().expect("lock").get(key).cloned() {
            let intent = self.intents.lock().expect("lock")[&id].clone();
            return (intent, Vec::new());
        }
        let status = match scenario {
            Scenario::RequiresAction | Scenario::Processing | Scenario::Succeeded | Scenario::Silent => "succeeded",
            Scenario::Failed | Scenario::Declined => "canceled",
        };
        let intent = Intent {
            id: self.next_id("pi"),
            payment_id: payment_id.to_owned(),
            amount_minor,
            currency: currency.to_owned(),
            status: status.to_owned(),
            amount_refunded: 0,
            scenario,
        };
        let redirect = json!({ "next_action": { "type": "redirect_to_url",
            "redirect_to_url": { "url": format!("https://psp.example/3ds/{}", intent.id) } } });
        let events =
            match scenario {
                Scenario::RequiresAction => vec![
                    self.event("payment_intent.requires_action", &intent, redirect),
                    self.event("payment_intent.succeeded", &intent, json!({})),
                ],
                Scenario::Processing => vec![
                    self.event("payment_intent.processing", &intent, json!({})),
                    self.event("payment_intent.succeeded", &intent, json!({})),
                ],
                Scenario::Succeeded => vec![self.event("payment_intent.succeeded", &intent, json!({}))],
                Scenario::Failed => vec![self.event(
                    "payment_intent.canceled",
                    &intent,
                    json!({ "cancellation_reason": "failed_invoice" }),
                )],
                Scenario::Declined => vec![
                self.event("payment_intent.payment_failed", &intent,
                    json!({ "last_payment_error": { "code": "card_declined", "decline_code": "insufficient_funds" } })),
                self.event("payment_intent.canceled", &intent, json!({ "cancellation_reason": "abandoned" })),
            ],
                Scenario::Silent => Vec::new(),
            };
        self.by_key
            .lock()
            .expect("lock")
            .insert(key.to_owned(), intent.id.clone());
        self.intents
            .lock()
            .expect("lock")
            .insert(intent.id.clone(), intent.clone());
        (intent, events)
    }

    /// Every intent created for our payment (a retried charge must not add one).
    pub fn intents_for(&self, payment_id: &str) -> Vec<Intent> {
        let intents = self.intents.lock().expect("lock");
        intents
            .values()
            .filter(|i| i.payment_id == payment_id)
            .cloned()
            .collect()
    }

    pub fn status(&self, intent_id: &str) -> Option<Intent> {
        self.intents.lock().expect("lock").get(intent_id).cloned()
    }

    /// Refunds `amount` of a succeeded intent, once per idempotency key; returns the cumulative refunded amount
    /// and the `charge.refunded` webhook (none for a repeated key).
    pub fn refund(&self, key: &str, intent_id: &str, amount: u64) -> Result<(u64, Option<WebhookEvent>), String> {
        if let Some(total) = self.refunds_by_key.lock().expect("lock").get(key) {
            return Ok((*total, None));
        }
        let mut intents = self.intents.lock().expect("lock");
        let intent = intents.get_mut(intent_id).ok_or("unknown payment intent")?;
        if intent.status != "succeeded" {
            return Err(format!("cannot refund a {} payment", intent.status));
        }
        if intent.amount_refunded + amount > intent.amount_minor {
            return Err("refund exceeds the captured amount".into());
        }
        intent.amount_refunded += amount;
        let total = intent.amount_refunded;
        let intent = intent.clone();
        drop(intents);
        self.refunds_by_key.lock().expect("lock").insert(key.to_owned(), total);
        let id = self.next_id("evt");
        let body = json!({ "id": id, "object": "event", "type": "charge.refunded", "created": now_secs(), "livemode": false,
            "data": { "object": { "id": format!("ch_{}", &intent.id[3..]), "object": "charge", "amount": intent.amount_minor,
                "amount_refunded": total, "currency": intent.currency.to_lowercase(), "captured": true,
                "payment_intent": intent.id, "metadata": { "payment_id": intent.payment_id } } } });
        Ok((
            total,
            Some(WebhookEvent {
                id,
                kind: "charge.refunded",
                body,
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_charges_once_and_sends_nothing_new() {
        let psp = Psp::new();
        let (a, events) = psp.charge("k1", "pay_1", 1000, "EUR", Scenario::RequiresAction);
        assert_eq!(events.len(), 2);
        let (b, again) = psp.charge("k1", "pay_1", 1000, "EUR", Scenario::RequiresAction);
        assert_eq!((a.id, again.len()), (b.id, 0));
    }

    #[test]
    fn refunds_are_idempotent_and_bounded() {
        let psp = Psp::new();
        let (pi, _) = psp.charge("k", "pay_1", 1000, "EUR", Scenario::Succeeded);
        assert_eq!(psp.refund("r1", &pi.id, 400).unwrap().0, 400);
        assert!(
            psp.refund("r1", &pi.id, 400).unwrap().1.is_none(),
            "a retry refunds nothing more"
        );
        assert!(psp.refund("r2", &pi.id, 700).is_err());
        let (failed, _) = psp.charge("k2", "pay_2", 1000, "EUR", Scenario::Failed);
        assert!(psp.refund("r3", &failed.id, 1).is_err());
    }
}
