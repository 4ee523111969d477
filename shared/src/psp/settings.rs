//! The PSP client's settings: the API key (redacted in `Debug`, never logged), where it comes from, and the
//! endpoint, timeouts and retries, read once per cold start from the environment.

use crate::retry::Backoff;
use crate::{ConfigError, Env};
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
