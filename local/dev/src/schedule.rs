//! EventBridge Scheduler's `ScheduleV2` locally: a `rate(...)` expression (the template's kind; `cron(...)` and
//! `at(...)` are refused by name when the template is read) becomes a timer that hands each run to the
//! function's asynchronous invocation (`async_invoke`), as Scheduler invokes Lambda with `InvocationType:
//! Event`: a run that fails or waits is Lambda's to retry, and runs overlap as they do in AWS. The first run
//! comes one period after the start. The event is Scheduler's envelope (`events/schedule.json`'s shape; the
//! functions do not read it).

use crate::async_invoke::AsyncInvoker;
use crate::eventbridge::LOCAL_ACCOUNT;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The period of a `rate(value unit)` expression (`minute(s)`, `hour(s)`, `day(s)`); anything else is an
/// error naming it.
pub fn rate(expression: &str) -> Result<Duration, String> {
    let refused = || format!("the schedule expression {expression:?} is not emulated locally (only rate(...))");
    let inner = expression
        .strip_prefix("rate(")
        .and_then(|e| e.strip_suffix(')'))
        .ok_or_else(refused)?;
    let (value, unit) = inner.trim().split_once(' ').ok_or_else(refused)?;
    let value: u64 = value.parse().map_err(|_| refused())?;
    // Scheduler's grammar: the singular for 1, the plural otherwise.
    let seconds = match (value, unit) {
        (1, "minute") => 60,
        (1, "hour") => 3_600,
        (1, "day") => 86_400,
        (2.., "minutes") => 60,
        (2.., "hours") => 3_600,
        (2.., "days") => 86_400,
        _ => return Err(refused()),
    };
    Ok(Duration::from_secs(value * seconds))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_as_scheduler_writes_them() {
        assert_eq!(rate("rate(1 minute)"), Ok(Duration::from_secs(60)));
        assert_eq!(rate("rate(5 minutes)"), Ok(Duration::from_secs(300)));
        assert_eq!(rate("rate(10 minutes)"), Ok(Duration::from_secs(600)));
        assert_eq!(rate("rate(2 hours)"), Ok(Duration::from_secs(7_200)));
        assert_eq!(rate("rate(1 day)"), Ok(Duration::from_secs(86_400)));
        for refused in [
            "cron(0 12 * * ? *)",
            "at(2026-12-04T20:00:00)",
            "rate(1 minutes)",
            "rate(5 minute)",
            "rate(x minutes)",
        ] {
            let err = rate(refused).expect_err(refused);
            assert!(err.contains(refused) && err.contains("not emulated"), "{err}");
        }
    }
}
