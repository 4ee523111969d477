//! [`StripeClient`]: Stripe's PaymentIntents and Refunds API over HTTPS (`reqwest` with rustls).
//!
//! - Requests are `application/x-www-form-urlencoded` (`metadata[payment_id]=...`), authenticated with
//!   `Authorization: Bearer <secret key>`, pinned to [`STRIPE_API_VERSION`]; every POST carries the caller's
//!   `Idempotency-Key`.
//! - Each attempt has a connect and a request timeout. Connection errors, timeouts, 409 (a concurrent request
//!   with the same key), 429 and 5xx are retried with exponential backoff and full jitter, unless Stripe's
//!   `Stripe-Should-Retry` header says otherwise (it wins either way, as in Stripe's own libraries).
//! - Stripe's error object is mapped to [`PspError`]: `card_error` is a decline; `invalid_request_error`,
//!   `idempotency_error` and other 4xx are permanent; `api_error`, 429, 5xx and timeouts are transient.
//! - The API key comes from Secrets Manager (`PSP_API_KEY_ARN`) in AWS or `PSP_API_KEY` locally. It is an
//!   [`ApiKey`], whose `Debug` is redacted, and it is never logged; neither are request bodies.

use super::stripe::{ErrorBody, ErrorType, PaymentIntent, Refund};
use super::{ChargeRequest, Psp, PspError};
use crate::retry::Backoff;
use crate::telemetry::ErrorChain;
use crate::{clock, PaymentId, PspReference};
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;
use std::fmt;
use tracing::{debug, warn, Instrument};

/// The Stripe API version every request is pinned to (the one the pinned official library speaks).
pub const STRIPE_API_VERSION: &str = "2026-10-28.endive";

pub use super::settings::{ApiKey, KeySource, PspSettings};

/// Stripe's API over HTTPS. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct StripeClient {
    http: reqwest::Client,
    base_url: String,
    key: ApiKey,
    return_url: Option<String>,
    retries: Backoff,
}

impl fmt::Debug for StripeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeClient")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// Why one attempt failed, and whether another may succeed.
struct AttemptFailure {
    error: PspError,
    retry: bool,
}

impl StripeClient {
    /// A client with `key` (already resolved).
    pub fn new(settings: &PspSettings, key: ApiKey) -> Result<Self, PspError> {
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.request_timeout)
            .user_agent(concat!("payments-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PspError::Unavailable(Box::new(Transport::new("building the HTTP client", e))))?;
        Ok(Self {
            http,
            base_url: settings.base_url.clone(),
            key,
            return_url: settings.return_url.clone(),
            retries: settings.retries,
        })
    }

    /// Resolves the key (Secrets Manager when `PSP_API_KEY_ARN` is set) and builds the client.
    pub async fn from_settings(
        settings: &PspSettings,
        sdk: &aws_config::SdkConfig,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let key = match &settings.key {
            KeySource::Value(key) => key.clone(),
            KeySource::SecretArn(arn) => {
                let secret = crate::aws::secret_string(&crate::aws::secrets_client(sdk), arn).await?;
                ApiKey::from_secret_string(&secret)?
            }
        };
        Ok(Self::new(settings, key)?)
    }

    /// One API call with retries, in a span named `step` (`psp.charge`, ...). `form` is the request body
    /// (POST) or query (GET).
    async fn call<T: DeserializeOwned>(
        &self,
        step: &'static str,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        form: &[(&str, String)],
    ) -> Result<T, PspError> {
        let span = crate::telemetry::step_span(step);
        let result = self
            .retries
            .retry(
                |attempt| self.attempt(method.clone(), path, key, form, attempt),
                |failure: &AttemptFailure| failure.retry,
            )
            .instrument(span)
            .await;
        result.map_err(|(failure, attempts)| {
            if failure.retry {
                warn!(path, attempts, error = %ErrorChain(&failure.error), "PSP call failed after retries");
            }
            failure.error
        })
    }

    async fn attempt<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        form: &[(&str, String)],
        attempt: u32,
    ) -> Result<T, AttemptFailure> {
        let url = format!("{}{path}", self.base_url);
        let mut request = self
            .http
            .request(method.clone(), url)
            .bearer_auth(self.key.expose())
            .header("Stripe-Version", STRIPE_API_VERSION);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request = if method == reqwest::Method::GET {
            request.query(form)
        } else {
            request.form(form)
        };
        let started = clock::now_ms();
        let response = request.send().await.map_err(|e| AttemptFailure {
            // A timeout or reset after sending: the call may have happened; the same key makes the retry safe.
            error: PspError::Unavailable(Box::new(Transport::new("no answer", e))),
            retry: true,
        })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(|e| AttemptFailure {
            error: PspError::Unavailable(Box::new(Transport::new("answer cut off", e))),
            retry: true,
        })?;
        debug!(
            status,
            attempt,
            elapsed_ms = clock::now_ms().saturating_sub(started),
            request_id = header(&headers, "request-id").unwrap_or("-"),
            "PSP answered"
        );
        if (200..300).contains(&status) {
            return serde_json::from_slice(&body).map_err(|e| AttemptFailure {
                error: PspError::BadAnswer(Box::new(Unreadable {
                    status,
                    path: path.to_owned(),
                    source: e,
                })),
                retry: false,
            });
        }
        Err(classify(status, &headers, &body))
    }
}

