//! The PSPs this deployment accepts webhooks from: name (the `{provider}` of the route), signature scheme,
//! active secrets (several during a rotation) and what their events must say about mode and account.
//!
//! `account` is checked only on a Connect endpoint (`"connect": true`), which must name it: Stripe puts
//! `account` on Connect events only, so an ordinary endpoint configured with one would refuse every event.
//! Either half without the other fails the cold start with a message saying which.
//!
//! `WEBHOOK_PROVIDERS` (JSON) names the providers; their secrets come from Secrets Manager
//! (`WEBHOOK_SECRETS_ARN`) or, for local development, from `WEBHOOK_SECRETS` (the same JSON:
//! `{"stripe": ["whsec_..."], ...}`). Secrets are never logged, and never named in an error.
//!
//! A secret loads only if it can be one: `whsec_` followed by at least [`MIN_SECRET_BYTES`] bytes of key
//! (Stripe's are 32 characters; Standard Webhooks asks for 24 to 64 bytes, base64-encoded). An empty or
//! truncated secret pasted into Secrets Manager would otherwise load and answer 401 to every webhook.
//!
//! [`ProviderSource`] keeps the secrets of Secrets Manager in a cache: read at cold start, again when the
//! copy is older than [`SECRETS_TTL`], and at once when a signature matches no secret (the PSP may have
//! rotated), at most every [`MIN_REFRESH_INTERVAL`] so a flood of forged requests costs at most one call
//! per interval per instance. A rotation so reaches warm instances within minutes, not at their next cold
//! start. A failed re-read keeps the secrets loaded before.

use crate::psp_event::Expectations;
use serde::Deserialize;
use shared::clock::MonotonicClock;
use shared::telemetry::ErrorChain;
use shared::{Env, PspName, SigningSecret};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use thiserror::Error;
use tracing::{info, warn};
use webhook_signatures::{standard_key, DEFAULT_TOLERANCE_SECS, MIN_SECRET_BYTES};

/// How long a copy of the secrets from Secrets Manager is used before it is read again.
pub const SECRETS_TTL: Duration = Duration::from_secs(300);
/// At most one re-read per this interval after failed signatures.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// A provider's signature scheme (Adyen's also has Basic auth, `crate::adyen`): named here as part of
/// [`Provider`], owned by the signatures library.
pub use webhook_signatures::Scheme;

#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub scheme: Scheme,
    pub secrets: Vec<SigningSecret>,
    pub expect: Expectations,
    pub tolerance_secs: i64,
}

