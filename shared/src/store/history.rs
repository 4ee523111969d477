//! A payment's event history: the event items under its partition (`EVENT#<version>`) and the event its
//! item carries (the one that wrote its current version).
//!
//! A transition writes the payment alone (its stream record is the outbox); the relay archives each event
//! it reads from a payment's change record as a history item before it sends it, off the webhook's path (1
//! write unit per event, a `BatchWriteItem` of up to 25). Reading merges the two in one `Query` of the
//! payment's partition, so the newest event is there at once; a version is missing only while the relay is
//! two or more transitions of one payment behind. Items an older writer put in its transaction
//! (`entity = event`) read the same.

use super::item::{event_from_item, event_of_payment_item, history_to_item, Item, PAYMENT_SK};
use super::StoreError;
use crate::telemetry::ErrorChain;
use crate::PaymentEvent;
use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use aws_sdk_dynamodb::Client;
use std::time::Duration;
use tracing::warn;

/// DynamoDB's most requests in one `BatchWriteItem`.
const BATCH_WRITE: usize = 25;
/// How many times unprocessed items (throttled) are sent again before the caller is told.
const UNPROCESSED_RETRIES: u32 = 5;

/// The events in the items of one payment's partition, oldest first: its event items and the event its
/// payment item carries (`items` as a `Query` of the partition returns them).
pub fn events_of_partition(items: Vec<Item>) -> Result<Vec<PaymentEvent>, StoreError> {
    let mut events = Vec::new();
    let mut carried = None;
    for item in items {
        let is_payment = item
            .get("sk")
            .and_then(|v| v.as_s().ok())
            .is_some_and(|sk| sk == PAYMENT_SK);
        if is_payment {
            carried = event_of_payment_item(item)?;
        } else {
            events.push(event_from_item(item)?);
        }
    }
    if let Some(event) = carried {
        if !events.iter().any(|e| e.version == event.version) {
            events.push(event);
        }
    }
    events.sort_by_key(|e| e.version);
    Ok(events)
}

/// Archives `events` as history items. An item exists only once per version and every copy of it is the
/// same, so a put without a condition is idempotent (a retried batch writes the same bytes again).
/// `Err(k)`: `events[k]` is the first event (in the order given) that is not known to be archived.
pub async fn archive(client: &Client, table: &str, events: &[PaymentEvent]) -> Result<(), usize> {
    for (chunk_index, chunk) in events.chunks(BATCH_WRITE).enumerate() {
        let offset = chunk_index.saturating_mul(BATCH_WRITE);
        if let Err(k) = archive_chunk(client, table, chunk).await {
            return Err(offset.saturating_add(k));
        }
    }
    Ok(())
}

/// One `BatchWriteItem` of at most 25 events, its unprocessed items sent again a few times.
async fn archive_chunk(client: &Client, table: &str, events: &[PaymentEvent]) -> Result<(), usize> {
    let mut requests = Vec::with_capacity(events.len());
    for (i, event) in events.iter().enumerate() {
        let put = history_to_item(event).and_then(|item| {
            PutRequest::builder()
                .set_item(Some(item))
                .build()
                .map_err(|e| StoreError::request("build history put", e))
        });
        match put {
            Ok(put) => requests.push(WriteRequest::builder().put_request(put).build()),
            Err(e) => {
                warn!(error = %ErrorChain(&e), "history item not built");
                return Err(i);
            }
        }
    }
    let mut pending = requests;
    for attempt in 0..=UNPROCESSED_RETRIES {
        if attempt > 0 {
            tokio::time::sleep(crate::clock::full_jitter(
                Duration::from_millis(25).saturating_mul(1 << attempt),
            ))
            .await;
        }
        let result = client
            .batch_write_item()
            .request_items(table, pending.clone())
            .send()
            .await;
        match result {
            Ok(out) => {
                pending = out
                    .unprocessed_items()
                    .and_then(|u| u.get(table))
                    .cloned()
                    .unwrap_or_default();
                if pending.is_empty() {
                    return Ok(());
                }
            }
            Err(e) => {
                warn!(error = %ErrorChain(&StoreError::from_sdk("archive events", e)), "archiving failed");
                break;
            }
        }
    }
    Err(first_pending(events, &pending))
}

/// The first of `events` whose put is among `pending` (not yet written); when none can be told, the first.
fn first_pending(events: &[PaymentEvent], pending: &[WriteRequest]) -> usize {
    let key = |item: &Item, name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    let pending: Vec<(Option<String>, Option<String>)> = pending
        .iter()
        .filter_map(WriteRequest::put_request)
        .map(|p| (key(p.item(), "pk"), key(p.item(), "sk")))
        .collect();
    events
        .iter()
        .position(|e| {
            let wanted = (
                Some(crate::keys::payment_pk(&e.payment_id)),
                Some(crate::keys::event_sk(e.version)),
            );
            pending.contains(&wanted)
        })
        .unwrap_or(0)
}
