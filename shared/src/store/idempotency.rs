//! Idempotent creation: the same `Idempotency-Key` with the same request answers the same payment.
//!
//! The key's record (`pk = IDEMPOTENCY#<key>`, `sk = IDEMPOTENCY`) is written in the same transaction as the
//! payment and its first event, so there is never a key without a payment or a payment created twice. A
//! losing concurrent request gets the record back in the cancellation reasons (ALL_OLD) and answers from it.
//! Records expire after [`KEY_RETENTION`]; an expired record counts as absent, as TTL deletes late.

use super::item::Item;
use super::transact::{transact_write, TransactError};
use super::{PaymentStore, StoreError};
use crate::clock;
use crate::{IdempotencyKey, NewPayment, Payment, PaymentId};
use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use std::time::Duration;

/// How long a key is remembered.
pub const KEY_RETENTION: Duration = Duration::from_secs(24 * 3600);
const MAX_CONFLICT_RETRIES: u32 = 5;

/// What an idempotent create did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// A new payment.
    New(Payment),
    /// The key was used before with the same request: its payment (as it is now).
    Replay(Payment),
    /// The key was used before with a different request.
    KeyReused,
}

fn request_failed(context: &'static str, e: impl Into<crate::store::Cause>) -> StoreError {
    StoreError::request(context, e)
}

impl PaymentStore {
    /// Creates `new` under `key`, unless the key was used already. `request_hash` identifies the request
    /// body (a hash of its canonical form), so a reused key with another body is told apart.
    pub async fn create_idempotent(
        &self,
        new: NewPayment,
        key: &IdempotencyKey,
        request_hash: &str,
    ) -> Result<Created, StoreError> {
        let mut conflicts: u32 = 0;
        loop {
            // Item 0 the key's record, then the payment (1), as `create` writes it.
            let mut items = vec![self.key_record(key, request_hash, &new.id, clock::now_ms())?];
            let (payment, writes) = self.create_writes(new.clone())?;
            items.extend(writes);
            let cancelled = match transact_write(&self.client, items, "create payment", false).await {
                Ok(()) => return Ok(Created::New(payment)),
                Err(TransactError::Cancelled(c)) => c,
                Err(e) => return Err(e.into_store_error("create payment")),
            };
            if cancelled.condition_failed(0) {
                return self.answer_reused_key(cancelled.item(0), request_hash).await;
            }
            if cancelled.condition_failed(1) {
                return Err(StoreError::AlreadyExists(payment.id.to_string()));
            }
            if cancelled.transient().is_none() {
                return Err(cancelled.into_store_error("create payment"));
            }
            // A transaction conflict: another request with the same key is committing right now.
            conflicts = conflicts.saturating_add(1);
            if conflicts > MAX_CONFLICT_RETRIES {
                return Err(StoreError::unavailable("create payment", cancelled));
            }
            tokio::time::sleep(clock::full_jitter(
                Duration::from_millis(10).saturating_mul(2u32.saturating_pow(conflicts)),
            ))
            .await;
        }
    }

    /// The key's record, naming the payment; written only if the key is absent or expired, and when it is
    /// not, the cancellation returns the record (ALL_OLD) so the request is answered from it.
    fn key_record(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        payment_id: &PaymentId,
        now: i64,
    ) -> Result<TransactWriteItem, StoreError> {
        let retention_ms = i64::try_from(KEY_RETENTION.as_millis()).unwrap_or(i64::MAX);
        let record = Put::builder()
            .table_name(&self.table)
            .set_item(Some(crate::keys::idempotency(key.as_str())))
            .item("request_hash", AttributeValue::S(request_hash.to_owned()))
            .item("payment_id", AttributeValue::S(payment_id.to_string()))
            .item(
                "expires_at",
                AttributeValue::N(clock::ceil_secs(now.saturating_add(retention_ms)).to_string()),
            )
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now")
            .expression_attribute_values(":now", AttributeValue::N((now / 1000).to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| request_failed("build idempotency record", e))?;
        Ok(TransactWriteItem::builder().put(record).build())
    }

    async fn answer_reused_key(&self, record: Option<&Item>, request_hash: &str) -> Result<Created, StoreError> {
        let record = record.ok_or_else(|| request_failed("read idempotency record", "no item returned"))?;
        let field = |name: &str| {
            record
                .get(name)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        if field("request_hash") != request_hash {
            return Ok(Created::KeyReused);
        }
        let id = PaymentId::parse(field("payment_id")).map_err(|e| StoreError::corrupt(field("pk"), e))?;
        let payment = self
            .get(&id)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        Ok(Created::Replay(payment))
    }
}
