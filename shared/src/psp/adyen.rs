//! [`AdyenClient`]: Adyen's Checkout API v71 over HTTPS, for payments that belong to Adyen (invariant 13).
//!
//! What differs from Stripe, and how this client carries it:
//! - **JSON bodies, `X-API-Key`**: the key is an [`ApiKey`] (redacted in `Debug`, never logged, nor are
//!   request bodies), from Secrets Manager (`ADYEN_API_KEY_ARN`, read again after a 401/403 as Stripe's is:
//!   [`CurrentKey`]) or the environment (`ADYEN_API_KEY`). A key Adyen refuses (401, 403: a revoked key, a web service user without the role, a
//!   merchant account the key may not use) is [`PspError::AuthFailed`], a deployment fault the callers defer
//!   on, never the customer's refusal.
//! - **Idempotency keys of at most 64 characters**: a longer key of ours (the saga's keys name the order and
//!   the step) is replaced by a digest of it ([`idempotency_key`]): deterministic, so a retry after a lost
//!   answer sends the same key and gets the first answer.
//! - **A refusal is an answer, not an error**: `/payments` answers 200 with `resultCode` `Refused` and a
//!   `refusalReason`. In our terms that is a decline ([`PspError::Declined`], `code` = Adyen's
//!   `refusalReasonCode`, `decline_code` = its `refusalReason`), like Stripe's `card_error`. A 3-D Secure
//!   challenge (`RedirectShopper`, `IdentifyShopper`, `ChallengeShopper`) is an [`AdyenPayment`] whose
//!   `action` is kept whole for the customer's page; `/payments/details` finishes it.
//! - **Modifications are asynchronous**: capture, cancel, refund, reversal and cancel-by-reference are
//!   answered `received` ([`Modification`]); whether they worked arrives only as a notification. There is no
//!   call that reads a payment's status: recovery relies on notifications, and on cancel-by-reference (our
//!   own reference, the payment id) after a deadline.
//! - **Errors** (`{status, errorCode, message, errorType, pspReference}`): 401/403 are `AuthFailed`; 429 and
//!   5xx (and no answer) are [`PspError::Unavailable`], retried like the Stripe client's (the same
//!   [`crate::retry::Backoff`], timeouts per attempt), each failed attempt reported to the breaker the call
//!   runs in (Adyen's own, `BREAKER#adyen`: [`super::GuardedAdyen`]; [`super::breaker::attempt_failed`]; Adyen
//!   marks no replayed answer, so every 5xx counts; a 429 is Adyen's rate limit, retried but never counted); other
//!   4xx (`validation`: a field missing, an idempotency key reused for another request) are
//!   [`PspError::Refused`]. Adyen's error is carried in Stripe's error shape ([`ErrorObject`]: `errorType` as
//!   `type`, `errorCode` as `code`), which every caller already reads, and logged and counted by the Stripe
//!   client's one refusal reporter.
//!
//! Amounts are sent in minor units as [`Money`] holds them (ISO 4217 exponents; Adyen's own exponents differ
//! for a few currencies, e.g. ISK and CLP, which this system does not take).

use super::client::{report_refusal, STAGE_MARKER};
use super::http::{self, AttemptFailure};
use super::key::CurrentKey;
use super::pace::Pace;
use super::settings::KeySource;
use super::stripe::{ErrorObject, ErrorType};
use super::{ApiKey, ChargeRequest, PspError};
use crate::config::{ConfigError, Env};
use crate::retry::Backoff;
use crate::{Money, PaymentId, PspReference};
use payments_core::breaker::Attempt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

/// The Checkout API version every path is under.
pub const API_VERSION: &str = "v71";
/// Characters Adyen accepts in an `Idempotency-Key`.
pub const MAX_KEY_CHARS: usize = 64;
/// Prefix of a digested key: never the start of a key we choose ourselves.
const DIGEST_PREFIX: &str = "sha256:";

/// `key` as Adyen accepts it: itself when it fits in [`MAX_KEY_CHARS`], else `sha256:` and the first 57 hex
/// digits of its SHA-256 (228 bits: no collision among our keys), the same for every retry.
pub fn idempotency_key(key: &str) -> Cow<'_, str> {
    use sha2::{Digest, Sha256};
    if key.chars().count() <= MAX_KEY_CHARS {
        return Cow::Borrowed(key);
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let room = MAX_KEY_CHARS.saturating_sub(DIGEST_PREFIX.len());
    Cow::Owned(format!("{DIGEST_PREFIX}{}", hex.get(..room).unwrap_or(&hex)))
}