impl Provider {
    /// The PSP whose payments this endpoint's events may change (invariant 13): its scheme's, or for a
    /// Standard Webhooks endpoint the one its name records (checked when the providers load).
    pub fn psp(&self) -> Result<PspName, shared::DomainError> {
        match self.scheme {
            Scheme::Stripe => Ok(PspName::Stripe),
            Scheme::Adyen => Ok(PspName::Adyen),
            Scheme::Standard => PspName::standard(&self.name),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Providers(HashMap<String, Provider>);

#[derive(Debug, Error)]
pub enum ProvidersError {
    #[error("WEBHOOK_PROVIDERS is not valid JSON: {0}")]
    BadProviders(String),
    #[error("webhook secrets are not valid JSON of the form {{\"provider\": [\"secret\", ...]}}: {0}")]
    BadSecrets(String),
    #[error("provider {0} has no active secret")]
    NoSecret(String),
    /// Names the provider and what is wrong, never the value.
    #[error("provider {0}: {1}")]
    BadSecret(String, String),
    #[error("no webhook secrets configured: set WEBHOOK_SECRETS_ARN (AWS) or WEBHOOK_SECRETS (local)")]
    NoSecrets,
    #[error("reading the webhook secrets from Secrets Manager failed")]
    SecretsManager(#[source] shared::aws::SecretError),
    /// An endpoint configured against how its PSP sends events (`account` without `connect`, or the reverse).
    #[error("WEBHOOK_PROVIDERS: provider {0}: {1}")]
    BadSpec(String, &'static str),
}

/// One entry of `WEBHOOK_PROVIDERS`: a provider without its secrets (what an operator's replay needs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSpec {
    pub name: String,
    pub scheme: Scheme,
    #[serde(default)]
    pub livemode: Option<bool>,
    /// A Stripe Connect endpoint (events of connected accounts, each naming its `account`).
    #[serde(default)]
    pub connect: bool,
    /// The connected account a Connect endpoint takes events of; only with `connect`.
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub tolerance_secs: Option<i64>,
}

impl ProviderSpec {
    /// The providers `WEBHOOK_PROVIDERS` names (default: [`DEFAULT_PROVIDERS`]), without reading any secret.
    pub fn from_env(env: &Env) -> Result<Vec<Self>, ProvidersError> {
        let providers = env
            .optional("WEBHOOK_PROVIDERS")
            .unwrap_or_else(|| DEFAULT_PROVIDERS.to_owned());
        parse_specs(&providers)
    }

    /// A Connect endpoint names its account, and only a Connect endpoint does: Stripe sets `account` on
    /// Connect events alone, so an ordinary endpoint expecting one would refuse (park and alarm) every event.
    pub fn check(&self) -> Result<(), ProvidersError> {
        let bad = |why| Err(ProvidersError::BadSpec(self.name.clone(), why));
        if self.scheme == Scheme::Standard && PspName::standard(&self.name).is_err() {
            return bad(
                "a Standard Webhooks provider's name is the PSP its payments record: 1 to 32 characters from \
                 [a-z0-9_-], and not a well-known PSP's (stripe, adyen)",
            );
        }
        match (self.connect, &self.account) {
            (false, Some(_)) => bad(
                "\"account\" is set on an endpoint that is not a Connect endpoint, whose events never name an \
                 account; remove it, or add \"connect\": true if this endpoint receives your connected accounts' events",
            ),
            (true, None) => bad("a Connect endpoint (\"connect\": true) needs the connected \"account\" (acct_...) it takes"),
            _ => Ok(()),
        }
    }

    /// What this provider's events must say about mode and (a Connect endpoint's) account.
    pub fn expectations(&self) -> Expectations {
        Expectations {
            livemode: self.livemode,
            account: self.account.clone().filter(|_| self.connect),
        }
    }

    /// This provider without secrets, for events that need no signature: those the catch-up job reads from
    /// the PSP's API with our own key (`crate::catchup`). The endpoint's expectations are the same.
    pub fn unsigned(&self) -> Provider {
        Provider {
            name: self.name.clone(),
            scheme: self.scheme,
            secrets: Vec::new(),
            expect: self.expectations(),
            tolerance_secs: self.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS),
        }
    }
}

/// `WEBHOOK_PROVIDERS`' specs, each checked ([`ProviderSpec::check`]): a wrong one fails the cold start.
fn parse_specs(providers: &str) -> Result<Vec<ProviderSpec>, ProvidersError> {
    let specs: Vec<ProviderSpec> =
        serde_json::from_str(providers).map_err(|e| ProvidersError::BadProviders(shared::http::json_error(&e)))?;
    specs.iter().try_for_each(ProviderSpec::check)?;
    Ok(specs)
}

/// The providers when `WEBHOOK_PROVIDERS` is not set: Stripe and one Standard Webhooks PSP.
pub const DEFAULT_PROVIDERS: &str = r#"[{"name":"stripe","scheme":"stripe"},{"name":"standard","scheme":"standard"}]"#;

impl Providers {
    /// Builds the registry from the providers JSON and the secrets JSON.
    pub fn from_json(providers: &str, secrets: &str) -> Result<Self, ProvidersError> {
        let specs = parse_specs(providers)?;
        // serde's message would quote the offending value, here a secret: only its shape and place are named.
        let mut secrets: HashMap<String, Vec<String>> =
            serde_json::from_str(secrets).map_err(|e| ProvidersError::BadSecrets(shared::http::json_error(&e)))?;
        let mut map = HashMap::new();
        for spec in specs {
            let list = secrets.remove(&spec.name).unwrap_or_default();
            let count = list.len();
            let secrets: Vec<SigningSecret> = list
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let which = format!("secret {} of {count}", i.saturating_add(1));
                    let secret = SigningSecret::parse(s)
                        .map_err(|_| ProvidersError::BadSecret(spec.name.clone(), format!("{which} is empty")))?;
                    check_secret(spec.scheme, &secret)
                        .map_err(|why| ProvidersError::BadSecret(spec.name.clone(), format!("{which} {why}")))?;
                    Ok(secret)
                })
                .collect::<Result<_, ProvidersError>>()?;
            if secrets.is_empty() {
                return Err(ProvidersError::NoSecret(spec.name));
            }
            if spec.scheme == Scheme::Adyen {
                crate::adyen::config::AdyenSecrets::parse(&secrets)
                    .map_err(|why| ProvidersError::BadSecret(spec.name.clone(), why))?;
            }
            let provider = Provider {
                name: spec.name.clone(),
                scheme: spec.scheme,
                secrets,
                expect: spec.expectations(),
                tolerance_secs: spec.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS),
            };
            map.insert(spec.name, provider);
        }
        Ok(Self(map))
    }

