//! What the webhook intake logged about a payment's deliveries: the deliveries that changed nothing
//! (duplicate, stale, deferred with 503) write no item by design, so their log lines are their only record.
//!
//! Two sources, one row type ([`Delivery`]):
//! - **AWS**: a CloudWatch Logs Insights query over the intake's log group (`--log-group`/`INTAKE_LOG_GROUP`),
//!   started, polled until a deadline, and stopped if it did not finish. Insights bills per GB *scanned* in
//!   the time range (the filter does not reduce it), so the range is the payment's life: from the unknown-payment
//!   window before its creation to now. The query keeps to `fields`, `filter ... like`, `sort` and `limit`,
//!   which CloudWatch runs and moto parses (moto ignores `filter` and returns every line of the range), and
//!   the rows are filtered again here, so both answer the same.
//! - **Locally**: the intake's log file of the local stack (`--log`, `.local/logs/<table>/WebhookIntakeFunction.log`):
//!   its JSON lines as in CloudWatch (the local world runs it with the template's `LOG_FORMAT`), or text lines,
//!   which carry no time; rows in file order.
//!
//! A row is about the payment when its line names the payment id or its PSP reference (the intake's request
//! span carries `payment_id`; a delivery deferred before the payment was found names what the event targets).

use crate::when::parse_instant;
use aws_sdk_cloudwatchlogs::types::{QueryStatus, ResultField};
use serde::Serialize;
use serde_json::Value;
use shared::Payment;
use std::time::Duration;

/// How long before the payment's creation a webhook may already arrive (the intake's 15-minute
/// unknown-payment window: such deliveries are deferred with 503 first).
const BEFORE_CREATION_MS: i64 = 15 * 60 * 1000;
/// Rows asked of Logs Insights at most (its own limit is 10 000).
const ROW_LIMIT: u32 = 1000;
const POLL_EVERY: Duration = Duration::from_millis(500);

/// Where a delivery row was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A CloudWatch Logs Insights query over the intake's log group.
    LogsInsights,
    /// The local stack's log file.
    LocalLog,
}

/// One line the intake logged about a delivery of the payment's webhooks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    pub origin: Origin,
    /// When it was logged; `None` for the local stack's text lines (they carry no time).
    pub at_ms: Option<i64>,
    pub level: String,
    pub message: String,
    /// The intake's `result`: `Applied(..)`, `Ignored(Duplicate)`, `Ignored(Stale)`, `Deferred(..)`.
    pub result: Option<String>,
    pub correlation_id: Option<String>,
    pub psp_event_id: Option<String>,
}