/// What separates the payment id from the stage in our merchant reference (neither holds one).
pub const STAGE_SEPARATOR: char = '@';

/// Our `reference` for `payment` at Adyen: `<payment id>@<stage>`. Adyen signs `merchantReference` in every
/// notification's HMAC (unlike `metadata` and `additionalData`), so the stage travels signed, and a
/// notification of another stage sharing the merchant account is known as such from signed data.
pub fn merchant_reference(payment: &PaymentId) -> String {
    format!("{payment}{STAGE_SEPARATOR}{}", crate::metrics::stage())
}

/// A `merchantReference` read back: the payment id's text and the stage, when it carries one (a reference
/// made before the stage was added has none).
pub fn split_reference(reference: &str) -> (&str, Option<&str>) {
    match reference.rsplit_once(STAGE_SEPARATOR) {
        Some((payment, stage)) => (payment, Some(stage)),
        None => (reference, None),
    }
}

/// The Adyen client's settings, read once per cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdyenSettings {
    /// `ADYEN_BASE_URL`: `https://checkout-test.adyen.com` (test) or the live `https://<prefix>-checkout-live.adyenpayments.com/checkout`,
    /// the simulator locally. The client adds `/v71/...`.
    pub base_url: String,
    /// `ADYEN_API_KEY_ARN` (a Secrets Manager secret: the key, or `{"api_key": "..."}`; read again after a
    /// 401/403, as the Stripe key is) or `ADYEN_API_KEY`: the web service user's API key.
    pub key: KeySource,
    /// `ADYEN_MERCHANT_ACCOUNT`: sent with every request; Adyen refuses one the key may not use (403).
    pub merchant_account: String,
    /// `ADYEN_RETURN_URL`: where a redirected shopper comes back (required by `/payments` in v71).
    pub return_url: String,
    /// `PSP_CONNECT_TIMEOUT_MS`, `PSP_REQUEST_TIMEOUT_MS`, `PSP_MAX_RETRIES`: the Stripe client's, shared.
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub retries: Backoff,
    /// The request rate a scanner's client keeps to (`ADYEN_SCAN_RATE_PER_SECOND`: [`super::pace::ScanRates`],
    /// set by the scanners); `None` (the checkout functions): unpaced.
    pub scan_rate: Option<NonZeroU32>,
}

impl AdyenSettings {
    /// The settings above; anything missing fails the start, not the first call.
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
        let key = match (env.optional("ADYEN_API_KEY_ARN"), env.optional("ADYEN_API_KEY")) {
            (Some(arn), _) => KeySource::SecretArn(arn),
            (None, Some(key)) => KeySource::Value(ApiKey::parse(&key).map_err(|_| ConfigError::Invalid {
                name: "ADYEN_API_KEY",
                expected: "non-empty Adyen API key",
                value: String::new(),
            })?),
            (None, None) => return Err(ConfigError::Missing("ADYEN_API_KEY_ARN or ADYEN_API_KEY")),
        };
        let (connect_timeout, request_timeout, retries) = super::settings::transport(env)?;
        Ok(Self {
            base_url: super::settings::endpoint(env, "ADYEN_BASE_URL")?,
            key,
            merchant_account: env.required("ADYEN_MERCHANT_ACCOUNT")?,
            return_url: super::settings::endpoint(env, "ADYEN_RETURN_URL")?,
            connect_timeout,
            request_timeout,
            retries,
            scan_rate: None,
        })
    }

    /// Settings for an Adyen account at `base_url` (the simulator) with the defaults.
    pub fn local(base_url: &str, key: &str, merchant_account: &str) -> Result<Self, ConfigError> {
        let env = Env::from_lookup(|_| None)
            .with("ADYEN_BASE_URL", base_url)
            .with("ADYEN_API_KEY", key)
            .with("ADYEN_MERCHANT_ACCOUNT", merchant_account)
            .with("ADYEN_RETURN_URL", "http://127.0.0.1/checkout/return");
        Self::from(&env)
    }
}

