//! The consumer library: applies each payment's events exactly once and in version order.
//!
//! A consumer's effect (DynamoDB writes built by a [`Projection`]) and its cursor (the last version it
//! applied for that payment) commit in one write, conditioned on the cursor being at `version - 1`. The
//! cursor is where [`Projection::cursor`] says ([`Cursor`]): its own item (`pk = CONSUMER#<name>#<payment
//! id>`), committed with the effect in one transaction; or the projection's one item itself, put alone (a
//! single-item projection such as the order projection: 1 write unit instead of the transaction's 4, issue
//! 43). So:
//! - an event already applied fails the condition and is skipped (acknowledged);
//! - an event after a gap (its predecessor not applied yet) fails the condition and is held back: reported
//!   as a batch failure so SQS redelivers it, counted, and alarmed once it keeps coming back; never skipped;
//! - the happy path costs one write and no read (the cursor comes back with ALL_OLD).
//!
//! The batch answer follows FIFO semantics: after a message of a group fails, the later messages of that
//! group in the batch fail too, so nothing overtakes a held-back event.

use crate::clock;
use crate::outbox;
use crate::store::transact::{transact_write, TransactError};
use crate::store::StoreError;
use crate::telemetry::ErrorChain;
use crate::{OrderId, PaymentEvent, PaymentId};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use std::collections::{HashMap, HashSet};
use thiserror::Error;
use tracing::{error, info, warn};

/// What a consumer does with one event, as DynamoDB writes committed together with its cursor.
pub trait Projection: Send + Sync {
    /// A stable name: part of the cursor key.
    fn name(&self) -> &str;
    /// The writes that apply `event` (may be empty for events this consumer does not care about). With a
    /// [`Cursor::Carried`] they are exactly one `Put` of the cursor's item, for every event.
    fn effects(&self, table: &str, event: &PaymentEvent) -> Result<Vec<TransactWriteItem>, ConsumerError>;
    /// Where the last version applied for `payment` (of `order`) is kept: by default the consumer's own
    /// cursor item.
    fn cursor(&self, order: &OrderId, payment: &PaymentId) -> Cursor {
        let _ = order;
        Cursor::Item(crate::keys::consumer_cursor(self.name(), payment))
    }
}

/// Where a consumer keeps the last version it applied for one payment.
#[derive(Debug, Clone, PartialEq)]
pub enum Cursor {
    /// Its own item (`CONSUMER#<name>#<payment id>` / `CURSOR`, `applied_version`), committed with the
    /// effects in one transaction.
    Item(crate::keys::Item),
    /// The projection's one item carries it (`key`, the version in `version_attribute`): the effect is put
    /// alone, conditioned on that attribute. Items an older cursor item counted stay right, as long as the
    /// projection wrote the version into that attribute then too (the order projection's `payment_version`).
    Carried {
        key: crate::keys::Item,
        version_attribute: &'static str,
    },
}

/// The attribute an own cursor item keeps the version in.
const APPLIED_VERSION: &str = "applied_version";

/// Why a message was not applied; each keeps the error underneath as its `source()`.
#[derive(Debug, Error)]
pub enum ConsumerError {
    /// The consumer's writes could not be built (a bug of ours, not a state of DynamoDB).
    #[error("building the effect failed")]
    Effect(#[source] crate::store::Cause),
    /// Reading the cursor or applying the writes failed.
    #[error("applying the event failed")]
    Store(#[source] StoreError),
}

/// What happened to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageOutcome {
    /// Its effect and the consumer's cursor committed together.
    Applied,
    /// Applied before: acknowledged, no effect.
    Skipped,
    /// Its predecessor is not applied yet: failed back to SQS for redelivery.
    HeldBack,
    /// Not processed because an earlier message of its group failed in this batch.
    BehindFailure,
    /// Unreadable, or applying it failed: failed back to SQS (redelivered, then the DLQ).
    Failed,
}

/// Counts of one batch, also written as an EMF record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    pub applied: u32,
    pub skipped: u32,
    pub held_back: u32,
    pub gap_persistent: u32,
    pub failed: u32,
}

