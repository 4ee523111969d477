//! The operator's repairs: replaying event items to the queue (by payment or time range) and redriving the
//! DLQ, both safe to repeat because consumers apply each event once (`paymentsctl replay`, `redrive-dlq`).

use crate::{Publisher, RelayError};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use shared::store::item::{event_from_item, event_of_payment_item, ENTITY_EVENT, ENTITY_HISTORY};
use shared::store::StoreError;
use shared::{PaymentEvent, PaymentId, PaymentStore};

/// Republishes the event items of one payment, in version order.
pub async fn replay_payment(store: &PaymentStore, publisher: &Publisher, id: &PaymentId) -> Result<usize, RelayError> {
    let events = store.events(id).await?;
    publisher.publish(&events).await.map_err(RelayError::Stopped)?;
    Ok(events.len())
}

/// Republishes every event recorded in `[from_ms, to_ms)`, per payment in version order. This scans
/// the table (an operator's tool, not a hot path): the stream keeps records only 24 hours.
pub async fn replay_range(
    store: &PaymentStore,
    publisher: &Publisher,
    from_ms: i64,
    to_ms: i64,
) -> Result<usize, RelayError> {
    let events = events_between(store, from_ms, to_ms, |_| {}).await?;
    publisher.publish(&events).await.map_err(RelayError::Stopped)?;
    Ok(events.len())
}

/// Every event recorded in `[from_ms, to_ms)`, per payment in version order, by a Scan: the event items
/// (history) and the newest event each payment item carries (not archived yet, perhaps); `scanned` is told
/// how many items each page read (for an operator's progress bar).
pub async fn events_between(
    store: &PaymentStore,
    from_ms: i64,
    to_ms: i64,
    mut scanned: impl FnMut(u64),
) -> Result<Vec<PaymentEvent>, RelayError> {
    let mut pages = store
        .client()
        .scan()
        .table_name(store.table())
        .filter_expression(
            "(entity IN (:event, :history) AND recorded_at_ms BETWEEN :from AND :to) \
             OR (entity = :payment AND last_event.#at BETWEEN :from AND :to)",
        )
        .expression_attribute_names("#at", "at")
        .expression_attribute_values(":event", AttributeValue::S(ENTITY_EVENT.into()))
        .expression_attribute_values(":history", AttributeValue::S(ENTITY_HISTORY.into()))
        .expression_attribute_values(":payment", AttributeValue::S("payment".into()))
        .expression_attribute_values(":from", AttributeValue::N(from_ms.to_string()))
        .expression_attribute_values(":to", AttributeValue::N(to_ms.saturating_sub(1).to_string()))
        .into_paginator()
        .send();
    let mut events = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| StoreError::from_sdk("scan events", e))?;
        scanned(u64::try_from(page.scanned_count()).unwrap_or(0));
        for item in page.items() {
            let is_payment = item
                .get("entity")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|e| e == "payment");
            if is_payment {
                events.extend(event_of_payment_item(item.clone())?);
            } else {
                events.push(event_from_item(item.clone())?);
            }
        }
    }
    events.sort_by(|a, b| (a.payment_id.as_str(), a.version).cmp(&(b.payment_id.as_str(), b.version)));
    events.dedup_by(|a, b| a.payment_id == b.payment_id && a.version == b.version);
    Ok(events)
}

/// Moves every message from the DLQ back to the queue (same group, deduplication id and attributes), deleting
/// each from the DLQ only after it was sent. Returns how many moved.
pub async fn redrive_dlq(sqs: &aws_sdk_sqs::Client, dlq_url: &str, queue_url: &str) -> Result<usize, RelayError> {
    let mut moved = 0;
    loop {
        let out = sqs
            .receive_message()
            .queue_url(dlq_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| RelayError::sqs("receive from the DLQ", e))?;
        let messages = out.messages();
        if messages.is_empty() {
            return Ok(moved);
        }
        for m in messages {
            let system = m.attributes();
            let group = system
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            let dedup = system
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageDeduplicationId))
                .cloned();
            sqs.send_message()
                .queue_url(queue_url)
                .set_message_body(m.body().map(str::to_owned))
                .set_message_group_id(group)
                .set_message_deduplication_id(dedup)
                .set_message_attributes(m.message_attributes().cloned())
                .send()
                .await
                .map_err(|e| RelayError::sqs("send to the queue", e))?;
            sqs.delete_message()
                .queue_url(dlq_url)
                .set_receipt_handle(m.receipt_handle().map(str::to_owned))
                .send()
                .await
                .map_err(|e| RelayError::sqs("delete from the DLQ", e))?;
            moved = moved.saturating_add(1);
        }
    }
}
