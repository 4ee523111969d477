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
use crate::{clock, ConfigError, Env, PaymentId, PspReference};
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;
use std::fmt;
use std::time::Duration;
use tracing::{debug, warn, Instrument};

/// The Stripe API version every request is pinned to (the one the pinned official library speaks).
pub const STRIPE_API_VERSION: &str = "2026-10-28.endive";

/// A PSP secret key (`sk_live_...`, `sk_test_...`). `Debug` is redacted; read only through `expose`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Trims whitespace (a secret pasted with a newline); refuses an empty key.
    pub fn parse(value: &str) -> Result<Self, ConfigError> {
        let value = value.trim();
        if value.is_empty() {
            return Err(ConfigError::Invalid {
                name: "PSP_API_KEY",
                expected: "non-empty PSP secret key",
                value: String::new(),
            });
        }
        Ok(Self(value.to_owned()))
    }

    /// The key. Called only to build the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A Secrets Manager secret string: the key itself, or JSON `{"api_key": "..."}`.
    pub fn from_secret_string(secret: &str) -> Result<Self, ConfigError> {
        let inner = serde_json::from_str::<serde_json::Value>(secret)
            .ok()
            .and_then(|v| v.get("api_key").and_then(|k| k.as_str()).map(str::to_owned));
        Self::parse(inner.as_deref().unwrap_or(secret))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// Where the key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A Secrets Manager secret (ARN), read once per cold start.
    SecretArn(String),
    /// The key itself (local development and tests).
    Value(ApiKey),
}

/// The PSP client's settings, read once per cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PspSettings {
    /// `PSP_BASE_URL`: `https://api.stripe.com` in AWS, the simulator locally. Required.
    pub base_url: String,
    /// `PSP_API_KEY_ARN` or `PSP_API_KEY`. Required.
    pub key: KeySource,
    /// `PSP_RETURN_URL`: where a customer returns after a redirect (3-D Secure). Optional.
    pub return_url: Option<String>,
    /// `PSP_CONNECT_TIMEOUT_MS` (default 3000).
    pub connect_timeout: Duration,
    /// `PSP_REQUEST_TIMEOUT_MS` (default 5000): one attempt, connect to last byte. Three attempts of 5 s and
    /// their pauses fit a 25 s function; Stripe answers in well under a second.
    pub request_timeout: Duration,
    /// `PSP_MAX_RETRIES` (default 2): retries after the first attempt.
    pub retries: Backoff,
}

impl PspSettings {
    /// Reads through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Result<Self, ConfigError> {
        Self::from(&Env::from_lookup(lookup))
    }

    /// The settings above; a missing base URL or key fails the start, not the first call.
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
        let base_url = env.required("PSP_BASE_URL")?;
        if !(base_url.starts_with("https://") || base_url.starts_with("http://127.0.0.1")) {
            return Err(ConfigError::Invalid {
                name: "PSP_BASE_URL",
                expected: "https:// URL (http:// only for 127.0.0.1)",
                value: base_url,
            });
        }
        let key = match (env.optional("PSP_API_KEY_ARN"), env.optional("PSP_API_KEY")) {
            (Some(arn), _) => KeySource::SecretArn(arn),
            (None, Some(key)) => KeySource::Value(ApiKey::parse(&key)?),
            (None, None) => return Err(ConfigError::Missing("PSP_API_KEY_ARN or PSP_API_KEY")),
        };
        let retries: u32 = env.number("PSP_MAX_RETRIES", 2)?;
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            key,
            return_url: env.optional("PSP_RETURN_URL"),
            connect_timeout: env.millis("PSP_CONNECT_TIMEOUT_MS", Duration::from_millis(3000))?,
            request_timeout: env.millis("PSP_REQUEST_TIMEOUT_MS", Duration::from_millis(5_000))?,
            retries: Backoff::new(
                retries.saturating_add(1),
                Duration::from_millis(250),
                Duration::from_secs(2),
            ),
        })
    }

    /// Settings for a PSP at `base_url` with `key` and the defaults (tests, tools).
    pub fn local(base_url: &str, key: &str) -> Result<Self, ConfigError> {
        let env = Env::from_lookup(|_| None)
            .with("PSP_BASE_URL", base_url)
            .with("PSP_API_KEY", key);
        Self::from(&env)
    }
}

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
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<PspSettings, ConfigError> {
        let vars: Vec<(String, String)> = vars.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        PspSettings::from_lookup(move |name| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn settings_need_a_base_url_and_a_key_and_refuse_malformed_numbers() {
        assert_eq!(
            settings(&[("PSP_API_KEY", "sk")]),
            Err(ConfigError::Missing("PSP_BASE_URL"))
        );
        assert_eq!(
            settings(&[("PSP_BASE_URL", "https://api.stripe.com")]),
            Err(ConfigError::Missing("PSP_API_KEY_ARN or PSP_API_KEY"))
        );
        assert!(matches!(
            settings(&[("PSP_BASE_URL", "http://api.stripe.com"), ("PSP_API_KEY", "sk")]),
            Err(ConfigError::Invalid {
                name: "PSP_BASE_URL",
                ..
            })
        ));
        assert!(matches!(
            settings(&[
                ("PSP_BASE_URL", "https://x"),
                ("PSP_API_KEY", "sk"),
                ("PSP_MAX_RETRIES", "two")
            ]),
            Err(ConfigError::Invalid {
                name: "PSP_MAX_RETRIES",
                ..
            })
        ));
        let s = settings(&[
            ("PSP_BASE_URL", "https://api.stripe.com/"),
            ("PSP_API_KEY_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:psp"),
            ("PSP_API_KEY", "sk_ignored"),
        ])
        .unwrap();
        assert_eq!(s.base_url, "https://api.stripe.com");
        assert_eq!(
            s.key,
            KeySource::SecretArn("arn:aws:secretsmanager:eu-west-1:1:secret:psp".into())
        );
        assert_eq!(s.retries.attempts, 3);
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let key = ApiKey::from_secret_string(r#"{"api_key": "sk_test_very_secret"}"#).unwrap();
        assert_eq!(key.expose(), "sk_test_very_secret");
        let s = settings(&[("PSP_BASE_URL", "https://x"), ("PSP_API_KEY", "sk_test_very_secret\n")]).unwrap();
        let client = StripeClient::new(&s, key).unwrap();
        for text in [format!("{s:?}"), format!("{client:?}")] {
            assert!(!text.contains("very_secret"), "{text}");
        }
        assert_eq!(
            ApiKey::from_secret_string("  sk_live_x \n").unwrap().expose(),
            "sk_live_x"
        );
        assert!(ApiKey::from_secret_string("  ").is_err());
    }
}
