//! Disputes: a captured charge disputed on demand, with the `charge.dispute.*` webhooks Stripe sends (the
//! dispute object as Stripe shows it), and refunds of a disputed charge refused as Stripe refuses them (400
//! `charge_disputed`).
//!
//! `POST /_sim/charges/{charge}/dispute` (optional `status`: `needs_response`, the default, opens a
//! chargeback and withdraws the funds; `under_review` submits evidence; `won` or `lost` closes it, `won`
//! reinstating the funds) is the simulator's own admin route, served to 127.0.0.1 without a key, so a local
//! run can dispute a charge the way a cardholder's bank does at Stripe.

use super::answers::{answer, no_such};
use super::objects::{event, event_id};
use super::{now_ms, Answer, Effects, Intent, Ledger, State, WebhookEvent};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One charge's dispute as the simulator holds it.
#[derive(Debug, Clone)]
pub(super) struct SimDispute {
    id: String,
    status: &'static str,
    created: i64,
    reinstated: bool,
}

/// The statuses the admin route accepts, with Stripe's names.
const STATUSES: [&str; 4] = ["needs_response", "under_review", "won", "lost"];

impl Ledger {
    /// Disputes the charge `charge_id` (opening a chargeback if it has none), then moves it to `status`: the
    /// dispute object, and the webhooks Stripe would send, in Stripe's order.
    pub fn dispute(&self, charge_id: &str, status: &str) -> Result<(Value, Vec<WebhookEvent>), Answer> {
        let Some(status) = STATUSES.into_iter().find(|s| *s == status) else {
            return Err(Answer::error(
                400,
                "invalid_request_error",
                Some("parameter_invalid"),
                "status must be needs_response, under_review, won or lost",
                json!({ "param": "status" }),
            ));
        };
        let now = now_ms();
        let mut state = self.state();
        let seq = Ledger::next_id(&mut state, "du");
        let intent = state
            .intents
            .values()
            .find(|i| i.charge.as_ref().is_some_and(|c| c.id == charge_id) && i.status == "succeeded")
            .cloned()
            .ok_or_else(|| no_such("charge", charge_id))?;
        let mut webhooks = Vec::new();
        let mut dispute = match state.disputes.get(charge_id) {
            Some(held) => held.clone(),
            None => {
                let opened = SimDispute {
                    id: seq,
                    status: "needs_response",
                    created: now / 1000,
                    reinstated: false,
                };
                webhooks.push(dispute_event("charge.dispute.created", &intent, &opened, now));
                webhooks.push(dispute_event("charge.dispute.funds_withdrawn", &intent, &opened, now));
                opened
            }
        };
        if status != dispute.status && !is_closed(dispute.status) {
            dispute.status = status;
            webhooks.extend(moved(&intent, &mut dispute, now));
        }
        let object = dispute_object(&intent, &dispute);
        state.disputes.insert(charge_id.to_owned(), dispute);
        Ok((object, webhooks))
    }

    /// The admin route: `Some` for a `/_sim/charges/...` path.
    pub(super) fn dispute_admin(&self, method: &str, path: &str, params: &BTreeMap<String, String>) -> Option<Effects> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let ("POST", ["_sim", "charges", charge, "dispute"]) = (method, segments.as_slice()) else {
            return None;
        };
        let status = params.get("status").map_or("needs_response", String::as_str);
        Some(match self.dispute(charge, status) {
            Ok((object, webhooks)) => Effects {
                answer: Some(Answer::ok(object)),
                webhooks,
                ..Effects::default()
            },
            Err(refused) => answer(refused),
        })
    }
}

/// The webhooks of a dispute moved to its new status (already set).
fn moved(intent: &Intent, dispute: &mut SimDispute, now: i64) -> Vec<WebhookEvent> {
    match dispute.status {
        "won" => {
            dispute.reinstated = true;
            vec![
                dispute_event("charge.dispute.closed", intent, dispute, now),
                dispute_event("charge.dispute.funds_reinstated", intent, dispute, now),
            ]
        }
        "lost" => vec![dispute_event("charge.dispute.closed", intent, dispute, now)],
        _ => vec![dispute_event("charge.dispute.updated", intent, dispute, now)],
    }
}

fn is_closed(status: &str) -> bool {
    matches!(status, "won" | "lost")
}

/// A refund of a charge with a chargeback, refused as Stripe refuses it; `None` when the refund may go on.
pub(super) fn refused_refund(state: &State, params: &BTreeMap<String, String>) -> Option<Effects> {
    let intent = state.intents.get(params.get("payment_intent")?)?;
    let charge = intent.charge.as_ref()?;
    state.disputes.get(&charge.id)?;
    Some(answer(Answer::error(
        400,
        "invalid_request_error",
        Some("charge_disputed"),
        &format!("Charge {} has been charged back; cannot issue a refund.", charge.id),
        json!({}),
    )))
}

/// `GET /v1/disputes/{id}`: the dispute as it stands, or Stripe's 404 `resource_missing`.
pub(super) fn get(state: &State, id: &str) -> Effects {
    let found = state.disputes.iter().find(|(_, d)| d.id == id).and_then(|(charge, d)| {
        let intent = state
            .intents
            .values()
            .find(|i| i.charge.as_ref().is_some_and(|c| c.id == *charge))?;
        Some(dispute_object(intent, d))
    });
    match found {
        Some(dispute) => answer(Answer {
            status: 200,
            body: dispute,
        }),
        None => answer(no_such("dispute", id)),
    }
}

