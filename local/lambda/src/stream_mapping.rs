//! The DynamoDB Streams event source mapping on a function as Lambda runs it (`function_pool`): the shards
//! read in lineage order through `stream_reader`, each record checked against the mapping's `FilterCriteria`
//! (one that no pattern matches is skipped, its position passed), batches of up to `BatchSize` gathered within
//! `MaximumBatchingWindowInSeconds`, one batch per shard at a time so a key's changes keep their order.
//! A batch ends in one of Lambda's ways: done; item failures (`batchItemFailures`, by sequence number) retry
//! from the first failed record (an identifier not in the batch fails it whole); a function error, a timeout
//! or an exited runtime fails it whole and, with `BisectBatchOnFunctionError`, splits it in two (a split uses
//! no retry); a throttle waits and tries again without counting. Past `MaximumRetryAttempts` (none: until the
//! record expires) or `MaximumRecordAgeInSeconds` (none: the stream's 24 h) the records are dropped, with
//! Lambda's stream failure record (`DDBStreamBatchInfo`) sent to the on-failure queue, and the shard moves on.
//! The waits are [`Waits`]: near Lambda's by default, shorter in tests.

use crate::function_pool::{FunctionPool, Outcome};
use crate::stream_reader::{Position, Shard, StreamReader, StreamRecord};
use crate::triggers::mapping::StreamMapping;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long DynamoDB Streams keeps a record: a mapping without `MaximumRecordAgeInSeconds` retries this long.
const STREAM_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// The most records one GetRecords returns (DynamoDB Streams' limit).
const READ_LIMIT: i32 = 1000;

/// The mapping's waits.
#[derive(Debug, Clone)]
pub struct Waits {
    /// Between polls of a shard with nothing new (Lambda polls each shard four times a second).
    pub poll: Duration,
    /// Before a failed batch is tried again (Lambda retries at once, give or take).
    pub retry: Duration,
    /// Before a throttled batch is tried again.
    pub throttle: Duration,
    /// After an error reading the stream, before reading again.
    pub read_error: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(250),
            retry: Duration::from_millis(100),
            throttle: Duration::from_secs(1),
            read_error: Duration::from_secs(1),
        }
    }
}

/// Starts the mapping of `stream_arn` to `function` with Lambda's waits; it runs until aborted.
pub fn start(
    streams: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
    mapping: StreamMapping,
    function: Arc<FunctionPool>,
    on_failure: Option<(aws_sdk_sqs::Client, String)>,
) -> tokio::task::JoinHandle<()> {
    let consumer = StreamConsumer {
        reader: StreamReader::new(streams, stream_arn),
        mapping,
        function,
        on_failure,
        waits: Waits::default(),
    };
    consumer.start()
}

/// What one invocation of a batch came to, as the mapping reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every record is done.
    Done,
    /// The records from this index on failed (the first reported item failure).
    FailedFrom(usize),
    /// The batch failed whole: the function's error payload, or Lambda's reading of its answer.
    Failed(Value),
    /// Not invoked: the reservation is busy.
    Throttled,
}

/// Reads `outcome` for `records`: with `item_failures` (`ReportBatchItemFailures`) an answer's
/// `batchItemFailures` (absent, null or empty: done; an identifier not in the batch: failed whole), without it
/// any answer is done.
#[must_use]
pub fn verdict(outcome: Result<Outcome, BoxError>, records: &[StreamRecord], item_failures: bool) -> Verdict {
    let answer = match outcome {
        Ok(Outcome::Response(answer)) => answer,
        Ok(Outcome::FunctionError(payload)) => return Verdict::Failed(payload),
        Ok(Outcome::Throttled) => return Verdict::Throttled,
        Err(e) => {
            return Verdict::Failed(json!({"errorType": "Lambda.ServiceException", "errorMessage": e.to_string()}))
        }
    };
    let Some(failures) = answer.get("batchItemFailures").and_then(Value::as_array) else {
        return Verdict::Done;
    };
    if !item_failures || failures.is_empty() {
        return Verdict::Done;
    }
    let mut first = records.len();
    for failure in failures {
        let id = failure
            .get("itemIdentifier")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match records.iter().position(|r| r.sequence == id) {
            Some(at) => first = first.min(at),
            None => {
                let message = format!("batchItemFailures names {id:?}, no record of the batch");
                return Verdict::Failed(json!({"errorType": "InvalidBatchItemFailure", "errorMessage": message}));
            }
        }
    }
    Verdict::FailedFrom(first)
}

