//! Request bodies and their conversion into domain values. Unknown fields are refused on every route
//! (`deny_unknown_fields`): a typo in a field name is a 400 naming the field, not a silently ignored value.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shared::http::ApiError;
use shared::{
    text, Channel, ClientSecret, CorrelationId, Currency, CustomerAction, KnownPsps, Metadata, Money, NewPayment,
    Observation, OrderId, Outcome, PaymentId, PspName, PspReference, RedirectUrl, RetryToken,
};
use std::collections::BTreeMap;

fn invalid(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(e.to_string())
}

/// `POST /payments`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePayment {
    pub order_id: String,
    pub amount_minor: u64,
    pub currency: String,
    #[serde(default)]
    pub psp_reference: Option<String>,
    /// The PSP the payment belongs to (`stripe` when absent): one the deployment knows. Left out of the
    /// canonical form when absent, so a request from before the field fingerprints as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

impl CreatePayment {
    /// Validates into a new payment with a fresh id, for a PSP in `known` (whose namespace the reference
    /// must be in).
    pub fn into_new_payment(
        self,
        known: &KnownPsps,
        correlation_id: CorrelationId,
        trace_context: Option<String>,
        now_ms: i64,
    ) -> Result<NewPayment, ApiError> {
        let currency = Currency::parse(&self.currency).map_err(invalid)?;
        let provider = match &self.provider {
            Some(name) => known.get(name).map_err(invalid)?,
            None => PspName::default(),
        };
        let psp_reference = self
            .psp_reference
            .map(PspReference::parse)
            .transpose()
            .map_err(invalid)?;
        if let Some(reference) = &psp_reference {
            provider.check_reference(reference).map_err(invalid)?;
        }
        Ok(NewPayment {
            id: PaymentId::generate(uuid::Uuid::new_v4().as_u128()),
            order_id: OrderId::parse(self.order_id).map_err(invalid)?,
            money: Money::new(self.amount_minor, currency).map_err(invalid)?,
            provider,
            psp_reference,
            metadata: Metadata::parse(self.metadata).map_err(invalid)?,
            correlation_id,
            trace_context,
            now_ms,
        })
    }

    /// Identifies the request for idempotency: a hash of its canonical form, so whitespace and key order
    /// in the body do not make the same request look different.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(canonical))
    }
}

/// `POST /payments/{id}/sync-result`: the PSP's synchronous answer to the charge.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum SyncResult {
    RequiresAction {
        #[serde(default)]
        client_secret: Option<String>,
        #[serde(default)]
        redirect_url: Option<String>,
        #[serde(default)]
        psp_reference: Option<String>,
    },
    Processing {
        #[serde(default)]
        psp_reference: Option<String>,
    },
    Succeeded {
        #[serde(default)]
        psp_reference: Option<String>,
    },
    /// A declined attempt the customer may retry.
    AttemptFailed {
        decline_code: String,
        #[serde(default)]
        retry_token: Option<String>,
        #[serde(default)]
        psp_reference: Option<String>,
    },
    Failed {
        reason: String,
        #[serde(default)]
        psp_reference: Option<String>,
    },
}

impl SyncResult {
    pub fn psp_reference(&self) -> Result<Option<PspReference>, ApiError> {
        let raw = match self {
            SyncResult::RequiresAction { psp_reference, .. }
            | SyncResult::Processing { psp_reference }
            | SyncResult::Succeeded { psp_reference }
            | SyncResult::AttemptFailed { psp_reference, .. }
            | SyncResult::Failed { psp_reference, .. } => psp_reference,
        };
        raw.clone().map(PspReference::parse).transpose().map_err(invalid)
    }

