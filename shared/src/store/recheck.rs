//! Objects to read again at Stripe: the durable hand-over from the webhook intake to recovery when Stripe
//! says it failed to generate an event (`v2.core.health.event_generation_failure.resolved`). That event is
//! never delivered nor listed, so neither a webhook nor the catch-up will tell us what changed; only a read
//! of the object it names does, and a captured payment's refund or dispute is never asked about otherwise.
//!
//! One item per failure event, `pk = RECHECK#<event id>`, written by the intake before it answers 2xx
//! (conditional on `attribute_not_exists(pk)`: Stripe's retry of the same event is a duplicate), in the
//! `open-items` index (`open_shard = RECHECK#n`, `opened_at_ms` = when it came) so recovery's next run finds
//! it due at once, without a Scan. Recovery deletes it once the object is read and applied ([`done`]); until
//! then it stays due every run, so how long the oldest has waited is recovery's lag (alarmed).

use super::open_index::{due_items, shard_of, DueItems, OpenKind, OpenShards};
use super::StoreError;
use crate::keys::{self, RECHECK_PK_PREFIX};
use crate::PspEventId;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

/// Records that the object Stripe's failure event `event` names is to be read again (received at
/// `now_ms`), under its shard among `shards`. `false` when it was recorded already (Stripe's retry of the
/// same event): nothing is written.
pub async fn record(
    client: &Client,
    table: &str,
    shards: OpenShards,
    event: &PspEventId,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let result = client
        .put_item()
        .table_name(table)
        .set_item(Some(keys::recheck(event)))
        .item("event_id", AttributeValue::S(event.to_string()))
        .item("received_at_ms", AttributeValue::N(now_ms.to_string()))
        .item(
            "open_shard",
            AttributeValue::S(shard_of(OpenKind::Recheck, event.as_str(), shards)),
        )
        .item("opened_at_ms", AttributeValue::N(now_ms.to_string()))
        .condition_expression("attribute_not_exists(pk)")
        .send()
        .await;
    StoreError::condition_held("record an object to read again", result)
}

/// A failure event whose object is still to be read, and when it came (epoch ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRecheck {
    pub event: PspEventId,
    pub received_at_ms: i64,
}

/// The failure events whose objects are still to be read, at most `limit`, oldest first per shard; all are
/// due at once (their sort key is when they came, never backed off). Eventually consistent: one read and
/// applied just now may still be listed, and [`done`] for it again is no error.
pub async fn due(
    client: &Client,
    table: &str,
    shards: OpenShards,
    now_ms: i64,
    limit: usize,
) -> Result<(Vec<DueRecheck>, DueItems), StoreError> {
    let found = due_items(client, table, shards, OpenKind::Recheck, now_ms, limit).await?;
    let events = found
        .keys
        .iter()
        .zip(&found.sort_ms)
        .filter_map(|(pk, received)| {
            let event = PspEventId::parse(pk.strip_prefix(RECHECK_PK_PREFIX)?).ok()?;
            Some(DueRecheck {
                event,
                received_at_ms: received.unwrap_or(now_ms),
            })
        })
        .collect();
    Ok((events, found))
}

/// The object of `event` was read and what it said applied (or it is not ours): nothing is left to do.
/// Deleting one already gone is no error.
pub async fn done(client: &Client, table: &str, event: &PspEventId) -> Result<(), StoreError> {
    client
        .delete_item()
        .table_name(table)
        .set_key(Some(keys::recheck(event)))
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("delete an object read again", e))?;
    Ok(())
}
