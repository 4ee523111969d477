//! The Stripe client's settings: the endpoint and key (`PSP_*`: the names deployments have always had), how a
//! charge handles redirects, how its money is captured, timeouts and retries, read once per cold start from
//! the environment.
//!
//! Redirects are a required choice, not a default: since API version 2023-08-16 Stripe refuses a confirm that
//! sends neither a `return_url` nor `automatic_payment_methods[allow_redirects]=never`, so a function started
//! with neither would have every checkout refused. It refuses to start instead.

use crate::settings::{endpoint, transport, ApiKey, KeySource};
use shared::retry::Backoff;
use shared::{ConfigError, Env};
use std::num::NonZeroU32;
use std::time::Duration;

/// How a charge's confirm lets Stripe send the customer elsewhere (a bank's page, a wallet's app).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirects {
    /// `PSP_REDIRECTS=never`: the confirm sends `automatic_payment_methods[enabled]=true` and
    /// `automatic_payment_methods[allow_redirects]=never`; only methods that need no redirect are offered
    /// (cards, 3-D Secure included, which the client secret serves in the page).
    Never,
    /// `PSP_RETURN_URL`: the confirm sends it as `return_url`, where the customer returns after a redirect.
    ReturnTo(String),
}

impl Redirects {
    /// `PSP_REDIRECTS` (`never` or `allowed`) and `PSP_RETURN_URL`: `never`, or a return URL (`allowed` or
    /// unset). Neither set, `allowed` without a URL, or `never` with one, is refused, naming both options.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        const CHOOSE: &str = "choice: PSP_REDIRECTS=never (no redirect-based methods), or PSP_RETURN_URL=https://... \
                              (redirect-based methods allowed; PSP_REDIRECTS unset or allowed)";
        let url = env.optional("PSP_RETURN_URL").filter(|u| !u.trim().is_empty());
        match (env.optional("PSP_REDIRECTS").as_deref().map(str::trim), url) {
            (Some("never"), None) => Ok(Self::Never),
            (None | Some("allowed"), Some(url)) if url.starts_with("https://") || url.starts_with("http://") => {
                Ok(Self::ReturnTo(url))
            }
            (None | Some("allowed"), Some(url)) => Err(ConfigError::Invalid {
                name: "PSP_RETURN_URL",
                expected: "http(s):// URL",
                value: url,
            }),
            (None, None) => Err(ConfigError::Missing(
                "PSP_REDIRECTS=never or PSP_RETURN_URL (Stripe refuses a confirm with neither)",
            )),
            (Some(other), url) => Err(ConfigError::Invalid {
                name: "PSP_REDIRECTS",
                expected: CHOOSE,
                value: match url {
                    Some(url) => format!("{other} with PSP_RETURN_URL={url}"),
                    None => other.to_owned(),
                },
            }),
        }
    }
}

/// When a charge's money is taken: Stripe's `capture_method` of the PaymentIntents the saga creates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CaptureMethod {
    /// Taken when the customer's bank says yes (`capture_method` not sent: Stripe's default). A
    /// compensation after the charge is a refund.
    #[default]
    Automatic,
    /// `capture_method=manual`: authorized at the charge (`requires_capture`), taken by our capture when the
    /// order is confirmed; a compensation cancels the authorization (no money moved, no refund). The
    /// authorization lapses at the charge's `capture_before` (7 days for customer-initiated card payments).
    Manual,
}

impl CaptureMethod {
    /// `STRIPE_CAPTURE_METHOD`: `automatic` (default) or `manual`, read by the checkout functions only.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        match env.optional("STRIPE_CAPTURE_METHOD").as_deref().map(str::trim) {
            None | Some("automatic") => Ok(Self::Automatic),
            Some("manual") => Ok(Self::Manual),
            Some(other) => Err(ConfigError::Invalid {
                name: "STRIPE_CAPTURE_METHOD",
                expected: "automatic or manual",
                value: other.to_owned(),
            }),
        }
    }
}

/// The Stripe client's settings, read once per cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeSettings {
    /// `PSP_BASE_URL`: `https://api.stripe.com` in AWS, the simulator locally. Required.
    pub base_url: String,
    /// `PSP_API_KEY_ARN` or `PSP_API_KEY`. Required.
    pub key: KeySource,
    /// `PSP_REDIRECTS=never` or `PSP_RETURN_URL`: one of them is required ([`Redirects::from_env`]).
    pub redirects: Redirects,
    /// `PSP_CONNECT_TIMEOUT_MS` (default 3000).
    pub connect_timeout: Duration,
    /// `PSP_REQUEST_TIMEOUT_MS` (default 5000): one attempt, connect to last byte. Three attempts of 5 s and
    /// their pauses fit a 25 s function; Stripe answers in well under a second.
    pub request_timeout: Duration,
    /// `PSP_MAX_RETRIES` (default 2): retries after the first attempt.
    pub retries: Backoff,
    /// The request rate a scanner's client keeps to (`PSP_SCAN_RATE_PER_SECOND`: [`crate::pace::ScanRates`],
    /// set by the scanners); `None` (the checkout functions): their [`Self::budget`], if any.
    pub scan_rate: Option<NonZeroU32>,
    /// The function's Stripe budget (`PSP_CALL_BUDGET_PER_SECOND` over `PSP_CALL_BUDGET_INSTANCES`:
    /// [`crate::pace::CallBudget`]), for a function that is not a scanner; `None`: unpaced.
    pub budget: Option<crate::pace::CallBudget>,
    /// How the charges this client makes are captured (`STRIPE_CAPTURE_METHOD`: [`CaptureMethod::from_env`], set
    /// by the checkout functions, which alone charge); automatic otherwise.
    pub capture: CaptureMethod,
}

impl StripeSettings {
    /// Reads through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Result<Self, ConfigError> {
        Self::from_env(&Env::from_lookup(lookup))
    }

    /// The settings above; a missing base URL or key fails the start, not the first call.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let base_url = endpoint(env, "PSP_BASE_URL")?;
        let key = match (env.optional("PSP_API_KEY_ARN"), env.optional("PSP_API_KEY")) {
            (Some(arn), _) => KeySource::SecretArn(arn),
            (None, Some(key)) => KeySource::Value(ApiKey::parse(&key)?),
            (None, None) => return Err(ConfigError::Missing("PSP_API_KEY_ARN or PSP_API_KEY")),
        };
        let (connect_timeout, request_timeout, retries) = transport(env)?;
        Ok(Self {
            base_url,
            key,
            redirects: Redirects::from_env(env)?,
            connect_timeout,
            request_timeout,
            retries,
            scan_rate: None,
            budget: crate::pace::CallBudget::from_env(env)?,
            capture: CaptureMethod::Automatic,
        })
    }

    /// Settings for a PSP at `base_url` with `key` and the defaults (tests, tools), with no redirects
    /// (`PSP_REDIRECTS=never`): the simulator's methods need none. A test of the return URL sets `redirects`.
    pub fn local(base_url: &str, key: &str) -> Result<Self, ConfigError> {
        let env = Env::from_lookup(|_| None)
            .with("PSP_BASE_URL", base_url)
            .with("PSP_API_KEY", key)
            .with("PSP_REDIRECTS", "never");
        Self::from_env(&env)
    }
}
