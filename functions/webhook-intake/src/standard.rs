//! Our own event schema for any PSP behind Standard Webhooks (documented in README).
//!
//! ```json
//! { "type": "payment.succeeded", "created": 1700000000, "livemode": false, "account": "acct_1",
//!   "data": { "payment_id": "pay_...", "psp_reference": "psp_...", "amount_minor": 1000, "currency": "EUR" } }
//! ```
//! Types: `payment.requires_action` (`client_secret` and/or `redirect_url`), `payment.processing`,
//! `payment.succeeded`, `payment.attempt_failed` (`decline_code`, optional `retry_token`), `payment.failed`
//! (`reason`), `payment.refunded` (`refunded_total_minor`, `captured`). The event id is the `webhook-id` header.
//!
//! `created` is required, and not after the signing time beyond the endpoint's clock tolerance (its
//! `tolerance_secs`, the same that bounds the signing time): a PSP re-signs every
//! delivery attempt, so `webhook-timestamp` says when this attempt was sent, not when the event happened.
//! Taken as the event's time, a late retry of an old `processing` looked newer than the customer's action and
//! took it away, and an unknown payment's wait window restarted with every retry. An event without it is
//! refused with a 400 and nothing written ([`Refused::Created`]): the sender's integration is wrong for every
//! event, and a 4xx shows on its side at once, where a quarantine would answer 200 and hide it. (Keeping the
//! first time we saw a `webhook-id` instead would cost a write per event and still order events by arrival.)
//! An event naming our `payment_id` is ours (and waited for while young, if its payment is not written yet);
//! one naming only a `psp_reference` that no payment of ours holds is not, and is acknowledged as ignored.

use crate::psp_event::{self, Facts, Parsed, PaymentRef, PspEvent, Unparseable};
use serde::Deserialize;
use shared::{
    ClientSecret, Currency, CustomerAction, Outcome, PaymentId, PspEventId, PspReference, RedirectUrl, RetryToken,
};

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    created: Option<i64>,
    #[serde(default)]
    livemode: Option<bool>,
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    payment_id: Option<String>,
    #[serde(default)]
    psp_reference: Option<String>,
    amount_minor: u64,
    currency: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    redirect_url: Option<String>,
    #[serde(default)]
    decline_code: Option<String>,
    #[serde(default)]
    retry_token: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    refunded_total_minor: Option<u64>,
    #[serde(default)]
    captured: Option<bool>,
}

use Unparseable as Bad;

/// The types we act on.
const KNOWN: [&str; 6] = [
    "payment.requires_action",
    "payment.processing",
    "payment.succeeded",
    "payment.attempt_failed",
    "payment.failed",
    "payment.refunded",
];

/// Why a verified body is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No usable `created` (missing, not positive, or after the signing time): a 400, nothing written.
    Created(String),
    /// Anything else we cannot read: quarantined for an operator.
    Unparseable(Unparseable),
}

impl From<Unparseable> for Refused {
    fn from(e: Unparseable) -> Self {
        Refused::Unparseable(e)
    }
}

/// For a reader of a body already accepted (a parked one replayed): whatever it lacks, it cannot be used.
impl From<Refused> for Unparseable {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Created(why) => Unparseable(why),
            Refused::Unparseable(e) => e,
        }
    }
}

