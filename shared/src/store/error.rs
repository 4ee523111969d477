//! What can go wrong talking to DynamoDB, in terms a handler can answer with.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use thiserror::Error;

/// The underlying error a store error keeps as its `source()`: the SDK's error, a builder's, or DynamoDB's
/// cancellation reasons. Logs show the whole chain ([`crate::telemetry::ErrorChain`]).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("payment {0} not found")]
    NotFound(String),
    #[error("payment {0} already exists")]
    AlreadyExists(String),
    /// DynamoDB could not be reached or kept failing (throttling, 5xx, timeouts) after the SDK's retries,
    /// or transaction conflicts outlasted ours. Nothing was written; answer 503 and let the caller retry.
    #[error("DynamoDB unavailable during {context}")]
    Unavailable {
        context: &'static str,
        #[source]
        source: Cause,
    },
    /// Version conflicts kept coming after the bounded number of re-decisions.
    #[error("payment {0} kept changing under us; gave up after {1} version conflicts")]
    ConflictsExhausted(String, u32),
    /// DynamoDB refused the request itself (validation): a bug of ours, not a transient state.
    #[error("DynamoDB refused {context}")]
    Request {
        context: &'static str,
        #[source]
        source: Cause,
    },
    /// A stored item does not parse into the domain: never silently dropped. The cause (serde's error, a
    /// domain check) is the `source()`; the text names the item's key only, never its values. (An item to
    /// store that cannot be built or encoded is a bug of ours: `Request`.)
    #[error("stored item {key} is corrupt")]
    Corrupt {
        key: String,
        #[source]
        source: Cause,
    },
}

impl StoreError {
    /// DynamoDB may answer the same request later: `Unavailable` during `context`, caused by `source`.
    pub fn unavailable(context: &'static str, source: impl Into<Cause>) -> Self {
        StoreError::Unavailable {
            context,
            source: source.into(),
        }
    }

    /// The request itself is wrong (a bug of ours): `Request` for `context`, caused by `source`.
    pub fn request(context: &'static str, source: impl Into<Cause>) -> Self {
        StoreError::Request {
            context,
            source: source.into(),
        }
    }

    /// The item under `key` does not parse into the domain, because of `source`.
    pub fn corrupt(key: impl Into<String>, source: impl Into<Cause>) -> Self {
        StoreError::Corrupt {
            key: key.into(),
            source: source.into(),
        }
    }

    /// Classifies an SDK error: anything that may pass (throttling, 5xx, timeouts, I/O) is `Unavailable`.
    /// The SDK's error stays the source, with DynamoDB's code and message.
    pub fn from_sdk<E, R>(context: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let permanent = match &err {
            SdkError::ServiceError(service) => matches!(
                service.err().code(),
                Some("ValidationException" | "ResourceNotFoundException" | "SerializationException")
            ),
            SdkError::ConstructionFailure(_) => true,
            _ => false,
        };
        let source = SdkFailure::from(err);
        if permanent {
            StoreError::request(context, source)
        } else {
            StoreError::unavailable(context, source)
        }
    }

    /// The answer of a conditional write: `true` when it was written, `false` when its condition failed (the
    /// item was not as the caller required: an answer, not a fault), else the failure in our terms.
    pub fn condition_held<T, E, R>(context: &'static str, result: Result<T, SdkError<E, R>>) -> Result<bool, Self>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(service)) if service.err().code() == Some("ConditionalCheckFailedException") => {
                Ok(false)
            }
            Err(e) => Err(StoreError::from_sdk(context, e)),
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

/// An SDK error as a source: the service's code and message when DynamoDB answered (the SDK's own `Display`
/// says only "service error"), else the SDK's error itself (timeout, dispatch, response), whose sources follow.
/// Used for every AWS service's errors (Secrets Manager's, and `paymentsctl`'s SQS, Logs and CloudFormation
/// calls too), since they share the SDK's error types.
#[derive(Debug, Error)]
pub enum SdkFailure {
    /// The service answered with an error: its code (`ResourceNotFoundException`) and message.
    #[error("{code}: {message}")]
    Service { code: String, message: String },
    /// No answer from the service (timeout, dispatch, construction): the SDK's cause.
    #[error(transparent)]
    Other(Cause),
}

impl<E, R> From<SdkError<E, R>> for SdkFailure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    fn from(err: SdkError<E, R>) -> Self {
        match &err {
            SdkError::ServiceError(service) => SdkFailure::Service {
                code: service.err().code().unwrap_or("unknown").to_owned(),
                message: service.err().message().unwrap_or("").to_owned(),
            },
            // The SDK's own cause (timeout, connector, construction); never the SdkError itself, whose `Debug`
            // holds the raw response (an item, client secret included, for a failed read).
            _ => {
                let what = err.to_string();
                SdkFailure::Other(err.into_source().unwrap_or_else(|_| what.into()))
            }
        }
    }
}
