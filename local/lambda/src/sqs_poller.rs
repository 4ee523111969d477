//! The local stand-in for the SQS event source mapping: receives up to ten messages, hands them to a
//! handler in the shape Lambda delivers (`SqsEvent`, with `MessageGroupId` and `ApproximateReceiveCount`,
//! and the message attributes, which carry the trace context), and deletes the ones the handler did not
//! report as failed (ReportBatchItemFailures). Failed messages come back after their visibility timeout.
//! The handler is a function's code called in this process, or the function as Lambda runs it
//! ([`invoke_batch`] on its `function_pool`); [`start_mapping`] polls for that function without end, as the
//! mapping does: long polling, the queue's own visibility timeout, a backoff after an error. On a FIFO queue
//! SQS itself keeps a message group's later messages back while an earlier one is in flight or failed.

use crate::function_pool::{FunctionPool, Outcome};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use serde_json::json;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub struct SqsPoller {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    /// Visibility timeout of each receive, in seconds.
    pub visibility_timeout: i32,
    /// The mapping's `BatchSize`: the most messages one receive (and so one invocation) takes (SQS: 1 to 10).
    pub batch_size: i32,
    /// How long one receive waits for a message (`WaitTimeSeconds`; 0: a short poll).
    pub wait_time_seconds: i32,
    /// Tests: forget to delete every n-th handled message, as if the delete was lost.
    pub lose_every_nth_ack: Option<usize>,
    handled: usize,
}

/// The Lambda SQS event for received messages.
pub fn lambda_event(messages: &[Message]) -> Result<SqsEvent, BoxError> {
    let records: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| {
            let attrs: HashMap<String, String> = m
                .attributes()
                .map(|a| a.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
                .unwrap_or_default();
            json!({ "messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(),
                    "attributes": attrs, "messageAttributes": message_attributes(m),
                    "eventSource": "aws:sqs", "awsRegion": "us-east-1" })
        })
        .collect();
    Ok(serde_json::from_value(json!({ "Records": records }))?)
}

/// A message's string attributes (all the relay sets) as the event source mapping hands them on.
fn message_attributes(m: &Message) -> serde_json::Map<String, serde_json::Value> {
    m.message_attributes()
        .into_iter()
        .flatten()
        .filter_map(|(name, a)| {
            let value = a.string_value()?;
            Some((name.clone(), json!({ "stringValue": value, "dataType": a.data_type() })))
        })
        .collect()
}

/// Hands `event` to `function` as the SQS event source mapping does: its `batchItemFailures` are the failed
/// messages; a function error, a throttle or no answer fails the whole batch (every message comes back after
/// its visibility timeout), as Lambda's mapping leaves them on the queue.
pub async fn invoke_batch(function: &FunctionPool, event: SqsEvent) -> SqsBatchResponse {
    let everything = || {
        let mut all = SqsBatchResponse::default();
        for record in &event.records {
            all.add_failure(record.message_id.clone().unwrap_or_default());
        }
        all
    };
    let Ok(payload) = serde_json::to_value(&event) else {
        return everything();
    };
    match function.invoke(payload).await {
        // A function answer that is no batch response (or none) reports no failure, as Lambda reads it.
        Ok(Outcome::Response(answer)) => serde_json::from_value(answer).unwrap_or_default(),
        Ok(Outcome::FunctionError(_) | Outcome::Throttled) | Err(_) => everything(),
    }
}

/// The mapping's long poll (Lambda's: the longest SQS allows).
const LONG_POLL_SECONDS: i32 = 20;
/// The first wait after a failed receive or delete, doubled after each further failure up to the last.
const ERROR_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Runs the SQS event source mapping of `queue_url` to `function` until aborted: batches of up to
/// `batch_size` ([`invoke_batch`]), each receive a long poll, messages hidden for the queue's own visibility
/// timeout (read from the queue, so a failed batch comes back when SQS would bring it back). An error (the
/// queue unreachable or gone) is reported and tried again after a backoff, never the end of the mapping.
pub fn start_mapping(
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    batch_size: i32,
    function: Arc<FunctionPool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut poller = SqsPoller::new(sqs, queue_url);
        poller.batch_size = batch_size;
        poller.wait_time_seconds = LONG_POLL_SECONDS;
        let mut visibility_read = false;
        let mut backoff = ERROR_BACKOFF.0;
        loop {
            let polled = async {
                if !visibility_read {
                    poller.visibility_timeout = poller.queue_visibility_timeout().await?;
                    visibility_read = true;
                }
                poller.poll_once(|event| invoke_batch(&function, event)).await
            };
            match polled.await {
                Ok(_) => backoff = ERROR_BACKOFF.0,
                Err(e) => {
                    eprintln!("queue mapping of {} on {}: {e}", function.name(), poller.queue_url);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ERROR_BACKOFF.1);
                }
            }
        }
    })
}

impl SqsPoller {
    /// The queue's `VisibilityTimeout` attribute, in seconds.
    async fn queue_visibility_timeout(&self) -> Result<i32, BoxError> {
        let out = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::VisibilityTimeout)
            .send()
            .await?;
        let value = out
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout))
            .ok_or("the queue has no VisibilityTimeout")?;
        Ok(value.parse()?)
    }

    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
            visibility_timeout: 1,
            batch_size: 10,
            wait_time_seconds: 0,
            lose_every_nth_ack: None,
            handled: 0,
        }
    }

    /// Receives one batch and delivers it. Returns how many messages were received (0: the queue looked empty).
    pub async fn poll_once<F, Fut>(&mut self, handler: F) -> Result<usize, BoxError>
    where
        F: FnOnce(SqsEvent) -> Fut,
        Fut: Future<Output = SqsBatchResponse>,
    {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(self.batch_size)
            .visibility_timeout(self.visibility_timeout)
            .wait_time_seconds(self.wait_time_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await?;
        let messages = out.messages();
        if messages.is_empty() {
            return Ok(0);
        }
        let response = handler(lambda_event(messages)?).await;
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        for m in messages {
            if failed.contains(&m.message_id().unwrap_or_default()) {
                continue;
            }
            self.handled += 1;
            if self.lose_every_nth_ack.is_some_and(|n| self.handled.is_multiple_of(n)) {
                continue;
            }
            self.sqs
                .delete_message()
                .queue_url(&self.queue_url)
                .set_receipt_handle(m.receipt_handle().map(String::from))
                .send()
                .await?;
        }
        Ok(messages.len())
    }
}
