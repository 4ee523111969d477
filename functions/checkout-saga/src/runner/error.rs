//! Why a saga's step or run failed: the saga store's, the payment store's or the PSP's error, kept as the
//! cause; retried at once when it is transient ([`RunError::is_transient`]).

use crate::saga::SagaStoreError;
use psp::PspError;
use shared::store::StoreError;
use thiserror::Error;

/// A step's or a run's failure.
#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Saga(#[from] SagaStoreError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Psp(#[from] PspError),
    #[error("{0}")]
    Invalid(String),
    /// The invocation's deadline came first; the saga is where the last completed step left it, and the
    /// sweeper resumes it.
    #[error("the invocation's deadline came before the saga settled")]
    OutOfTime,
    /// Retries did not help; the saga was sent to the escalation queue.
    #[error("saga {order_id} escalated after {attempts} attempts at {action}")]
    Escalated {
        order_id: String,
        action: &'static str,
        attempts: u32,
        #[source]
        error: Box<RunError>,
    },
}

impl RunError {
    /// Worth retrying at once: storage or the PSP failed for a moment.
    pub fn is_transient(&self) -> bool {
        match self {
            RunError::Saga(e) => e.is_transient(),
            RunError::Store(e) => e.is_transient(),
            RunError::Psp(e) => e.is_transient(),
            RunError::Invalid(_) | RunError::Escalated { .. } | RunError::OutOfTime => false,
        }
    }
}