/// Runs a [`Projection`] over SQS batches.
pub struct Consumer<P> {
    client: Client,
    table: String,
    projection: P,
    /// A held-back message that has been received this many times raises the gap alarm.
    pub gap_alarm_after_receives: u32,
}

impl<P: Projection> Consumer<P> {
    pub fn new(client: Client, table: impl Into<String>, projection: P) -> Self {
        Self {
            client,
            table: table.into(),
            projection,
            gap_alarm_after_receives: 5,
        }
    }

    pub fn projection(&self) -> &P {
        &self.projection
    }

    /// Handles one SQS batch; the answer lists the messages SQS must redeliver.
    pub async fn handle(&self, batch: SqsEvent) -> SqsBatchResponse {
        let (response, report) = self.process(&batch.records).await;
        crate::metrics::emit(&emf(self.projection.name(), &report, clock::now_ms()));
        crate::telemetry::flush();
        response
    }

    /// Processes messages in order and returns the batch answer and its counts.
    pub async fn process(&self, messages: &[SqsMessage]) -> (SqsBatchResponse, BatchReport) {
        let mut failed_groups: HashSet<String> = HashSet::new();
        let mut failures = Vec::new();
        let mut report = BatchReport::default();
        for message in messages {
            let group = message.attributes.get("MessageGroupId").cloned().unwrap_or_default();
            let outcome = if failed_groups.contains(&group) {
                MessageOutcome::BehindFailure
            } else {
                // Each message continues the trace the relay handed on (the webhook's, for a webhook's event).
                let span = crate::telemetry::step_span_with_parent("consume", trace_carrier(message).as_deref());
                tracing::Instrument::instrument(self.apply_message(message, &mut report), span).await
            };
            match outcome {
                MessageOutcome::Applied => report.applied = report.applied.saturating_add(1),
                MessageOutcome::Skipped => report.skipped = report.skipped.saturating_add(1),
                MessageOutcome::HeldBack | MessageOutcome::BehindFailure | MessageOutcome::Failed => {
                    if outcome == MessageOutcome::HeldBack {
                        report.held_back = report.held_back.saturating_add(1);
                    }
                    if outcome == MessageOutcome::Failed {
                        report.failed = report.failed.saturating_add(1);
                    }
                    failed_groups.insert(group);
                    let mut failure = BatchItemFailure::default();
                    failure.item_identifier = message.message_id.clone().unwrap_or_default();
                    failures.push(failure);
                }
            }
        }
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = failures;
        (response, report)
    }

    async fn apply_message(&self, message: &SqsMessage, report: &mut BatchReport) -> MessageOutcome {
        let event = match message.body.as_deref().map(outbox::parse_body) {
            Some(Ok(event)) => event,
            other => {
                // A message we cannot read is failed, so it ends in the DLQ (alarmed) instead of being lost.
                error!(message_id = ?message.message_id, error = ?other.map(|r| r.err()), "unreadable message");
                return MessageOutcome::Failed;
            }
        };
        match self.apply(&event).await {
            Ok(outcome) => {
                if outcome == MessageOutcome::HeldBack {
                    let receives: u32 = message
                        .attributes
                        .get("ApproximateReceiveCount")
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(1);
                    if receives >= self.gap_alarm_after_receives {
                        report.gap_persistent = report.gap_persistent.saturating_add(1);
                        error!(payment_id = %event.payment_id, version = event.version, receives, "event gap persists");
                    } else {
                        warn!(payment_id = %event.payment_id, version = event.version, "event after a gap held back");
                    }
                }
                outcome
            }
            Err(e) => {
                warn!(payment_id = %event.payment_id, version = event.version, error = %ErrorChain(&e), "apply failed; SQS redelivers");
                MessageOutcome::Failed
            }
        }
    }

