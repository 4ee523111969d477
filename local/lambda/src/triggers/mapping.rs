//! The event source mappings among the triggers: a `DynamoDB` event (the table's stream, with its batching,
//! retries, bisection, record age, on-failure destination and `FilterCriteria`) and an `SQS` event (a queue,
//! its batch size and `ScalingConfig`). Each property is one the local mappings play, or refused by name.

use super::reader::Reader;
use crate::event_pattern::EventPattern;
use serde_yaml_ng::Value;
use std::time::Duration;

/// A `DynamoDB` event source mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMapping {
    /// The table whose stream it reads (a logical id).
    pub table: String,
    pub starting_position: String,
    pub batch_size: u64,
    pub batching_window: Duration,
    pub bisect: bool,
    /// `None`: retried until the record expires (-1, the default).
    pub max_retries: Option<u64>,
    pub max_record_age: Option<Duration>,
    pub item_failures: bool,
    /// The on-failure destination's queue (a logical id).
    pub on_failure: Option<String>,
    /// The `FilterCriteria` patterns (a record passes when one matches; none: every record).
    pub filters: Vec<EventPattern>,
}

/// An `SQS` event source mapping (a FIFO queue's message groups are the queue's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMapping {
    /// The queue (a logical id).
    pub queue: String,
    pub batch_size: u64,
    pub item_failures: bool,
    /// `ScalingConfig.MaximumConcurrency` (2 to 1,000): the most batches in flight at once. The local
    /// mapping runs one batch at a time, always within it; the capacity model reads it.
    pub max_concurrency: Option<u64>,
}

/// A `DynamoDB` event's properties `p`.
pub(crate) fn stream(reader: &Reader<'_>, p: &Value) -> Result<StreamMapping, String> {
    reader.only(
        p,
        &[
            "Stream",
            "StartingPosition",
            "BatchSize",
            "MaximumBatchingWindowInSeconds",
            "ParallelizationFactor",
            "BisectBatchOnFunctionError",
            "MaximumRetryAttempts",
            "MaximumRecordAgeInSeconds",
            "FunctionResponseTypes",
            "DestinationConfig",
            "FilterCriteria",
        ],
    )?;
    let stream = reader.logical_id(&p["Stream"], "Stream")?;
    if reader.count(&p["ParallelizationFactor"])?.is_some_and(|n| n != 1) {
        return Err(format!(
            "{}: a ParallelizationFactor other than 1 is not emulated locally",
            reader.at
        ));
    }
    Ok(StreamMapping {
        table: stream,
        starting_position: reader.needed(&p["StartingPosition"], "StartingPosition")?,
        batch_size: reader.count(&p["BatchSize"])?.unwrap_or(100),
        batching_window: Duration::from_secs(reader.count(&p["MaximumBatchingWindowInSeconds"])?.unwrap_or(0)),
        bisect: reader.text(&p["BisectBatchOnFunctionError"])?.as_deref() == Some("true"),
        max_retries: reader.signed(&p["MaximumRetryAttempts"])?,
        max_record_age: reader.signed(&p["MaximumRecordAgeInSeconds"])?.map(Duration::from_secs),
        item_failures: item_failures(reader, p)?,
        on_failure: reader.on_failure(&p["DestinationConfig"])?,
        filters: filters(reader, &p["FilterCriteria"])?,
    })
}

/// `FilterCriteria: {Filters: [{Pattern: ...}]}`, each pattern parsed (an operator it does not know refused).
fn filters(reader: &Reader<'_>, criteria: &Value) -> Result<Vec<EventPattern>, String> {
    reader.only(criteria, &["Filters"])?;
    let filters = criteria["Filters"].as_sequence().cloned().unwrap_or_default();
    filters
        .iter()
        .map(|f| {
            reader.only(f, &["Pattern"])?;
            let text = reader.needed(&f["Pattern"], "FilterCriteria's Pattern")?;
            EventPattern::parse(&text).map_err(|why| format!("{}: {why}", reader.at))
        })
        .collect()
}

/// An `SQS` event's properties `p`: one receive per batch here, so at most 10 (more needs a batching window).
pub(crate) fn queue(reader: &Reader<'_>, p: &Value) -> Result<QueueMapping, String> {
    reader.only(p, &["Queue", "BatchSize", "FunctionResponseTypes", "ScalingConfig"])?;
    let batch_size = reader.count(&p["BatchSize"])?.unwrap_or(10);
    if !(1..=10).contains(&batch_size) {
        return Err(format!(
            "{}: an SQS BatchSize of {batch_size} (over 10) is not emulated locally",
            reader.at
        ));
    }
    reader.only(&p["ScalingConfig"], &["MaximumConcurrency"])?;
    let max_concurrency = reader.count(&p["ScalingConfig"]["MaximumConcurrency"])?;
    if max_concurrency.is_some_and(|n| !(2..=1000).contains(&n)) {
        return Err(format!("{}: MaximumConcurrency must be 2 to 1000", reader.at));
    }
    Ok(QueueMapping {
        queue: reader.logical_id(&p["Queue"], "Queue")?,
        batch_size,
        item_failures: item_failures(reader, p)?,
        max_concurrency,
    })
}

/// `FunctionResponseTypes`: `[ReportBatchItemFailures]` or nothing.
fn item_failures(reader: &Reader<'_>, p: &Value) -> Result<bool, String> {
    let types = p["FunctionResponseTypes"].as_sequence().cloned().unwrap_or_default();
    match types.iter().map(Value::as_str).collect::<Vec<_>>().as_slice() {
        [] => Ok(false),
        [Some("ReportBatchItemFailures")] => Ok(true),
        other => Err(format!(
            "{}: FunctionResponseTypes {other:?} is not emulated locally",
            reader.at
        )),
    }
}
