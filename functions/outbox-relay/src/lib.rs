//! The outbox relay: DynamoDB Streams -> SQS FIFO. Each INSERT of an event item becomes one message
//! (group = payment id, deduplication id = event id), sent with `SendMessageBatch` in tens. The answer is a
//! partial batch failure, fail-fast: the first record that could not be published and every later record
//! are reported, so the stream retries from there and the order per payment never breaks.
//!
//! An event that SQS would refuse (a character it does not take, over its size: only an item written around
//! the entry points' text rules can be one) never fails the batch, which would hold the shard for hours and
//! the payment's later events behind it: the relay sends it made sendable (its reason cleaned and cut,
//! [`shared::outbox::made_sendable`]), parks a notice naming the event in the relay-failures queue (alarmed
//! while not empty) and counts `UnsendableEvents`. The original stays in the table; `paymentsctl replay
//! --payment <id>` publishes the payment's events again.
//!
//! Also here: replaying event items to the queue (by payment or time range) and redriving the DLQ, both
//! safe to repeat because consumers apply each event once. The operator runs them through `paymentsctl
//! replay` and `paymentsctl redrive-dlq` (`tools/paymentsctl`).
// Tests may count and index freely (the workspace lints keep them out of the request paths).
#![cfg_attr(
    test,
    allow(
        clippy::arithmetic_side_effects,
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeName, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    SendMessageBatchRequestEntry,
};
use serde_json::json;
use shared::store::item::event_from_item;
use shared::store::{Cause, StoreError};
use shared::telemetry::ErrorChain;
use shared::{metrics, outbox, telemetry, PaymentEvent, PaymentId, PaymentStore};
use thiserror::Error;
use tracing::Span;
use tracing::{error, info, warn};

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

/// Publishes events to the FIFO queue.
#[derive(Debug, Clone)]
pub struct Publisher {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    /// Where notices of events that had to be made sendable go (`RELAY_FAILURES_QUEUE_URL`).
    parking_url: Option<String>,
}

/// Namespace of the relay's own metrics.
pub const METRICS_NAMESPACE: &str = "Payments/Relay";

fn attribute(value: &str) -> Result<MessageAttributeValue, RelayError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| RelayError::Build(e.into()))
}

