//! What every PSP client's settings share: the API key (redacted in `Debug`, never logged), where it comes
//! from, the endpoint and the transport (timeouts, retries), read once per cold start from the environment.
//! Each PSP's own settings are its module's ([`super::stripe::StripeSettings`], [`super::adyen::AdyenSettings`]).

use shared::retry::Backoff;
use shared::{ConfigError, Env};
use std::fmt;
use std::time::Duration;

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

/// The URL in `name`, without a trailing `/`: `https://`, or `http://` only to 127.0.0.1 (the simulator).
pub(crate) fn endpoint(env: &Env, name: &'static str) -> Result<String, ConfigError> {
    let url = env.required(name)?;
    if !(url.starts_with("https://") || url.starts_with("http://127.0.0.1")) {
        return Err(ConfigError::Invalid {
            name,
            expected: "https:// URL (http:// only for 127.0.0.1)",
            value: url,
        });
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The connect timeout, request timeout and retries every PSP client takes: `PSP_CONNECT_TIMEOUT_MS`
/// (default 3000), `PSP_REQUEST_TIMEOUT_MS` (default 5000) and `PSP_MAX_RETRIES` (default 2, after the first
/// attempt).
pub(crate) fn transport(env: &Env) -> Result<(Duration, Duration, Backoff), ConfigError> {
    let retries: u32 = env.number("PSP_MAX_RETRIES", 2)?;
    Ok((
        env.millis("PSP_CONNECT_TIMEOUT_MS", Duration::from_millis(3000))?,
        env.millis("PSP_REQUEST_TIMEOUT_MS", Duration::from_millis(5_000))?,
        Backoff::new(
            retries.saturating_add(1),
            Duration::from_millis(250),
            Duration::from_secs(2),
        ),
    ))
}
