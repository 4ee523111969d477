//! Leases: at most one live worker per payment in the webhook and recovery flows.
//!
//! A lease is its own item, `pk = LEASE#<payment id>`, with a random owner token and an expiry. It is acquired
//! with a conditional put that succeeds only if no live lease exists; an expired lease counts as free because
//! DynamoDB's TTL deletes late (up to 48 h). It is released by a delete conditioned on the owner, inside the
//! finalize transaction when there is a write anyway. A holder whose lease expired and was taken over cannot
//! overwrite a newer write: the payment's version token fences it.
//!
//! Acquiring is idempotent under lost answers: the put also succeeds over a lease with our own owner token, so
//! the SDK's retry of a put that committed but whose answer was lost (a 500, a reset) finds its own lease and
//! takes it, instead of blocking the payment until the lease expires. A request path holds its lease as a
//! [`HeldLease`], which releases it on every way out (an early return, an error, a cut at the deadline) unless
//! a write released it in its transaction.

use crate::clock;
use crate::config::ConfigError;
use crate::store::StoreError;
use crate::telemetry::ErrorChain;
use crate::PaymentId;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use std::time::Duration;

/// The lease time-to-live, checked against the function timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    ttl: Duration,
}

impl LeaseConfig {
    /// Refuses a TTL that is not longer than `function_timeout`: the lease must outlive any holder.
    pub fn new(ttl: Duration, function_timeout: Duration) -> Result<Self, ConfigError> {
        if ttl <= function_timeout {
            return Err(ConfigError::LeaseShorterThanTimeout {
                ttl,
                timeout: function_timeout,
            });
        }
        Ok(Self { ttl })
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// A lease this worker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub payment_id: PaymentId,
    pub owner: String,
    pub expires_at_ms: i64,
}

/// Acquires and releases leases in the payments table.
#[derive(Debug, Clone)]
pub struct Leases {
    client: Client,
    table: String,
    config: LeaseConfig,
}

impl Leases {
    pub fn new(client: Client, table: impl Into<String>, config: LeaseConfig) -> Self {
        Self {
            client,
            table: table.into(),
            config,
        }
    }

    /// Tries once. `Ok(None)` when another worker holds a live lease.
    pub async fn acquire(&self, id: &PaymentId) -> Result<Option<Lease>, StoreError> {
        let now = clock::now_ms();
        let ttl_ms = i64::try_from(self.config.ttl.as_millis()).unwrap_or(i64::MAX);
        let lease = Lease {
            payment_id: id.clone(),
            owner: uuid::Uuid::new_v4().to_string(),
            expires_at_ms: now.saturating_add(ttl_ms),
        };
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(crate::keys::lease(id)))
            .item("owner", AttributeValue::S(lease.owner.clone()))
            .item("expires_at_ms", AttributeValue::N(lease.expires_at_ms.to_string()))
            .item(
                "expires_at",
                AttributeValue::N(clock::ceil_secs(lease.expires_at_ms).to_string()),
            )
            .condition_expression("attribute_not_exists(pk) OR expires_at_ms < :now OR #owner = :owner")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .expression_attribute_values(":owner", AttributeValue::S(lease.owner.clone()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(Some(lease)),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(None)
            }
            Err(e) => Err(StoreError::from_sdk("acquire lease", e)),
        }
    }

    /// Tries up to `attempts` times, waiting a random time up to `max_wait` between tries (bounded, jittered).
    pub async fn acquire_waiting(
        &self,
        id: &PaymentId,
        attempts: u32,
        max_wait: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        for attempt in 1..=attempts.max(1) {
            if let Some(lease) = self.acquire(id).await? {
                return Ok(Some(lease));
            }
            if attempt < attempts {
                tokio::time::sleep(clock::full_jitter(max_wait)).await;
            }
        }
        Ok(None)
    }

    /// Releases `lease` if this worker still owns it. `Ok(false)`: someone else owns it now (ours expired).
    pub async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        release(&self.client, &self.table, lease).await
    }

    /// The release as one item of a `TransactWriteItems`, saving a call when there is a write anyway.
    pub(crate) fn release_in_transaction(table: &str, lease: &Lease) -> Result<TransactWriteItem, StoreError> {
        let delete = Delete::builder()
            .table_name(table)
            .set_key(Some(crate::keys::lease(&lease.payment_id)))
            .condition_expression("#owner = :owner")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":owner", AttributeValue::S(lease.owner.clone()))
            .build()
            .map_err(|e| StoreError::request("build lease release", e))?;
        Ok(TransactWriteItem::builder().delete(delete).build())
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Holds `lease` for a request path: see [`HeldLease`].
    pub fn hold(&self, lease: Lease) -> HeldLease {
        HeldLease {
            lease,
            leases: self.clone(),
            armed: true,
        }
    }
}

/// A lease a request path holds. Whatever way the path ends, the lease is released: by a write's transaction
/// ([`HeldLease::released_by_write`]), by [`HeldLease::release`], or, on any other way out (an early return
/// with `?`, a panic unwinding, a future cut at its deadline), by a release started when it is dropped (best
/// effort: if it cannot run, the lease expires by itself).
#[must_use = "a held lease is released when dropped"]
#[derive(Debug)]
pub struct HeldLease {
    lease: Lease,
    leases: Leases,
    armed: bool,
}

impl HeldLease {
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// A write released the lease in its transaction (`FinalizeOutcome::lease_released`): nothing left to do.
    pub fn released_by_write(mut self) {
        self.armed = false;
    }

    /// Releases the lease now. `Ok(false)`: it was no longer ours.
    pub async fn release(mut self) -> Result<bool, StoreError> {
        self.armed = false;
        self.leases.release(&self.lease).await
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (leases, lease) = (self.leases.clone(), self.lease.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = leases.release(&lease).await {
                        tracing::warn!(payment_id = %lease.payment_id, error = %ErrorChain(&e), "lease release failed; it will expire");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(payment_id = %self.lease.payment_id, "no runtime to release the lease; it will expire")
            }
        }
    }
}

/// The conditional delete behind [`Leases::release`], also used by the store after a decision that writes
/// nothing.
pub(crate) async fn release(client: &Client, table: &str, lease: &Lease) -> Result<bool, StoreError> {
    let result = client
        .delete_item()
        .table_name(table)
        .set_key(Some(crate::keys::lease(&lease.payment_id)))
        .condition_expression("#owner = :owner")
        .expression_attribute_names("#owner", "owner")
        .expression_attribute_values(":owner", AttributeValue::S(lease.owner.clone()))
        .send()
        .await;
    match result {
        Ok(_) => Ok(true),
        Err(SdkError::ServiceError(e)) if matches!(e.err(), DeleteItemError::ConditionalCheckFailedException(_)) => {
            Ok(false)
        }
        Err(e) => Err(StoreError::from_sdk("release lease", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_must_exceed_the_function_timeout() {
        assert!(LeaseConfig::new(Duration::from_secs(30), Duration::from_secs(10)).is_ok());
        assert!(LeaseConfig::new(Duration::from_secs(10), Duration::from_secs(10)).is_err());
        assert!(LeaseConfig::new(Duration::from_secs(5), Duration::from_secs(10)).is_err());
    }
}
