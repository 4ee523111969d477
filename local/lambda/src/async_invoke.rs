//! Lambda's asynchronous invocation (`InvocationType: Event`, as EventBridge Scheduler invokes the sweeper,
//! the reconciler and the catch-up): the event is accepted at once, then Lambda runs it from its own queue.
//! A function error is retried `MaximumRetryAttempts` times (`EventInvokeConfig`; default 2), waiting 1 then
//! 2 minutes; a throttled run is retried with a growing backoff (1 s, doubling to 5 min) for as long as the
//! event is younger than `MaximumEventAgeInSeconds` (default 6 h), without counting as a retry. An event whose
//! retries are exhausted or whose age ran out goes to the on-failure destination (an SQS queue) as Lambda's
//! invocation record, else it is dropped. The waits are [`Waits`]: Lambda's by default, shorter in tests.

use crate::account::LOCAL_ACCOUNT;
use crate::function_pool::{FunctionPool, Outcome};
use crate::triggers::AsyncConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long Lambda waits before each retry.
#[derive(Debug, Clone)]
pub struct Waits {
    /// Before the first and the second retry of a function error (Lambda: 1 and 2 minutes).
    pub after_error: [Duration; 2],
    /// The first backoff after a throttle, doubled each time up to `throttle_max` (Lambda: 1 s, 5 min).
    pub throttle_first: Duration,
    pub throttle_max: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            after_error: [Duration::from_secs(60), Duration::from_secs(120)],
            throttle_first: Duration::from_secs(1),
            throttle_max: Duration::from_secs(300),
        }
    }
}

/// How an asynchronous event ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A run answered without error (after `invocations` runs).
    Done { invocations: u32 },
    /// Sent to the on-failure destination (or dropped, without one) for `condition`:
    /// `RetriesExhausted` or `EventAgeExceeded`.
    Failed { condition: &'static str, invocations: u32 },
}

/// One function's asynchronous invocations.
pub struct AsyncInvoker {
    pub function: Arc<FunctionPool>,
    /// The function's logical id (in the record's `functionArn`).
    pub name: String,
    pub config: AsyncConfig,
    /// The on-failure destination's queue URL (the local counterpart of `config.on_failure`) and the client
    /// to send with.
    pub destination: Option<(aws_sdk_sqs::Client, String)>,
    pub waits: Waits,
}

impl AsyncInvoker {
    /// Accepts `event` (Lambda's 202) and runs it in the background as Lambda does.
    pub fn invoke(self: &Arc<Self>, event: Value) -> tokio::task::JoinHandle<Result<Delivery, BoxError>> {
        let this = self.clone();
        tokio::spawn(async move { this.deliver(event).await })
    }

    /// Runs `event` to its end: done, or failed (and sent to the destination).
    pub async fn deliver(&self, event: Value) -> Result<Delivery, BoxError> {
        let accepted = Instant::now();
        let (mut invocations, mut errors) = (0u32, 0u32);
        let mut backoff = self.waits.throttle_first;
        loop {
            let outcome = self.function.invoke(event.clone()).await?;
            let wait = match outcome {
                Outcome::Response(_) => {
                    return Ok(Delivery::Done {
                        invocations: invocations + 1,
                    })
                }
                Outcome::Throttled => {
                    let wait = backoff;
                    backoff = (backoff * 2).min(self.waits.throttle_max);
                    wait
                }
                Outcome::FunctionError(payload) => {
                    invocations += 1;
                    if u64::from(errors) >= self.config.max_retries {
                        return self.fail("RetriesExhausted", invocations, &event, Some(payload)).await;
                    }
                    errors += 1;
                    self.waits.after_error[if errors == 1 { 0 } else { 1 }]
                }
            };
            if accepted.elapsed() + wait > self.config.max_event_age {
                return self.fail("EventAgeExceeded", invocations, &event, None).await;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Lambda's invocation record of a failed event to the on-failure destination, if there is one.
    async fn fail(
        &self,
        condition: &'static str,
        invocations: u32,
        event: &Value,
        error: Option<Value>,
    ) -> Result<Delivery, BoxError> {
        if let Some((sqs, queue_url)) = &self.destination {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let mut record = json!({
                "version": "1.0",
                "timestamp": now_ms.to_string(),
                "requestContext": {
                    "requestId": uuid::Uuid::new_v4().to_string(),
                    "functionArn": format!("arn:aws:lambda:us-east-1:{LOCAL_ACCOUNT}:function:{}:$LATEST", self.name),
                    "condition": condition,
                    "approximateInvokeCount": invocations,
                },
                "requestPayload": event,
            });
            // What the last run answered, when one ran to an error (an event that aged out throttled has none).
            if let Some(error) = error {
                let context = json!({"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"});
                record["responseContext"] = context;
                record["responsePayload"] = error;
            }
            sqs.send_message()
                .queue_url(queue_url)
                .message_body(record.to_string())
                .send()
                .await
                .map_err(|e| format!("send to the on-failure destination {queue_url}: {e:?}"))?;
        }
        Ok(Delivery::Failed { condition, invocations })
    }
}