/// Adyen's `resultCode` of a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum ResultCode {
    Authorised,
    Refused,
    RedirectShopper,
    IdentifyShopper,
    ChallengeShopper,
    PresentToShopper,
    Pending,
    Received,
    Cancelled,
    Error,
    #[serde(other)]
    Other,
}

impl ResultCode {
    /// The shopper must act (a 3-D Secure challenge, a redirect): the answer carries an `action`.
    pub fn needs_shopper(self) -> bool {
        matches!(
            self,
            Self::RedirectShopper | Self::IdentifyShopper | Self::ChallengeShopper | Self::PresentToShopper
        )
    }
}

/// A payment as `/payments` or `/payments/details` answered it, when it is not refused.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdyenPayment {
    /// Absent only while the shopper has not acted yet on some methods.
    #[serde(default)]
    pub psp_reference: Option<PspReference>,
    pub result_code: ResultCode,
    /// What the customer's page does next (Adyen's Drop-in/Components take it whole): kept as sent.
    #[serde(default)]
    pub action: Option<Value>,
    #[serde(default)]
    pub merchant_reference: Option<String>,
    #[serde(default)]
    pub refusal_reason: Option<String>,
    #[serde(default)]
    pub refusal_reason_code: Option<String>,
}

/// A modification Adyen received (`status` is always `received`): its own pspReference; the outcome comes by
/// notification, under this reference, with the payment's as `originalReference`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Modification {
    pub psp_reference: PspReference,
    /// The payment's (`paymentPspReference`); absent for a cancel by our reference.
    #[serde(default)]
    pub payment_psp_reference: Option<PspReference>,
    /// Our reference of the payment, for a cancel by reference (`paymentReference`).
    #[serde(default)]
    pub payment_reference: Option<String>,
    pub status: ModificationStatus,
}

/// The only status Adyen gives a modification synchronously.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModificationStatus {
    Received,
}

/// Adyen's error object.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceError {
    #[serde(default)]
    error_code: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error_type: Option<String>,
}

/// Adyen's Checkout API. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct AdyenClient {
    http: reqwest::Client,
    base_url: String,
    key: CurrentKey,
    merchant_account: String,
    return_url: String,
    retries: Backoff,
    pace: Option<Pace>,
}

impl fmt::Debug for AdyenClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdyenClient")
            .field("base_url", &self.base_url)
            .field("merchant_account", &self.merchant_account)
            .finish_non_exhaustive()
    }
}

/// `{value, currency}` in minor units.
fn amount(money: &Money) -> Value {
    json!({ "value": money.amount_minor(), "currency": money.currency().as_str() })
}

/// A request we refuse to send (it could never succeed): refused as Adyen would refuse it, without a call.
fn refused_here(field: &str, message: &str) -> PspError {
    PspError::Refused {
        status: 422,
        error: Box::new(ErrorObject {
            kind: ErrorType::InvalidRequestError,
            code: None,
            decline_code: None,
            message: Some(message.to_owned()),
            param: Some(field.to_owned()),
            payment_intent: None,
        }),
    }
}

/// A payment's answer in our terms: refused (or cancelled) by the issuer or the shopper is a decline, with
/// Adyen's refusal reason; `Error` is a refusal of this request (its key replays it); a challenge must carry
/// its `action`.
fn settled(payment: AdyenPayment) -> Result<AdyenPayment, PspError> {
    let reference = payment.psp_reference.as_ref().map_or("-", PspReference::as_str);
    let error = |kind| ErrorObject {
        kind,
        code: payment.refusal_reason_code.clone(),
        decline_code: payment.refusal_reason.clone(),
        message: Some(format!("{:?} (pspReference {reference})", payment.result_code)),
        param: None,
        payment_intent: None,
    };
    match payment.result_code {
        ResultCode::Refused | ResultCode::Cancelled => Err(PspError::Declined(Box::new(error(ErrorType::CardError)))),
        ResultCode::Error => Err(PspError::Refused {
            status: 200,
            error: Box::new(error(ErrorType::ApiError)),
        }),
        ResultCode::Other => Err(PspError::BadAnswer("a resultCode this client does not know".into())),
        code if code.needs_shopper() && payment.action.is_none() => {
            Err(PspError::BadAnswer(format!("{code:?} without an action").into()))
        }
        _ => Ok(payment),
    }
}

