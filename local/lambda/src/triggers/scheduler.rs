//! EventBridge Scheduler among the triggers: a `ScheduleV2` event (its `rate(...)` expression, the schedule's
//! own delivery retries and dead-letter queue). Running it is the top-level `schedule`'s, through Lambda's
//! asynchronous invocation.

use super::reader::Reader;
use serde_yaml_ng::Value;
use std::time::Duration;

/// A `ScheduleV2` event: EventBridge Scheduler invoking asynchronously.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The `rate(...)` expression's period ([`rate`]).
    pub period: Duration,
    /// The schedule's own retries: of delivery to Lambda only (throttled or unreachable).
    pub delivery_retries: u64,
    pub delivery_max_age: Duration,
    /// The schedule's dead-letter queue (a logical id).
    pub dead_letter: Option<String>,
}

/// A `ScheduleV2` event's properties `p`, with EventBridge Scheduler's defaults (185 retries over 24 hours).
pub(crate) fn event(reader: &Reader<'_>, p: &Value) -> Result<Schedule, String> {
    reader.only(p, &["Name", "ScheduleExpression", "RetryPolicy", "DeadLetterConfig"])?;
    reader.only(&p["RetryPolicy"], &["MaximumEventAgeInSeconds", "MaximumRetryAttempts"])?;
    reader.only(&p["DeadLetterConfig"], &["Arn"])?;
    let dead_letter = match p["DeadLetterConfig"]["Arn"] {
        Value::Null => None,
        ref arn => Some(reader.logical_id(arn, "DeadLetterConfig's Arn")?),
    };
    Ok(Schedule {
        period: rate(&reader.needed(&p["ScheduleExpression"], "ScheduleExpression")?)
            .map_err(|why| format!("{}: {why}", reader.at))?,
        delivery_retries: reader.count(&p["RetryPolicy"]["MaximumRetryAttempts"])?.unwrap_or(185),
        delivery_max_age: Duration::from_secs(
            reader
                .count(&p["RetryPolicy"]["MaximumEventAgeInSeconds"])?
                .unwrap_or(86_400),
        ),
        dead_letter,
    })
}

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
