//! Webhooks parked for an operator: validly signed but unusable (quarantined) or about a payment we do not
//! know after the wait window (unknown payment). Stored redacted, kept 30 days, one item per event, under
//! `pk = PARKED#<kind>` so an operator lists them with one Query.

use super::{PaymentStore, StoreError};
use crate::clock;
use crate::PaymentId;
use crate::PspReference;
use aws_sdk_dynamodb::types::AttributeValue;
use std::time::Duration;

pub const PARKED_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
pub const PSP_REFERENCE_INDEX: &str = "by-psp-reference";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkedKind {
    Quarantined,
    UnknownPayment,
    /// Accepted, not applicable yet (its payment's lease held, its payment not written yet, a refund before
    /// its capture): retried by the intake's own job until applied or its deadline, then quarantined (Adyen,
    /// whose one queue per endpoint a 503 would hold up).
    Retrying,
}

impl ParkedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ParkedKind::Quarantined => "quarantined",
            ParkedKind::UnknownPayment => "unknown_payment",
            ParkedKind::Retrying => "retrying",
        }
    }
}

/// One parked webhook, as an operator reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    pub provider: String,
    pub event_key: String,
    pub reason: String,
    pub body: String,
}

impl PaymentStore {
    /// Parks a redacted webhook body. Idempotent per (kind, provider, event key): the first body parked
    /// under a key stays (a conditional put), so neither a PSP's retry nor another body that came under the
    /// same key can overwrite what the operator is to read.
    pub async fn park(
        &self,
        kind: ParkedKind,
        provider: &str,
        event_key: &str,
        reason: &str,
        redacted_body: &str,
    ) -> Result<(), StoreError> {
        let now = clock::now_ms();
        let retention = i64::try_from(PARKED_RETENTION.as_millis()).unwrap_or(i64::MAX);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(crate::keys::parked(
                kind.as_str(),
                &crate::keys::parked_sk(provider, event_key),
            )))
            .item("provider", AttributeValue::S(provider.to_owned()))
            .item("event_key", AttributeValue::S(event_key.to_owned()))
            .item("reason", AttributeValue::S(reason.chars().take(500).collect()))
            .item("body", AttributeValue::S(redacted_body.to_owned()))
            .item("recorded_at_ms", AttributeValue::N(now.to_string()))
            .item(
                "expires_at",
                AttributeValue::N(clock::ceil_secs(now.saturating_add(retention)).to_string()),
            )
            // An item past its retention that TTL has not deleted yet (it deletes late) is no longer kept.
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now")
            .expression_attribute_values(":now", AttributeValue::N(clock::ceil_secs(now).to_string()))
            .send()
            .await;
        // A body already parked under the key stays: the first one is kept.
        StoreError::condition_held("park webhook", result).map(|_| ())
    }

    /// Removes a parked webhook (one retried and done with); removing one already gone is no error.
    pub async fn unpark(&self, kind: ParkedKind, provider: &str, event_key: &str) -> Result<(), StoreError> {
        let key = crate::keys::parked(kind.as_str(), &crate::keys::parked_sk(provider, event_key));
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("unpark webhook", e))?;
        Ok(())
    }

    /// The parked webhooks of one kind.
    pub async fn parked(&self, kind: ParkedKind) -> Result<Vec<Parked>, StoreError> {
        let items = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(crate::keys::parked_pk(kind.as_str())))
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .map_err(|e| StoreError::from_sdk("list parked webhooks", e))?;
        let text = |item: &super::item::Item, name: &str| {
            item.get(name).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default()
        };
        Ok(items
            .iter()
            .map(|i| Parked {
                provider: text(i, "provider"),
                event_key: text(i, "event_key"),
                reason: text(i, "reason"),
                body: text(i, "body"),
            })
            .collect())
    }

    /// The payment bound to a PSP reference, through the sparse `by-psp-reference` index (eventually
    /// consistent: a reference bound a moment ago may not be found yet, and the PSP retries).
    pub async fn find_by_psp_reference(&self, reference: &PspReference) -> Result<Option<PaymentId>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(PSP_REFERENCE_INDEX)
            .key_condition_expression("psp_reference = :r")
            .expression_attribute_values(":r", AttributeValue::S(reference.to_string()))
            .limit(1)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("find payment by PSP reference", e))?;
        let pk = out
            .items()
            .first()
            .and_then(|i| i.get("pk"))
            .and_then(|v| v.as_s().ok());
        pk.and_then(|pk| pk.strip_prefix(crate::keys::PAYMENT_PK_PREFIX))
            .map(PaymentId::parse)
            .transpose()
            .map_err(|e| StoreError::corrupt(reference.to_string(), e))
    }
}
