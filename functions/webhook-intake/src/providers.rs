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
//!
//! Four parts: [`spec`] reads `WEBHOOK_PROVIDERS` (each endpoint checked), [`secrets`] checks that a
//! secret can be one, [`settings`] says where the secrets are and reads them from Secrets Manager, and
//! [`source`] keeps them in the refresh cache the handler asks.

mod secrets;
mod settings;
mod source;
mod spec;

pub use settings::{secrets_manager_loader, ProviderSettings, SecretsFrom, SecretsLoader};
pub use source::{ProviderSource, MIN_REFRESH_INTERVAL, SECRETS_TTL};
pub use spec::{ProviderSpec, DEFAULT_PROVIDERS};

use crate::psp_event::Expectations;
use shared::{PspName, SigningSecret};
use std::collections::HashMap;
use thiserror::Error;
use webhook_signatures::DEFAULT_TOLERANCE_SECS;

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

impl Providers {
    /// Builds the registry from the providers JSON and the secrets JSON.
    pub fn from_json(providers: &str, secrets: &str) -> Result<Self, ProvidersError> {
        let specs = spec::parse_specs(providers)?;
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
                    secrets::check_secret(spec.scheme, &secret)
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

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // a test clock that moves forward
mod tests;
