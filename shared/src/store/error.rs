//! What can go wrong talking to DynamoDB, in terms a handler can answer with.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("payment {0} not found")]
    NotFound(String),
    #[error("payment {0} already exists")]
    AlreadyExists(String),
    /// DynamoDB could not be reached or kept failing (throttling, 5xx, timeouts) after the SDK's retries,
    /// or transaction conflicts outlasted ours. Nothing was written; answer 503 and let the caller retry.
    #[error("DynamoDB unavailable during {context}: {message}")]
    Unavailable { context: &'static str, message: String },
    /// Version conflicts kept coming after the bounded number of re-decisions.
    #[error("payment {0} kept changing under us; gave up after {1} version conflicts")]
    ConflictsExhausted(String, u32),
    /// DynamoDB refused the request itself (validation): a bug of ours, not a transient state.
    #[error("DynamoDB refused {context}: {message}")]
    Request { context: &'static str, message: String },
    /// A stored item does not parse into the domain: never silently dropped.
    #[error("stored item {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
}

impl StoreError {
    /// Classifies an SDK error: anything that may pass (throttling, 5xx, timeouts, I/O) is `Unavailable`.
    pub fn from_sdk<E, R>(context: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let message = match &err {
            SdkError::ServiceError(service) => {
                let e = service.err();
                format!("{}: {}", e.code().unwrap_or("unknown"), e.message().unwrap_or(""))
            }
            other => format!("{other}"),
        };
        let permanent = match &err {
            SdkError::ServiceError(service) => matches!(
                service.err().code(),
                Some("ValidationException" | "ResourceNotFoundException" | "SerializationException")
            ),
            SdkError::ConstructionFailure(_) => true,
            _ => false,
        };
        if permanent {
            StoreError::Request { context, message }
        } else {
            StoreError::Unavailable { context, message }
        }
    }

    /// True when retrying the same request later may succeed (answer 503 with Retry-After).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::ConflictsExhausted(..)
        )
    }
}
