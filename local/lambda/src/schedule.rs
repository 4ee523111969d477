//! EventBridge Scheduler's `ScheduleV2` locally: a `rate(...)` expression (the template's kind; `cron(...)` and
//! `at(...)` are refused by name when the template is read) becomes a timer that hands each run to the
//! function's asynchronous invocation (`async_invoke`), as Scheduler invokes Lambda with `InvocationType:
//! Event`: a run that fails or waits is Lambda's to retry, and runs overlap as they do in AWS. The first run
//! comes one period after the start. The event is Scheduler's envelope (`events/schedule.json`'s shape; the
//! functions do not read it).

use crate::account::LOCAL_ACCOUNT;
use crate::async_invoke::AsyncInvoker;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Runs the schedule `name` every `period` into `invoker` until the task is dropped.
pub fn start(name: String, period: Duration, invoker: Arc<AsyncInvoker>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            ticks.tick().await;
            let event = json!({
                "version": "0",
                "id": uuid::Uuid::new_v4().to_string(),
                "detail-type": "Scheduled Event",
                "source": "aws.scheduler",
                "account": LOCAL_ACCOUNT,
                "region": "us-east-1",
                "resources": [format!("arn:aws:scheduler:us-east-1:{LOCAL_ACCOUNT}:schedule/default/{name}")],
                "detail": {},
            });
            // Accepted and left to Lambda's queue: the next run does not wait for this one.
            drop(invoker.invoke(event));
        }
    })
}
