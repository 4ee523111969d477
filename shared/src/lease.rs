//! Leases: at most one live worker per payment in the webhook and recovery flows.
//!
//! A lease is its own item, `pk = LEASE#<payment id>`, with a random owner token, an expiry and the payment
//! version it was taken at (`at_version`, the version of the payment read just before). It is taken with one
//! conditional put that succeeds when the lease is free:
//!
//! - there is no lease item, or its expiry has passed (DynamoDB's TTL deletes late, up to 48 h), or
//! - its `at_version` is below the version of the payment the taker has just read: every write moves the
//!   payment's version forward, so the holder (or someone) has written since the lease was taken, and a
//!   holder's work ends with its write, or
//! - it carries our own owner token (see below).
//!
//! So a write releases its lease by moving the version; no delete rides in the finalize transaction (which
//! would cost two write units of its five). A holder that decides to write nothing deletes its lease
//! (conditioned on the owner), or it expires. A taker on an equal version waits: the holder may be at work.
//! A holder whose lease expired and was taken over, or was freed by another writer's write, cannot overwrite
//! a newer write: the payment's version token fences it.
//!
//! Taking is idempotent under lost answers: the put also succeeds over a lease with our own owner token, so
//! the SDK's retry of a put that committed but whose answer was lost (a 500, a reset) finds its own lease and
//! takes it, instead of blocking the payment until the lease expires. A request path holds its lease as a
//! [`HeldLease`], which releases it on every way out (an early return, an error, a cut at the deadline) unless
//! a write released it.

use crate::clock;
use crate::config::ConfigError;
use crate::store::StoreError;
use crate::telemetry::ErrorChain;
use crate::{Payment, PaymentId};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
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
    /// The version of the payment read before the lease was taken; a payment version above it frees it.
    pub at_version: u64,
}

/// When a lease may be taken (see the module doc): none, expired, ours (a retried put whose answer was lost),
/// or taken at a payment version below the one the taker read (its holder's work is written).
const FREE: &str = "attribute_not_exists(pk) OR expires_at_ms < :now OR #owner = :owner OR at_version < :version";

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

    /// Tries once to take the lease of `current`, the payment as just read. `Ok(None)` when another worker
    /// holds a live lease taken at this version or a later one.
    pub async fn acquire(&self, current: &Payment) -> Result<Option<Lease>, StoreError> {
        let now = clock::now_ms();
        let ttl_ms = i64::try_from(self.config.ttl.as_millis()).unwrap_or(i64::MAX);
        let lease = Lease {
            payment_id: current.id.clone(),
            owner: uuid::Uuid::new_v4().to_string(),
            expires_at_ms: now.saturating_add(ttl_ms),
            at_version: current.version,
        };
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(crate::keys::lease(&current.id)))
            .item("owner", AttributeValue::S(lease.owner.clone()))
            .item("expires_at_ms", AttributeValue::N(lease.expires_at_ms.to_string()))
            .item(
                "expires_at",
                AttributeValue::N(clock::ceil_secs(lease.expires_at_ms).to_string()),
            )
            .item("at_version", AttributeValue::N(lease.at_version.to_string()))
            .condition_expression(FREE)
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .expression_attribute_values(":owner", AttributeValue::S(lease.owner.clone()))
            .expression_attribute_values(":version", AttributeValue::N(current.version.to_string()))
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

    /// Releases `lease` if this worker still owns it. `Ok(false)`: someone else owns it now (ours expired).
    pub async fn release(&self, lease: &Lease) -> Result<bool, StoreError> {
        release(&self.client, &self.table, lease).await
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

/// A lease a request path holds. Whatever way the path ends, the lease is released: by a write
/// ([`HeldLease::released_by_write`], the payment's version moved past the lease's), by [`HeldLease::release`], or, on any other way out (an early return
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

    /// A write released the lease by moving the payment's version (`FinalizeOutcome::lease_released`):
    /// nothing left to do.
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
