//! The checkout saga (orchestration): reserve stock, create and charge the payment, wait for its outcome
//! from the queue, confirm the order; on failure the completed steps are compensated in reverse order.
//!
//! The states and their legal moves are types in `payments_core::saga`; persistence, escalation and retry
//! live in `shared`. This crate holds the checkout's steps ([`runner`]), its own items ([`inventory`],
//! [`orders`]), the three entry points ([`api`], [`events`], [`sweeper`]) and its [`metrics`].

pub mod api;
pub mod events;
pub mod inventory;
pub mod metrics;
pub mod orders;
pub mod runner;
pub mod sweeper;

use runner::{default_checkout_psp, Runner, Settings};
use shared::lease::Leases;
use shared::psp::PspSet;
use shared::recovery::{Recovery, RecoverySettings};
use shared::saga::{Escalation, SagaStore};
use shared::{Config, ConfigError, Env, PaymentStore};

/// Builds the runner from `env` (`TABLE_NAME`, every configured PSP's settings (Stripe's `PSP_BASE_URL`,
/// `PSP_API_KEY_ARN` or `PSP_API_KEY`, ...; Adyen's `ADYEN_BASE_URL`, ...: `shared::psp::set::from_env`),
/// `SAGA_PSP` (default `stripe`), `ESCALATION_QUEUE_URL`, `SAGA_PAYMENT_TIMEOUT_SECONDS` (default 120),
/// `CHECKOUT_ABANDON_AFTER_SECONDS` (default 900), `RECOVERY_*`, lease settings), with clients made once per
/// cold start. A missing or malformed setting fails the start.
pub async fn runner_from_env(
    sdk: &aws_config::SdkConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    config: &Config,
    env: &Env,
) -> Result<Runner<PspSet>, Box<dyn std::error::Error + Send + Sync>> {
    let defaults = Settings::default();
    let psps = shared::psp::set::from_env(sdk, dynamodb.clone(), &config.table_name, env).await?;
    let new_checkouts = default_checkout_psp(env)?;
    // New checkouts go to a PSP this deployment can call: refused at the start, not at the first checkout.
    if !psps.providers().contains(&new_checkouts.name()) {
        return Err(ConfigError::Missing(
            "the settings of SAGA_PSP's PSP (PSP_BASE_URL for stripe, ADYEN_BASE_URL for adyen)",
        )
        .into());
    }
    Ok(Runner {
        sagas: SagaStore::new(dynamodb.clone(), &config.table_name),
        recovery: Recovery {
            store: PaymentStore::new(dynamodb.clone(), &config.table_name),
            leases: Leases::new(dynamodb.clone(), &config.table_name, config.lease),
            psp: psps,
            settings: RecoverySettings::from(env)?,
        },
        escalation: Escalation::new(aws_sdk_sqs::Client::new(sdk), env.required("ESCALATION_QUEUE_URL")?),
        settings: Settings {
            payment_timeout: env.seconds("SAGA_PAYMENT_TIMEOUT_SECONDS", defaults.payment_timeout)?,
            abandon_after: env.seconds("CHECKOUT_ABANDON_AFTER_SECONDS", defaults.abandon_after)?,
            new_checkouts,
            ..defaults
        },
    })
}