/// A non-2xx answer in our terms, and whether to retry it.
fn classify(status: u16, body: &[u8]) -> AttemptFailure {
    let parsed = serde_json::from_slice::<ServiceError>(body).ok();
    let kind = match status {
        401 => ErrorType::AuthenticationError,
        403 => ErrorType::PermissionError,
        429 | 500..=599 => ErrorType::ApiError,
        _ => ErrorType::InvalidRequestError,
    };
    let error = ErrorObject {
        kind,
        code: parsed.as_ref().and_then(|e| e.error_code.clone()),
        decline_code: None,
        message: Some(match &parsed {
            Some(e) => format!(
                "{} ({})",
                e.message.as_deref().unwrap_or("no message"),
                e.error_type.as_deref().unwrap_or("no errorType")
            ),
            None => format!("HTTP {status} without an Adyen error object"),
        }),
        param: None,
        payment_intent: None,
    };
    let (error, retry) = match status {
        401 | 403 => (
            PspError::AuthFailed {
                status,
                error: Box::new(error),
            },
            false,
        ),
        429 | 500..=599 => (
            PspError::Unavailable(format!("HTTP {status}: {}", error.summary()).into()),
            true,
        ),
        _ => (
            PspError::Refused {
                status,
                error: Box::new(error),
            },
            false,
        ),
    };
    AttemptFailure { error, retry }
}

impl AdyenClient {
    /// A client for the account of `settings` whose key is the environment's (`ADYEN_API_KEY`: local runs,
    /// tests); a key in Secrets Manager is read by [`AdyenClient::from_settings`], and refused here.
    pub fn new(settings: &AdyenSettings) -> Result<Self, PspError> {
        match &settings.key {
            KeySource::Value(key) => Self::with_key(settings, CurrentKey::fixed(key.clone())),
            KeySource::SecretArn(_) => Err(PspError::BadAnswer(
                "ADYEN_API_KEY_ARN: the key is read by AdyenClient::from_settings".into(),
            )),
        }
    }

    /// Resolves the key ([`CurrentKey::resolve`]: Secrets Manager when `ADYEN_API_KEY_ARN` is set, read again
    /// after a 401/403) and builds the client, once per cold start.
    pub async fn from_settings(
        settings: &AdyenSettings,
        sdk: &aws_config::SdkConfig,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let key = CurrentKey::resolve(&settings.key, sdk).await?;
        Ok(Self::with_key(settings, key)?)
    }

    /// A client with `key`.
    pub fn with_key(settings: &AdyenSettings, key: CurrentKey) -> Result<Self, PspError> {
        let http = http::client(settings.connect_timeout, settings.request_timeout)?;
        Ok(Self {
            http,
            base_url: settings.base_url.clone(),
            key,
            merchant_account: settings.merchant_account.clone(),
            return_url: settings.return_url.clone(),
            retries: settings.retries,
            pace: settings.scan_rate.map(Pace::per_second),
        })
    }

    /// One API call with retries, in a span named `step`; a refusal is logged and counted once.
    async fn call<T: DeserializeOwned>(
        &self,
        step: &'static str,
        path: &str,
        key: &str,
        body: &Value,
    ) -> Result<T, PspError> {
        let key = &idempotency_key(key);
        let operation = step.strip_prefix("psp.").unwrap_or(step);
        let result = self
            .key
            .with_refresh(operation, |api_key| async move {
                http::retried(&self.retries, step, path, |attempt| {
                    self.attempt(&api_key, path, key, body, attempt)
                })
                .await
            })
            .await;
        if let Err(e) = &result {
            report_refusal(step, e);
        }
        result
    }