    pub fn get(&self, name: &str) -> Option<&Provider> {
        self.0.get(name)
    }
}

/// Why a secret cannot be one for its scheme (the reason only, never the value).
fn check_secret(scheme: Scheme, secret: &SigningSecret) -> Result<(), String> {
    if scheme == Scheme::Adyen {
        return crate::adyen::config::check(secret);
    }
    let Some(key) = secret.expose().strip_prefix("whsec_") else {
        return Err("does not start with whsec_".to_owned());
    };
    let key_bytes = match scheme {
        // Adyen's secrets were checked above.
        Scheme::Stripe | Scheme::Adyen => key.len(),
        Scheme::Standard => standard_key(secret)
            .map_err(|_| "is not base64 after whsec_ (a Standard Webhooks secret)".to_owned())?
            .len(),
    };
    if key_bytes < MIN_SECRET_BYTES {
        return Err(format!("is shorter than {MIN_SECRET_BYTES} bytes after whsec_"));
    }
    Ok(())
}

/// Reads the secrets JSON (from Secrets Manager in AWS).
pub type SecretsLoader =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<String, ProvidersError>> + Send>> + Send + Sync>;

/// Reads the secret `arn` (its current version) from Secrets Manager at each call.
pub fn secrets_manager_loader(sdk: &aws_config::SdkConfig, arn: &str) -> SecretsLoader {
    let client = shared::aws::secrets_client(sdk);
    let arn = arn.to_owned();
    Arc::new(move || {
        let (client, arn) = (client.clone(), arn.clone());
        Box::pin(async move {
            shared::aws::secret_string(&client, &arn)
                .await
                .map_err(ProvidersError::SecretsManager)
        })
    })
}

/// The providers, re-read from their secrets' source after [`SECRETS_TTL`] or a failed signature.
#[derive(Clone)]
pub struct ProviderSource {
    inner: Arc<SourceInner>,
}

struct SourceInner {
    providers_json: String,
    /// None: secrets from the environment, fixed for the process.
    loader: Option<SecretsLoader>,
    clock: MonotonicClock,
    ttl: Duration,
    min_refresh_interval: Duration,
    state: RwLock<Loaded>,
    /// One re-read at a time; the others use what it loaded.
    refreshing: tokio::sync::Mutex<()>,
}

struct Loaded {
    providers: Arc<Providers>,
    loaded_at: Instant,
    last_attempt: Instant,
}

impl std::fmt::Debug for ProviderSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSource")
            .field("providers", &self.inner.state.read().map(|s| s.providers.clone()).ok())
            .field("refreshed", &self.inner.loader.is_some())
            .finish()
    }
}

/// Where the intake's providers and their secrets come from, read once per cold start: `WEBHOOK_PROVIDERS`
/// (default [`DEFAULT_PROVIDERS`]), and `WEBHOOK_SECRETS_ARN` (AWS) or `WEBHOOK_SECRETS` (local). The
/// secrets are read when the source is built ([`ProviderSource::from_settings`]).
#[derive(Clone)]
pub struct ProviderSettings {
    /// `WEBHOOK_PROVIDERS`, checked with the secrets when the source is built.
    pub providers_json: String,
    /// Where the secrets are.
    pub secrets: SecretsFrom,
}