impl Publisher {
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
            parking_url: None,
        }
    }

    /// Parks notices of unsendable events in `url` (the relay-failures queue).
    #[must_use]
    pub fn with_parking(mut self, url: impl Into<String>) -> Self {
        self.parking_url = Some(url.into());
        self
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// `events` as they can be sent: each that SQS would refuse is made sendable, counted and parked (see the
    /// module doc). Never fails: a notice that cannot be parked is logged, and the event is sent anyway.
    async fn sendable(&self, events: &[PaymentEvent]) -> Vec<PaymentEvent> {
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            match outbox::check_sendable(event) {
                Ok(()) => out.push(event.clone()),
                Err(problem) => {
                    self.park(event, problem).await;
                    out.push(outbox::made_sendable(event));
                }
            }
        }
        out
    }

    async fn park(&self, event: &PaymentEvent, problem: outbox::Unsendable) {
        let event_id = event.event_id();
        error!(event_id, payment_id = %event.payment_id, problem = problem.as_str(),
               "event SQS would refuse: sent made sendable, parked for an operator");
        metrics::emit(&metrics::counts(
            METRICS_NAMESPACE,
            &[&[]],
            &["UnsendableEvents"],
            json!({ "UnsendableEvents": 1, "event_id": event_id, "problem": problem.as_str() }),
            shared::clock::now_ms(),
        ));
        let Some(url) = &self.parking_url else {
            return;
        };
        let notice = json!({
            "kind": "unsendable_event",
            "event_id": event_id,
            "payment_id": event.payment_id.as_str(),
            "version": event.version,
            "problem": problem.as_str(),
            "sent": "made_sendable",
            "parked_at_ms": shared::clock::now_ms(),
        });
        if let Err(e) = self
            .sqs
            .send_message()
            .queue_url(url)
            .message_body(notice.to_string())
            .send()
            .await
        {
            error!(event_id, error = %ErrorChain(&e), "the unsendable event's notice could not be parked");
        }
    }

    /// The SQS entry of `event`, published under `span` (its `publish` step): the message carries that
    /// span's context as the `traceparent` attribute and as the `AWSTraceHeader` system attribute (which
    /// X-Ray and Lambda's SQS event source read), so the consumer continues the webhook's trace.
    pub fn entry(index: usize, event: &PaymentEvent, span: &Span) -> Result<SendMessageBatchRequestEntry, RelayError> {
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(outbox::message_body(event))
            .message_group_id(outbox::group_id(event))
            .message_deduplication_id(outbox::deduplication_id(event))
            .message_attributes(outbox::ATTR_CORRELATION_ID, attribute(event.correlation_id.as_str())?)
            .message_attributes(outbox::ATTR_EVENT_TYPE, attribute(event.kind.as_str())?);
        if let Some(trace) = telemetry::traceparent_of(span).or_else(|| event.trace_context.clone()) {
            entry = entry.message_attributes(outbox::ATTR_TRACE_CONTEXT, attribute(&trace)?);
        }
        if let Some(header) = telemetry::xray_header_of(span) {
            let value = MessageSystemAttributeValue::builder()
                .data_type("String")
                .string_value(header)
                .build()
                .map_err(|e| RelayError::Build(e.into()))?;
            entry = entry.message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, value);
        }
        entry.build().map_err(|e| RelayError::Build(e.into()))
    }

    /// Sends `events`, keeping their order per payment. `Err(k)`: `k` is the first event (in input order)
    /// not confirmed; nothing of a payment is sent after one of its events failed.
    ///
    /// A batch holds at most ten entries and **at most one per payment**: if one entry of a batch fails
    /// while the others succeed, no later event of that payment may already sit in the queue ahead of it,
    /// or the consumer would hold the later event back at the head of its FIFO group with its predecessor
    /// stuck behind it. Events of different payments are interleaved to keep batches full.
    pub async fn publish(&self, events: &[PaymentEvent]) -> Result<(), usize> {
        let events = &self.sendable(events).await;
        let mut lanes = Lanes::new(events);
        loop {
            let batch = lanes.next_batch();
            if batch.is_empty() {
                return Ok(());
            }
            // One `publish` span per event, in the trace its event item carries; each ends with the send.
            let spans: Vec<Span> = batch
                .iter()
                .map(|&e| {
                    let parent = events.get(e).and_then(|ev| ev.trace_context.as_deref());
                    telemetry::step_span_with_parent("publish", parent)
                })
                .collect();
            let entries: Result<Vec<_>, _> = batch
                .iter()
                .enumerate()
                .zip(&spans)
                .map(|((i, &e), span)| {
                    let event = events
                        .get(e)
                        .ok_or_else(|| RelayError::Build(format!("no event at {e}").into()))?;
                    Self::entry(i, event, span)
                })
                .collect();
            let entries = match entries {
                Ok(entries) => entries,
                Err(e) => {
                    warn!(error = %ErrorChain(&e), "building SQS entries failed");
                    return Err(lanes.first_unconfirmed());
                }
            };
            let failed_positions: Vec<usize> = match self
                .sqs
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => {
                    for f in out.failed() {
                        warn!(
                            id = f.id(),
                            code = f.code(),
                            sender_fault = f.sender_fault(),
                            "SQS entry failed"
                        );
                    }
                    out.failed().iter().filter_map(|f| f.id().parse().ok()).collect()
                }
                Err(e) => {
                    warn!(error = %ErrorChain(&e), "SendMessageBatch failed");
                    (0..batch.len()).collect()
                }
            };
            for (position, &event) in batch.iter().enumerate() {
                if !failed_positions.contains(&position) {
                    lanes.confirm(event);
                }
            }
            if !failed_positions.is_empty() {
                return Err(lanes.first_unconfirmed());
            }
        }
    }
}

/// Events split by payment, each payment's in order: the next batch takes the oldest unsent event of up to
/// ten payments.
struct Lanes {
    lanes: Vec<std::collections::VecDeque<usize>>,
    confirmed: Vec<bool>,
}