/// The dispute object as Stripe shows it (the fields of Stripe's `dispute` fixture).
fn dispute_object(intent: &Intent, d: &SimDispute) -> Value {
    let charge = intent.charge.as_ref().map(|c| c.id.clone());
    let withdrawn = json!({ "id": format!("txn_{}_w", d.id), "object": "balance_transaction",
        "amount": -i128::from(intent.amount), "currency": intent.currency, "type": "adjustment" });
    let mut balance_transactions = vec![withdrawn];
    if d.reinstated {
        balance_transactions.push(
            json!({ "id": format!("txn_{}_r", d.id), "object": "balance_transaction",
            "amount": intent.amount, "currency": intent.currency, "type": "adjustment" }),
        );
    }
    json!({
        "id": d.id, "object": "dispute", "amount": intent.amount, "balance_transactions": balance_transactions,
        "charge": charge, "created": d.created, "currency": intent.currency, "evidence": {},
        "evidence_details": { "due_by": d.created + 7 * 86_400, "has_evidence": d.status != "needs_response",
            "past_due": false, "submission_count": u8::from(d.status != "needs_response") },
        "is_charge_refundable": false, "livemode": false, "metadata": {},
        "payment_intent": intent.id,
        "payment_method_details": { "card": { "brand": "visa", "case_type": "chargeback",
            "network_reason_code": "10.4" }, "type": "card" },
        "reason": "fraudulent", "status": d.status,
    })
}

fn dispute_event(kind: &'static str, intent: &Intent, d: &SimDispute, now: i64) -> WebhookEvent {
    event(event_id(), kind, dispute_object(intent, d), now)
}

#[cfg(test)]
mod tests {
    use super::super::{Ledger, Timings};
    use std::collections::BTreeMap;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// A ledger with one captured charge: (ledger, PaymentIntent id, charge id).
    fn captured() -> (Ledger, String, String) {
        let l = Ledger::new("sk_test_k", Timings::default(), None);
        let p = params(&[
            ("amount", "1000"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("payment_method", "pm_succeeded"),
            ("automatic_payment_methods[enabled]", "true"),
            ("automatic_payment_methods[allow_redirects]", "never"),
            ("metadata[payment_id]", "pay_1"),
        ]);
        let created = l.handle("POST", "/v1/payment_intents", Some("Bearer sk_test_k"), Some("k1"), &p);
        let intent = created.answer.unwrap().body;
        let id = intent["id"].as_str().unwrap().to_owned();
        let charge = l.intents_for("pay_1")[0]["latest_charge"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        (l, id, charge)
    }

    fn refund(l: &Ledger, intent: &str, key: &str) -> super::Answer {
        l.handle(
            "POST",
            "/v1/refunds",
            Some("Bearer sk_test_k"),
            Some(key),
            &params(&[("payment_intent", intent)]),
        )
        .answer
        .unwrap()
    }

    #[test]
    fn a_disputed_charge_sends_stripes_dispute_events_and_refuses_refunds() {
        let (l, intent, charge) = captured();
        let opened = l.handle(
            "POST",
            &format!("/_sim/charges/{charge}/dispute"),
            None,
            None,
            &params(&[]),
        );
        let kinds: Vec<_> = opened.webhooks.iter().map(|w| w.kind).collect();
        assert_eq!(kinds, ["charge.dispute.created", "charge.dispute.funds_withdrawn"]);
        let object = &opened.webhooks[0].body["data"]["object"];
        assert_eq!(
            (object["object"].as_str(), object["status"].as_str()),
            (Some("dispute"), Some("needs_response"))
        );
        assert_eq!(object["payment_intent"].as_str(), Some(intent.as_str()));
        assert_eq!(object["charge"].as_str(), Some(charge.as_str()));

        let refused = refund(&l, &intent, "r1");
        assert_eq!(refused.status, 400);
        let error = &refused.body["error"];
        assert_eq!(
            (error["type"].as_str(), error["code"].as_str()),
            (Some("invalid_request_error"), Some("charge_disputed"))
        );
        assert_eq!(
            error["message"].as_str().unwrap(),
            format!("Charge {charge} has been charged back; cannot issue a refund.")
        );
        assert_eq!(
            l.intents_for("pay_1")[0]["latest_charge"]["amount_refunded"],
            0,
            "no money moved"
        );

        let read = |id: &str| {
            let a = l.handle(
                "GET",
                &format!("/v1/disputes/{id}"),
                Some("Bearer sk_test_k"),
                None,
                &params(&[]),
            );
            a.answer.unwrap()
        };
        let dispute_id = object["id"].as_str().unwrap();
        assert_eq!(
            (read(dispute_id).status, &read(dispute_id).body),
            (200, object),
            "read as its events show it"
        );
        let missing = read("du_nope");
        assert_eq!(
            (missing.status, missing.body["error"]["code"].as_str()),
            (404, Some("resource_missing"))
        );

        let (won, hooks) = l.dispute(&charge, "won").unwrap();
        assert_eq!(won["status"], "won");
        assert_eq!(read(dispute_id).body["status"], "won", "as it stands now");
        let kinds: Vec<_> = hooks.iter().map(|w| w.kind).collect();
        assert_eq!(kinds, ["charge.dispute.closed", "charge.dispute.funds_reinstated"]);
        assert!(
            l.dispute(&charge, "lost").unwrap().1.is_empty(),
            "a closed dispute stays closed"
        );
    }

    #[test]
    fn only_a_captured_charge_can_be_disputed() {
        let (l, _, _) = captured();
        assert_eq!(l.dispute("ch_unknown", "needs_response").unwrap_err().status, 404);
        let (l, _, charge) = captured();
        assert_eq!(l.dispute(&charge, "maybe").unwrap_err().status, 400);
    }
}
