//! Recovery's settings: its own (`RECOVERY_*`, which the checkout functions read too) and the reconciler
//! function's, read once per cold start.

use psp::pace::ScanRates;
use psp::PspSetSettings;
use shared::{Config, ConfigError, Env};
use std::time::Duration;

/// Recovery's own settings (`RECOVERY_*`).
#[derive(Debug, Clone, Copy)]
pub struct RecoverySettings {
    /// A payment open for longer than this is asked about.
    pub stale_after: Duration,
    /// At most this many payments per run.
    pub batch_limit: usize,
    /// A payment recovery has nothing to ask about (see [`NothingToAsk`](payments_core::recovery::NothingToAsk)) and open this long since its
    /// creation is recorded failed as expired.
    pub expire_after: Duration,
}

impl RecoverySettings {
    /// `RECOVERY_STALE_AFTER_SECONDS`, `RECOVERY_BATCH_LIMIT` and `RECOVERY_EXPIRE_AFTER_SECONDS`, else the
    /// defaults: the one reader of recovery's own settings, the reconciler's ([`Settings::from_env`]) and the
    /// checkout functions' alike.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let default = Self::default();
        Ok(Self {
            stale_after: env.seconds("RECOVERY_STALE_AFTER_SECONDS", default.stale_after)?,
            batch_limit: env.number("RECOVERY_BATCH_LIMIT", default.batch_limit)?,
            expire_after: env.seconds("RECOVERY_EXPIRE_AFTER_SECONDS", default.expire_after)?,
        })
    }

    /// `RECOVERY_EXPIRE_AFTER_SECONDS` in milliseconds.
    pub(crate) fn expire_after_ms(&self) -> i64 {
        millis(self.expire_after)
    }

    /// `RECOVERY_STALE_AFTER_SECONDS` in milliseconds.
    pub(crate) fn stale_after_ms(&self) -> i64 {
        millis(self.stale_after)
    }
}

impl Default for RecoverySettings {
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(300),
            batch_limit: 200,
            expire_after: DEFAULT_EXPIRE_AFTER,
        }
    }
}

/// `RECOVERY_EXPIRE_AFTER_SECONDS`' default, 7 days: longer than any asynchronous payment method keeps a
/// payment open before its PSP reports the end (bank debits take days), short enough that an abandoned
/// payment does not hold its order for weeks.
pub const DEFAULT_EXPIRE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// The reconciler function's settings, read once per cold start: `TABLE_NAME` and the lease settings
/// ([`Config`]), each configured PSP's settings ([`PspSetSettings`]: Stripe's `PSP_BASE_URL`,
/// `PSP_API_KEY_ARN` or `PSP_API_KEY`, ...; Adyen's `ADYEN_BASE_URL`, `ADYEN_API_KEY_ARN` or
/// `ADYEN_API_KEY`, ...) paced for a scan ([`ScanRates`]: `PSP_SCAN_RATE_PER_SECOND`,
/// `ADYEN_SCAN_RATE_PER_SECOND`), and recovery's own ([`RecoverySettings`]: `RECOVERY_STALE_AFTER_SECONDS`,
/// `RECOVERY_BATCH_LIMIT`, `RECOVERY_EXPIRE_AFTER_SECONDS`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The table and the leases.
    pub config: Config,
    /// The PSPs recovery asks, each about its own payments only, each at most at its scan rate.
    pub psps: PspSetSettings,
    /// When a payment is due, how many per run, when one expires.
    pub recovery: RecoverySettings,
}

impl Settings {
    /// Reads the settings from `env` (see the type); a missing or malformed one fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            config: Config::from_env(env)?,
            psps: PspSetSettings::from_env(env)?.paced(&ScanRates::from_env(env)?),
            recovery: RecoverySettings::from_env(env)?,
        })
    }
}

/// `d` in milliseconds (saturating).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
