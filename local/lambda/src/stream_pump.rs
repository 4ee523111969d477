//! The stream's records handed to a handler in this process (the relay's code, in the tests that drive it
//! step by step): each batch in the exact shape Lambda delivers, read through `stream_reader`. A checkpoint
//! per shard advances only past records the handler did not report as failed, so a reported record and
//! everything after it is delivered again on the next poll, as the real mapping does with
//! ReportBatchItemFailures. The mapping on a function as Lambda runs it is `stream_mapping`.

use crate::stream_reader::{sequence_number, Position, StreamReader};
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use aws_sdk_dynamodbstreams::types::Record;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::future::Future;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub struct StreamPump {
    reader: StreamReader,
    /// Last sequence number handled per shard.
    checkpoints: HashMap<String, String>,
    /// Closed shards read to their end.
    finished: HashSet<String>,
    pub batch_size: i32,
}

impl StreamPump {
    /// A pump on `table`'s latest stream.
    pub async fn for_table(
        dynamodb: &aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        table: &str,
    ) -> Result<Self, BoxError> {
        Ok(Self {
            reader: StreamReader::for_table(dynamodb, streams, table).await?,
            checkpoints: HashMap::new(),
            finished: HashSet::new(),
            batch_size: 100,
        })
    }

    /// Reads every shard once up to its current end and delivers the records in batches. Returns how many
    /// records the handler accepted. A batch with failures stops that shard for this poll.
    pub async fn poll_once<F, Fut>(&mut self, mut handler: F) -> Result<usize, BoxError>
    where
        F: FnMut(StreamEvent) -> Fut,
        Fut: Future<Output = DynamoDbEventResponse>,
    {
        let mut accepted = 0;
        for shard in self.reader.shards().await? {
            if self.finished.contains(&shard.id) {
                continue;
            }
            let (handled, shard_done) = self.pump_shard(&shard.id, &mut handler).await?;
            accepted += handled;
            if shard.closed && shard_done {
                self.finished.insert(shard.id);
            }
        }
        Ok(accepted)
    }

    /// Delivers one shard's records from its checkpoint to its current end, a batch at a time, stopping at
    /// the first batch with a failure. Returns the records accepted and whether the shard's end was reached
    /// (no next iterator), which for a closed shard means it is finished.
    async fn pump_shard<F, Fut>(&mut self, shard: &str, handler: &mut F) -> Result<(usize, bool), BoxError>
    where
        F: FnMut(StreamEvent) -> Fut,
        Fut: Future<Output = DynamoDbEventResponse>,
    {
        let mut accepted = 0;
        let position = self
            .checkpoints
            .get(shard)
            .map_or(Position::Start, |seq| Position::After(seq.clone()));
        let Some(mut iterator) = self.reader.iterator(shard, &position).await? else {
            return Ok((0, false));
        };
        loop {
            let (records, next) = self.reader.records(&iterator, self.batch_size).await?;
            if records.is_empty() {
                return Ok((accepted, next.is_none()));
            }
            let failed = self.deliver(&records, handler).await?;
            let (handled, all_ok) = self.checkpoint(shard, &records, &failed);
            accepted += handled;
            if !all_ok {
                return Ok((accepted, false));
            }
            match next {
                Some(next) => iterator = next,
                None => return Ok((accepted, true)),
            }
        }
    }

    /// Hands `records` to the handler as Lambda's event; returns the sequence numbers it reported failed.
    async fn deliver<F, Fut>(&self, records: &[Record], handler: &mut F) -> Result<HashSet<String>, BoxError>
    where
        F: FnMut(StreamEvent) -> Fut,
        Fut: Future<Output = DynamoDbEventResponse>,
    {
        let lambda: Vec<serde_json::Value> = records
            .iter()
            .map(|r| self.reader.mapped(r).map(|r| r.lambda))
            .collect::<Result<_, _>>()?;
        let event: StreamEvent = serde_json::from_value(json!({ "Records": lambda }))?;
        let response = handler(event).await;
        Ok(response
            .batch_item_failures
            .iter()
            .filter_map(|f| f.item_identifier.clone())
            .collect())
    }

    /// Moves the shard's checkpoint past the records handled, up to the first reported failed (that one and
    /// all after it come again on the next poll). Returns how many were accepted and whether all were.
    fn checkpoint(&mut self, shard: &str, records: &[Record], failed: &HashSet<String>) -> (usize, bool) {
        let mut accepted = 0;
        for record in records {
            let seq = sequence_number(record);
            if failed.contains(&seq) {
                return (accepted, false);
            }
            self.checkpoints.insert(shard.to_owned(), seq);
            accepted += 1;
        }
        (accepted, true)
    }
}