/// Where the webhook secrets are.
#[derive(Clone)]
pub enum SecretsFrom {
    /// `WEBHOOK_SECRETS_ARN`: a Secrets Manager secret, cached and re-read.
    SecretsManager(String),
    /// `WEBHOOK_SECRETS`: the secrets themselves, fixed for the process (local development).
    Value(String),
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `WEBHOOK_SECRETS` holds the secrets themselves: never printed.
        let secrets = match &self.secrets {
            SecretsFrom::SecretsManager(arn) => arn.as_str(),
            SecretsFrom::Value(_) => "WEBHOOK_SECRETS [withheld]",
        };
        f.debug_struct("ProviderSettings")
            .field("providers_json", &self.providers_json)
            .field("secrets", &secrets)
            .finish()
    }
}

impl ProviderSettings {
    /// Reads `WEBHOOK_PROVIDERS` and where the secrets are from `env`; neither secrets variable set fails the
    /// start.
    pub fn from_env(env: &Env) -> Result<Self, shared::ConfigError> {
        let providers_json = env
            .optional("WEBHOOK_PROVIDERS")
            .unwrap_or_else(|| DEFAULT_PROVIDERS.to_owned());
        let secrets = match (env.optional("WEBHOOK_SECRETS_ARN"), env.optional("WEBHOOK_SECRETS")) {
            (Some(arn), _) => SecretsFrom::SecretsManager(arn),
            (None, Some(secrets)) => SecretsFrom::Value(secrets),
            (None, None) => {
                return Err(shared::ConfigError::Missing(
                    "WEBHOOK_SECRETS_ARN (AWS) or WEBHOOK_SECRETS (local): no webhook secrets configured",
                ))
            }
        };
        Ok(Self {
            providers_json,
            secrets,
        })
    }
}

/// Providers fixed for the process (local development, tests).
impl From<Providers> for ProviderSource {
    fn from(providers: Providers) -> Self {
        let now = Instant::now();
        Self::build(String::new(), None, Arc::new(Instant::now), providers, now)
    }
}