/// Records on their way through the function, with what Lambda counts of them.
struct Attempt {
    records: Vec<StreamRecord>,
    /// Retries used (a bisection uses none).
    retries: u64,
    /// Invocations that ran with these records.
    invocations: u64,
    /// How the last run ended: `Some(true)` a function error, `Some(false)` item failures.
    function_error: Option<bool>,
}

/// One shard's reading position and the records read but not yet delivered.
struct ShardState {
    position: Position,
    iterator: Option<String>,
    buffer: VecDeque<StreamRecord>,
    /// When the oldest buffered record was read (the batching window runs from it).
    gathering_since: Option<Instant>,
    /// No next iterator: a closed shard read to its end.
    ended: bool,
}

impl ShardState {
    fn new(position: Position) -> Self {
        Self {
            position,
            iterator: None,
            buffer: VecDeque::new(),
            gathering_since: None,
            ended: false,
        }
    }

    fn finished(&self) -> bool {
        self.ended && self.buffer.is_empty()
    }

    /// The next batch once it is full, its window is over, or the shard has ended.
    fn take_batch(&mut self, size: usize, window: Duration) -> Option<Vec<StreamRecord>> {
        let due = self.gathering_since.is_some_and(|since| since.elapsed() >= window);
        if self.buffer.is_empty() || (self.buffer.len() < size && !due && !self.ended) {
            return None;
        }
        let batch: Vec<StreamRecord> = self.buffer.drain(..size.min(self.buffer.len())).collect();
        self.gathering_since = (!self.buffer.is_empty()).then(Instant::now);
        Some(batch)
    }
}

/// The mapping of one stream to one function.
pub struct StreamConsumer {
    pub reader: StreamReader,
    pub mapping: StreamMapping,
    pub function: Arc<FunctionPool>,
    /// The on-failure destination's client and queue URL.
    pub on_failure: Option<(aws_sdk_sqs::Client, String)>,
    pub waits: Waits,
}

