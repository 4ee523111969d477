//! The saga engine's storage: a saga's state and its event log in the payments table, written together under
//! the saga's version token, plus escalation of what retries could not fix.
//!
//! Layout:
//! - state: `pk = SAGA#<order id>`, `sk = SAGA`, the [`SagaRecord`] fields, and the sparse `open-items`
//!   index key while the saga is open (the sweeper finds stuck sagas through it);
//! - log: `pk = SAGA#<order id>`, `sk = EVENT#<version, 10 digits>`, `entity = saga_event` (the outbox relay
//!   publishes only `entity = event` items, so the saga log stays local).
//!
//! [`SagaStore::save`] is one `TransactWriteItems`: the state put under `version = :previous`, the event put
//! under `attribute_not_exists`, and the step's own writes (a stock decrement, an order update) with their
//! conditions. So each step is one local transaction that appends its event, and a step retried after a lost
//! answer finds the version moved instead of running twice.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use shared::clock;
use shared::store::item::Item;
use shared::store::open_index::{shard_of, OpenKind, OpenShards};
use shared::store::transact::{transact_write, TransactError};
use shared::store::{read_item, StoreError};
use shared::OrderId;

use serde_json::json;
use thiserror::Error;

pub use payments_core::saga::*;

#[derive(Debug, Error)]
pub enum SagaStoreError {
    /// Another worker moved the saga first: reload and continue from its state.
    #[error("saga {0} moved under us")]
    Conflict(String),
    /// The step's own write `index` failed its condition (e.g. not enough stock): the step failed.
    #[error("the step's write {0} failed its condition")]
    StepCondition(usize),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("stored saga unusable: {0}")]
    Inconsistent(#[from] payments_core::saga::InconsistentSaga),
}

impl SagaStoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, SagaStoreError::Store(e) if e.is_transient())
    }
}

pub use shared::keys::{saga as saga_key, saga_pk};

fn record_to_item(r: &SagaRecord, shards: OpenShards) -> Result<Item, StoreError> {
    let pk = saga_pk(&r.order_id);
    let mut item: Item = serde_dynamo::to_item(r).map_err(|e| StoreError::request("encode saga item", e))?;
    item.insert("pk".into(), AttributeValue::S(pk));
    item.insert("sk".into(), AttributeValue::S(shared::keys::SAGA_SK.into()));
    item.insert("entity".into(), AttributeValue::S("saga".into()));
    if !r.status.is_terminal() {
        item.insert(
            "open_shard".into(),
            AttributeValue::S(shard_of(OpenKind::Saga, r.order_id.as_str(), shards)),
        );
        item.insert("opened_at_ms".into(), AttributeValue::N(index_time(r).to_string()));
    }
    Ok(item)
}

/// The saga's sort key in the open-items index: its start, so the sweeper looks at it on the normal schedule;
/// for a saga set aside after its escalation, its first look ([`set_aside_due`]), so a saga the sweeper could
/// not help stops sitting first in its shard.
fn index_time(r: &SagaRecord) -> i64 {
    match &r.set_aside {
        Some(aside) => set_aside_due(aside.at_ms, aside.at_ms),
        None => r.started_at_ms,
    }
}

fn event_to_item(e: &SagaEvent) -> Result<Item, StoreError> {
    let pk = saga_pk(&e.order_id);
    let mut item: Item = serde_dynamo::to_item(e).map_err(|err| StoreError::request("encode saga event item", err))?;
    item.insert("pk".into(), AttributeValue::S(pk));
    item.insert("sk".into(), AttributeValue::S(shared::keys::event_sk(e.version)));
    item.insert("entity".into(), AttributeValue::S("saga_event".into()));
    Ok(item)
}

/// Reads a saga's state item: decoded, then checked and typed ([`Loaded::from_record`]).
pub fn saga_from_item(item: Item) -> Result<Loaded, SagaStoreError> {
    let key = item_pk(&item);
    let record: SagaRecord = serde_dynamo::from_item(item).map_err(|e| StoreError::corrupt(&key, e))?;
    Ok(Loaded::from_record(record)?)
}

/// Reads an entry of a saga's log.
pub fn saga_event_from_item(item: Item) -> Result<SagaEvent, StoreError> {
    let key = item_pk(&item);
    serde_dynamo::from_item(item).map_err(|e| StoreError::corrupt(&key, e))
}

fn item_pk(item: &Item) -> String {
    item.get("pk").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default()
}

/// Reads and writes sagas.
#[derive(Debug, Clone)]
pub struct SagaStore {
    client: Client,
    table: String,
    /// The `open-items` shards an open saga is written under and the sweeper reads (`Config::open_shards`).
    shards: OpenShards,
}