    /// Applies one event exactly once: effect and cursor in one write, the cursor at `version - 1`.
    pub async fn apply(&self, event: &PaymentEvent) -> Result<MessageOutcome, ConsumerError> {
        let name = self.projection.name();
        let effects = self.projection.effects(&self.table, event)?;
        let outcome = match self.projection.cursor(&event.order_id, &event.payment_id) {
            Cursor::Item(key) => self.with_cursor_item(effects, key, event).await?,
            Cursor::Carried { key, version_attribute } => {
                let item = carried_item(effects, &key)?;
                self.carrying_cursor(item, version_attribute, event).await?
            }
        };
        if outcome == MessageOutcome::Applied {
            info!(consumer = name, payment_id = %event.payment_id, version = event.version, "event applied");
        }
        Ok(outcome)
    }

    /// The effects and the cursor item in one transaction.
    async fn with_cursor_item(
        &self,
        mut items: Vec<TransactWriteItem>,
        key: crate::keys::Item,
        event: &PaymentEvent,
    ) -> Result<MessageOutcome, ConsumerError> {
        let (condition, values) = after_previous(APPLIED_VERSION, event.version);
        let cursor = Put::builder()
            .table_name(&self.table)
            .set_item(Some(key))
            .item(APPLIED_VERSION, AttributeValue::N(event.version.to_string()))
            .item("applied_event_id", AttributeValue::S(event.event_id()))
            .item("updated_at_ms", AttributeValue::N(clock::now_ms().to_string()))
            .condition_expression(condition)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| ConsumerError::Effect(e.into()))?;
        items.push(TransactWriteItem::builder().put(cursor).build());
        let cursor_index = items.len().saturating_sub(1);
        match transact_write(&self.client, items, "apply event", false).await {
            Ok(()) => Ok(MessageOutcome::Applied),
            // Our cursor's condition failed: the event was applied before, or its predecessor was not yet.
            Err(TransactError::Cancelled(c)) if c.condition_failed(cursor_index) => {
                Ok(not_applied(c.item(cursor_index), APPLIED_VERSION, event))
            }
            Err(e) => Err(ConsumerError::Store(e.into_store_error("apply event"))),
        }
    }

    /// The projection's one item, carrying its cursor, put alone under the same condition.
    async fn carrying_cursor(
        &self,
        item: crate::keys::Item,
        version_attribute: &'static str,
        event: &PaymentEvent,
    ) -> Result<MessageOutcome, ConsumerError> {
        let (condition, values) = after_previous(version_attribute, event.version);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .item(version_attribute, AttributeValue::N(event.version.to_string()))
            .item("applied_by", AttributeValue::S(self.projection.name().to_owned()))
            .item("applied_event_id", AttributeValue::S(event.event_id()))
            .item("updated_at_ms", AttributeValue::N(clock::now_ms().to_string()))
            .condition_expression(condition)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match put {
            Ok(_) => Ok(MessageOutcome::Applied),
            Err(e) => match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(failed)) => {
                    Ok(not_applied(failed.item(), version_attribute, event))
                }
                _ => Err(ConsumerError::Store(StoreError::from_sdk("apply event", e))),
            },
        }
    }
    /// The last version this consumer applied for `payment` of `order` (0: none).
    pub async fn applied_version(&self, order: &OrderId, payment: &PaymentId) -> Result<u64, ConsumerError> {
        let (key, attribute) = match self.projection.cursor(order, payment) {
            Cursor::Item(key) => (key, APPLIED_VERSION),
            Cursor::Carried { key, version_attribute } => (key, version_attribute),
        };
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ConsumerError::Store(StoreError::from_sdk("read consumer cursor", e)))?;
        Ok(version_in(out.item(), attribute))
    }
}

/// The condition that `version` comes right after the one applied: no cursor yet for version 1, else the
/// cursor at `version - 1`.
fn after_previous(attribute: &str, version: u64) -> (String, Option<HashMap<String, AttributeValue>>) {
    if version <= 1 {
        return ("attribute_not_exists(pk)".to_owned(), None);
    }
    let previous = AttributeValue::N(version.saturating_sub(1).to_string());
    (
        format!("{attribute} = :previous"),
        Some(HashMap::from([(":previous".to_owned(), previous)])),
    )
}