/// One attempt's transport failure: what was cut (`no answer`, `answer cut off`) and how (timeout,
/// connection), with reqwest's error, its URL removed (no secret in it today, but a query string could hold
/// one), as the source.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {kind}")]
struct Transport {
    what: &'static str,
    kind: &'static str,
    #[source]
    source: reqwest::Error,
}

impl Transport {
    fn new(what: &'static str, e: reqwest::Error) -> Self {
        let kind = if e.is_timeout() {
            "timeout"
        } else if e.is_connect() {
            "connection failed"
        } else {
            "request failed"
        };
        Self {
            what,
            kind,
            source: e.without_url(),
        }
    }
}

/// An answer whose JSON does not read as what the path returns; serde's error is the source.
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status} {path}: not the expected JSON")]
struct Unreadable {
    status: u16,
    path: String,
    #[source]
    source: serde_json::Error,
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A non-2xx answer in our terms, and whether to retry it.
fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> AttemptFailure {
    let should_retry = match header(headers, "stripe-should-retry") {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    let retry = should_retry.unwrap_or(matches!(status, 409 | 429 | 500..=599));
    let error = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody { error }) => match error.kind {
            _ if status == 429 || status >= 500 => {
                PspError::Unavailable(format!("HTTP {status}: {}", error.summary()).into())
            }
            ErrorType::ApiError => PspError::Unavailable(format!("HTTP {status}: {}", error.summary()).into()),
            ErrorType::CardError => PspError::Declined(Box::new(error)),
            _ if retry => PspError::Unavailable(format!("HTTP {status}: {}", error.summary()).into()),
            _ => PspError::Refused {
                status,
                error: Box::new(error),
            },
        },
        Err(_) if status == 429 || status >= 500 || retry => {
            PspError::Unavailable(format!("HTTP {status} without a Stripe error object").into())
        }
        Err(e) => PspError::BadAnswer(Box::new(Unreadable {
            status,
            path: "error object".to_owned(),
            source: e,
        })),
    };
    AttemptFailure { error, retry }
}

fn path_segment(reference: &PspReference) -> &str {
    // PSP references are validated ids (ASCII letters, digits, `_-.:`): safe in a path as they are.
    reference.as_str()
}

impl Psp for StripeClient {
    async fn charge(&self, key: &str, request: &ChargeRequest<'_>) -> Result<PaymentIntent, PspError> {
        let mut form = vec![
            ("amount", request.money.amount_minor().to_string()),
            ("currency", request.money.currency().as_str().to_ascii_lowercase()),
            ("payment_method", request.payment_method.to_owned()),
            ("confirm", "true".to_owned()),
            ("metadata[payment_id]", request.payment_id.to_string()),
            ("metadata[order_id]", request.order_id.to_string()),
        ];
        if let Some(url) = &self.return_url {
            form.push(("return_url", url.clone()));
        }
        self.call(
            "psp.charge",
            reqwest::Method::POST,
            "/v1/payment_intents",
            Some(key),
            &form,
        )
        .await
    }

    async fn retrieve(&self, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        let path = format!("/v1/payment_intents/{}", path_segment(reference));
        let form = [("expand[]", "latest_charge".to_owned())];
        self.call("psp.retrieve", reqwest::Method::GET, &path, None, &form)
            .await
    }

    async fn cancel(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        let path = format!("/v1/payment_intents/{}/cancel", path_segment(reference));
        let form = [("cancellation_reason", "abandoned".to_owned())];
        self.call("psp.cancel", reqwest::Method::POST, &path, Some(key), &form)
            .await
    }

    async fn refund(&self, key: &str, reference: &PspReference, amount_minor: Option<u64>) -> Result<Refund, PspError> {
        let mut form = vec![("payment_intent", reference.to_string())];
        if let Some(amount) = amount_minor {
            form.push(("amount", amount.to_string()));
        }
        self.call("psp.refund", reqwest::Method::POST, "/v1/refunds", Some(key), &form)
            .await
    }

    async fn find_for_payment(&self, payment: &PaymentId) -> Result<Option<PaymentIntent>, PspError> {
        // Payment ids are validated ids (no quote can close the search string).
        let form = [("query", format!("metadata['payment_id']:'{payment}'"))];
        let found: super::stripe::SearchResult<PaymentIntent> = self
            .call(
                "psp.search",
                reqwest::Method::GET,
                "/v1/payment_intents/search",
                None,
                &form,
            )
            .await?;
        // Oldest first: a second one would itself be the double charge this search prevents.
        Ok(found.data.into_iter().min_by_key(|pi| pi.created))
    }
}

#[cfg(test)]
mod tests;