impl Lanes {
    fn new(events: &[PaymentEvent]) -> Self {
        let mut order: Vec<&PaymentId> = Vec::new();
        let mut lanes: Vec<std::collections::VecDeque<usize>> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            match order.iter().position(|p| **p == e.payment_id) {
                Some(lane) => {
                    if let Some(lane) = lanes.get_mut(lane) {
                        lane.push_back(i);
                    }
                }
                None => {
                    order.push(&e.payment_id);
                    lanes.push([i].into());
                }
            }
        }
        Self {
            lanes,
            confirmed: vec![false; events.len()],
        }
    }

    fn next_batch(&self) -> Vec<usize> {
        self.lanes
            .iter()
            .filter_map(|lane| lane.front().copied())
            .take(BATCH)
            .collect()
    }

    fn confirm(&mut self, event: usize) {
        if let Some(confirmed) = self.confirmed.get_mut(event) {
            *confirmed = true;
        }
        for lane in &mut self.lanes {
            if lane.front() == Some(&event) {
                lane.pop_front();
            }
        }
    }

    fn first_unconfirmed(&self) -> usize {
        self.confirmed.iter().position(|c| !c).unwrap_or(self.confirmed.len())
    }
}

/// Relays one stream batch. Records that are not outbox inserts are skipped (and never reported).
pub async fn relay(publisher: &Publisher, batch: &StreamEvent) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    // (position in the batch, event) of every outbox record.
    let mut outbox_records: Vec<(usize, PaymentEvent)> = Vec::new();
    let mut first_unreadable: Option<usize> = None;
    for (position, record) in batch.records.iter().enumerate() {
        if !outbox::is_outbox_insert(&record.event_name, &record.change.new_image) {
            continue;
        }
        match event_from_item(record.change.new_image.clone()) {
            Ok(event) => outbox_records.push((position, event)),
            Err(e) => {
                // A corrupt event item stops the batch here: retried, bisected, then sent to the on-failure
                // destination, never skipped silently.
                warn!(error = %ErrorChain(&e), sequence = ?record.change.sequence_number, "unreadable event item");
                first_unreadable = Some(position);
                break;
            }
        }
    }
    let events: Vec<PaymentEvent> = outbox_records.iter().map(|(_, e)| e.clone()).collect();
    let first_failed_position = match publisher.publish(&events).await {
        Ok(()) => first_unreadable,
        // `k` is an index into `events`, one per outbox record; the first record is the safe fallback.
        Err(k) => Some(outbox_records.get(k).map_or(0, |(position, _)| *position)),
    };
    if let Some(position) = first_failed_position {
        for record in batch.records.iter().skip(position) {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = record.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
        }
    }
    info!(
        records = batch.records.len(),
        published =
            first_failed_position.map_or(events.len(), |p| outbox_records.iter().filter(|(q, _)| *q < p).count()),
        failed = response.batch_item_failures.len(),
        "relayed stream batch"
    );
    response
}

/// Republishes the event items of one payment, in version order.
pub async fn replay_payment(store: &PaymentStore, publisher: &Publisher, id: &PaymentId) -> Result<usize, RelayError> {
    let events = store.events(id).await?;
    publisher.publish(&events).await.map_err(RelayError::Stopped)?;
    Ok(events.len())
}

/// Republishes every event item recorded in `[from_ms, to_ms)`, per payment in version order. This scans
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

