//! Building the DynamoDB client once per cold start, with retries and timeouts suited to a payment path, and
//! reading a secret's string from Secrets Manager (its errors name the secret, never its value).
//!
//! Endpoints come from the SDK's own variables (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL`), so the same
//! binary talks to AWS or to DynamoDB Local without code of ours.

use crate::store::{Cause, SdkFailure};
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use std::time::Duration;
use thiserror::Error;

/// SDK attempts per call (the first plus retries) for throttling, 5xx and timeouts. The SDK backs off
/// exponentially with full jitter from [`INITIAL_BACKOFF`].
pub const MAX_ATTEMPTS: u32 = 4;
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(25);
/// One attempt may take this long before it is retried; the whole call this long before it fails.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(6);

/// Our retry and timeout settings on top of a shared SDK config.
pub fn dynamodb_config(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::from(sdk)
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(MAX_ATTEMPTS)
                .with_initial_backoff(INITIAL_BACKOFF),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .operation_timeout(OPERATION_TIMEOUT)
                .build(),
        )
}

pub use aws_sdk_dynamodb::Client as DynamoDbClient;

/// The shared SDK configuration from the environment (region, credentials, `AWS_ENDPOINT_URL*`).
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// The DynamoDB client for a function, with our retry and timeout settings.
pub fn dynamodb_client(sdk: &aws_config::SdkConfig) -> DynamoDbClient {
    DynamoDbClient::from_conf(dynamodb_config(sdk).build())
}

/// A Secrets Manager client whose calls end within [`OPERATION_TIMEOUT`]: secrets are read at cold start and,
/// for webhook secrets, again inside a request after a failed signature, which must not wait for long.
pub fn secrets_client(sdk: &aws_config::SdkConfig) -> aws_sdk_secretsmanager::Client {
    let config = aws_sdk_secretsmanager::config::Builder::from(sdk)
        .timeout_config(
            aws_sdk_secretsmanager::config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .operation_timeout(OPERATION_TIMEOUT)
                .build(),
        )
        .build();
    aws_sdk_secretsmanager::Client::from_conf(config)
}

/// Why a secret's string could not be read. The text names the secret's ARN, never a value.
#[derive(Debug, Error)]
pub enum SecretError {
    /// Secrets Manager refused the call or did not answer. The source is its code and message (or the SDK's
    /// own cause: timeout, connection), never the raw response, which could hold the secret.
    #[error("reading secret {arn} failed")]
    Read {
        arn: String,
        #[source]
        source: Cause,
    },
    /// The secret holds no string (a binary secret).
    #[error("secret {arn} has no string value")]
    NoString { arn: String },
}

/// The string value of the secret `arn`.
pub async fn secret_string(client: &aws_sdk_secretsmanager::Client, arn: &str) -> Result<String, SecretError> {
    let out = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| SecretError::Read {
            arn: arn.to_owned(),
            source: SdkFailure::from(e).into(),
        })?;
    out.secret_string()
        .map(str::to_owned)
        .ok_or_else(|| SecretError::NoString { arn: arn.to_owned() })
}