/// The event in our terms; `webhook_id` and `webhook_timestamp` (the attempt's signing time) come from the
/// verified headers, `tolerance_secs` is the endpoint's clock tolerance (`Provider::tolerance_secs`).
pub fn parse(body: &[u8], webhook_id: &str, webhook_timestamp: i64, tolerance_secs: i64) -> Result<Parsed, Refused> {
    let event: Event = serde_json::from_slice(body).map_err(Bad::because)?;
    psp_event::event_type(&event.kind)?;
    if !KNOWN.contains(&event.kind.as_str()) {
        return Ok(Parsed::Ignored { event_type: event.kind });
    }
    let created_secs = created(event.created, webhook_timestamp, tolerance_secs)?;
    let data = event.data.ok_or_else(|| Unparseable("data is missing".into()))?;
    let outcome = outcome(&event.kind, &data)?;
    let target = PaymentRef {
        payment_id: data
            .payment_id
            .map(PaymentId::parse)
            .transpose()
            .map_err(Bad::because)?,
        psp_reference: data
            .psp_reference
            .map(PspReference::parse)
            .transpose()
            .map_err(Bad::because)?,
        // Our schema has no stage marker: the endpoint is this deployment's own, and an event is ours when
        // it names our payment id, or a PSP reference bound to one of our payments.
        stage: None,
    };
    let target = psp_event::named(target, "data names neither payment_id nor psp_reference")?;
    Ok(Parsed::Event(Box::new(PspEvent {
        id: PspEventId::parse(webhook_id).map_err(Bad::because)?,
        created_secs,
        target,
        facts: Facts {
            amount_minor: Some(data.amount_minor),
            currency: Some(Currency::parse(&data.currency).map_err(Bad::because)?),
            livemode: event.livemode,
            account: psp_event::account(event.account.as_deref())?,
        },
        outcome,
    })))
}

/// When the event was created (epoch seconds): required, positive, and not after its signing beyond the
/// endpoint's clock tolerance (see the module doc).
fn created(created: Option<i64>, signed_at: i64, tolerance_secs: i64) -> Result<i64, Refused> {
    let Some(created) = created else {
        return Err(Refused::Created(
            "created is missing: the event's own creation time (epoch seconds) is required".into(),
        ));
    };
    if created <= 0 || created > signed_at.saturating_add(tolerance_secs) {
        return Err(Refused::Created(format!(
            "created {created} is not a time before the delivery was signed ({signed_at})"
        )));
    }
    Ok(created)
}

