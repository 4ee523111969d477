//! The outbox relay: DynamoDB Streams -> SQS FIFO. Each payment change record that carries a transition
//! becomes one message (group = payment id, deduplication id = event id), sent with `SendMessageBatch` in
//! tens, after its event was archived in the payment's history (`BatchWriteItem`, off the webhook's path).
//! INSERTs of event items an older writer put in its transaction are sent as before (the migration: such
//! records stay in the stream 24 h). The mapping's filter passes only these two forms. The answer is a
//! partial batch failure, fail-fast: the first record that could not be archived or published and every
//! later record are reported, so the stream retries from there and the order per payment never breaks.
//!
//! An event that SQS would refuse (a character it does not take, over its size: only an item written around
//! the entry points' text rules can be one) never fails the batch, which would hold the shard for hours and
//! the payment's later events behind it: the relay sends it made sendable (its reason cleaned and cut,
//! [`shared::outbox::made_sendable`]), parks a notice naming the event in the relay-failures queue (alarmed
//! while not empty) and counts `UnsendableEvents`. The original stays in the table; `paymentsctl replay
//! payment <id>` publishes the payment's events again.
//!
//! Also here: replaying event items to the queue (by payment or time range) and redriving the DLQ, both
//! safe to repeat because consumers apply each event once. The operator runs them through `paymentsctl
//! replay` and `paymentsctl redrive-dlq` (`tools/paymentsctl`).
//!
//! Built once per cold start from its [`Settings`] ([`Publisher::build`]). The stream batch handling
//! ([`relay`]) is here; `publisher` builds entries and sends batches (its `parking`
//! handles what SQS would refuse), `replay` holds the operator's repairs.

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod publisher;
mod replay;

pub use publisher::Publisher;
pub use replay::{events_between, redrive_dlq, replay_payment, replay_range};

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use shared::lambda::{BuildError, Clients};
use shared::outbox::OutboxRecord;
use shared::store::open_index::OpenShards;
use shared::store::{Cause, StoreError};
use shared::telemetry::ErrorChain;
use shared::{outbox, ConfigError, Env, PaymentEvent, PaymentStore};
use std::convert::Infallible;
use thiserror::Error;
use tracing::{info, warn};

/// The function's name in its metrics (`payments-<stage>-outbox-relay` in the template).
pub const FUNCTION: &str = "outbox-relay";

/// SQS accepts at most ten entries per `SendMessageBatch`.
pub const BATCH: usize = 10;

/// Why relaying or replaying stopped; each keeps the error underneath as its `source()`.
#[derive(Debug, Error)]
pub enum RelayError {
    /// SQS refused the call or did not answer.
    #[error("SQS {context} failed")]
    Sqs {
        context: &'static str,
        #[source]
        source: Cause,
    },
    /// Publishing stopped at this event (in the order given); the ones before it were sent.
    #[error("publishing stopped at event {0}")]
    Stopped(usize),
    /// Reading the events from the table failed.
    #[error("reading the events failed")]
    Store(#[from] StoreError),
    /// A message could not be built (a bug of ours, not a state of SQS).
    #[error("building the message failed")]
    Build(#[source] Cause),
}

impl RelayError {
    fn sqs(context: &'static str, source: impl Into<Cause>) -> Self {
        RelayError::Sqs {
            context,
            source: source.into(),
        }
    }
}

/// Namespace of the relay's own metrics.
pub const METRICS_NAMESPACE: &str = "Payments/Relay";

/// The relay function's settings, read once per cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `TABLE_NAME` (required): where the events read from payment change records are archived (history).
    pub table: String,
    /// `QUEUE_URL` (required): the FIFO queue the events go to.
    pub queue_url: String,
    /// `RELAY_FAILURES_QUEUE_URL`: where notices of events SQS would refuse are parked (alarmed while not
    /// empty); unset, nothing is parked.
    pub parking_url: Option<String>,
}

impl Settings {
    /// Reads the settings from `env` (see the type); a missing one fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            table: env.required("TABLE_NAME")?,
            queue_url: env.required("QUEUE_URL")?,
            parking_url: env.optional("RELAY_FAILURES_QUEUE_URL"),
        })
    }
}