/// Errors of the Logs Insights query (the timeline reports them as a note and goes on).
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("StartQuery on {group}")]
    Start {
        group: String,
        #[source]
        source: shared::store::SdkFailure,
    },
    #[error("GetQueryResults of query {id}")]
    Results {
        id: String,
        #[source]
        source: shared::store::SdkFailure,
    },
    #[error("query {id} ended {status}")]
    Ended { id: String, status: String },
    #[error("query {id} did not finish within {waited:?}; it was stopped (run it in the console for a longer wait)")]
    Deadline { id: String, waited: Duration },
    #[error("reading the local log {path}")]
    LocalLog {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The strings a line must contain to be about `p`: its id, and its PSP reference if bound.
pub fn needles(p: &Payment) -> Vec<String> {
    let mut out = vec![p.id.to_string()];
    out.extend(p.psp_reference.as_ref().map(ToString::to_string));
    out
}

/// The Logs Insights query for `p`'s deliveries.
pub fn insights_query(p: &Payment) -> String {
    let filter = needles(p)
        .iter()
        .map(|n| format!("@message like \"{n}\""))
        .collect::<Vec<_>>()
        .join(" or ");
    format!("fields @timestamp, @message | filter {filter} | sort @timestamp asc | limit {ROW_LIMIT}")
}

/// The query's time range in epoch seconds: the payment's life, from the unknown-payment window before its
/// creation to `now_ms`.
pub fn insights_range(p: &Payment, now_ms: i64) -> (i64, i64) {
    ((p.created_at_ms - BEFORE_CREATION_MS) / 1000, now_ms / 1000 + 1)
}

/// The command line that runs the same query by hand.
pub fn insights_command(p: &Payment, group: &str, now_ms: i64) -> String {
    let (start, end) = insights_range(p, now_ms);
    format!(
        "aws logs start-query --log-group-names {group} --start-time {start} --end-time {end} --query-string '{}'",
        insights_query(p)
    )
}

/// Runs the query for `p` over `group`, waits for it up to `deadline`, and returns its rows about `p`.
pub async fn from_insights(
    client: &aws_sdk_cloudwatchlogs::Client,
    group: &str,
    p: &Payment,
    now_ms: i64,
    deadline: Duration,
) -> Result<Vec<Delivery>, LogsError> {
    let (start, end) = insights_range(p, now_ms);
    let started = client
        .start_query()
        .log_group_names(group)
        .start_time(start)
        .end_time(end)
        .query_string(insights_query(p))
        .limit(i32::try_from(ROW_LIMIT).unwrap_or(i32::MAX))
        .send()
        .await
        .map_err(|e| LogsError::Start {
            group: group.to_owned(),
            source: e.into(),
        })?;
    let id = started.query_id().unwrap_or_default().to_owned();
    let rows = wait_for_rows(client, &id, deadline).await?;
    let needles = needles(p);
    Ok(rows.iter().filter_map(|row| insights_row(row, &needles)).collect())
}

/// Polls the query until it completes, or stops it at the deadline.
async fn wait_for_rows(
    client: &aws_sdk_cloudwatchlogs::Client,
    id: &str,
    deadline: Duration,
) -> Result<Vec<Vec<ResultField>>, LogsError> {
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let out = client
            .get_query_results()
            .query_id(id)
            .send()
            .await
            .map_err(|e| LogsError::Results {
                id: id.to_owned(),
                source: e.into(),
            })?;
        match out.status() {
            Some(QueryStatus::Complete) => return Ok(out.results().to_vec()),
            Some(QueryStatus::Running | QueryStatus::Scheduled) | None => {}
            Some(other) => {
                return Err(LogsError::Ended {
                    id: id.to_owned(),
                    status: other.as_str().to_owned(),
                })
            }
        }
        if tokio::time::Instant::now() >= until {
            // Best effort: a query left running keeps scanning (and billing) until it ends by itself.
            let _ = client.stop_query().query_id(id).send().await;
            return Err(LogsError::Deadline {
                id: id.to_owned(),
                waited: deadline,
            });
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// One result row (`@timestamp`, `@message`) as a delivery, if its message is about the payment.
pub fn insights_row(row: &[ResultField], needles: &[String]) -> Option<Delivery> {
    let field = |name: &str| {
        row.iter()
            .find(|f| f.field() == Some(name))
            .and_then(ResultField::value)
    };
    let message = field("@message")?;
    if !needles.iter().any(|n| message.contains(n.as_str())) {
        return None;
    }
    let at_ms = field("@timestamp").and_then(insights_timestamp);
    json_line(message, at_ms)
}

/// `@timestamp` as CloudWatch gives it (`2026-12-01 10:00:00.123`, UTC) or as moto does (epoch ms).
pub fn insights_timestamp(value: &str) -> Option<i64> {
    parse_instant(value).ok()
}

/// A line of the intake's JSON logs (`shared::telemetry`: the event's fields flattened, the span list under
/// `spans`); a line that is not JSON is kept whole as its message. A span's close line (`time.busy`, written
/// when no OTLP endpoint takes the spans) is not a delivery: `None`.
pub fn json_line(line: &str, at_ms: Option<i64>) -> Option<Delivery> {
    let json: Value = serde_json::from_str(line).unwrap_or(Value::Null);
    if json.get("time.busy").is_some() {
        return None;
    }
    let text = |v: &Value, name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
    let correlation_id = json
        .get("spans")
        .and_then(Value::as_array)
        .and_then(|spans| spans.iter().find_map(|s| text(s, "correlation_id")));
    Some(Delivery {
        origin: Origin::LogsInsights,
        at_ms,
        level: text(&json, "level").unwrap_or_default(),
        message: text(&json, "message").unwrap_or_else(|| line.trim().to_owned()),
        result: text(&json, "result"),
        correlation_id,
        psp_event_id: text(&json, "psp_event_id"),
    })
}

/// The local stack's log lines about the payment's webhooks, in file order (span close lines left out).
pub fn from_local_log(path: &std::path::Path, needles: &[String]) -> Result<Vec<Delivery>, LogsError> {
    let log = std::fs::read_to_string(path).map_err(|source| LogsError::LocalLog {
        path: path.display().to_string(),
        source,
    })?;
    Ok(log
        .lines()
        .map(strip_ansi)
        .filter(|l| {
            let webhook = l.contains("path=\"webhook\"") || l.contains("\"path\":\"webhook\"");
            webhook && needles.iter().any(|n| l.contains(n.as_str()))
        })
        .filter_map(|l| local_line(&l))
        .filter(|d| d.message != SPAN_CLOSE)
        .collect())
}

/// One line of the local log: a JSON line (its `timestamp` its time) or a text line.
fn local_line(line: &str) -> Option<Delivery> {
    if !line.trim_start().starts_with('{') {
        return Some(text_line(line));
    }
    let at_ms = serde_json::from_str::<Value>(line).ok().and_then(|json| {
        json.get("timestamp")
            .and_then(Value::as_str)
            .and_then(|t| parse_instant(t).ok())
    });
    json_line(line, at_ms).map(|d| Delivery {
        origin: Origin::LocalLog,
        ..d
    })
}

/// What a span's close line says instead of a message (written when no OTLP endpoint takes the spans).
const SPAN_CLOSE: &str = "close";

/// A compact text line: `LEVEL span:span: message key=value ... span fields`.
pub fn text_line(line: &str) -> Delivery {
    let line = line.trim();
    let (level, rest) = line.split_once(' ').unwrap_or((line, ""));
    let words: Vec<&str> = rest.split(' ').skip_while(|w| w.ends_with(':')).collect();
    let message: Vec<&str> = words.iter().copied().take_while(|w| !w.contains('=')).collect();
    let value = |key: &str| {
        words
            .iter()
            .find_map(|w| w.strip_prefix(key))
            .map(|v| v.trim_matches('"').to_owned())
    };
    Delivery {
        origin: Origin::LocalLog,
        at_ms: None,
        level: level.to_owned(),
        message: message.join(" "),
        result: value("result="),
        correlation_id: value("correlation_id="),
        psp_event_id: value("psp_event_id="),
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-letter.
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of `pay_1` that `from_local_log` reads from a file holding `log`.
    fn pay_1_rows(kind: &str, log: &str) -> Vec<Delivery> {
        let file = std::env::temp_dir().join(format!("paymentsctl-{kind}-log-{}", std::process::id()));
        std::fs::write(&file, log).unwrap();
        let rows = from_local_log(&file, &["pay_1".to_owned()]).unwrap();
        std::fs::remove_file(&file).unwrap();
        rows
    }

    #[test]
    fn the_local_log_yields_the_payments_webhook_lines_without_colours() {
        let log = "\u{1b}[32m INFO\u{1b}[0m \u{1b}[1mrequest\u{1b}[0m: webhook finalized \u{1b}[3mresult\u{1b}[0m\u{1b}[2m=\u{1b}[0mIgnored(Duplicate) \u{1b}[2m\u{1b}[3mpath\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"webhook\" \u{1b}[3mcorrelation_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"c-1\" \u{1b}[3mpayment_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"pay_1\"\u{1b}[0m
 INFO request: close path=\"webhook\" payment_id=\"pay_1\"
 INFO request: payment transition written payment_id=pay_1 path=\"sync\"
 INFO request: webhook finalized result=Applied path=\"webhook\" payment_id=\"pay_2\"";
        assert_eq!(
            pay_1_rows("text", log),
            [Delivery {
                origin: Origin::LocalLog,
                at_ms: None,
                level: "INFO".into(),
                message: "webhook finalized".into(),
                result: Some("Ignored(Duplicate)".into()),
                correlation_id: Some("c-1".into()),
                psp_event_id: None,
            }]
        );
    }

    #[test]
    fn the_local_worlds_json_lines_are_read_as_cloudwatch_has_them() {
        let line = r#"{"timestamp":"2025-12-01T10:00:00.123Z","level":"INFO","message":"webhook finalized","result":"Applied(ProcessingStarted)","psp_event_id":"evt_1","span":{"correlation_id":"c-1","path":"webhook","payment_id":"pay_1","name":"request"},"spans":[{"requestId":"r-1","name":"Lambda runtime invoke"},{"correlation_id":"c-1","path":"webhook","payment_id":"pay_1","name":"request"}]}"#;
        let other = line.replace("pay_1", "pay_2");
        let sync = line.replace("\"path\":\"webhook\"", "\"path\":\"sync\"");
        assert_eq!(
            pay_1_rows("json", &format!("{line}\n{other}\n{sync}\n")),
            [Delivery {
                origin: Origin::LocalLog,
                at_ms: Some(1_764_583_200_123),
                level: "INFO".into(),
                message: "webhook finalized".into(),
                result: Some("Applied(ProcessingStarted)".into()),
                correlation_id: Some("c-1".into()),
                psp_event_id: Some("evt_1".into()),
            }]
        );
    }

    #[test]
    fn cloudwatch_and_moto_timestamps_are_both_read() {
        assert_eq!(insights_timestamp("1764583200123"), Some(1_764_583_200_123));
        assert_eq!(insights_timestamp("2025-12-01 10:00:00.123"), Some(1_764_583_200_123));
    }
}