impl ProviderSource {
    fn build(
        providers_json: String,
        loader: Option<SecretsLoader>,
        clock: MonotonicClock,
        providers: Providers,
        now: Instant,
    ) -> Self {
        Self {
            inner: Arc::new(SourceInner {
                providers_json,
                loader,
                clock,
                ttl: SECRETS_TTL,
                min_refresh_interval: MIN_REFRESH_INTERVAL,
                state: RwLock::new(Loaded {
                    providers: Arc::new(providers),
                    loaded_at: now,
                    last_attempt: now,
                }),
                refreshing: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Loads the providers through `loader` once (an error here fails the cold start, as it should: there
    /// is nothing to verify with) and keeps the loader for the re-reads.
    pub async fn load(
        providers_json: &str,
        loader: SecretsLoader,
        clock: MonotonicClock,
    ) -> Result<Self, ProvidersError> {
        let providers = Providers::from_json(providers_json, &loader().await?)?;
        let now = clock();
        Ok(Self::build(
            providers_json.to_owned(),
            Some(loader),
            clock,
            providers,
            now,
        ))
    }

    /// The source `settings` name, built once per cold start: the secrets of `WEBHOOK_SECRETS_ARN` are read
    /// here (and re-read, cached), those of `WEBHOOK_SECRETS` are fixed.
    pub async fn from_settings(
        settings: &ProviderSettings,
        sdk: &aws_config::SdkConfig,
    ) -> Result<Self, ProvidersError> {
        match &settings.secrets {
            SecretsFrom::SecretsManager(arn) => {
                let loader = secrets_manager_loader(sdk, arn);
                Self::load(&settings.providers_json, loader, Arc::new(Instant::now)).await
            }
            SecretsFrom::Value(secrets) => Ok(Providers::from_json(&settings.providers_json, secrets)?.into()),
        }
    }

    /// The providers to verify with: the cached copy, re-read first when it is older than the TTL.
    pub async fn current(&self) -> Arc<Providers> {
        let (providers, due) = {
            let state = self
                .inner
                .state
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = (self.inner.clock)();
            let due = now.saturating_duration_since(state.loaded_at) >= self.inner.ttl
                && now.saturating_duration_since(state.last_attempt) >= self.inner.min_refresh_interval;
            (state.providers.clone(), due)
        };
        if due && self.inner.loader.is_some() {
            return self.refresh("ttl").await.unwrap_or(providers);
        }
        providers
    }

    /// After a signature that no loaded secret verified: re-reads the secrets unless that was done less
    /// than [`MIN_REFRESH_INTERVAL`] ago. `Some` with the fresh providers when a re-read happened.
    pub async fn refresh_after_failed_signature(&self) -> Option<Arc<Providers>> {
        self.inner.loader.as_ref()?;
        self.refresh("failed signature").await
    }

    async fn refresh(&self, why: &'static str) -> Option<Arc<Providers>> {
        let loader = self.inner.loader.as_ref()?;
        let _one_at_a_time = self.inner.refreshing.lock().await;
        let now = (self.inner.clock)();
        {
            let mut state = self
                .inner
                .state
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Whoever held the lock before may have just re-read: that copy is as fresh as ours would be.
            if now.saturating_duration_since(state.last_attempt) < self.inner.min_refresh_interval {
                return None;
            }
            state.last_attempt = now;
        }
        match loader()
            .await
            .and_then(|json| Providers::from_json(&self.inner.providers_json, &json))
        {
            Ok(providers) => {
                let providers = Arc::new(providers);
                let mut state = self
                    .inner
                    .state
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                state.providers = providers.clone();
                state.loaded_at = now;
                info!(reason = why, "webhook secrets re-read");
                Some(providers)
            }
            Err(e) => {
                // The error names the provider and the problem, never a secret.
                warn!(reason = why, error = %ErrorChain(&e), "re-reading the webhook secrets failed; keeping the loaded ones");
                None
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // a test clock that moves forward
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Mutex;

    const STRIPE_A: &str = "whsec_stripe_test_secret_aaaaaaaaaa";
    const STRIPE_B: &str = "whsec_stripe_test_secret_bbbbbbbbbb";
    /// base64 of "standard-webhooks-test-secret" (29 bytes).
    const STANDARD: &str = "whsec_c3RhbmRhcmQtd2ViaG9va3MtdGVzdC1zZWNyZXQ=";

    fn secrets(stripe: &[&str]) -> String {
        serde_json::json!({ "stripe": stripe, "standard": [STANDARD] }).to_string()
    }

    #[test]
    fn providers_need_secrets_and_valid_standard_keys() {
        let p = Providers::from_json(DEFAULT_PROVIDERS, &secrets(&[STRIPE_A, STRIPE_B])).unwrap();
        assert_eq!(p.get("stripe").unwrap().secrets.len(), 2);
        assert_eq!(p.get("standard").unwrap().scheme, Scheme::Standard);
        assert!(p.get("adyen").is_none());
        assert!(matches!(
            Providers::from_json(
                DEFAULT_PROVIDERS,
                &serde_json::json!({ "stripe": [STRIPE_A] }).to_string()
            ),
            Err(ProvidersError::NoSecret(_))
        ));
        let debug = format!("{p:?}");
        assert!(!debug.contains(STRIPE_A) && !debug.contains("c3RhbmRhcmQ"), "{debug}");
    }

    /// Each secret that cannot be one is refused with the provider's name and the reason, never the value.
    #[test]
    fn secrets_that_cannot_be_one_refuse_to_load_naming_the_provider_not_the_value() {
        let cases = [
            ("stripe", "", "secret 1 of 1 is empty"),
            ("stripe", "   ", "secret 1 of 1 is empty"),
            ("stripe", "whsec_short_stripe_secret", "shorter than 24 bytes"),
            (
                "stripe",
                "sk_live_not_a_signing_secret_at_all",
                "does not start with whsec_",
            ),
            ("standard", "whsec_not*base64*at*all*but*long*enough", "not base64"),
            // base64 of "only-twenty-bytes-ok" (20 bytes): valid base64, too short a key.
            (
                "standard",
                "whsec_b25seS10d2VudHktYnl0ZXMtb2s=",
                "shorter than 24 bytes",
            ),
        ];
        for (provider, bad, reason) in cases {
            let json = match provider {
                "stripe" => serde_json::json!({ "stripe": [bad], "standard": [STANDARD] }),
                _ => serde_json::json!({ "stripe": [STRIPE_A], "standard": [STANDARD, bad] }),
            };
            let err = Providers::from_json(DEFAULT_PROVIDERS, &json.to_string()).unwrap_err();
            let message = err.to_string();
            assert!(
                matches!(&err, ProvidersError::BadSecret(p, _) if p == provider),
                "{bad}: {message}"
            );
            assert!(message.starts_with(&format!("provider {provider}: ")), "{message}");
            assert!(message.contains(reason), "{bad}: {message}");
            let value = bad.trim().trim_start_matches("whsec_");
            assert!(
                value.is_empty() || !message.contains(value),
                "{message} shows the secret"
            );
        }
        // Secrets JSON of the wrong shape: the error names the shape and place, never the value.
        for shape in [
            serde_json::json!({ "stripe": STRIPE_A, "standard": [STANDARD] }).to_string(),
            format!(r#"{{"stripe": ["{STRIPE_A}"], "standard": ["{STANDARD}"],}}"#),
            serde_json::json!({ "stripe": [{ "secret": STRIPE_A }], "standard": [STANDARD] }).to_string(),
        ] {
            let message = Providers::from_json(DEFAULT_PROVIDERS, &shape).unwrap_err().to_string();
            assert!(message.starts_with("webhook secrets are not valid JSON"), "{message}");
            let key = STRIPE_A.trim_start_matches("whsec_");
            assert!(!message.contains(key), "{message} shows the secret");
        }
        // At the limit: exactly 24 bytes after whsec_ loads.
        let exactly = format!("whsec_{}", "k".repeat(MIN_SECRET_BYTES));
        Providers::from_json(DEFAULT_PROVIDERS, &secrets(&[&exactly])).unwrap();
    }

    #[test]
    fn account_is_checked_only_on_a_connect_endpoint_and_either_half_alone_refuses_to_start() {
        let secrets = serde_json::json!({ "stripe": [STRIPE_A] }).to_string();
        let connect = r#"[{"name":"stripe","scheme":"stripe","connect":true,"account":"acct_1"}]"#;
        let p = Providers::from_json(connect, &secrets).unwrap();
        assert_eq!(p.get("stripe").unwrap().expect.account.as_deref(), Some("acct_1"));
        let plain = r#"[{"name":"stripe","scheme":"stripe","livemode":false}]"#;
        assert_eq!(
            Providers::from_json(plain, &secrets)
                .unwrap()
                .get("stripe")
                .unwrap()
                .expect
                .account,
            None
        );
        for (spec, says) in [
            (
                r#"[{"name":"stripe","scheme":"stripe","account":"acct_1"}]"#,
                "add \"connect\": true",
            ),
            (
                r#"[{"name":"stripe","scheme":"stripe","connect":true}]"#,
                "needs the connected \"account\"",
            ),
        ] {
            let err = Providers::from_json(spec, &secrets).unwrap_err();
            assert!(
                matches!(&err, ProvidersError::BadSpec(name, _) if name == "stripe"),
                "{err}"
            );
            assert!(err.to_string().contains(says), "{err}");
            let env = Env::from_lookup(|_| None).with("WEBHOOK_PROVIDERS", spec);
            assert!(
                ProviderSpec::from_env(&env).is_err(),
                "paymentsctl refuses it too: {spec}"
            );
        }
    }

    /// A loader whose answer the test changes, counting its calls, and a clock the test moves.
    struct Fixture {
        json: Arc<Mutex<String>>,
        calls: Arc<AtomicUsize>,
        offset_secs: Arc<AtomicU64>,
        source: ProviderSource,
    }

    impl Fixture {
        async fn new() -> Self {
            let json = Arc::new(Mutex::new(secrets(&[STRIPE_A])));
            let calls = Arc::new(AtomicUsize::new(0));
            let offset_secs = Arc::new(AtomicU64::new(0));
            let loader: SecretsLoader = {
                let (json, calls) = (json.clone(), calls.clone());
                Arc::new(move || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let json = json.lock().unwrap().clone();
                    Box::pin(async move {
                        if json == "fail" {
                            Err(ProvidersError::SecretsManager(shared::aws::SecretError::Read {
                                arn: "arn:test".into(),
                                source: "AccessDenied".into(),
                            }))
                        } else {
                            Ok(json)
                        }
                    })
                })
            };
            let start = Instant::now();
            let clock: MonotonicClock = {
                let offset = offset_secs.clone();
                Arc::new(move || start + Duration::from_secs(offset.load(Ordering::SeqCst)))
            };
            let source = ProviderSource::load(DEFAULT_PROVIDERS, loader, clock).await.unwrap();
            Self {
                json,
                calls,
                offset_secs,
                source,
            }
        }
        fn at(&self, secs: u64) {
            self.offset_secs.store(secs, Ordering::SeqCst);
        }
        fn rotate_to(&self, json: String) {
            *self.json.lock().unwrap() = json;
        }
        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    fn stripe_secrets(p: &Arc<Providers>) -> Vec<String> {
        p.get("stripe")
            .unwrap()
            .secrets
            .iter()
            .map(|s| s.expose().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn the_secrets_are_read_again_once_the_copy_is_older_than_the_ttl() {
        let f = Fixture::new().await;
        assert_eq!(f.calls(), 1);
        f.rotate_to(secrets(&[STRIPE_A, STRIPE_B]));
        f.at(SECRETS_TTL.as_secs() - 1);
        assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A]);
        assert_eq!(f.calls(), 1, "no read before the TTL");
        f.at(SECRETS_TTL.as_secs());
        assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A, STRIPE_B]);
        assert_eq!(f.calls(), 2);
        f.at(SECRETS_TTL.as_secs() + 10);
        f.source.current().await;
        assert_eq!(f.calls(), 2, "the fresh copy is used for another TTL");
    }

    #[tokio::test]
    async fn a_failed_signature_reads_the_secrets_again_at_most_every_30_seconds() {
        let f = Fixture::new().await;
        f.rotate_to(secrets(&[STRIPE_B]));
        f.at(5);
        assert!(
            f.source.refresh_after_failed_signature().await.is_none(),
            "5 s after the load"
        );
        assert_eq!(f.calls(), 1);
        f.at(MIN_REFRESH_INTERVAL.as_secs());
        let fresh = f.source.refresh_after_failed_signature().await.expect("a re-read");
        assert_eq!(stripe_secrets(&fresh), vec![STRIPE_B]);
        assert_eq!(
            stripe_secrets(&f.source.current().await),
            vec![STRIPE_B],
            "later requests use it"
        );
        for secs in [31, 45, 59] {
            f.at(MIN_REFRESH_INTERVAL.as_secs() + secs - 30);
            assert!(f.source.refresh_after_failed_signature().await.is_none(), "at {secs} s");
        }
        assert_eq!(f.calls(), 2, "a flood of bad signatures costs one read per interval");
        f.at(2 * MIN_REFRESH_INTERVAL.as_secs());
        assert!(f.source.refresh_after_failed_signature().await.is_some());
        assert_eq!(f.calls(), 3);
    }

    #[tokio::test]
    async fn a_failed_or_invalid_re_read_keeps_the_loaded_secrets() {
        let f = Fixture::new().await;
        f.rotate_to("fail".into());
        f.at(SECRETS_TTL.as_secs());
        assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A]);
        f.rotate_to(secrets(&["whsec_truncated"]));
        f.at(SECRETS_TTL.as_secs() + MIN_REFRESH_INTERVAL.as_secs());
        assert!(f.source.refresh_after_failed_signature().await.is_none());
        assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A]);
        assert_eq!(f.calls(), 3);
    }

    #[tokio::test]
    async fn providers_from_the_environment_are_never_re_read() {
        let source = ProviderSource::from(Providers::from_json(DEFAULT_PROVIDERS, &secrets(&[STRIPE_A])).unwrap());
        assert!(source.refresh_after_failed_signature().await.is_none());
        assert_eq!(stripe_secrets(&source.current().await), vec![STRIPE_A]);
        assert!(!format!("{source:?}").contains(STRIPE_A));
    }
}