/// Every event item recorded in `[from_ms, to_ms)`, per payment in version order, by a Scan; `scanned` is
/// told how many items each page read (for an operator's progress bar).
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
        .filter_expression("entity = :event AND recorded_at_ms BETWEEN :from AND :to")
        .expression_attribute_values(":event", AttributeValue::S("event".into()))
        .expression_attribute_values(":from", AttributeValue::N(from_ms.to_string()))
        .expression_attribute_values(":to", AttributeValue::N(to_ms.saturating_sub(1).to_string()))
        .into_paginator()
        .send();
    let mut events = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| StoreError::from_sdk("scan events", e))?;
        scanned(u64::try_from(page.scanned_count()).unwrap_or(0));
        for item in page.items() {
            events.push(event_from_item(item.clone())?);
        }
    }
    events.sort_by(|a, b| (a.payment_id.as_str(), a.version).cmp(&(b.payment_id.as_str(), b.version)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{CorrelationId, EventKind, Money, OrderId, Path, PaymentStatus};

    /// The message carries the `publish` span's context, in the event item's trace, both as `traceparent`
    /// and as SQS's `AWSTraceHeader`, so the consumer's `consume` span continues the webhook's trace.
    #[test]
    fn an_entry_hands_the_event_items_trace_on_to_sqs() {
        use tracing_subscriber::layer::SubscriberExt;
        const TRACE: &str = "5759e988bd862e3fe1be46a994272793";
        let provider = telemetry::tracer_provider();
        let subscriber = tracing_subscriber::registry().with(telemetry::otel_layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let mut e = event("pay_1", 3);
            e.trace_context = Some(format!("00-{TRACE}-53995c3f42cd8ad8-01"));
            let span = telemetry::step_span_with_parent("publish", e.trace_context.as_deref());
            let entry = Publisher::entry(0, &e, &span).unwrap();
            let header = entry.message_system_attributes().unwrap()
                [&MessageSystemAttributeNameForSends::AwsTraceHeader]
                .string_value()
                .unwrap()
                .to_owned();
            assert!(
                header.starts_with("Root=1-5759e988-bd862e3fe1be46a994272793;Parent="),
                "{header}"
            );
            assert!(
                !header.contains("53995c3f42cd8ad8"),
                "the parent is the publish span: {header}"
            );
            let traceparent = entry.message_attributes().unwrap()[outbox::ATTR_TRACE_CONTEXT]
                .string_value()
                .unwrap()
                .to_owned();
            assert_eq!(&traceparent[3..35], TRACE);
            assert_eq!(Some(traceparent), telemetry::traceparent_of(&span));

            // An event without a trace context starts a trace at the relay, still handed on.
            let untraced = Publisher::entry(
                1,
                &event("pay_2", 1),
                &telemetry::step_span_with_parent("publish", None),
            )
            .unwrap();
            assert!(untraced.message_system_attributes().is_some());
        });
    }

    fn event(payment: &str, version: u64) -> PaymentEvent {
        PaymentEvent {
            payment_id: PaymentId::parse(payment).unwrap(),
            order_id: OrderId::parse("o").unwrap(),
            version,
            kind: EventKind::ProcessingStarted,
            path: Path::Sync,
            status: PaymentStatus::Processing,
            previous_status: None,
            money: Money::new(1, shared::Currency::parse("EUR").unwrap()).unwrap(),
            refunded_minor: 0,
            reason: None,
            psp_event_id: None,
            correlation_id: CorrelationId::parse("c").unwrap(),
            trace_context: None,
            recorded_at_ms: 0,
        }
    }

    #[test]
    fn batches_hold_one_event_per_payment_and_keep_each_payments_order() {
        let events: Vec<_> = [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("c", 1), ("b", 2)]
            .iter()
            .map(|(p, v)| event(p, *v))
            .collect();
        let mut lanes = Lanes::new(&events);
        let mut sent = Vec::new();
        loop {
            let batch = lanes.next_batch();
            if batch.is_empty() {
                break;
            }
            let payments: Vec<&str> = batch.iter().map(|&i| events[i].payment_id.as_str()).collect();
            let mut unique = payments.clone();
            unique.dedup();
            assert_eq!(unique.len(), payments.len(), "one per payment: {payments:?}");
            for &i in &batch {
                lanes.confirm(i);
                sent.push((events[i].payment_id.as_str().to_owned(), events[i].version));
            }
        }
        for p in ["a", "b", "c"] {
            let versions: Vec<u64> = sent.iter().filter(|(q, _)| q == p).map(|(_, v)| *v).collect();
            let mut sorted = versions.clone();
            sorted.sort();
            assert_eq!(versions, sorted, "{p} in order");
        }
        assert_eq!(sent.len(), 6);
        assert_eq!(lanes.first_unconfirmed(), 6);
    }

    #[test]
    fn a_batch_has_at_most_ten_entries() {
        let events: Vec<_> = (0..25).map(|i| event(&format!("p{i}"), 1)).collect();
        let lanes = Lanes::new(&events);
        assert_eq!(lanes.next_batch().len(), 10);
    }
}