impl SagaStore {
    /// The store on `table`, open sagas under one of `shards` (`Config::open_shards`).
    pub fn new(client: Client, table: impl Into<String>, shards: OpenShards) -> Self {
        Self {
            client,
            table: table.into(),
            shards,
        }
    }

    /// The `open-items` shards it writes under, which the sweeper reads.
    pub fn open_shards(&self) -> OpenShards {
        self.shards
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// The stored saga, checked and typed (consistent read).
    pub async fn load(&self, id: &OrderId) -> Result<Option<Loaded>, SagaStoreError> {
        let Some(item) = read_item(&self.client, &self.table, saga_key(id), "read saga").await? else {
            return Ok(None);
        };
        saga_from_item(item).map(Some)
    }

    /// Writes `saga` (just moved by a transition) and `event`, plus the step's own `writes`, in one
    /// transaction conditioned on the stored version being the one before.
    pub async fn save<S>(
        &self,
        saga: &Saga<S>,
        event: &SagaEvent,
        writes: Vec<TransactWriteItem>,
    ) -> Result<(), SagaStoreError> {
        self.save_record(saga.record(), event, writes).await
    }

    /// [`SagaStore::save`] for a saga of any state (a transition that keeps the state, as [`Loaded::set_aside`]).
    pub async fn save_loaded(&self, saga: &Loaded, event: &SagaEvent) -> Result<(), SagaStoreError> {
        self.save_record(saga.record(), event, Vec::new()).await
    }

    async fn save_record(
        &self,
        record: &SagaRecord,
        event: &SagaEvent,
        writes: Vec<TransactWriteItem>,
    ) -> Result<(), SagaStoreError> {
        let state = Put::builder()
            .table_name(&self.table)
            .set_item(Some(record_to_item(record, self.shards)?))
            .condition_expression(if record.version == 1 {
                "attribute_not_exists(pk)"
            } else {
                "version = :previous"
            })
            .set_expression_attribute_values((record.version > 1).then(|| {
                [(
                    ":previous".to_owned(),
                    AttributeValue::N(record.version.saturating_sub(1).to_string()),
                )]
                .into()
            }))
            .build()
            .map_err(|e| StoreError::request("build saga put", e))?;
        let log = Put::builder()
            .table_name(&self.table)
            .set_item(Some(event_to_item(event)?))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| StoreError::request("build saga event put", e))?;
        let mut items = vec![
            TransactWriteItem::builder().put(state).build(),
            TransactWriteItem::builder().put(log).build(),
        ];
        items.extend(writes);
        match transact_write(&self.client, items, "save saga", true).await {
            Ok(()) => Ok(()),
            // Item 0 is the saga's state, 1 its log entry, 2.. the step's own writes.
            Err(TransactError::Cancelled(c)) => Err(match c.first_failed_from(0) {
                Some(0 | 1) => SagaStoreError::Conflict(record.order_id.to_string()),
                Some(step) => SagaStoreError::StepCondition(step.saturating_sub(2)),
                None => c.into_store_error("save saga").into(),
            }),
            Err(e) => Err(e.into_store_error("save saga").into()),
        }
    }

    /// The saga's log in version order.
    pub async fn events(&self, id: &OrderId) -> Result<Vec<SagaEvent>, StoreError> {
        let mut events = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :e)")
                .expression_attribute_values(":pk", AttributeValue::S(saga_pk(id)))
                .expression_attribute_values(":e", AttributeValue::S(shared::keys::EVENT_SK_PREFIX.into()))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("read saga events", e))?;
            for item in out.items() {
                events.push(saga_event_from_item(item.clone())?);
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(events);
            }
        }
    }
}

/// Sends what retries could not fix to the escalation queue (a DLQ with an alarm on its depth): a person
/// looks at it, and redriving the message resumes the saga. Never dropped: if even this send fails, the
/// caller fails the invocation so the trigger (or the sweeper) brings the saga back.
#[derive(Debug, Clone)]
pub struct Escalation {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl Escalation {
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
        }
    }

    /// Sends the saga to the escalation queue (alarmed) with what kept failing.
    pub async fn escalate(
        &self,
        order_id: &OrderId,
        action: &str,
        attempts: u32,
        error: &str,
    ) -> Result<(), EscalationError> {
        let body = json!({ "order_id": order_id.as_str(), "action": action, "attempts": attempts,
                           "error": error, "escalated_at_ms": clock::now_ms() });
        self.sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body.to_string())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| EscalationError(e.into()))
    }
}

/// The escalation queue did not take the message; the SQS error is the source.
#[derive(Debug, Error)]
#[error("sending to the escalation queue failed")]
pub struct EscalationError(#[source] pub shared::store::Cause);
