//! The DynamoDB payment store: create, read, list events, and the one versioned write every path uses.
//!
//! The versioned write is one conditional `PutItem` of the payment under `version = :expected` (the new item
//! has `version = :expected + 1`), carrying the transition it records (`last_event`): the payment item is its
//! own outbox, its stream record the event (change-data-capture form, `docs/OUTBOX.md`), so no transaction and
//! no event item are on the hot path. A caller's lease is freed by the version moving. PSP event ids are
//! deduplicated on the payment item itself (`seen_psp_events`): the version condition already guarantees that
//! the id list we decided on is the current one, so dedup costs no extra item.

mod error;
mod finalize;
pub mod history;
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

use crate::keys::{self, payment_pk, Item};
use crate::{NewPayment, Payment, PaymentEvent, PaymentId};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use item::transition_to_item;

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
    /// The `open-items` index's shards an open payment is written under (`Config::open_shards`).
    shards: open_index::OpenShards,
}

impl PaymentStore {
    /// The store on `table`, writing open payments under one of `shards` (the deployment's `OPEN_ITEMS_SHARDS`:
    /// `Config::open_shards`; `OpenShards::DEFAULT` in tests).
    pub fn new(client: Client, table: impl Into<String>, shards: open_index::OpenShards) -> Self {
        Self {
            client,
            table: table.into(),
            shards,
        }
    }

    /// The `open-items` shards it writes under, which its scanners read.
    pub fn open_shards(&self) -> open_index::OpenShards {
        self.shards
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates the payment at version 1, carrying its `PaymentCreated` event: one conditional `PutItem`.
    pub async fn create(&self, new: NewPayment) -> Result<Payment, StoreError> {
        let (payment, event) = new.into_payment();
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(transition_to_item(&payment, &event, self.shards)?))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match StoreError::condition_held("create payment", result)? {
            true => Ok(payment),
            false => Err(StoreError::AlreadyExists(payment.id.to_string())),
        }
    }

    /// The write that creates the payment (only if it does not exist, carrying its `PaymentCreated` event),
    /// for a caller that commits it in its own transaction with an item of its own: the checkout saga saves
    /// the payment's id, `POST /payments` its idempotency record, atomically with the payment. That is why
    /// those two stay transactions; the event needs none.
    pub fn create_writes(&self, new: NewPayment) -> Result<(Payment, Vec<TransactWriteItem>), StoreError> {
        let (payment, event) = new.into_payment();
        let put_payment = Put::builder()
            .table_name(&self.table)
            .set_item(Some(transition_to_item(&payment, &event, self.shards)?))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| StoreError::request("build create", e))?;
        Ok((payment, vec![TransactWriteItem::builder().put(put_payment).build()]))
    }

    /// The current payment, from a strongly consistent read.
    pub async fn get(&self, id: &PaymentId) -> Result<Option<Payment>, StoreError> {
        read_item(&self.client, &self.table, keys::payment(id), "read payment")
            .await?
            .map(item::payment_from_item)
            .transpose()
    }

    /// The payment's events, oldest (version 1) first: one strongly consistent `Query` of its partition, the
    /// history items and the event the payment item carries ([`history`]).
    pub async fn events(&self, id: &PaymentId) -> Result<Vec<PaymentEvent>, StoreError> {
        let items = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(payment_pk(id)))
            .scan_index_forward(true)
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<Item>, _>>()
            .await
            .map_err(|e| StoreError::from_sdk("list events", e))?;
        history::events_of_partition(items)
    }

    /// Archives `events` as history items (the relay, for the events it read from payment change records);
    /// `Err(k)`: `events[k]` is the first not known to be archived.
    pub async fn archive(&self, events: &[PaymentEvent]) -> Result<(), usize> {
        history::archive(&self.client, &self.table, events).await
    }
}
