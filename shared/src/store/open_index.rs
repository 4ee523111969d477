//! The sparse `open-items` index: what stayed open too long, found without a Scan.
//!
//! Only open items carry its key: a non-terminal payment, a checkout saga that is not completed or
//! compensated. The partition key `open_shard` is `<KIND>#<n>` with `n` a stable hash of the id modulo
//! [`OPEN_SHARDS`], never the status, so no partition turns hot; the sort key `opened_at_ms` is when the item
//! was opened (created, started) and never changes while it is open. A terminal write drops both attributes,
//! which removes the item from the index.
//!
//! Cost (KEYS_ONLY, entries far under 1 KB): 1 WCU when an item opens and 1 WCU when it closes. Writes in
//! between change no index key, so they write nothing to the index (had the sort key been the time of the
//! last change, every intermediate write would cost 2 more: delete and put of the entry).

use super::StoreError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

pub const OPEN_INDEX: &str = "open-items";
pub const OPEN_SHARDS: u64 = 8;

/// The kind of open item: the prefix of its shard key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    Payment,
    Saga,
}

impl OpenKind {
    fn prefix(self) -> &'static str {
        match self {
            OpenKind::Payment => "PAYMENT",
            OpenKind::Saga => "SAGA",
        }
    }
}

/// FNV-1a: stable across processes and releases (std's hasher is not).
fn stable_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub fn shard_of(kind: OpenKind, id: &str) -> String {
    format!("{}#{}", kind.prefix(), stable_hash(id) % OPEN_SHARDS)
}

/// The `pk`s of items of `kind` that opened at or before `opened_before_ms` and are still open, oldest first
/// per shard, at most `limit` in all. Eventually consistent: callers re-read each item before acting.
///
/// Fair to every shard: each gets an equal share of `limit` (at least one), so items that cannot be resolved
/// piling up in one shard never hide the other shards; when `limit` is smaller than the number of shards, the
/// first shard asked rotates with the clock, so every shard is reached over a few runs.
pub async fn open_since(
    client: &Client,
    table: &str,
    kind: OpenKind,
    opened_before_ms: i64,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let shards = usize::try_from(OPEN_SHARDS).unwrap_or(8);
    let share = (limit / shards).max(1);
    let first = usize::try_from(crate::clock::now_ms().rem_euclid(60_000) / 1000).unwrap_or(0);
    let mut found = Vec::new();
    for n in (0..shards).map(|i| (first + i) % shards) {
        let budget = share.min(limit.saturating_sub(found.len()));
        if budget == 0 {
            break;
        }
        found.extend(
            shard_since(
                client,
                table,
                &format!("{}#{n}", kind.prefix()),
                opened_before_ms,
                budget,
            )
            .await?,
        );
    }
    Ok(found)
}

/// Up to `budget` open items of one shard, oldest first.
async fn shard_since(
    client: &Client,
    table: &str,
    shard: &str,
    opened_before_ms: i64,
    budget: usize,
) -> Result<Vec<String>, StoreError> {
    let mut found = Vec::new();
    let mut start = None;
    loop {
        let remaining = budget.saturating_sub(found.len());
        if remaining == 0 {
            return Ok(found);
        }
        let out = client
            .query()
            .table_name(table)
            .index_name(OPEN_INDEX)
            .key_condition_expression("open_shard = :s AND opened_at_ms <= :t")
            .expression_attribute_values(":s", AttributeValue::S(shard.to_owned()))
            .expression_attribute_values(":t", AttributeValue::N(opened_before_ms.to_string()))
            .limit(i32::try_from(remaining).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("query open items", e))?;
        found.extend(
            out.items()
                .iter()
                .filter_map(|i| i.get("pk").and_then(|v| v.as_s().ok()).cloned()),
        );
        start = out.last_evaluated_key;
        if start.is_none() {
            return Ok(found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(
            shard_of(OpenKind::Payment, "pay_1"),
            shard_of(OpenKind::Payment, "pay_1")
        );
        assert!(shard_of(OpenKind::Saga, "order-1").starts_with("SAGA#"));
        let shards: std::collections::HashSet<_> = (0..200)
            .map(|i| shard_of(OpenKind::Payment, &format!("pay_{i}")))
            .collect();
        assert_eq!(shards.len() as u64, OPEN_SHARDS);
    }
}