impl Publisher {
    /// The relay's publisher, built once per cold start from its settings on `clients`' SQS client, archiving
    /// to the table with its DynamoDB client.
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        let publisher = Publisher::new(clients.sqs, &settings.queue_url)
            // The relay writes history items only, never an open item: the index's shards do not matter here.
            .with_history(PaymentStore::new(
                clients.dynamodb,
                &settings.table,
                OpenShards::DEFAULT,
            ));
        Ok(match &settings.parking_url {
            Some(parking) => publisher.with_parking(parking),
            None => publisher,
        })
    }
}

/// The Lambda's handler ([`relay`]): a stream batch never fails the invocation, what could not be published
/// is in the answer (partial batch failure).
pub async fn handle(publisher: &Publisher, batch: StreamEvent) -> Result<DynamoDbEventResponse, Infallible> {
    Ok(relay(publisher, &batch).await)
}

/// Relays one stream batch. Records that are not outbox records are skipped (and never reported): the
/// mapping's filter keeps them out already.
pub async fn relay(publisher: &Publisher, batch: &StreamEvent) -> DynamoDbEventResponse {
    let (records, first_unreadable) = outbox_records(batch);
    let archived = archive(publisher, &records).await;
    let events: Vec<PaymentEvent> = records.iter().take(archived).map(|(_, r)| r.event().clone()).collect();
    let first_failed_position = match publisher.publish(&events).await {
        // Everything archived was sent: the first record not archived, else the first unreadable one.
        Ok(()) => records
            .get(archived)
            .map(|(position, _)| *position)
            .or(first_unreadable),
        // `k` is an index into `events`, one per outbox record; the first record is the safe fallback.
        Err(k) => Some(records.get(k).map_or(0, |(position, _)| *position)),
    };
    let mut response = DynamoDbEventResponse::default();
    if let Some(position) = first_failed_position {
        for record in batch.records.iter().skip(position) {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = record.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
        }
    }
    // Per version: a new version that fails every record raises no Errors, only this (its canary's alarm).
    shared::metrics::emit(&shared::metrics::failed_items(
        FUNCTION,
        u64::try_from(response.batch_item_failures.len()).unwrap_or(u64::MAX),
        shared::clock::now_ms(),
    ));
    info!(
        records = batch.records.len(),
        published = first_failed_position.map_or(events.len(), |p| records.iter().filter(|(q, _)| *q < p).count()),
        failed = response.batch_item_failures.len(),
        "relayed stream batch"
    );
    response
}

/// The outbox records of `batch` with their positions, up to the first that cannot be read (its position
/// second): a corrupt record stops the batch there (retried, bisected, then sent to the on-failure
/// destination), never skipped silently.
fn outbox_records(batch: &StreamEvent) -> (Vec<(usize, OutboxRecord)>, Option<usize>) {
    let mut records = Vec::new();
    for (position, record) in batch.records.iter().enumerate() {
        match outbox::outbox_record(&record.event_name, &record.change.new_image) {
            None => {}
            Some(Ok(r)) => records.push((position, r)),
            Some(Err(e)) => {
                warn!(error = %ErrorChain(&e), sequence = ?record.change.sequence_number, "unreadable outbox record");
                return (records, Some(position));
            }
        }
    }
    (records, None)
}

/// Archives the events of the payment change records among `records` in the history; answers how many
/// records from the start are archived or need no archive (an event item is history already). Without a
/// history (a publisher built without one), nothing is archived and every record passes.
async fn archive(publisher: &Publisher, records: &[(usize, OutboxRecord)]) -> usize {
    let Some(history) = publisher.history() else {
        return records.len();
    };
    // (index in `records`, event) of the records to archive.
    let transitions: Vec<(usize, PaymentEvent)> = records
        .iter()
        .enumerate()
        .filter_map(|(i, (_, r))| match r {
            OutboxRecord::Transition(e) => Some((i, e.clone())),
            OutboxRecord::EventItem(_) => None,
        })
        .collect();
    let events: Vec<PaymentEvent> = transitions.iter().map(|(_, e)| e.clone()).collect();
    match history.archive(&events).await {
        Ok(()) => records.len(),
        Err(k) => transitions.get(k).map_or(0, |(i, _)| *i),
    }
}
