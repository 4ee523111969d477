//! The finalize loop: decide, write under the version token, and on a conflict decide again from the item
//! that won, which DynamoDB returns with the failed condition (no extra read).
//!
//! Cost on the happy path: one read and one conditional `PutItem` of the payment carrying its transition (1
//! write unit up to 1 KB, plus the `open-items` entry a terminal status removes): its stream record is the
//! event (the outbox, `docs/OUTBOX.md`). The caller's lease is freed by the version moving past the one it
//! was taken at (see [`crate::lease`]). A conflict costs no extra read. A `TransactionConflict` (a
//! transaction, the saga's create, held the item at that moment) carries no item: it is retried after a
//! jittered pause with a fresh read. Both are bounded. An answer lost after the put committed comes back as
//! a failed condition whose item is exactly the one we wrote: that is our write, applied once.

use super::item::{payment_from_item, transition_to_item};
use super::{PaymentStore, StoreError};
use crate::clock;
use crate::lease::{self, Lease};
use crate::telemetry::ErrorChain;
use crate::{decide, Decision, DeferReason, EventKind, IgnoreReason, Observation, Payment, PaymentId, Transition};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use serde::Serialize;
use std::time::Duration;
use tracing::{debug, warn};

/// How many times a version conflict is decided again before giving up (the payment would have to change
/// this many times within one request). Each conflict means another writer committed, so with N concurrent
/// writers on one payment a writer meets at most N - 1; 32 covers the heaviest contention we test. Each
/// re-decision costs one `PutItem` and no read.
pub const MAX_VERSION_CONFLICTS: u32 = 32;
/// How many `TransactionConflict`s (or throttling past the SDK's retries) are retried with a fresh read.
pub const MAX_TRANSIENT_RETRIES: u32 = 5;
const TRANSIENT_BACKOFF_BASE: Duration = Duration::from_millis(20);

/// What finalize did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalizeResult {
    Applied(EventKind),
    Ignored(IgnoreReason),
    Deferred(DeferReason),
}

/// The result and the latest payment the answer must be built from.
#[derive(Debug, Clone)]
pub struct FinalizeOutcome {
    pub result: FinalizeResult,
    /// The payment as written by us, or the current item when we did not write.
    pub payment: Payment,
    /// Version conflicts met on the way (another path won at least once).
    pub version_conflicts: u32,
    /// True when the caller's lease was released: by the write (the payment's version moved past it) or, when
    /// nothing was written, by its delete.
    pub lease_released: bool,
    /// The observation was not about this payment (see [`crate::decide`]): why. An anomaly was recorded.
    pub refused: Option<String>,
}

/// Why one write did not commit.
enum WriteFailure {
    /// Another writer moved the payment; here is the item that won.
    VersionConflict(Box<Payment>),
    /// The put committed but its answer was lost; the SDK's retry found our own item.
    Ours,
    /// A transaction held the item: retry after a pause, with a fresh read.
    Transient(String),
    Failed(StoreError),
}

