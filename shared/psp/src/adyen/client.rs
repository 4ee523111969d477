//! [`AdyenClient`]: the calls of Adyen's Checkout API (what the module above says), and the same calls through
//! Adyen's own circuit breaker.

use super::{idempotency_key, merchant_reference, AdyenPayment, AdyenSettings, Modification, ResultCode, API_VERSION};
use crate::breaker::CircuitBreaker;
use crate::error::PspError;
use crate::http::{self, AttemptFailure, STAGE_MARKER};
use crate::key::CurrentKey;
use crate::pace::Pace;
use crate::settings::{ApiKey, KeySource};
use crate::stripe::objects::{ErrorObject, ErrorType};
use crate::ChargeRequest;
use payments_core::breaker::{Attempt, Request};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use shared::retry::Backoff;
use shared::{Money, PaymentId, PspReference};
use std::fmt;

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
        http::call(&self.key, &self.retries, step, path, |api_key, attempt| {
            self.attempt(api_key, path, key, body, attempt)
        })
        .await
    }

    /// One attempt of a call with `api_key`: the request, paced to the function's budget, and its answer read.
    async fn attempt<T: DeserializeOwned>(
        &self,
        api_key: ApiKey,
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
            crate::breaker::attempt_failed(Attempt::PspFailed);
        }
        if failed.status == 429 {
            http::count_rate_limited("adyen", path);
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
                STAGE_MARKER: shared::metrics::stage(),
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

/// Adyen's Checkout API through its own breaker (`BREAKER#adyen`), by the same rule as Stripe's: Adyen failing
/// stops only Adyen's calls. Only what Adyen has: no status read, no search, no refund read (there are none),
/// so neither the saga nor recovery can ask Adyen for them.
impl CircuitBreaker<AdyenClient> {
    /// Always [`shared::PspName::Adyen`]: the payments this client may be asked about.
    pub fn provider(&self) -> shared::PspName {
        shared::PspName::Adyen
    }

    /// [`AdyenClient::authorise`](AdyenClient::authorise) through the breaker.
    pub async fn authorise(&self, key: &str, request: &ChargeRequest<'_>) -> Result<AdyenPayment, PspError> {
        self.guarded(Request::Keyed(key), self.inner().authorise(key, request))
            .await
    }

    /// [`AdyenClient::details`](AdyenClient::details) through the breaker.
    pub async fn details(&self, key: &str, redirect_result: &str) -> Result<AdyenPayment, PspError> {
        self.guarded(Request::Keyed(key), self.inner().details(key, redirect_result))
            .await
    }

    /// [`AdyenClient::capture`](AdyenClient::capture) through the breaker.
    pub async fn capture(&self, key: &str, reference: &PspReference, money: &Money) -> Result<Modification, PspError> {
        self.guarded(Request::Keyed(key), self.inner().capture(key, reference, money))
            .await
    }

    /// [`AdyenClient::cancel`](AdyenClient::cancel) through the breaker.
    pub async fn cancel(&self, key: &str, reference: &PspReference) -> Result<Modification, PspError> {
        self.guarded(Request::Keyed(key), self.inner().cancel(key, reference))
            .await
    }

    /// [`AdyenClient::refund`](AdyenClient::refund) through the breaker.
    pub async fn refund(&self, key: &str, reference: &PspReference, money: &Money) -> Result<Modification, PspError> {
        self.guarded(Request::Keyed(key), self.inner().refund(key, reference, money))
            .await
    }

    /// [`AdyenClient::reverse`](AdyenClient::reverse) through the breaker.
    pub async fn reverse(&self, key: &str, reference: &PspReference) -> Result<Modification, PspError> {
        self.guarded(Request::Keyed(key), self.inner().reverse(key, reference))
            .await
    }

    /// [`AdyenClient::cancel_by_reference`](AdyenClient::cancel_by_reference) through the breaker.
    pub async fn cancel_by_reference(&self, key: &str, payment: &PaymentId) -> Result<Modification, PspError> {
        self.guarded(Request::Keyed(key), self.inner().cancel_by_reference(key, payment))
            .await
    }
}