impl StreamConsumer {
    /// Runs the mapping in the background until aborted: an error reading the stream is reported and the
    /// read tried again after `waits.read_error`, never the end of the mapping.
    pub fn start(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut shards: HashMap<String, ShardState> = HashMap::new();
            let mut first = true;
            loop {
                match self.pass(&mut shards, first).await {
                    Ok(busy) => {
                        // The shards of the first pass that read them are those `LATEST` starts at the end of.
                        first = false;
                        if !busy {
                            tokio::time::sleep(self.waits.poll).await;
                        }
                    }
                    Err(e) => {
                        eprintln!("stream mapping of {}: {e}", self.function.name());
                        tokio::time::sleep(self.waits.read_error).await;
                    }
                }
            }
        })
    }

    /// One pass over the shards, parents before children (a child waits for its parent to finish): reads
    /// what is new and delivers what is due. Whether anything was read or delivered.
    async fn pass(&self, shards: &mut HashMap<String, ShardState>, first: bool) -> Result<bool, BoxError> {
        let mut busy = false;
        for shard in self.reader.shards().await? {
            let parent_pending = shard
                .parent
                .as_ref()
                .and_then(|p| shards.get(p))
                .is_some_and(|p| !p.finished());
            let state = shards
                .entry(shard.id.clone())
                .or_insert_with(|| self.starting_state(&shard, first));
            if parent_pending || state.finished() {
                continue;
            }
            busy |= self.read(&shard, state).await?;
            let size = usize::try_from(self.mapping.batch_size).unwrap_or(usize::MAX).max(1);
            if let Some(batch) = state.take_batch(size, self.mapping.batching_window) {
                self.deliver(&shard.id, batch).await;
                busy = true;
            }
        }
        Ok(busy)
    }

    /// Where a shard is first read: `TRIM_HORIZON` from its start; `LATEST` from the end of the shards open at
    /// the start (the closed ones skipped), and from the start of shards that open later.
    fn starting_state(&self, shard: &Shard, first: bool) -> ShardState {
        if !first || self.mapping.starting_position != "LATEST" {
            return ShardState::new(Position::Start);
        }
        let mut state = ShardState::new(Position::End);
        state.ended = shard.closed;
        state
    }

    /// Reads the shard's new records into its buffer, those no filter matches skipped. Whether any came.
    async fn read(&self, shard: &Shard, state: &mut ShardState) -> Result<bool, BoxError> {
        if state.ended {
            return Ok(false);
        }
        let iterator = match state.iterator.take() {
            Some(iterator) => iterator,
            None => match self.reader.iterator(&shard.id, &state.position).await? {
                Some(iterator) => iterator,
                None => {
                    state.ended = true;
                    return Ok(false);
                }
            },
        };
        let (records, next) = self.reader.records(&iterator, READ_LIMIT).await?;
        for record in &records {
            let record = self.reader.mapped(record)?;
            state.position = Position::After(record.sequence.clone());
            let filters = &self.mapping.filters;
            if filters.is_empty() || filters.iter().any(|f| f.matches(&record.lambda)) {
                state.gathering_since.get_or_insert_with(Instant::now);
                state.buffer.push_back(record);
            }
        }
        state.ended = next.is_none();
        state.iterator = next;
        Ok(!records.is_empty())
    }

    /// Runs `batch` to its end: every record done or dropped (sent to the on-failure destination).
    async fn deliver(&self, shard: &str, batch: Vec<StreamRecord>) {
        let first = Attempt {
            records: batch,
            retries: 0,
            invocations: 0,
            function_error: None,
        };
        let mut work = VecDeque::from([first]);
        while let Some(mut attempt) = work.pop_front() {
            let expired = self.expired(&attempt.records);
            if expired > 0 {
                let rest = attempt.records.split_off(expired);
                self.discard(shard, &attempt, "RecordAgeExceeded").await;
                attempt.records = rest;
            }
            if attempt.records.is_empty() {
                continue;
            }
            let event = json!({"Records": attempt.records.iter().map(|r| &r.lambda).collect::<Vec<_>>()});
            let outcome = self.function.invoke(event).await;
            match verdict(outcome, &attempt.records, self.mapping.item_failures) {
                Verdict::Done => {}
                Verdict::Throttled => {
                    tokio::time::sleep(self.waits.throttle).await;
                    work.push_front(attempt);
                }
                Verdict::FailedFrom(at) => {
                    attempt.records.drain(..at);
                    attempt.invocations += 1;
                    attempt.function_error = Some(false);
                    self.retry_or_discard(shard, attempt, &mut work).await;
                }
                Verdict::Failed(_) => {
                    attempt.invocations += 1;
                    attempt.function_error = Some(true);
                    if self.mapping.bisect && attempt.records.len() > 1 {
                        let half = attempt.records.len() / 2;
                        let second = attempt.records.split_off(half);
                        let (retries, invocations) = (attempt.retries, attempt.invocations);
                        let second = Attempt {
                            records: second,
                            retries,
                            invocations,
                            function_error: Some(true),
                        };
                        work.push_front(second);
                        work.push_front(attempt);
                    } else {
                        self.retry_or_discard(shard, attempt, &mut work).await;
                    }
                }
            }
        }
    }

    /// How many of `records` (oldest first) are past the mapping's record age.
    fn expired(&self, records: &[StreamRecord]) -> usize {
        let max_age = self.mapping.max_record_age.unwrap_or(STREAM_RETENTION);
        records
            .iter()
            .take_while(|r| r.arrival.elapsed().is_ok_and(|age| age > max_age))
            .count()
    }

    /// Tries the records again after `waits.retry`, or drops them once the retries are used up.
    async fn retry_or_discard(&self, shard: &str, mut attempt: Attempt, work: &mut VecDeque<Attempt>) {
        if self.mapping.max_retries.is_some_and(|max| attempt.retries >= max) {
            self.discard(shard, &attempt, "RetryAttemptsExhausted").await;
            return;
        }
        attempt.retries += 1;
        tokio::time::sleep(self.waits.retry).await;
        work.push_front(attempt);
    }

    /// Drops the records of `attempt`, sending Lambda's failure record to the on-failure destination. A send
    /// that fails is tried twice more, then the record is written to stderr: the mapping moves on as Lambda's
    /// does.
    async fn discard(&self, shard: &str, attempt: &Attempt, condition: &str) {
        let Some((sqs, queue_url)) = &self.on_failure else {
            return;
        };
        let record = failure_record(self, shard, attempt, condition).to_string();
        for _ in 0..3 {
            let sent = sqs
                .send_message()
                .queue_url(queue_url)
                .message_body(&record)
                .send()
                .await;
            match sent {
                Ok(_) => return,
                Err(e) => {
                    eprintln!("stream mapping: send to the on-failure destination {queue_url}: {e:?}");
                    tokio::time::sleep(self.waits.retry).await;
                }
            }
        }
        eprintln!("stream mapping: the failure record not delivered: {record}");
    }
}