/// The version `attribute` of `item` says was applied (0: none).
fn version_in(item: Option<&HashMap<String, AttributeValue>>, attribute: &str) -> u64 {
    item.and_then(|i| i.get(attribute))
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The cursor's condition failed: applied before (skipped), or its predecessor not yet (held back).
fn not_applied(
    cursor: Option<&HashMap<String, AttributeValue>>,
    attribute: &str,
    event: &PaymentEvent,
) -> MessageOutcome {
    if version_in(cursor, attribute) >= event.version {
        MessageOutcome::Skipped
    } else {
        MessageOutcome::HeldBack
    }
}

/// The one item a projection that carries its cursor writes: its effects must be exactly one `Put` of the
/// cursor's key (anything else is a bug of the projection, failed back to SQS, never half applied).
fn carried_item(effects: Vec<TransactWriteItem>, key: &crate::keys::Item) -> Result<crate::keys::Item, ConsumerError> {
    let mut effects = effects.into_iter();
    let put = match (effects.next().and_then(|e| e.put), effects.next()) {
        (Some(put), None) => put,
        _ => {
            return Err(ConsumerError::Effect(
                "a projection that carries its cursor writes one put".into(),
            ))
        }
    };
    let item = put.item;
    let same_key = key.iter().all(|(name, value)| item.get(name) == Some(value));
    if !same_key {
        return Err(ConsumerError::Effect(
            "a projection's put is not the item that carries its cursor".into(),
        ));
    }
    Ok(item)
}

/// The trace context a message carries: our `traceparent` attribute, else SQS's `AWSTraceHeader`.
pub fn trace_carrier(message: &SqsMessage) -> Option<String> {
    message
        .message_attributes
        .get(outbox::ATTR_TRACE_CONTEXT)
        .and_then(|a| a.string_value.clone())
        .or_else(|| message.attributes.get("AWSTraceHeader").cloned())
}

/// The consumer's EMF record: applied, skipped, held back, persistent gaps, failures.
pub fn emf(consumer: &str, r: &BatchReport, now_ms: i64) -> serde_json::Value {
    crate::metrics::counts(
        "Payments/Consumers",
        &[&[], &["Consumer"]],
        &["Applied", "Skipped", "HeldBack", "GapPersistent", "Failed"],
        serde_json::json!({
            "Consumer": consumer,
            "Applied": r.applied, "Skipped": r.skipped, "HeldBack": r.held_back,
            "GapPersistent": r.gap_persistent, "Failed": r.failed,
        }),
        now_ms,
    )
}

#[cfg(test)]
mod trace_tests {
    use super::*;
    use aws_lambda_events::event::sqs::SqsMessageAttribute;
    use tracing_subscriber::layer::SubscriberExt;

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    const TRACEPARENT: &str = "00-5759e988bd862e3fe1be46a994272793-1111111111111111-01";

    #[test]
    fn a_message_is_consumed_in_the_trace_it_carries() {
        let mut message = SqsMessage::default();
        assert_eq!(trace_carrier(&message), None);
        message.attributes.insert("AWSTraceHeader".into(), XRAY.into());
        assert_eq!(trace_carrier(&message).as_deref(), Some(XRAY));
        let mut attribute = SqsMessageAttribute::default();
        attribute.string_value = Some(TRACEPARENT.into());
        attribute.data_type = Some("String".into());
        message
            .message_attributes
            .insert(outbox::ATTR_TRACE_CONTEXT.into(), attribute);
        assert_eq!(
            trace_carrier(&message).as_deref(),
            Some(TRACEPARENT),
            "our own attribute first"
        );

        let provider = crate::telemetry::tracer_provider();
        let subscriber = tracing_subscriber::registry().with(crate::telemetry::otel_layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let span = crate::telemetry::step_span_with_parent("consume", trace_carrier(&message).as_deref());
            let consumed = crate::telemetry::traceparent_of(&span).unwrap();
            assert_eq!(&consumed[3..35], "5759e988bd862e3fe1be46a994272793");
        });
    }
}
