//! A PSP event after parsing, in our terms: which payment, what happened, and the facts to check against
//! the payment before anything is applied.

use shared::{text, Channel, Claims, Currency, Observation, Outcome, PspEventId};
use thiserror::Error;

/// How to find the payment an event is about, whose the event's object says it is, and the one lookup
/// (`shared::payment_ref`: the intake, `paymentsctl parked replay` and recovery's recheck locate alike).
pub use shared::payment_ref::{Ownership, PaymentRef, STAGE_MARKER};

/// What the event claims about the payment; each must match before the event is applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Facts {
    pub amount_minor: Option<u64>,
    pub currency: Option<Currency>,
    pub livemode: Option<bool>,
    pub account: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PspEvent {
    pub id: PspEventId,
    /// When the PSP created the event (epoch seconds).
    pub created_secs: i64,
    pub target: PaymentRef,
    pub facts: Facts,
    pub outcome: Outcome,
}

/// The result of parsing a verified body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Event(Box<PspEvent>),
    /// A type we do not act on: acknowledged so the PSP stops sending it.
    Ignored {
        event_type: String,
    },
}

/// A validly signed body we cannot read: quarantined for an operator.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unparseable event: {0}")]
pub struct Unparseable(pub String);

impl Unparseable {
    /// The body is unreadable for this reason (a parse or a text rule's error).
    pub fn because(e: impl std::fmt::Display) -> Self {
        Self(e.to_string())
    }

    /// A status of `what` (a refund's, a dispute's) we do not know; the value quoted, cut to 40 characters.
    pub fn unknown_status(what: &str, status: &str) -> Self {
        Self(format!(
            "unknown {what} status {:?}",
            status.chars().take(40).collect::<String>()
        ))
    }
}

/// `target`, if it names the payment at all (our id or the PSP's); else unparseable, saying `neither` (where
/// the provider's events carry them).
pub fn named(target: PaymentRef, neither: &str) -> Result<PaymentRef, Unparseable> {
    if target.payment_id.is_none() && target.psp_reference.is_none() {
        return Err(Unparseable(neither.to_owned()));
    }
    Ok(target)
}

/// The stage marker of an object's metadata, within the text rules (it is logged when not ours).
pub fn stage_marker(value: Option<&str>) -> Result<Option<String>, Unparseable> {
    shared::payment_ref::stage_marker(value).map_err(Unparseable::because)
}

/// A reason from the event, checked by the text rules (`shared::text`): one that breaks them makes the event
/// unparseable (quarantined), never a stored reason that cannot be sent on.
pub fn reason(field: &'static str, value: &str) -> Result<String, Unparseable> {
    text::bounded(field, value, text::MAX_REASON_CHARS).map_err(Unparseable::because)
}

/// The connected account an event names, within the text rules.
pub fn account(account: Option<&str>) -> Result<Option<String>, Unparseable> {
    account
        .map(|a| text::bounded("account", a, text::MAX_ACCOUNT_CHARS))
        .transpose()
        .map_err(Unparseable::because)
}

/// The event's type is logged when we do not handle it: within the text rules and this long at most.
pub fn event_type(kind: &str) -> Result<(), Unparseable> {
    text::check("type", kind, MAX_TYPE_CHARS).map_err(Unparseable::because)
}

const MAX_TYPE_CHARS: usize = 128;

/// What the deployment expects of its provider's events.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expectations {
    pub livemode: Option<bool>,
    /// The connected account of a Connect endpoint (`"connect": true`); `None` for an ordinary endpoint,
    /// whose events' `account` is not checked (Stripe sets it on Connect events only).
    pub account: Option<String>,
}

impl PspEvent {
    /// Live/test mode and (a Connect endpoint's) account must be what this endpoint expects; an endpoint
    /// configured for either refuses an event that does not say (an event that omits the field proves nothing). Amount, currency
    /// and the PSP's payment id are checked against the payment by the one check every path shares
    /// ([`Observation::check`], called by the decision). `Err` names the first mismatch.
    pub fn check(&self, expected: &Expectations) -> Result<(), String> {
        let f = &self.facts;
        match (f.livemode, expected.livemode) {
            (Some(seen), Some(want)) if seen != want => {
                return Err(format!("livemode {seen} but this endpoint expects livemode {want}"))
            }
            (None, Some(want)) => return Err(format!("the event omits livemode; this endpoint expects {want}")),
            _ => {}
        }
        match (&f.account, &expected.account) {
            (Some(seen), Some(want)) if seen != want => {
                Err(format!("account {seen} is not this endpoint's account {want}"))
            }
            (None, Some(want)) => Err(format!("the event omits its account; this endpoint expects {want}")),
            _ => Ok(()),
        }
    }

    /// The observation to finalize: the event's outcome with its claims, or an anomaly when the endpoint's
    /// check failed.
    pub fn observation(&self, mismatch: Option<String>, correlation_id: shared::CorrelationId) -> Observation {
        let outcome = match mismatch {
            Some(reason) => Outcome::Anomaly { reason },
            None => self.outcome.clone(),
        };
        let mut obs = Observation::new(Channel::Webhook, outcome, correlation_id)
            .with_event(self.id.clone(), self.created_secs.saturating_mul(1000));
        obs.psp_reference = self.target.psp_reference.clone();
        obs.claims = Claims {
            amount_minor: self.facts.amount_minor,
            currency: self.facts.currency,
        };
        obs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The target a Stripe PaymentIntent event with `metadata` names.
    fn target(metadata: serde_json::Value) -> Result<PaymentRef, Unparseable> {
        let body = json!({ "id": "evt_1", "type": "payment_intent.succeeded", "created": 1, "data": { "object": {
            "id": "pi_1", "amount": 1, "currency": "eur", "metadata": metadata } } });
        match crate::stripe::parse(body.to_string().as_bytes())? {
            Parsed::Event(event) => Ok(event.target),
            other => panic!("a handled type: {other:?}"),
        }
    }

    #[test]
    fn the_marker_decides_and_our_payment_id_claims_an_unmarked_object() {
        let own = |metadata| target(metadata).map(|t| t.ownership("prod"));
        assert_eq!(own(json!({ STAGE_MARKER: "prod" })), Ok(Ownership::Claimed));
        assert_eq!(
            own(json!({ STAGE_MARKER: "prod", "payment_id": "pay_1" })),
            Ok(Ownership::Claimed)
        );
        assert_eq!(
            own(json!({ STAGE_MARKER: "dev", "payment_id": "pay_1" })),
            Ok(Ownership::OtherStage("dev".into()))
        );
        assert_eq!(
            own(json!({ "payment_id": "pay_1" })),
            Ok(Ownership::Claimed),
            "made before the marker"
        );
        assert_eq!(own(json!({})), Ok(Ownership::Unmarked));
        // Another system's key of the same name, not one of our ids: unmarked, so not a claim and no fault.
        assert_eq!(own(json!({ "payment_id": "order #5" })), Ok(Ownership::Unmarked));
        // On an object this system marked, a broken payment id is a fault: quarantined.
        assert!(target(json!({ STAGE_MARKER: "prod", "payment_id": "order #5" })).is_err());
        assert!(
            target(json!({ STAGE_MARKER: "p".repeat(65) })).is_err(),
            "a marker too long to log"
        );
    }
}