    async fn attempt<T: DeserializeOwned>(
        &self,
        api_key: &ApiKey,
        path: &str,
        key: &str,
        body: &Value,
        attempt: u32,
    ) -> Result<T, AttemptFailure> {
        let request = self
            .http
            .post(format!("{}/{API_VERSION}{path}", self.base_url))
            .header("X-API-Key", api_key.expose())
            .header("Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .body(body.to_string());
        if let Some(pace) = &self.pace {
            pace.ready().await;
        }
        let failed = match http::attempt(request, path, attempt, "pspreference").await? {
            Ok(answer) => return Ok(answer),
            Err(failed) => failed,
        };
        // Adyen marks no answer as replayed for the key: every 5xx is the PSP failing now. A 429 is Adyen's
        // rate limit ("Too Many Requests": slow down, the request may succeed later), not an outage: retried
        // with back-off, never counted by the breaker (as Stripe's).
        if failed.status >= 500 {
            super::breaker::attempt_failed(Attempt::PspFailed);
        }
        Err(classify(failed.status, &failed.body))
    }

    /// Authorises `request.money` for our payment (`reference`: [`merchant_reference`]), to be captured later
    /// (`additionalData.manualCapture`), once per `key`. `request.payment_method` is Adyen's `paymentMethod`
    /// object as the customer's page produced it (JSON text: encrypted card fields, a stored method, ...).
    /// A challenge comes back with its `action`; a refusal is [`PspError::Declined`].
    pub async fn authorise(&self, key: &str, request: &ChargeRequest<'_>) -> Result<AdyenPayment, PspError> {
        let method: Value = serde_json::from_str(request.payment_method)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| refused_here("paymentMethod", "not Adyen's paymentMethod object (JSON)"))?;
        let body = json!({
            "amount": amount(request.money),
            "merchantAccount": self.merchant_account,
            "reference": merchant_reference(request.payment_id),
            "paymentMethod": method,
            "returnUrl": self.return_url,
            "additionalData": { "manualCapture": "true" },
            "metadata": {
                "order_id": request.order_id.as_str(),
                STAGE_MARKER: crate::metrics::stage(),
            },
        });
        settled(self.call("psp.authorise", "/payments", key, &body).await?)
    }

    /// Finishes a challenged payment with what the shopper's redirect brought back (`redirectResult`).
    pub async fn details(&self, key: &str, redirect_result: &str) -> Result<AdyenPayment, PspError> {
        let body = json!({ "details": { "redirectResult": redirect_result } });
        settled(self.call("psp.details", "/payments/details", key, &body).await?)
    }

    /// `/payments/{reference}/{operation}` with the merchant account, an amount when given, and our `key`'s
    /// reference for the modification.
    async fn modify(
        &self,
        step: &'static str,
        key: &str,
        reference: &PspReference,
        operation: &str,
        money: Option<&Money>,
    ) -> Result<Modification, PspError> {
        let body = match money {
            Some(money) => json!({
                "merchantAccount": self.merchant_account,
                "reference": idempotency_key(key),
                "amount": amount(money),
            }),
            None => json!({ "merchantAccount": self.merchant_account, "reference": idempotency_key(key) }),
        };
        // PSP references are validated ids (path-safe): safe in a path as they are.
        let path = format!("/payments/{}/{operation}", reference.as_str());
        self.call(step, &path, key, &body).await
    }

    /// Captures `money` of an authorised payment. `CAPTURE` (then possibly `CAPTURE_FAILED`) says how it went.
    pub async fn capture(&self, key: &str, reference: &PspReference, money: &Money) -> Result<Modification, PspError> {
        self.modify("psp.capture", key, reference, "captures", Some(money))
            .await
    }

    /// Cancels an authorisation not captured. `CANCELLATION` says how it went.
    pub async fn cancel(&self, key: &str, reference: &PspReference) -> Result<Modification, PspError> {
        self.modify("psp.cancel", key, reference, "cancels", None).await
    }

    /// Refunds `money` of a captured payment. `REFUND` (then possibly `REFUND_FAILED`) says how it went.
    pub async fn refund(&self, key: &str, reference: &PspReference, money: &Money) -> Result<Modification, PspError> {
        self.modify("psp.refund", key, reference, "refunds", Some(money)).await
    }

    /// Cancels the payment if it is not captured, else refunds it whole. `CANCEL_OR_REFUND` says how it went.
    pub async fn reverse(&self, key: &str, reference: &PspReference) -> Result<Modification, PspError> {
        self.modify("psp.reverse", key, reference, "reversals", None).await
    }

    /// Cancels the payment we created for `payment` (our reference), when its pspReference never reached us:
    /// how recovery ends a payment without a notification after its deadline. `TECHNICAL_CANCEL` says how it
    /// went (`success: false` when Adyen has no payment for the reference).
    pub async fn cancel_by_reference(&self, key: &str, payment: &PaymentId) -> Result<Modification, PspError> {
        let body = json!({
            "merchantAccount": self.merchant_account,
            "paymentReference": merchant_reference(payment),
            "reference": idempotency_key(key),
        });
        self.call("psp.cancel_by_reference", "/cancels", key, &body).await
    }
}
