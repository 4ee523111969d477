//! Configuration read from the environment, by convention: `TABLE_NAME`, the AWS SDK's own endpoint variables
//! (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`), and the few settings of our own, documented in README.

use crate::lease::LeaseConfig;
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

/// Settings every function shares.
#[derive(Debug, Clone)]
pub struct Config {
    pub table_name: String,
    pub lease: LeaseConfig,
}

pub const DEFAULT_LEASE_TTL_SECONDS: u64 = 30;
pub const DEFAULT_FUNCTION_TIMEOUT_SECONDS: u64 = 10;

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let table_name = lookup("TABLE_NAME")
            .filter(|v| !v.is_empty())
            .ok_or(ConfigError::Missing("TABLE_NAME"))?;
        let seconds = |name: &'static str, default: u64| -> Result<Duration, ConfigError> {
            match lookup(name) {
                None => Ok(Duration::from_secs(default)),
                Some(value) => value
                    .parse::<u64>()
                    .map(Duration::from_secs)
                    .map_err(|_| ConfigError::Invalid {
                        name,
                        expected: "number of seconds",
                        value,
                    }),
            }
        };
        let ttl = seconds("LEASE_TTL_SECONDS", DEFAULT_LEASE_TTL_SECONDS)?;
        let timeout = seconds("FUNCTION_TIMEOUT_SECONDS", DEFAULT_FUNCTION_TIMEOUT_SECONDS)?;
        Ok(Self {
            table_name,
            lease: LeaseConfig::new(ttl, timeout)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
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
}
