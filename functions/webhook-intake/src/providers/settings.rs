//! Where the webhook secrets are (`WEBHOOK_SECRETS_ARN` or `WEBHOOK_SECRETS`), read once per cold start, and
//! the loader that reads them from Secrets Manager.

use super::{ProvidersError, DEFAULT_PROVIDERS};
use shared::Env;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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