    pub fn into_observation(
        self,
        correlation_id: CorrelationId,
        trace_context: Option<String>,
    ) -> Result<Observation, ApiError> {
        let psp_reference = self.psp_reference()?;
        let outcome = match self {
            SyncResult::RequiresAction {
                client_secret,
                redirect_url,
                ..
            } => {
                let secret = client_secret.map(ClientSecret::parse).transpose().map_err(invalid)?;
                let url = redirect_url.map(RedirectUrl::parse).transpose().map_err(invalid)?;
                Outcome::RequiresAction(CustomerAction::new(secret, url).map_err(invalid)?)
            }
            SyncResult::Processing { .. } => Outcome::Processing,
            SyncResult::Succeeded { .. } => Outcome::Succeeded,
            SyncResult::AttemptFailed {
                decline_code,
                retry_token,
                ..
            } => Outcome::AttemptFailed {
                reason: text::bounded("decline_code", &decline_code, text::MAX_REASON_CHARS).map_err(invalid)?,
                retry_token: retry_token.map(RetryToken::parse).transpose().map_err(invalid)?,
            },
            SyncResult::Failed { reason, .. } => Outcome::Failed {
                reason: text::bounded("reason", &reason, text::MAX_REASON_CHARS).map_err(invalid)?,
            },
        };
        let mut observation = Observation::new(Channel::Sync, outcome, correlation_id);
        observation.psp_reference = psp_reference;
        observation.trace_context = trace_context;
        Ok(observation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::http::parse_json;

    #[test]
    fn unknown_fields_are_refused_and_named() {
        let err = parse_json::<CreatePayment>(br#"{"order_id":"o","amount_minor":1,"currency":"EUR","amout":2}"#)
            .unwrap_err();
        assert!(err.message.contains("amout"), "{}", err.message);
        let err = parse_json::<SyncResult>(br#"{"outcome":"succeeded","extra":1}"#).unwrap_err();
        assert!(err.message.contains("extra"), "{}", err.message);
    }

    #[test]
    fn the_provider_is_a_known_one_and_the_reference_is_in_its_namespace() {
        let known = KnownPsps::default();
        let create = |body: &str| {
            parse_json::<CreatePayment>(body.as_bytes()).unwrap().into_new_payment(
                &known,
                CorrelationId::parse("c").unwrap(),
                None,
                1,
            )
        };
        let base = r#""order_id":"o","amount_minor":1,"currency":"EUR""#;
        assert_eq!(create(&format!("{{{base}}}")).unwrap().provider, PspName::Stripe);
        let standard = create(&format!(r#"{{{base},"provider":"standard","psp_reference":"psp_1"}}"#)).unwrap();
        assert_eq!(standard.provider.as_str(), "standard");
        for (body, says) in [
            (r#""provider":"paypal""#, "unknown provider"),
            (r#""provider":"Stripe!""#, "provider"),
            (r#""psp_reference":"psp_1""#, "not a stripe reference"),
            (
                r#""provider":"stripe","psp_reference":"7914073381342284""#,
                "not a stripe reference",
            ),
        ] {
            let err = create(&format!("{{{base},{body}}}")).unwrap_err();
            assert_eq!(err.status, 400, "{body}");
            assert!(err.message.contains(says), "{body}: {}", err.message);
        }
        let plain: CreatePayment = parse_json(format!("{{{base}}}").as_bytes()).unwrap();
        assert!(
            !serde_json::to_string(&plain).unwrap().contains("provider"),
            "an old request keeps its fingerprint"
        );
    }

    #[test]
    fn sync_results_parse_into_observations() {
        let r: SyncResult =
            parse_json(br#"{"outcome":"requires_action","redirect_url":"https://bank.example/3ds"}"#).unwrap();
        let obs = r.into_observation(CorrelationId::parse("c").unwrap(), None).unwrap();
        assert!(matches!(obs.outcome, Outcome::RequiresAction(_)));
        let r: SyncResult = parse_json(br#"{"outcome":"requires_action"}"#).unwrap();
        assert!(
            r.into_observation(CorrelationId::parse("c").unwrap(), None).is_err(),
            "an action needs something"
        );
        assert!(parse_json::<SyncResult>(br#"{"outcome":"teleported"}"#).is_err());
        assert!(
            parse_json::<SyncResult>(br#"{"outcome":"failed"}"#).is_err(),
            "reason is required"
        );
    }

    #[test]
    fn free_text_is_bounded_and_printable() {
        let c = || CorrelationId::parse("c").unwrap();
        for body in [
            r#"{"outcome":"failed","reason":"fraud\uffff"}"#.to_owned(),
            r#"{"outcome":"attempt_failed","decline_code":"x\u0007"}"#.to_owned(),
            format!(r#"{{"outcome":"failed","reason":"{}"}}"#, "r".repeat(201)),
            format!(
                r#"{{"outcome":"attempt_failed","decline_code":"d","retry_token":"{}"}}"#,
                "t".repeat(513)
            ),
            format!(
                r#"{{"outcome":"requires_action","client_secret":"{}"}}"#,
                "s".repeat(513)
            ),
            r#"{"outcome":"requires_action","redirect_url":"http://localhost@evil.example/3ds"}"#.to_owned(),
            r#"{"outcome":"requires_action","redirect_url":"http://localhost.evil.example/3ds"}"#.to_owned(),
        ] {
            let parsed: SyncResult = parse_json(body.as_bytes()).unwrap();
            let err = parsed.into_observation(c(), None).unwrap_err();
            assert_eq!(err.status, 400, "{body}");
        }
        let ok: SyncResult =
            parse_json(format!(r#"{{"outcome":"failed","reason":"{}"}}"#, "r".repeat(200)).as_bytes()).unwrap();
        assert!(ok.into_observation(c(), None).is_ok());
    }

    #[test]
    fn fingerprint_ignores_formatting_but_not_content() {
        let a: CreatePayment = parse_json(br#"{"order_id":"o","amount_minor":1,"currency":"EUR"}"#).unwrap();
        let b: CreatePayment =
            parse_json(b"{ \"currency\": \"EUR\", \"amount_minor\": 1, \"order_id\": \"o\" }").unwrap();
        let c: CreatePayment = parse_json(br#"{"order_id":"o","amount_minor":2,"currency":"EUR"}"#).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
    }
}
