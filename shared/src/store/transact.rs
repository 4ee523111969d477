//! One way to send a DynamoDB transaction and read why it was cancelled.
//!
//! `TransactWriteItems` succeeds or fails as a whole. When a condition or a concurrent transaction cancels
//! it, DynamoDB says per item why (`CancellationReasons`, in the order of the items sent) and, for an item
//! sent with `ReturnValuesOnConditionCheckFailure::AllOld`, returns that item as it is now. Every writer
//! (payment create and finalize, idempotent create, saga save, consumer apply) reads that answer through
//! [`Cancelled`], so the codes are spelled once.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, TransactWriteItem};
use aws_sdk_dynamodb::Client;

use super::item::Item;
use super::StoreError;

/// Why a transaction wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum TransactError {
    /// A condition failed or another transaction got in the way; [`Cancelled`] says which item and why.
    #[error(transparent)]
    Cancelled(Cancelled),
    /// A transaction with the same client request token is still running: retrying passes.
    #[error("transaction in progress")]
    InProgress,
    /// Any other failure, classified like every SDK error.
    #[error(transparent)]
    Store(StoreError),
}

impl TransactError {
    /// As a store error for a writer with no use for the reasons: a cancellation that passes when retried
    /// (or a transaction still in progress) is `Unavailable`, any other is `Request`.
    pub fn into_store_error(self, context: &'static str) -> StoreError {
        match self {
            TransactError::Cancelled(c) => c.into_store_error(context),
            TransactError::InProgress => StoreError::unavailable(context, "TransactionInProgress"),
            TransactError::Store(e) => e,
        }
    }
}

/// DynamoDB's per-item reasons for cancelling a transaction.
#[derive(Clone, thiserror::Error)]
#[error("transaction cancelled: {}", self.codes())]
pub struct Cancelled {
    reasons: Vec<CancellationReason>,
}

/// The codes only: a reason may carry the item as it is now, client secret included.
impl std::fmt::Debug for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cancelled({})", self.codes())
    }
}

impl Cancelled {
    /// Whether the condition of item `index` (in the order sent) failed.
    pub fn condition_failed(&self, index: usize) -> bool {
        self.code(index) == Some("ConditionalCheckFailed")
    }

    /// The first item from `from` on whose condition failed.
    pub fn first_failed_from(&self, from: usize) -> Option<usize> {
        (from..self.reasons.len()).find(|&i| self.condition_failed(i))
    }

    /// Item `index` as it is now, when its condition failed and it was sent asking for it.
    pub fn item(&self, index: usize) -> Option<&Item> {
        self.reasons.get(index).and_then(CancellationReason::item)
    }

    /// The code of a reason that passes when the transaction is sent again: a conflict with another
    /// transaction on the same item, or throttling.
    pub fn transient(&self) -> Option<&str> {
        self.reasons.iter().filter_map(CancellationReason::code).find(|c| {
            matches!(
                *c,
                "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
            )
        })
    }

    /// As a store error: `Unavailable` when [`Self::transient`], `Request` otherwise.
    pub fn into_store_error(self, context: &'static str) -> StoreError {
        if self.transient().is_some() {
            StoreError::unavailable(context, self)
        } else {
            StoreError::request(context, self)
        }
    }

    fn code(&self, index: usize) -> Option<&str> {
        self.reasons.get(index).and_then(CancellationReason::code)
    }

    fn codes(&self) -> String {
        let codes: Vec<&str> = self.reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
        codes.join(", ")
    }
}

/// Sends `items` as one transaction. With `token`, every SDK retry of this call carries the same client
/// request token, so a retry after a lost answer does not apply it twice.
pub async fn transact_write(
    client: &Client,
    items: Vec<TransactWriteItem>,
    context: &'static str,
    token: bool,
) -> Result<(), TransactError> {
    let request = client
        .transact_write_items()
        .set_transact_items(Some(items))
        .set_client_request_token(token.then(|| uuid::Uuid::new_v4().to_string()));
    match request.send().await {
        Ok(_) => Ok(()),
        Err(SdkError::ServiceError(e)) => match e.err() {
            TransactWriteItemsError::TransactionCanceledException(c) => Err(TransactError::Cancelled(Cancelled {
                reasons: c.cancellation_reasons().to_vec(),
            })),
            TransactWriteItemsError::TransactionInProgressException(_) => Err(TransactError::InProgress),
            _ => Err(TransactError::Store(StoreError::from_sdk(
                context,
                SdkError::ServiceError(e),
            ))),
        },
        Err(e) => Err(TransactError::Store(StoreError::from_sdk(context, e))),
    }
}
