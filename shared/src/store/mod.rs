//! The DynamoDB payment store: create, read, list events, and the one versioned write every path uses.
//!
//! The versioned write is one `TransactWriteItems` with the payment put under `version = :expected` (the new
//! item has `version = :expected + 1`), the event item (audit log and outbox in one) and, when the caller holds
//! a lease, its release. PSP event ids are deduplicated on the payment item itself (`seen_psp_events`): the
//! version condition already guarantees that the id list we decided on is the current one, so dedup costs no
//! extra transactional item (a separate dedup item would add 2 write units to every webhook).

mod error;
mod finalize;
mod idempotency;
pub mod item;
pub mod open_index;
mod parked;
pub mod recheck;
pub mod transact;

pub use error::SdkFailure;
pub use error::{Cause, StoreError};
pub use finalize::{FinalizeOutcome, FinalizeResult, MAX_TRANSIENT_RETRIES, MAX_VERSION_CONFLICTS};
pub use idempotency::{Created, KEY_RETENTION};
pub use parked::{Parked, ParkedKind, PARKED_RETENTION, PSP_REFERENCE_INDEX};

use crate::keys::{self, payment_pk, Item, EVENT_SK_PREFIX};
use crate::{NewPayment, Payment, PaymentEvent, PaymentId};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use item::{event_to_item, payment_to_item};
use transact::{transact_write, TransactError};

/// One item by its key, from a strongly consistent read (every read that decides something is one).
pub async fn read_item(
    client: &Client,
    table: &str,
    key: Item,
    context: &'static str,
) -> Result<Option<Item>, StoreError> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| StoreError::from_sdk(context, e))?;
    Ok(out.item)
}

/// Reads and writes payments and their events in one table.
#[derive(Debug, Clone)]
pub struct PaymentStore {
    client: Client,
    table: String,
}

impl PaymentStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates the payment at version 1 together with its `PaymentCreated` event.
    pub async fn create(&self, new: NewPayment) -> Result<Payment, StoreError> {
        let (payment, items) = self.create_writes(new)?;
        match transact_write(&self.client, items, "create payment", false).await {
            Ok(()) => Ok(payment),
            Err(TransactError::Cancelled(c)) if c.condition_failed(0) => {
                Err(StoreError::AlreadyExists(payment.id.to_string()))
            }
            Err(e) => Err(e.into_store_error("create payment")),
        }
    }

    /// The writes that create the payment (the payment, only if it does not exist, and its `PaymentCreated`
    /// event), for a caller that commits them in its own transaction: the checkout saga saves the payment's
    /// id in the same transaction that creates it.
    pub fn create_writes(&self, new: NewPayment) -> Result<(Payment, Vec<TransactWriteItem>), StoreError> {
        let (payment, event) = new.into_payment();
        let put_payment = Put::builder()
            .table_name(&self.table)
            .set_item(Some(payment_to_item(&payment)?))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| StoreError::request("build create", e))?;
        let items = vec![
            TransactWriteItem::builder().put(put_payment).build(),
            self.event_put(&event)?,
        ];
        Ok((payment, items))
    }

    /// The current payment, from a strongly consistent read.
    pub async fn get(&self, id: &PaymentId) -> Result<Option<Payment>, StoreError> {
        read_item(&self.client, &self.table, keys::payment(id), "read payment")
            .await?
            .map(item::payment_from_item)
            .transpose()
    }

    /// The payment's events, oldest (version 1) first.
    pub async fn events(&self, id: &PaymentId) -> Result<Vec<PaymentEvent>, StoreError> {
        let pages = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", AttributeValue::S(payment_pk(id)))
            .expression_attribute_values(":prefix", AttributeValue::S(EVENT_SK_PREFIX.to_owned()))
            .scan_index_forward(true)
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<Item>, _>>()
            .await
            .map_err(|e| StoreError::from_sdk("list events", e))?;
        pages.into_iter().map(item::event_from_item).collect()
    }

    pub(crate) fn event_put(&self, event: &PaymentEvent) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(event_to_item(event)?))
            .condition_expression("attribute_not_exists(sk)")
            .build()
            .map_err(|e| StoreError::request("build event put", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}