impl PaymentStore {
    /// Reads the payment and finalizes `observation` against it.
    pub async fn finalize(
        &self,
        id: &PaymentId,
        observation: &Observation,
        lease: Option<&Lease>,
    ) -> Result<FinalizeOutcome, StoreError> {
        let current = self
            .get(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        self.finalize_from(current, observation, lease).await
    }

    /// Finalizes `observation` against `current`, a payment the caller has just read.
    pub async fn finalize_from(
        &self,
        mut current: Payment,
        observation: &Observation,
        lease: Option<&Lease>,
    ) -> Result<FinalizeOutcome, StoreError> {
        let mut version_conflicts = 0;
        let mut transient: u32 = 0;
        loop {
            let transition = match decide(&current, observation, clock::now_ms()) {
                Decision::Apply(t) => t,
                Decision::Ignore(reason) => {
                    return self
                        .not_written(FinalizeResult::Ignored(reason), current, version_conflicts, lease)
                        .await
                }
                Decision::Defer(reason) => {
                    return self
                        .not_written(FinalizeResult::Deferred(reason), current, version_conflicts, lease)
                        .await
                }
            };
            match self.write(current.version, &transition).await {
                Ok(()) | Err(WriteFailure::Ours) => {
                    return Ok(applied(*transition, observation, version_conflicts, lease.is_some()))
                }
                Err(WriteFailure::VersionConflict(winner)) => {
                    version_conflicts = count_version_conflict(&current, &winner, version_conflicts)?;
                    current = *winner;
                }
                Err(WriteFailure::Transient(code)) => {
                    transient = transient.saturating_add(1);
                    current = self.read_after_pause(&current.id, transient, code).await?;
                }
                Err(WriteFailure::Failed(e)) => return Err(e),
            }
        }
    }

    /// After the `attempt`th transient cancellation: a jittered, growing pause, then a fresh read (such a
    /// cancellation carries no item). Past [`MAX_TRANSIENT_RETRIES`], storage is unavailable.
    async fn read_after_pause(&self, id: &PaymentId, attempt: u32, code: String) -> Result<Payment, StoreError> {
        if attempt > MAX_TRANSIENT_RETRIES {
            return Err(StoreError::unavailable("finalize", code));
        }
        let cap = TRANSIENT_BACKOFF_BASE.saturating_mul(2u32.saturating_pow(attempt));
        tokio::time::sleep(clock::full_jitter(cap)).await;
        self.get(id).await?.ok_or_else(|| StoreError::NotFound(id.to_string()))
    }

    async fn not_written(
        &self,
        result: FinalizeResult,
        payment: Payment,
        version_conflicts: u32,
        lease: Option<&Lease>,
    ) -> Result<FinalizeOutcome, StoreError> {
        debug!(payment_id = %payment.id, ?result, "nothing to write");
        let mut lease_released = false;
        if let Some(lease) = lease {
            match lease::release(&self.client, &self.table, lease).await {
                Ok(released) => lease_released = released,
                // The lease expires by itself; the answer does not depend on it.
                Err(e) => warn!(error = %ErrorChain(&e), "lease release failed; it will expire"),
            }
        }
        Ok(FinalizeOutcome {
            result,
            payment,
            version_conflicts,
            lease_released,
            refused: None,
        })
    }

    /// One conditional `PutItem`: the payment under the version token, carrying its transition.
    async fn write(&self, expected: u64, t: &Transition) -> Result<(), WriteFailure> {
        let item = transition_to_item(&t.payment, &t.event, self.shards).map_err(WriteFailure::Failed)?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("version = :expected")
            .expression_attribute_values(":expected", AttributeValue::N(expected.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => Err(classify_failure(e, t)),
        }
    }
}

/// The transition was written: logged at DEBUG (each path's own summary line says it at INFO: the intake's
/// "webhook finalized"), an anomaly also warned and alarmed, and answered.
fn applied(
    transition: Transition,
    observation: &Observation,
    version_conflicts: u32,
    lease_released: bool,
) -> FinalizeOutcome {
    debug!(
        payment_id = %transition.payment.id,
        version = transition.payment.version,
        status = %transition.payment.status,
        event = transition.event.kind.as_str(),
        path = %observation.path,
        "payment transition written"
    );
    if transition.event.kind == EventKind::AnomalyRecorded {
        // Alarmed (`PaymentAnomaliesAlarm`), whichever path recorded it.
        warn!(payment_id = %transition.payment.id, path = %observation.path,
              reason = transition.event.reason.as_deref().unwrap_or(""), "anomaly recorded");
        crate::metrics::emit(&crate::metrics::anomaly(&observation.path.to_string(), clock::now_ms()));
    }
    if transition.event.kind == EventKind::DisputeOpened {
        // Alarmed (`DisputesOpenedAlarm`): the merchant has days to answer a dispute.
        warn!(payment_id = %transition.payment.id, path = %observation.path,
              dispute = transition.event.reason.as_deref().unwrap_or(""), "dispute opened");
        crate::metrics::emit(&crate::metrics::dispute_opened(
            &observation.path.to_string(),
            clock::now_ms(),
        ));
    }
    if transition.event.kind == EventKind::RefundFailed {
        // Alarmed (`RefundsFailedAlarm`): the money is the merchant's again until recovery gives it back.
        warn!(payment_id = %transition.payment.id, path = %observation.path,
              refund = transition.event.reason.as_deref().unwrap_or(""), "refund failed");
        crate::metrics::emit(&crate::metrics::refund_failed(
            &observation.path.to_string(),
            clock::now_ms(),
        ));
    }
    FinalizeOutcome {
        result: FinalizeResult::Applied(transition.event.kind),
        payment: transition.payment,
        version_conflicts,
        lease_released,
        refused: transition.refused,
    }
}

/// Counts one more version conflict (`winner` is the item that beat `current`); past
/// [`MAX_VERSION_CONFLICTS`] the payment changes too often to finalize within one request.
fn count_version_conflict(current: &Payment, winner: &Payment, conflicts: u32) -> Result<u32, StoreError> {
    let conflicts = conflicts.saturating_add(1);
    debug!(
        expected = current.version,
        found = winner.version,
        "version conflict: deciding again"
    );
    if conflicts > MAX_VERSION_CONFLICTS {
        return Err(StoreError::ConflictsExhausted(current.id.to_string(), conflicts));
    }
    Ok(conflicts)
}

/// Reads a failed put. A failed condition returns the item as it is: another writer's (decide again on it),
/// or ours when the SDK retried a put whose answer was lost (the item is exactly the one we wrote: applied);
/// without an item, the payment was deleted since it was read: not found.
fn classify_failure<R>(err: SdkError<PutItemError, R>, t: &Transition) -> WriteFailure
where
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = match &err {
        SdkError::ServiceError(service) => match service.err() {
            PutItemError::ConditionalCheckFailedException(failed) => {
                return match failed.item().cloned().map(payment_from_item) {
                    Some(Ok(winner)) if winner == t.payment => WriteFailure::Ours,
                    Some(Ok(winner)) => WriteFailure::VersionConflict(Box::new(winner)),
                    Some(Err(e)) => WriteFailure::Failed(e),
                    None => WriteFailure::Failed(StoreError::NotFound(t.payment.id.to_string())),
                };
            }
            PutItemError::TransactionConflictException(_) => Some("TransactionConflict"),
            _ => None,
        },
        _ => None,
    };
    match code {
        Some(code) => WriteFailure::Transient(code.to_owned()),
        None => WriteFailure::Failed(StoreError::from_sdk("finalize write", err)),
    }
}