/// The outcome an event of type `kind` (one of [`KNOWN`]) reports.
fn outcome(kind: &str, data: &Data) -> Result<Outcome, Unparseable> {
    let missing = |field: &str| Unparseable(format!("{field} is missing"));
    Ok(match kind {
        "payment.requires_action" => {
            let secret = data
                .client_secret
                .clone()
                .map(ClientSecret::parse)
                .transpose()
                .map_err(Bad::because)?;
            let url = data
                .redirect_url
                .clone()
                .map(RedirectUrl::parse)
                .transpose()
                .map_err(Bad::because)?;
            Outcome::RequiresAction(CustomerAction::new(secret, url).map_err(Bad::because)?)
        }
        "payment.processing" => Outcome::Processing,
        "payment.succeeded" => Outcome::Succeeded,
        "payment.attempt_failed" => Outcome::AttemptFailed {
            reason: psp_event::reason(
                "decline_code",
                data.decline_code.as_deref().ok_or_else(|| missing("decline_code"))?,
            )?,
            retry_token: data
                .retry_token
                .clone()
                .map(RetryToken::parse)
                .transpose()
                .map_err(Bad::because)?,
        },
        "payment.failed" => Outcome::Failed {
            reason: psp_event::reason("reason", data.reason.as_deref().unwrap_or("failed"))?,
        },
        _ => Outcome::Refunded {
            refunded_total_minor: data
                .refunded_total_minor
                .ok_or_else(|| missing("refunded_total_minor"))?,
            capture_proven: data.captured.unwrap_or(false),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use webhook_signatures::DEFAULT_TOLERANCE_SECS;

    /// [`super::parse`] for an endpoint with the default tolerance.
    fn parse(body: &[u8], webhook_id: &str, signed_at: i64) -> Result<Parsed, Refused> {
        super::parse(body, webhook_id, signed_at, DEFAULT_TOLERANCE_SECS)
    }

    #[test]
    fn our_schema_parses() {
        let body = json!({ "type": "payment.refunded", "created": 5, "data": { "payment_id": "pay_1",
            "amount_minor": 1000, "currency": "usd", "refunded_total_minor": 1000, "captured": true } });
        let Parsed::Event(e) = parse(body.to_string().as_bytes(), "msg_1", 9).unwrap() else {
            panic!()
        };
        assert_eq!(
            e.outcome,
            Outcome::Refunded {
                refunded_total_minor: 1000,
                capture_proven: true
            }
        );
        assert_eq!((e.id.as_str(), e.created_secs), ("msg_1", 5));
        let ignored = parse(br#"{"type":"payment.disputed"}"#, "msg_2", 9).unwrap();
        assert_eq!(
            ignored,
            Parsed::Ignored {
                event_type: "payment.disputed".into()
            }
        );
        assert!(parse(br#"{"type":"payment.succeeded","created":5}"#, "msg_3", 9).is_err());
        assert!(parse(
            br#"{"type":"payment.attempt_failed","created":5,"data":{"payment_id":"pay_1","amount_minor":1,"currency":"EUR"}}"#,
            "m",
            9
        )
        .is_err());
    }

    #[test]
    fn text_that_breaks_the_rules_makes_the_event_unparseable() {
        let event = |data: serde_json::Value| {
            json!({ "type": "payment.failed", "created": 5, "data": data })
                .to_string()
                .into_bytes()
        };
        let base = json!({ "payment_id": "pay_1", "amount_minor": 1, "currency": "EUR" });
        assert!(parse(&event(base.clone()), "msg_1", 9).is_ok());
        for (field, value) in [
            ("reason", json!("fraud\u{FFFF}")),
            ("reason", json!("\u{FDD0}")),
            ("reason", json!("r".repeat(201))),
        ] {
            let mut data = base.clone();
            data[field] = value;
            assert!(parse(&event(data), "msg_1", 9).is_err(), "{field}");
        }
        let long_account =
            json!({ "type": "payment.succeeded", "created": 5, "account": "a".repeat(129), "data": base });
        assert!(parse(long_account.to_string().as_bytes(), "msg_1", 9).is_err());
        assert!(
            parse(&event(base), &"m".repeat(1100), 9).is_err(),
            "a webhook-id over 128 characters"
        );
    }

    #[test]
    fn the_event_says_when_it_was_created_never_the_attempt() {
        let body = |created: serde_json::Value| {
            let mut event = json!({ "type": "payment.processing",
                "data": { "payment_id": "pay_1", "amount_minor": 1, "currency": "EUR" } });
            if !created.is_null() {
                event["created"] = created;
            }
            event.to_string().into_bytes()
        };
        let signed_at = 1_700_000_000;
        let created = |b: &[u8]| match parse(b, "msg_1", signed_at) {
            Ok(Parsed::Event(e)) => Ok(e.created_secs),
            Ok(other) => panic!("{other:?}"),
            Err(Refused::Created(why)) => Err(why),
            Err(other) => panic!("{other:?}"),
        };
        assert_eq!(created(&body(json!(signed_at - 3_600))), Ok(signed_at - 3_600));
        assert_eq!(
            created(&body(json!(signed_at + 300))),
            Ok(signed_at + 300),
            "clock skew"
        );
        for bad in [
            json!(null),
            json!(0),
            json!(-5),
            json!(signed_at + 301),
            json!(i64::MAX),
        ] {
            assert!(created(&body(bad.clone())).is_err(), "{bad}");
        }
        // The endpoint's own tolerance bounds it, not the default.
        let created_with = |b: &[u8], tolerance: i64| super::parse(b, "msg_1", signed_at, tolerance).is_ok();
        assert!(!created_with(&body(json!(signed_at + 61)), 60));
        assert!(created_with(&body(json!(signed_at + 900)), 900));
        // A type we do not handle needs no time: acknowledged as before.
        assert!(matches!(
            parse(br#"{"type":"payment.disputed"}"#, "m", signed_at),
            Ok(Parsed::Ignored { .. })
        ));
        // Text that is not even JSON stays a quarantine.
        assert!(matches!(parse(b"{", "m", signed_at), Err(Refused::Unparseable(_))));
    }
}
