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
//!   [`shared::retry::Backoff`], timeouts per attempt), each failed attempt reported to the breaker the call
//!   runs in (Adyen's own, `BREAKER#adyen`: [`super::GuardedAdyen`]; [`super::breaker::attempt_failed`]; Adyen
//!   marks no replayed answer, so every 5xx counts; a 429 is Adyen's rate limit, retried but never counted); other
//!   4xx (`validation`: a field missing, an idempotency key reused for another request) are
//!   [`PspError::Refused`]. Adyen's error is carried in Stripe's error shape ([`ErrorObject`]: `errorType` as
//!   `type`, `errorCode` as `code`), which every caller already reads, and logged and counted by the one refusal
//!   reporter every client shares (`http`).
//!
//! Amounts are sent in minor units as [`Money`] holds them (ISO 4217 exponents; Adyen's own exponents differ
//! for a few currencies, e.g. ISK and CLP, which this system does not take).

mod client;

pub use client::AdyenClient;

use super::settings::{self, ApiKey, KeySource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shared::config::{ConfigError, Env};
use shared::retry::Backoff;
use shared::{PaymentId, PspReference};
use std::borrow::Cow;
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
    format!("{payment}{STAGE_SEPARATOR}{}", shared::metrics::stage())
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
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let key = match (env.optional("ADYEN_API_KEY_ARN"), env.optional("ADYEN_API_KEY")) {
            (Some(arn), _) => KeySource::SecretArn(arn),
            (None, Some(key)) => KeySource::Value(ApiKey::parse(&key).map_err(|_| ConfigError::Invalid {
                name: "ADYEN_API_KEY",
                expected: "non-empty Adyen API key",
                value: String::new(),
            })?),
            (None, None) => return Err(ConfigError::Missing("ADYEN_API_KEY_ARN or ADYEN_API_KEY")),
        };
        let (connect_timeout, request_timeout, retries) = settings::transport(env)?;
        Ok(Self {
            base_url: settings::endpoint(env, "ADYEN_BASE_URL")?,
            key,
            merchant_account: env.required("ADYEN_MERCHANT_ACCOUNT")?,
            return_url: settings::endpoint(env, "ADYEN_RETURN_URL")?,
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
        Self::from_env(&env)
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
