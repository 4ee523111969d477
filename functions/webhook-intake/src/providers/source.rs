//! The refresh cache of the providers and their secrets: read at cold start, again when the copy is older
//! than [`SECRETS_TTL`], and at once when a signature matches no secret, at most every
//! [`MIN_REFRESH_INTERVAL`]; a failed re-read keeps the secrets loaded before.

use super::settings::{secrets_manager_loader, ProviderSettings, SecretsFrom, SecretsLoader};
use super::{Providers, ProvidersError};
use shared::clock::MonotonicClock;
use shared::telemetry::ErrorChain;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long a copy of the secrets from Secrets Manager is used before it is read again.
pub const SECRETS_TTL: Duration = Duration::from_secs(300);
/// At most one re-read per this interval after failed signatures.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

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
