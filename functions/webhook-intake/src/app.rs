//! What the intake is built from, once per cold start: its settings ([`Settings`]) and its clients
//! ([`App::build`]).

use crate::providers::{ProviderSettings, ProviderSource};
use shared::lambda::{BuildError, Clients};
use shared::{Config, ConfigError, Env, Leases, PaymentStore};
use std::time::Duration;

/// Limits and waits, from the environment (see README).
#[derive(Debug, Clone)]
pub struct IntakeSettings {
    pub max_body_bytes: usize,
    /// A webhook for a payment we do not know yet gets 503 while younger than this, then is parked.
    pub unknown_payment_window: Duration,
    pub lease_attempts: u32,
    pub lease_max_wait: Duration,
    /// A delivery signed this long after its event was created is a redelivery (the PSP's retry, or a
    /// resend): the payment is read first, and an event it already holds is answered from that one read.
    pub redelivery_after: Duration,
    /// An Adyen item parked for the retry (not applicable when it came) is quarantined this long after it
    /// was first received (`crate::adyen::retry`).
    pub adyen_retry_deadline: Duration,
}

impl Default for IntakeSettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 256 * 1024,
            unknown_payment_window: Duration::from_secs(15 * 60),
            lease_attempts: 4,
            lease_max_wait: Duration::from_millis(100),
            redelivery_after: Duration::from_secs(60),
            adyen_retry_deadline: Duration::from_secs(3600),
        }
    }
}

impl IntakeSettings {
    /// `WEBHOOK_MAX_BODY_BYTES`, `UNKNOWN_PAYMENT_WINDOW_SECONDS`, `LEASE_WAIT_ATTEMPTS`, `LEASE_WAIT_MAX_MS`,
    /// `WEBHOOK_REDELIVERY_AFTER_SECONDS`, `ADYEN_RETRY_DEADLINE_SECONDS`.
    pub fn from_env(env: &Env) -> Result<Self, shared::ConfigError> {
        let d = Self::default();
        Ok(Self {
            max_body_bytes: env.number("WEBHOOK_MAX_BODY_BYTES", d.max_body_bytes)?,
            unknown_payment_window: env.seconds("UNKNOWN_PAYMENT_WINDOW_SECONDS", d.unknown_payment_window)?,
            lease_attempts: env.number("LEASE_WAIT_ATTEMPTS", d.lease_attempts)?,
            lease_max_wait: env.millis("LEASE_WAIT_MAX_MS", d.lease_max_wait)?,
            redelivery_after: env.seconds("WEBHOOK_REDELIVERY_AFTER_SECONDS", d.redelivery_after)?,
            adyen_retry_deadline: env.seconds("ADYEN_RETRY_DEADLINE_SECONDS", d.adyen_retry_deadline)?,
        })
    }
}

/// The intake function's settings, read once per cold start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `TABLE_NAME` and the lease settings.
    pub config: Config,
    /// `WEBHOOK_PROVIDERS` and where their secrets are.
    pub providers: ProviderSettings,
    /// The intake's limits and waits.
    pub intake: IntakeSettings,
}

impl Settings {
    /// Reads the settings from `env` (see the type); a missing or malformed one fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            config: Config::from_env(env)?,
            providers: ProviderSettings::from_env(env)?,
            intake: IntakeSettings::from_env(env)?,
        })
    }
}

/// Everything the handler needs, built once per cold start ([`App::build`]).
#[derive(Debug, Clone)]
pub struct App {
    pub store: PaymentStore,
    pub leases: Leases,
    /// The providers and their secrets, re-read after a TTL or a failed signature (see `providers`).
    pub providers: ProviderSource,
    pub settings: IntakeSettings,
}

impl App {
    /// Builds the intake once per cold start from its settings on `clients`: the providers' secrets are read
    /// here (Secrets Manager or `WEBHOOK_SECRETS`), and from Secrets Manager again only when the cached copy
    /// is 5 minutes old or a signature fails (at most every 30 s), never per request.
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        let providers = ProviderSource::from_settings(&settings.providers, &clients.sdk).await?;
        Ok(Self::new(
            clients.dynamodb,
            &settings.config,
            providers,
            settings.intake.clone(),
        ))
    }

    /// The app on `config`'s table with these providers and settings: the one place its store and leases are
    /// built (the intake's [`App::build`] and the catch-up job, which needs no secret, both use it).
    pub fn new(
        client: shared::aws::DynamoDbClient,
        config: &shared::Config,
        providers: ProviderSource,
        settings: IntakeSettings,
    ) -> Self {
        Self {
            store: PaymentStore::new(client.clone(), &config.table_name, config.open_shards),
            leases: Leases::new(client, &config.table_name, config.lease),
            providers,
            settings,
        }
    }
}
