//! The local stand-in for the DynamoDB Streams event source mapping: reads DynamoDB Local's stream
//! (DescribeStream, GetShardIterator, GetRecords), parents before children along the shard lineage, and
//! hands each batch to a handler in the exact shape Lambda delivers. A checkpoint per shard advances only
//! past records the handler did not report as failed, so a reported record and everything after it is
//! delivered again on the next poll, as the real mapping does with ReportBatchItemFailures.

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::future::Future;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub struct StreamPump {
    streams: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
    /// Last sequence number handled per shard.
    checkpoints: HashMap<String, String>,
    /// Closed shards read to their end.
    finished: HashSet<String>,
    pub batch_size: i32,
}

/// The Lambda (DynamoDB Streams) JSON of one SDK stream record.
fn lambda_record(record: &Record, stream_arn: &str) -> Result<serde_json::Value, BoxError> {
    let change = record.dynamodb().ok_or("record without dynamodb")?;
    let image = |item: Option<&HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| -> Result<serde_json::Value, BoxError> {
        match item {
            Some(item) => {
                let item: serde_dynamo::Item = item.clone().into();
                Ok(serde_json::to_value(item)?)
            }
            None => Ok(json!({})),
        }
    };
    Ok(json!({
        "eventID": record.event_id(),
        "eventName": record.event_name().map(|n| n.as_str()).unwrap_or_default(),
        "eventVersion": record.event_version(),
        "eventSource": "aws:dynamodb",
        "awsRegion": record.aws_region().unwrap_or("us-east-1"),
        "eventSourceARN": stream_arn,
        "dynamodb": {
            "ApproximateCreationDateTime": change.approximate_creation_date_time().map(|t| t.as_secs_f64()).unwrap_or(0.0),
            "Keys": image(change.keys())?,
            "NewImage": image(change.new_image())?,
            "OldImage": image(change.old_image())?,
            "SequenceNumber": change.sequence_number(),
            "SizeBytes": change.size_bytes().unwrap_or(0),
            "StreamViewType": change.stream_view_type().map(|v| v.as_str()).unwrap_or("NEW_IMAGE"),
        }
    }))
}

impl StreamPump {
    /// A pump on `table`'s latest stream.
    pub async fn for_table(
        dynamodb: &aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        table: &str,
    ) -> Result<Self, BoxError> {
        let described = dynamodb.describe_table().table_name(table).send().await?;
        let stream_arn = described
            .table()
            .and_then(|t| t.latest_stream_arn())
            .ok_or("the table has no stream")?
            .to_owned();
        Ok(Self {
            streams,
            stream_arn,
            checkpoints: HashMap::new(),
            finished: HashSet::new(),
            batch_size: 100,
        })
    }

    /// Shards in lineage order: a parent before its children.
    async fn shards(&self) -> Result<Vec<(String, bool)>, BoxError> {
        let mut shards = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .streams
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.clone())
                .send()
                .await?;
            let description = out.stream_description().ok_or("no stream description")?;
            for shard in description.shards() {
                let closed = shard
                    .sequence_number_range()
                    .and_then(|r| r.ending_sequence_number())
                    .is_some();
                shards.push((
                    shard.shard_id().unwrap_or_default().to_owned(),
                    shard.parent_shard_id().map(str::to_owned),
                    closed,
                ));
            }
            start = description.last_evaluated_shard_id().map(str::to_owned);
            if start.is_none() {
                break;
            }
        }
        let ids: HashSet<String> = shards.iter().map(|(id, _, _)| id.clone()).collect();
        let mut ordered = Vec::new();
        let mut placed: HashSet<String> = HashSet::new();
        while ordered.len() < shards.len() {
            let before = ordered.len();
            for (id, parent, closed) in &shards {
                let parent_ready = parent.as_ref().is_none_or(|p| !ids.contains(p) || placed.contains(p));
                if !placed.contains(id) && parent_ready {
                    placed.insert(id.clone());
                    ordered.push((id.clone(), *closed));
                }
            }
            if ordered.len() == before {
                break; // a lineage cycle cannot happen; stop rather than spin
            }
        }
        Ok(ordered)
    }

    /// Reads every shard once up to its current end and delivers the records in batches. Returns how many
    /// records the handler accepted. A batch with failures stops that shard for this poll.
    pub async fn poll_once<F, Fut>(&mut self, mut handler: F) -> Result<usize, BoxError>
    where
        F: FnMut(StreamEvent) -> Fut,
        Fut: Future<Output = DynamoDbEventResponse>,
    {
        let mut accepted = 0;
        for (shard, closed) in self.shards().await? {
            if self.finished.contains(&shard) {
                continue;
            }
            let (handled, shard_done) = self.pump_shard(&shard, &mut handler).await?;
            accepted += handled;
            if closed && shard_done {
                self.finished.insert(shard);
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
        let Some(mut iterator) = self.shard_iterator(shard).await? else {
            return Ok((0, false));
        };
        loop {
            let out = self
                .streams
                .get_records()
                .shard_iterator(&iterator)
                .limit(self.batch_size)
                .send()
                .await?;
            let records = out.records();
            if records.is_empty() {
                return Ok((accepted, out.next_shard_iterator().is_none()));
            }
            let failed = self.deliver(records, handler).await?;
            let (handled, all_ok) = self.checkpoint(shard, records, &failed);
            accepted += handled;
            if !all_ok {
                return Ok((accepted, false));
            }
            match out.next_shard_iterator() {
                Some(next) => iterator = next.to_owned(),
                None => return Ok((accepted, true)),
            }
        }
    }

    /// An iterator on `shard` just after its checkpoint, or at its oldest record when none was handled yet.
    async fn shard_iterator(&self, shard: &str) -> Result<Option<String>, BoxError> {
        let request = self
            .streams
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard);
        let request = match self.checkpoints.get(shard) {
            Some(seq) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
            None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        Ok(request.send().await?.shard_iterator().map(str::to_owned))
    }

    /// Hands `records` to the handler as Lambda's event; returns the sequence numbers it reported failed.
    async fn deliver<F, Fut>(&self, records: &[Record], handler: &mut F) -> Result<HashSet<String>, BoxError>
    where
        F: FnMut(StreamEvent) -> Fut,
        Fut: Future<Output = DynamoDbEventResponse>,
    {
        let lambda: Vec<serde_json::Value> = records
            .iter()
            .map(|r| lambda_record(r, &self.stream_arn))
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
            let seq = record
                .dynamodb()
                .and_then(|d| d.sequence_number())
                .unwrap_or_default()
                .to_owned();
            if failed.contains(&seq) {
                return (accepted, false);
            }
            self.checkpoints.insert(shard.to_owned(), seq);
            accepted += 1;
        }
        (accepted, true)
    }
}
