//! The PSPs this deployment accepts webhooks from: name (the `{provider}` of the route), signature scheme,
//! active secrets (several during a rotation) and what their events must say about mode and account.
//!
//! `WEBHOOK_PROVIDERS` (JSON) names the providers; their secrets come from Secrets Manager
//! (`WEBHOOK_SECRETS_ARN`, fetched once per cold start) or, for local development, from `WEBHOOK_SECRETS`
//! (the same JSON: `{"stripe": ["whsec_..."], ...}`). Secrets are never logged.

use crate::psp_event::Expectations;
use crate::signature::{standard_key, DEFAULT_TOLERANCE_SECS};
use serde::Deserialize;
use shared::SigningSecret;
use std::collections::HashMap;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    Stripe,
    Standard,
}

#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub scheme: Scheme,
    pub secrets: Vec<SigningSecret>,
    pub expect: Expectations,
    pub tolerance_secs: i64,
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
    #[error("provider {0}: {1}")]
    BadSecret(String, String),
    #[error("no webhook secrets configured: set WEBHOOK_SECRETS_ARN (AWS) or WEBHOOK_SECRETS (local)")]
    NoSecrets,
    #[error("reading the webhook secrets from Secrets Manager failed: {0}")]
    SecretsManager(String),
}

/// One entry of `WEBHOOK_PROVIDERS`: a provider without its secrets (what an operator's replay needs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSpec {
    pub name: String,
    pub scheme: Scheme,
    #[serde(default)]
    pub livemode: Option<bool>,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub tolerance_secs: Option<i64>,
}

impl ProviderSpec {
    /// The providers `WEBHOOK_PROVIDERS` names (default: [`DEFAULT_PROVIDERS`]), without reading any secret.
    pub fn from_env() -> Result<Vec<Self>, ProvidersError> {
        let providers = std::env::var("WEBHOOK_PROVIDERS").unwrap_or_else(|_| DEFAULT_PROVIDERS.to_owned());
        serde_json::from_str(&providers).map_err(|e| ProvidersError::BadProviders(e.to_string()))
    }

    /// What this provider's events must say about mode and account.
    pub fn expectations(&self) -> Expectations {
        Expectations {
            livemode: self.livemode,
            account: self.account.clone(),
        }
    }
}

/// The providers when `WEBHOOK_PROVIDERS` is not set: Stripe and one Standard Webhooks PSP.
pub const DEFAULT_PROVIDERS: &str = r#"[{"name":"stripe","scheme":"stripe"},{"name":"standard","scheme":"standard"}]"#;

impl Providers {
    /// Builds the registry from the providers JSON and the secrets JSON.
    pub fn from_json(providers: &str, secrets: &str) -> Result<Self, ProvidersError> {
        let specs: Vec<ProviderSpec> =
            serde_json::from_str(providers).map_err(|e| ProvidersError::BadProviders(e.to_string()))?;
        let mut secrets: HashMap<String, Vec<String>> =
            serde_json::from_str(secrets).map_err(|e| ProvidersError::BadSecrets(e.to_string()))?;
        let mut map = HashMap::new();
        for spec in specs {
            let list = secrets.remove(&spec.name).unwrap_or_default();
            let secrets: Vec<SigningSecret> = list
                .into_iter()
                .map(|s| {
                    SigningSecret::parse(s).map_err(|e| ProvidersError::BadSecret(spec.name.clone(), e.to_string()))
                })
                .collect::<Result<_, _>>()?;
            if secrets.is_empty() {
                return Err(ProvidersError::NoSecret(spec.name));
            }
            if spec.scheme == Scheme::Standard {
                for s in &secrets {
                    standard_key(s).map_err(|e| ProvidersError::BadSecret(spec.name.clone(), e.to_string()))?;
                }
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

    /// Reads the environment; fetches the secrets from Secrets Manager when `WEBHOOK_SECRETS_ARN` is set.
    pub async fn from_env(sdk: &aws_config::SdkConfig) -> Result<Self, ProvidersError> {
        let providers = std::env::var("WEBHOOK_PROVIDERS").unwrap_or_else(|_| DEFAULT_PROVIDERS.to_owned());
        let secrets = match std::env::var("WEBHOOK_SECRETS_ARN") {
            Ok(arn) if !arn.is_empty() => {
                let client = aws_sdk_secretsmanager::Client::new(sdk);
                let out = client
                    .get_secret_value()
                    .secret_id(arn)
                    .send()
                    .await
                    .map_err(|e| ProvidersError::SecretsManager(e.to_string()))?;
                out.secret_string()
                    .map(str::to_owned)
                    .ok_or(ProvidersError::NoSecrets)?
            }
            _ => std::env::var("WEBHOOK_SECRETS").map_err(|_| ProvidersError::NoSecrets)?,
        };
        Self::from_json(&providers, &secrets)
    }

    pub fn get(&self, name: &str) -> Option<&Provider> {
        self.0.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_need_secrets_and_valid_standard_keys() {
        let p = Providers::from_json(
            DEFAULT_PROVIDERS,
            r#"{"stripe":["whsec_a","whsec_b"],"standard":["whsec_c2VjcmV0"]}"#,
        )
        .unwrap();
        assert_eq!(p.get("stripe").unwrap().secrets.len(), 2);
        assert_eq!(p.get("standard").unwrap().scheme, Scheme::Standard);
        assert!(p.get("adyen").is_none());
        assert!(matches!(
            Providers::from_json(DEFAULT_PROVIDERS, r#"{"stripe":["whsec_a"]}"#),
            Err(ProvidersError::NoSecret(_))
        ));
        assert!(matches!(
            Providers::from_json(DEFAULT_PROVIDERS, r#"{"stripe":["whsec_a"],"standard":["whsec_***"]}"#),
            Err(ProvidersError::BadSecret(..))
        ));
        let debug = format!("{p:?}");
        assert!(!debug.contains("whsec_a") && !debug.contains("c2VjcmV0"), "{debug}");
    }
}
