//! Reading a DynamoDB stream as Lambda's event source mapping does, against DynamoDB Local: the shards in
//! lineage order (a parent before its children, so a key's changes keep their order across a split), an
//! iterator from a shard's start, its end or after a sequence number, and each SDK record turned into the JSON
//! Lambda delivers (`Records[]` of a DynamoDB Streams event). Both the in-process pump (`stream_pump`) and the
//! mapping on a function (`stream_mapping`) read through it.

use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How far DynamoDB Local's `ApproximateCreationDateTime` may be before the record's real creation.
const ROUNDING: Duration = Duration::from_secs(60);

/// One shard of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    pub id: String,
    /// The shard it was split from, if that one is still listed.
    pub parent: Option<String>,
    /// Closed: it has an ending sequence number and takes no more records.
    pub closed: bool,
}

/// Where an iterator starts in a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// The oldest record kept (`TRIM_HORIZON`).
    Start,
    /// Only what is written from now on (`LATEST`).
    End,
    /// Just after this sequence number (a checkpoint).
    After(String),
}

/// One record as the mapping handles it: Lambda's JSON, its sequence number and when it reached the stream.
#[derive(Debug, Clone)]
pub struct StreamRecord {
    pub lambda: Value,
    pub sequence: String,
    /// `ApproximateCreationDateTime` (what `MaximumRecordAgeInSeconds` is measured from).
    pub arrival: SystemTime,
}

/// A table's stream, read through DynamoDB Streams' API.
#[derive(Clone)]
pub struct StreamReader {
    streams: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
}

/// The Lambda (DynamoDB Streams) JSON of one SDK stream record.
pub fn lambda_record(record: &Record, stream_arn: &str) -> Result<Value, BoxError> {
    let change = record.dynamodb().ok_or("record without dynamodb")?;
    let image =
        |item: Option<&HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| -> Result<Value, BoxError> {
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

/// A record's sequence number (every stream record has one).
pub fn sequence_number(record: &Record) -> String {
    record
        .dynamodb()
        .and_then(|d| d.sequence_number())
        .unwrap_or_default()
        .to_owned()
}

impl StreamReader {
    #[must_use]
    pub fn new(streams: aws_sdk_dynamodbstreams::Client, stream_arn: String) -> Self {
        Self { streams, stream_arn }
    }

    /// The reader of `table`'s latest stream.
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
        Ok(Self::new(streams, stream_arn))
    }

    /// The stream's ARN.
    #[must_use]
    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// Shards in lineage order: a parent before its children.
    pub async fn shards(&self) -> Result<Vec<Shard>, BoxError> {
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
                let id = shard.shard_id().unwrap_or_default().to_owned();
                let parent = shard.parent_shard_id().map(str::to_owned);
                shards.push(Shard { id, parent, closed });
            }
            start = description.last_evaluated_shard_id().map(str::to_owned);
            if start.is_none() {
                break;
            }
        }
        Ok(lineage_order(shards))
    }

    /// An iterator on `shard` at `position` (`None`: the shard is gone).
    pub async fn iterator(&self, shard: &str, position: &Position) -> Result<Option<String>, BoxError> {
        let request = self
            .streams
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard);
        let request = match position {
            Position::Start => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            Position::End => request.shard_iterator_type(ShardIteratorType::Latest),
            Position::After(seq) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
        };
        Ok(request.send().await?.shard_iterator().map(str::to_owned))
    }

    /// Up to `limit` SDK records from `iterator`, and the next iterator (`None`: a closed shard's end).
    pub async fn records(&self, iterator: &str, limit: i32) -> Result<(Vec<Record>, Option<String>), BoxError> {
        let out = self
            .streams
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await?;
        Ok((out.records().to_vec(), out.next_shard_iterator().map(str::to_owned)))
    }

    /// `record` as the mapping handles it, read now. Its arrival is its `ApproximateCreationDateTime`, which
    /// DynamoDB Local rounds down to the minute: for a record younger than that the time it is read stands in
    /// (the mapping reads a few times a second), so a record age of seconds is measured as Lambda does.
    pub fn mapped(&self, record: &Record) -> Result<StreamRecord, BoxError> {
        let read = SystemTime::now();
        let created = record
            .dynamodb()
            .and_then(|d| d.approximate_creation_date_time())
            .and_then(|t| SystemTime::try_from(*t).ok());
        let arrival = match created {
            Some(created) if read.duration_since(created).is_ok_and(|age| age > ROUNDING) => created,
            _ => read,
        };
        Ok(StreamRecord {
            lambda: lambda_record(record, &self.stream_arn)?,
            sequence: sequence_number(record),
            arrival,
        })
    }
}

/// `shards` ordered parents first; a parent no longer listed (trimmed) counts as read and is forgotten.
fn lineage_order(mut shards: Vec<Shard>) -> Vec<Shard> {
    let ids: HashSet<String> = shards.iter().map(|s| s.id.clone()).collect();
    for shard in &mut shards {
        shard.parent = shard.parent.take().filter(|p| ids.contains(p));
    }
    let mut ordered: Vec<Shard> = Vec::new();
    let mut placed: HashSet<String> = HashSet::new();
    while ordered.len() < shards.len() {
        let before = ordered.len();
        for shard in &shards {
            let parent_ready = shard.parent.as_ref().is_none_or(|p| placed.contains(p));
            if !placed.contains(&shard.id) && parent_ready {
                placed.insert(shard.id.clone());
                ordered.push(shard.clone());
            }
        }
        if ordered.len() == before {
            break; // a lineage cycle cannot happen; stop rather than spin
        }
    }
    ordered
}
