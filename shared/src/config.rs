//! Configuration read from the environment, by convention: `TABLE_NAME`, the AWS SDK's own endpoint variables
//! (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`), and the few settings of our own, documented in `docs/CONFIGURATION.md`.
//!
//! Every loader reads through one [`Env`], the same way: an empty value is unset, a required variable that is
//! unset is [`ConfigError::Missing`] and a malformed value is [`ConfigError::Invalid`], both at start, never a
//! silent default. Each function reads its settings once, at its cold start, into its crate's `Settings`
//! (`Settings::from_env(&Env)`, the shared [`Config`] among them when it has a table), and is built from them
//! (`shared::lambda`), before the first request. Two readers are
//! left outside on purpose: telemetry's (`LOG_FORMAT`, `OTEL_*`, the platform's `_X_AMZN_TRACE_ID`), which
//! must work before any setting can be reported, and the pure core's `REDIRECT_HOSTS`, which has no SDK and
//! no `shared` to depend on.

use crate::lease::LeaseConfig;
use crate::store::open_index::OpenShards;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {name} is not a valid {expected}: {value:?}")]
    Invalid {
        name: &'static str,
        expected: &'static str,
        value: String,
    },
    #[error(
        "lease TTL {ttl:?} must be longer than the function timeout {timeout:?}: a live holder would lose its lease mid-work"
    )]
    LeaseShorterThanTimeout { ttl: Duration, timeout: Duration },
}

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Where settings come from: the process environment, or a test's (or the local stack's) own values.
#[derive(Clone)]
pub struct Env {
    lookup: Arc<Lookup>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The values may be secrets (`PSP_API_KEY`, `WEBHOOK_SECRETS`).
        f.write_str("Env([values withheld])")
    }
}

impl Env {
    /// The process environment.
    pub fn process() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Values from `lookup` (tests, the local stack).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self {
            lookup: Arc::new(lookup),
        }
    }

    /// These values, with `name` set to `value` (the local stack passes what it created, e.g. a queue URL).
    pub fn with(self, name: &'static str, value: impl Into<String>) -> Self {
        let value = value.into();
        let inner = self.lookup;
        Self::from_lookup(move |n| if n == name { Some(value.clone()) } else { inner(n) })
    }

    /// The value of `name`; unset or empty (blank) is `None`.
    pub fn optional(&self, name: &str) -> Option<String> {
        (self.lookup)(name).filter(|v| !v.trim().is_empty())
    }

    /// The value of `name`, which must be set.
    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.optional(name).ok_or(ConfigError::Missing(name))
    }

    /// `name` parsed as a `T` (a count, a size), or `default` when unset.
    pub fn number<T: FromStr>(&self, name: &'static str, default: T) -> Result<T, ConfigError> {
        match self.optional(name) {
            None => Ok(default),
            Some(value) => value.trim().parse().map_err(|_| ConfigError::Invalid {
                name,
                expected: "whole number",
                value,
            }),
        }
    }

    /// `name` as whole seconds, or `default` when unset.
    pub fn seconds(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        self.number(name, default.as_secs()).map(Duration::from_secs)
    }

    /// `name` as whole milliseconds, or `default` when unset.
    pub fn millis(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        let default = u64::try_from(default.as_millis()).unwrap_or(u64::MAX);
        self.number(name, default).map(Duration::from_millis)
    }
}

/// The settings of every function that has a table: the table and its leases.
#[derive(Debug, Clone)]
pub struct Config {
    /// `TABLE_NAME`: the one table (payments, events, sagas, leases, breakers).
    pub table_name: String,
    /// `LEASE_TTL_SECONDS` against `FUNCTION_TIMEOUT_SECONDS`.
    pub lease: LeaseConfig,
    /// `OPEN_ITEMS_SHARDS` (the template's `OpenItemsShards`, default 8): the `open-items` index's shards,
    /// the same for every function that writes or reads the index.
    pub open_shards: OpenShards,
}

pub const DEFAULT_LEASE_TTL_SECONDS: u64 = 30;
pub const DEFAULT_FUNCTION_TIMEOUT_SECONDS: u64 = 10;

