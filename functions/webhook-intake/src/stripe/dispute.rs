//! Stripe's `charge.dispute.*` events: a dispute object names the disputed `charge` and its
//! `payment_intent`, which finds our payment (the bound PSP reference; a dispute carries no metadata of
//! ours). A dispute of a charge without a PaymentIntent is none of ours (we create every charge through a
//! PaymentIntent): acknowledged and ignored.

use super::About;
use crate::psp_event::Unparseable;
use psp::stripe::Dispute;
use serde::Deserialize;
use shared::{DisputeFact, Outcome};

/// What a dispute event says; `None` for a dispute of a charge that has no PaymentIntent.
pub(super) fn about(fact: DisputeFact, object: &serde_json::Value) -> Result<Option<About>, Unparseable> {
    let dispute = Dispute::deserialize(object).map_err(Unparseable::because)?;
    let Some(intent) = dispute.payment_intent.clone() else {
        return Ok(None);
    };
    let report = dispute.report(fact).map_err(Unparseable)?;
    // The disputed amount may differ from the charge's (a partial dispute, currency conversion).
    About::of_intent(intent, dispute.currency, Outcome::Dispute(report)).map(Some)
}

#[cfg(test)]
mod tests {
    use crate::psp_event::Parsed;
    use serde_json::json;
    use shared::{DisputeFact, DisputeStatus, Outcome};

    fn event(kind: &str, object: serde_json::Value) -> Vec<u8> {
        json!({ "id": "evt_d", "object": "event", "type": kind, "created": 1_700_000_000, "livemode": false,
                "data": { "object": object } })
        .to_string()
        .into_bytes()
    }

    /// A dispute object with the fields of Stripe's fixture.
    fn dispute(status: &str, payment_intent: serde_json::Value) -> serde_json::Value {
        json!({ "id": "du_1", "object": "dispute", "amount": 700, "balance_transactions": [], "charge": "ch_1",
                "created": 1_700_000_000, "currency": "eur", "evidence": {}, "is_charge_refundable": false,
                "livemode": false, "metadata": {}, "payment_intent": payment_intent, "reason": "fraudulent",
                "status": status })
    }

    #[test]
    fn each_dispute_event_type_is_a_dispute_report_found_by_its_payment_intent() {
        let cases = [
            ("charge.dispute.created", "needs_response", DisputeFact::Created),
            ("charge.dispute.updated", "under_review", DisputeFact::Updated),
            (
                "charge.dispute.funds_withdrawn",
                "needs_response",
                DisputeFact::FundsWithdrawn,
            ),
            ("charge.dispute.funds_reinstated", "won", DisputeFact::FundsReinstated),
            ("charge.dispute.closed", "lost", DisputeFact::Closed),
        ];
        for (kind, status, fact) in cases {
            let Parsed::Event(e) = super::super::parse(&event(kind, dispute(status, json!("pi_1")))).unwrap() else {
                panic!("{kind} not handled");
            };
            let Outcome::Dispute(report) = &e.outcome else {
                panic!("{kind}: {:?}", e.outcome)
            };
            assert_eq!(
                (report.fact, report.status.as_str(), report.amount_minor),
                (fact, status, 700)
            );
            assert_eq!(e.target.psp_reference.as_ref().map(|r| r.as_str()), Some("pi_1"));
            assert_eq!(e.target.payment_id, None);
            assert_eq!(
                e.facts.amount_minor, None,
                "a dispute's amount is not a claim on the payment's"
            );
            assert_eq!(e.facts.currency.map(|c| c.to_string()).as_deref(), Some("EUR"));
        }
        let Parsed::Event(e) =
            super::super::parse(&event("charge.dispute.closed", dispute("won", json!("pi_1")))).unwrap()
        else {
            panic!()
        };
        assert!(matches!(e.outcome, Outcome::Dispute(ref r) if r.status == DisputeStatus::Won));
    }

    #[test]
    fn a_dispute_without_a_payment_intent_is_not_ours_and_an_unknown_status_is_unparseable() {
        assert!(matches!(
            super::super::parse(&event("charge.dispute.created", dispute("needs_response", json!(null)))),
            Ok(Parsed::Ignored { .. })
        ));
        assert!(super::super::parse(&event(
            "charge.dispute.created",
            dispute("charge_refunded", json!("pi_1"))
        ))
        .is_err());
    }
}
