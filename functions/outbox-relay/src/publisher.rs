//! The publisher: builds each event's SQS entry (with its trace) and sends events in batches of at most ten,
//! one event per payment per batch, so a failed entry never has a later event of its payment ahead of it.

mod parking;

use crate::{RelayError, BATCH};
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    SendMessageBatchRequestEntry,
};
use shared::telemetry::ErrorChain;
use shared::{outbox, telemetry, PaymentEvent, PaymentId, PaymentStore};
use tracing::{warn, Span};

/// Publishes events to the FIFO queue.
#[derive(Debug, Clone)]
pub struct Publisher {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    /// Where notices of events that had to be made sendable go (`RELAY_FAILURES_QUEUE_URL`).
    parking_url: Option<String>,
    /// Where the relay archives the events it reads from payment change records (the payments' history);
    /// a replay publishes what is archived already and needs none.
    history: Option<PaymentStore>,
}

fn attribute(value: &str) -> Result<MessageAttributeValue, RelayError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| RelayError::Build(e.into()))
}

impl Publisher {
    /// A publisher to the FIFO queue at `queue_url`, parking nothing (see [`Publisher::with_parking`]).
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
            parking_url: None,
            history: None,
        }
    }

    /// Archives the events of payment change records in `store`'s table before sending them.
    #[must_use]
    pub fn with_history(mut self, store: PaymentStore) -> Self {
        self.history = Some(store);
        self
    }

    /// The store the relay archives events in, if any.
    pub fn history(&self) -> Option<&PaymentStore> {
        self.history.as_ref()
    }

    /// Parks notices of unsendable events in `url` (the relay-failures queue).
    #[must_use]
    pub fn with_parking(mut self, url: impl Into<String>) -> Self {
        self.parking_url = Some(url.into());
        self
    }

    /// The FIFO queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
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
    ///
    /// An event SQS would refuse is sent made sendable, and noticed (parked, counted) once it is confirmed
    /// and every event before it too: the stream retries a batch from its first unconfirmed record, so an
    /// event noticed only then is noticed once, not on every retry of its batch.
    pub async fn publish(&self, events: &[PaymentEvent]) -> Result<(), usize> {
        let (sendable, unsendable) = parking::sendable(events);
        let result = self.send_in_order(&sendable).await;
        let done = result.err().unwrap_or(events.len());
        self.notice(events, &unsendable, done).await;
        result
    }

    /// Sends `events` (all sendable) in batches, keeping their order per payment; `Err(k)` as [`Self::publish`].
    async fn send_in_order(&self, events: &[PaymentEvent]) -> Result<(), usize> {
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
            let failed_positions = self.send_batch(entries).await;
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

    /// Sends one batch; answers the positions of the entries SQS did not confirm (all of them when the call
    /// itself failed).
    async fn send_batch(&self, entries: Vec<SendMessageBatchRequestEntry>) -> Vec<usize> {
        let count = entries.len();
        match self
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
                (0..count).collect()
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

#[cfg(test)]
mod tests;