impl Config {
    /// Reads through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Result<Self, ConfigError> {
        Self::from_env(&Env::from_lookup(lookup))
    }

    /// `TABLE_NAME` (required), `LEASE_TTL_SECONDS`, `FUNCTION_TIMEOUT_SECONDS` and `OPEN_ITEMS_SHARDS`.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let shards = env.number("OPEN_ITEMS_SHARDS", OpenShards::DEFAULT.get())?;
        let open_shards = OpenShards::new(shards).ok_or_else(|| ConfigError::Invalid {
            name: "OPEN_ITEMS_SHARDS",
            expected: "shard count from 8 to 256 (only ever raised: docs/DEPLOY.md, \"Peak season\")",
            value: shards.to_string(),
        })?;
        let ttl = env.seconds("LEASE_TTL_SECONDS", Duration::from_secs(DEFAULT_LEASE_TTL_SECONDS))?;
        let timeout = env.seconds(
            "FUNCTION_TIMEOUT_SECONDS",
            Duration::from_secs(DEFAULT_FUNCTION_TIMEOUT_SECONDS),
        )?;
        Ok(Self {
            table_name: env.required("TABLE_NAME")?,
            lease: LeaseConfig::new(ttl, timeout)?,
            open_shards,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Send + Sync + 'static {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply() {
        let c = Config::from_lookup(env(&[("TABLE_NAME", "payments")])).unwrap();
        assert_eq!(c.table_name, "payments");
        assert_eq!(c.lease.ttl(), Duration::from_secs(30));
    }

    #[test]
    fn table_name_is_required() {
        assert_eq!(
            Config::from_lookup(env(&[])).unwrap_err(),
            ConfigError::Missing("TABLE_NAME")
        );
    }

    #[test]
    fn a_lease_ttl_not_longer_than_the_timeout_is_refused() {
        let err = Config::from_lookup(env(&[
            ("TABLE_NAME", "t"),
            ("LEASE_TTL_SECONDS", "10"),
            ("FUNCTION_TIMEOUT_SECONDS", "10"),
        ]))
        .unwrap_err();
        assert!(matches!(err, ConfigError::LeaseShorterThanTimeout { .. }));
        assert!(Config::from_lookup(env(&[("TABLE_NAME", "t"), ("LEASE_TTL_SECONDS", "abc")])).is_err());
    }

    #[test]
    fn the_open_items_shards_are_read_once_and_kept_in_range() {
        let read = |n: &str| Config::from_lookup(env(&[("TABLE_NAME", "t"), ("OPEN_ITEMS_SHARDS", n)]));
        assert_eq!(
            Config::from_lookup(env(&[("TABLE_NAME", "t")])).unwrap().open_shards,
            OpenShards::DEFAULT
        );
        assert_eq!(read("16").unwrap().open_shards.get(), 16);
        for bad in ["4", "0", "257", "many"] {
            let err = read(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    ConfigError::Invalid {
                        name: "OPEN_ITEMS_SHARDS",
                        ..
                    }
                ),
                "{bad}: {err}"
            );
        }
        assert!(read("4").unwrap_err().to_string().contains("from 8 to 256"));
    }

    #[test]
    fn a_malformed_value_is_an_error_not_a_default() {
        let env = Env::from_lookup(env(&[("N", " 12 "), ("BAD", "12s"), ("BLANK", " ")]));
        assert_eq!(env.number("N", 1u32), Ok(12));
        assert_eq!(env.number("BLANK", 1u32), Ok(1));
        assert_eq!(
            env.millis("UNSET", Duration::from_millis(250)),
            Ok(Duration::from_millis(250))
        );
        assert!(matches!(
            env.seconds("BAD", Duration::ZERO),
            Err(ConfigError::Invalid { name: "BAD", .. })
        ));
        assert_eq!(env.required("BLANK"), Err(ConfigError::Missing("BLANK")));
        let env = env.with("BLANK", "set");
        assert_eq!(env.required("BLANK").as_deref(), Ok("set"));
        assert_eq!(format!("{env:?}"), "Env([values withheld])");
    }
}