/// Lambda's record of dropped stream records (what its on-failure destination receives for a DynamoDB
/// stream): no records, where they are in the stream.
fn failure_record(consumer: &StreamConsumer, shard: &str, attempt: &Attempt, condition: &str) -> Value {
    let (first, last) = (attempt.records.first(), attempt.records.last());
    let seconds = |r: Option<&StreamRecord>| r.map(|r| humantime::format_rfc3339_seconds(r.arrival).to_string());
    let mut record = json!({
        "requestContext": {
            "requestId": uuid::Uuid::new_v4().to_string(),
            "functionArn": consumer.function.arn(),
            "condition": condition,
            "approximateInvokeCount": attempt.invocations,
        },
        "version": "1.0",
        "timestamp": humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        "DDBStreamBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": first.map(|r| &r.sequence),
            "endSequenceNumber": last.map(|r| &r.sequence),
            "approximateArrivalOfFirstRecord": seconds(first),
            "approximateArrivalOfLastRecord": seconds(last),
            "batchSize": attempt.records.len(),
            "streamArn": consumer.reader.stream_arn(),
        },
    });
    // What the last run answered: a function error, or an answer with item failures (no function error).
    if let Some(function_error) = attempt.function_error {
        record["responseContext"] = json!({
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": function_error.then_some("Unhandled"),
        });
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(sequences: &[&str]) -> Vec<StreamRecord> {
        sequences
            .iter()
            .map(|s| StreamRecord {
                lambda: json!({}),
                sequence: (*s).to_owned(),
                arrival: SystemTime::now(),
            })
            .collect()
    }

    fn answered(answer: Value) -> Result<Outcome, BoxError> {
        Ok(Outcome::Response(answer))
    }

    #[test]
    fn item_failures_fail_from_the_first_named_record() {
        let batch = records(&["10", "20", "30"]);
        let answer = json!({"batchItemFailures": [{"itemIdentifier": "30"}, {"itemIdentifier": "20"}]});
        assert_eq!(verdict(answered(answer), &batch, true), Verdict::FailedFrom(1));
    }

    #[test]
    fn no_failure_listed_is_done_and_without_report_batch_item_failures_the_list_is_not_read() {
        let batch = records(&["10"]);
        for answer in [
            json!({}),
            json!({"batchItemFailures": []}),
            json!({"batchItemFailures": null}),
            json!("ok"),
        ] {
            assert_eq!(verdict(answered(answer), &batch, true), Verdict::Done);
        }
        let answer = json!({"batchItemFailures": [{"itemIdentifier": "10"}]});
        assert_eq!(verdict(answered(answer), &batch, false), Verdict::Done);
    }

    #[test]
    fn an_identifier_not_in_the_batch_fails_it_whole() {
        let batch = records(&["10", "20"]);
        for failure in [
            json!({"itemIdentifier": "99"}),
            json!({"itemIdentifier": ""}),
            json!({}),
        ] {
            let answer = json!({"batchItemFailures": [failure]});
            let got = verdict(answered(answer), &batch, true);
            assert!(matches!(got, Verdict::Failed(_)), "{got:?}");
        }
    }

    #[test]
    fn a_function_error_fails_whole_and_a_throttle_is_no_invocation() {
        let batch = records(&["10"]);
        let error = json!({"errorType": "Sandbox.Timedout"});
        let got = verdict(Ok(Outcome::FunctionError(error.clone())), &batch, true);
        assert_eq!(got, Verdict::Failed(error));
        assert_eq!(verdict(Ok(Outcome::Throttled), &batch, true), Verdict::Throttled);
    }
}
