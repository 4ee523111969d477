//! Stripe events (`payment_intent.*`, `charge.refunded`, `refund.*`, `charge.refund.updated`,
//! `charge.dispute.*`) into our terms. Only the fields we need are read; the raw object (which carries
//! `client_secret` and next-action URLs) is never stored or logged.

mod dispute;
mod refund;
pub mod thin;
pub mod version;

use crate::psp_event::{self, Facts, Parsed, PaymentRef, PspEvent, Unparseable};
use psp::stripe::{customer_action, LastPaymentError, NextAction};
use serde::Deserialize;
use shared::{ClientSecret, Currency, Outcome, PspEventId, PspReference};
use std::collections::HashMap;

#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    created: i64,
    #[serde(default)]
    livemode: Option<bool>,
    #[serde(default)]
    account: Option<String>,
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    object: serde_json::Value,
}

#[derive(Deserialize)]
struct PaymentIntent {
    id: String,
    amount: u64,
    currency: String,
    #[serde(default)]
    metadata: HashMap<String, String>,
    #[serde(default)]
    client_secret: Option<ClientSecret>,
    #[serde(default)]
    next_action: Option<NextAction>,
    #[serde(default)]
    last_payment_error: Option<LastPaymentError>,
    #[serde(default)]
    cancellation_reason: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

#[derive(Deserialize)]
struct Charge {
    amount: u64,
    amount_refunded: u64,
    currency: String,
    #[serde(default)]
    captured: bool,
    #[serde(default)]
    payment_intent: Option<String>,
    #[serde(default)]
    metadata: HashMap<String, String>,
}

use Unparseable as Bad;

/// What an object's metadata and PSP id say about its payment (the rules every path reads them by:
/// [`PaymentRef::of_metadata`]).
fn target(metadata: &HashMap<String, String>, psp_reference: Option<String>) -> Result<PaymentRef, Unparseable> {
    PaymentRef::of_metadata(metadata, psp_reference.as_deref()).map_err(Bad::because)
}

/// The event in our terms; `Ignored` for a type we do not handle.
pub fn parse(body: &[u8]) -> Result<Parsed, Unparseable> {
    let event: Event = serde_json::from_slice(body).map_err(Bad::because)?;
    let id = PspEventId::parse(event.id).map_err(Bad::because)?;
    psp_event::event_type(&event.kind)?;
    let account = psp_event::account(event.account.as_deref())?;
    let Some(About {
        target,
        amount,
        currency,
        outcome,
    }) = about(&event.kind, &event.data.object)?
    else {
        return Ok(Parsed::Ignored { event_type: event.kind });
    };
    let facts = Facts {
        amount_minor: amount,
        currency: Some(Currency::parse(&currency).map_err(Bad::because)?),
        livemode: event.livemode,
        account,
    };
    Ok(Parsed::Event(Box::new(PspEvent {
        id,
        created_secs: event.created,
        target: psp_event::named(
            target,
            "the event names neither metadata.payment_id nor a payment intent",
        )?,
        facts,
        outcome,
    })))
}

/// The event types [`parse`] turns into events (every other type is acknowledged and ignored): the ones to
/// subscribe the webhook endpoint to, and the ones the catch-up job asks Stripe's Events API for
/// (`types[]`, at most 20). A type handled in `about` belongs here (the test `subscribed_types_are_handled`
/// checks the other way round).
pub const SUBSCRIBED_TYPES: &[&str] = &[
    "payment_intent.succeeded",
    "payment_intent.processing",
    "payment_intent.requires_action",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.amount_capturable_updated",
    "charge.refunded",
    "refund.created",
    "refund.updated",
    "refund.failed",
    "charge.refund.updated",
    "charge.dispute.created",
    "charge.dispute.updated",
    "charge.dispute.funds_withdrawn",
    "charge.dispute.funds_reinstated",
    "charge.dispute.closed",
];

/// What a handled event says.
struct About {
    target: PaymentRef,
    /// The payment's amount as the event claims it; `None` where the event's amount is another (a dispute's).
    amount: Option<u64>,
    currency: String,
    outcome: Outcome,
}

impl About {
    /// What an object that names our payment only by its PaymentIntent says (a refund, a dispute: neither
    /// carries metadata of ours, so it is ours when its PaymentIntent is bound to one of our payments). Its
    /// amount is its own (a partial refund, a partial or converted dispute), not a claim about the payment's
    /// amount; its currency is.
    fn of_intent(intent: String, currency: String, outcome: Outcome) -> Result<Self, Unparseable> {
        Ok(Self {
            target: PaymentRef {
                payment_id: None,
                psp_reference: Some(PspReference::parse(intent).map_err(Bad::because)?),
                stage: None,
            },
            amount: None,
            currency,
            outcome,
        })
    }
}

/// What an event of type `kind` says about its payment; `None` for a type we do not handle.
fn about(kind: &str, object: &serde_json::Value) -> Result<Option<About>, Unparseable> {
    match kind {
        "payment_intent.succeeded"
        | "payment_intent.processing"
        | "payment_intent.requires_action"
        | "payment_intent.payment_failed"
        | "payment_intent.canceled" => {
            let pi = PaymentIntent::deserialize(object).map_err(Bad::because)?;
            let outcome = intent_outcome(kind, &pi)?;
            Ok(Some(About {
                target: target(&pi.metadata, Some(pi.id))?,
                amount: Some(pi.amount),
                currency: pi.currency,
                outcome,
            }))
        }
        // Manual capture: the money is held for us (`requires_capture`), not taken. An event's PaymentIntent
        // has no expanded charge: the capture deadline is the charge answer's (or a read's) to record.
        "payment_intent.amount_capturable_updated" => {
            let pi = PaymentIntent::deserialize(object).map_err(Bad::because)?;
            if pi.status.as_deref() != Some("requires_capture") {
                return Ok(None);
            }
            Ok(Some(About {
                target: target(&pi.metadata, Some(pi.id))?,
                amount: Some(pi.amount),
                currency: pi.currency,
                outcome: Outcome::Authorized {
                    capture_before_ms: None,
                },
            }))
        }
        "charge.refunded" => {
            let charge = Charge::deserialize(object).map_err(Bad::because)?;
            Ok(Some(About {
                target: target(&charge.metadata, charge.payment_intent)?,
                amount: Some(charge.amount),
                currency: charge.currency,
                outcome: Outcome::Refunded {
                    refunded_total_minor: charge.amount_refunded,
                    capture_proven: charge.captured,
                },
            }))
        }
        kind if refund::handles(kind) => refund::about(object),
        _ => match shared::DisputeFact::of_stripe_event(kind) {
            Some(fact) => dispute::about(fact, object),
            None => Ok(None),
        },
    }
}

/// The outcome a `payment_intent.*` event of type `kind` reports.
fn intent_outcome(kind: &str, pi: &PaymentIntent) -> Result<Outcome, Unparseable> {
    Ok(match kind {
        "payment_intent.succeeded" => Outcome::Succeeded,
        "payment_intent.processing" => Outcome::Processing,
        "payment_intent.requires_action" => Outcome::RequiresAction(
            customer_action(pi.client_secret.as_ref(), pi.next_action.as_ref()).map_err(Bad::because)?,
        ),
        "payment_intent.payment_failed" => Outcome::AttemptFailed {
            reason: psp_event::reason(
                "decline_code",
                pi.last_payment_error
                    .as_ref()
                    .map_or("payment_failed", LastPaymentError::raw_reason),
            )?,
            retry_token: None,
        },
        _ => Outcome::Failed {
            reason: psp_event::reason(
                "cancellation_reason",
                pi.cancellation_reason.as_deref().unwrap_or("canceled"),
            )?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use shared::{RefundEntry, RefundStatus};

    fn event(kind: &str, object: serde_json::Value) -> Vec<u8> {
        json!({ "id": "evt_1", "object": "event", "type": kind, "created": 1_700_000_000, "livemode": false,
                "data": { "object": object } })
        .to_string()
        .into_bytes()
    }

    fn intent() -> serde_json::Value {
        json!({ "id": "pi_1", "object": "payment_intent", "amount": 1000, "currency": "eur",
                "metadata": { "payment_id": "pay_1" }, "client_secret": "pi_1_secret_x",
                "next_action": { "type": "redirect_to_url", "redirect_to_url": { "url": "https://hooks.stripe.com/3ds" } },
                "last_payment_error": { "code": "card_declined", "decline_code": "insufficient_funds" } })
    }

    fn parsed(kind: &str, object: serde_json::Value) -> PspEvent {
        match parse(&event(kind, object)).unwrap() {
            Parsed::Event(e) => *e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn payment_intent_events_map_to_outcomes() {
        assert_eq!(parsed("payment_intent.succeeded", intent()).outcome, Outcome::Succeeded);
        assert_eq!(
            parsed("payment_intent.processing", intent()).outcome,
            Outcome::Processing
        );
        assert!(matches!(
            parsed("payment_intent.requires_action", intent()).outcome,
            Outcome::RequiresAction(_)
        ));
        assert_eq!(
            parsed("payment_intent.payment_failed", intent()).outcome,
            Outcome::AttemptFailed {
                reason: "insufficient_funds".into(),
                retry_token: None
            }
        );
        assert_eq!(
            parsed("payment_intent.canceled", intent()).outcome,
            Outcome::Failed {
                reason: "canceled".into()
            }
        );
        let mut held = intent();
        held["status"] = json!("requires_capture");
        assert_eq!(
            parsed("payment_intent.amount_capturable_updated", held).outcome,
            Outcome::Authorized {
                capture_before_ms: None
            },
            "an authorization, not a payment"
        );
        let mut released = intent();
        released["status"] = json!("canceled");
        assert!(
            matches!(
                parse(&event("payment_intent.amount_capturable_updated", released)).unwrap(),
                Parsed::Ignored { .. }
            ),
            "nothing capturable: no news"
        );
        let e = parsed("payment_intent.succeeded", intent());
        assert_eq!(e.target.payment_id.unwrap().as_str(), "pay_1");
        assert_eq!(e.target.psp_reference.unwrap().as_str(), "pi_1");
        assert_eq!(
            (e.facts.amount_minor, e.facts.currency.unwrap().as_str()),
            (Some(1000), "EUR")
        );
        assert_eq!(e.created_secs, 1_700_000_000);
    }

    #[test]
    fn text_that_breaks_the_rules_makes_the_event_unparseable() {
        let mut declined = intent();
        declined["last_payment_error"]["decline_code"] = json!("insufficient\u{FFFF}");
        assert!(parse(&event("payment_intent.payment_failed", declined)).is_err());
        let mut canceled = intent();
        canceled["cancellation_reason"] = json!("r".repeat(201));
        assert!(parse(&event("payment_intent.canceled", canceled)).is_err());
        let mut secret = intent();
        secret["client_secret"] = json!("s".repeat(513));
        assert!(parse(&event("payment_intent.requires_action", secret)).is_err());
        let mut body: serde_json::Value = serde_json::from_slice(&event("payment_intent.succeeded", intent())).unwrap();
        body["account"] = json!("a".repeat(129));
        assert!(parse(body.to_string().as_bytes()).is_err());
        body["account"] = json!("acct_1");
        assert!(parse(body.to_string().as_bytes()).is_ok());
        body["type"] = json!("x".repeat(129));
        assert!(
            parse(body.to_string().as_bytes()).is_err(),
            "an over-long type is not logged"
        );
    }

    #[test]
    fn charge_refunded_carries_the_cumulative_amount_and_the_capture() {
        let charge = json!({ "id": "ch_1", "object": "charge", "amount": 1000, "amount_refunded": 400,
                             "currency": "eur", "captured": true, "payment_intent": "pi_1", "metadata": {} });
        let e = parsed("charge.refunded", charge);
        assert_eq!(
            e.outcome,
            Outcome::Refunded {
                refunded_total_minor: 400,
                capture_proven: true
            }
        );
        assert_eq!(e.target.payment_id, None);
        assert_eq!(e.target.psp_reference.unwrap().as_str(), "pi_1");
    }

    /// A Stripe Refund object as `refund.*` and `charge.refund.updated` carry it (the shape of Stripe's fixture).
    fn refund_object(status: &str) -> serde_json::Value {
        json!({ "id": "re_1", "object": "refund", "amount": 400, "balance_transaction": null, "charge": "ch_1",
                "created": 1_700_000_000, "currency": "eur", "metadata": {}, "payment_intent": "pi_1",
                "reason": "requested_by_customer", "status": status, "failure_reason": "expired_or_canceled_card" })
    }

    #[test]
    fn refund_events_report_one_refund_with_its_own_amount_and_status() {
        for kind in [
            "refund.created",
            "refund.updated",
            "refund.failed",
            "charge.refund.updated",
        ] {
            for status in RefundStatus::ALL {
                let e = parsed(kind, refund_object(status.as_str()));
                let Outcome::Refund(report) = e.outcome else {
                    panic!("{kind}: {:?}", e.outcome)
                };
                assert_eq!(
                    report.refund,
                    RefundEntry {
                        refund_id: "re_1".into(),
                        amount_minor: 400,
                        status
                    }
                );
                let failure = status.is_undone().then(|| "expired_or_canceled_card".to_owned());
                assert_eq!(report.failure_reason, failure, "{kind} {status}");
                assert_eq!(report.answers_give_back, None);
                // Found by the PaymentIntent; the refund's amount is not a claim about the payment's.
                assert_eq!((e.target.payment_id, e.target.stage), (None, None));
                assert_eq!(e.target.psp_reference.unwrap().as_str(), "pi_1");
                assert_eq!(
                    (e.facts.amount_minor, e.facts.currency.unwrap().as_str()),
                    (None, "EUR")
                );
            }
        }
    }

    #[test]
    fn a_refund_without_a_payment_intent_is_ignored_and_an_unknown_status_is_unparseable() {
        let mut no_intent = refund_object("succeeded");
        no_intent["payment_intent"] = serde_json::Value::Null;
        assert_eq!(
            parse(&event("refund.updated", no_intent)).unwrap(),
            Parsed::Ignored {
                event_type: "refund.updated".into()
            }
        );
        assert!(parse(&event("refund.updated", refund_object("refunded"))).is_err());
        let mut long_id = refund_object("failed");
        long_id["id"] = json!("r".repeat(129));
        assert!(parse(&event("refund.failed", long_id)).is_err());
    }

    #[test]
    fn subscribed_types_are_handled() {
        assert!(SUBSCRIBED_TYPES.len() <= 20, "Stripe takes at most 20 types[] per list");
        for kind in SUBSCRIBED_TYPES {
            let object = if *kind == "payment_intent.amount_capturable_updated" {
                let mut held = intent();
                held["status"] = json!("requires_capture");
                held
            } else if kind.starts_with("payment_intent.") {
                intent()
            } else if kind.contains("refund.") {
                refund_object("failed")
            } else if kind.starts_with("charge.dispute.") {
                json!({ "id": "du_1", "object": "dispute", "amount": 1000, "charge": "ch_1", "currency": "eur",
                        "payment_intent": "pi_1", "status": "needs_response" })
            } else {
                json!({ "id": "ch_1", "object": "charge", "amount": 1000, "amount_refunded": 1000,
                        "currency": "eur", "captured": true, "payment_intent": "pi_1", "metadata": {} })
            };
            assert!(
                matches!(parse(&event(kind, object)), Ok(Parsed::Event(_))),
                "{kind} is subscribed but not handled"
            );
        }
    }

    #[test]
    fn unknown_types_are_ignored_and_broken_bodies_are_unparseable() {
        assert_eq!(
            parse(&event("customer.created", json!({}))).unwrap(),
            Parsed::Ignored {
                event_type: "customer.created".into()
            }
        );
        assert!(parse(b"not json").is_err());
        assert!(parse(&event("payment_intent.succeeded", json!({ "id": "pi_1" }))).is_err());
        let no_target = json!({ "id": "pi 1", "amount": 1, "currency": "eur" });
        assert!(parse(&event("payment_intent.succeeded", no_target)).is_err());
    }
}
