//! The sparse `open-items` index: what stayed open too long, found without a Scan.
//!
//! Only open items carry its key: a non-terminal payment, a checkout saga that is not completed or
//! compensated. The partition key `open_shard` is `<KIND>#<n>` with `n` a stable hash of the id modulo
//! the deployment's [`OpenShards`] (`OPEN_ITEMS_SHARDS`), never the status, so no partition turns hot; the sort key `opened_at_ms` is when the item
//! was opened (created, started) and never changes while it is open. A terminal write drops both attributes,
//! which removes the item from the index.
//!
//! Cost (KEYS_ONLY, entries far under 1 KB): 1 WCU when an item opens and 1 WCU when it closes. Writes in
//! between change no index key, so they write nothing to the index (had the sort key been the time of the
//! last change, every intermediate write would cost 2 more: delete and put of the entry).
//!
//! **Back-off.** An item its scanner looked at and could not resolve (a payment the PSP says nothing new
//! about, or has no PSP reference; a saga still waiting) is [`defer`]red: its sort key moves ahead so that it
//! is due again on an exponential schedule counted from its opening (after 1, 2, 4, 8, ... times the
//! scanner's threshold, at most [`MAX_RECHECK_INTERVAL`] apart). So `opened_at_ms` reads "due (minus the
//! threshold) at"; a write that changes the item puts it back to its opening time, so news is checked on
//! the normal schedule. Items that cannot be resolved thus cost fewer and fewer reads and never crowd out the
//! others (each shard also gets its share of every run, and what a shard leaves unused goes to the others).

use super::StoreError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

pub const OPEN_INDEX: &str = "open-items";

/// How many partition key values each kind of open item is spread over (`OPEN_ITEMS_SHARDS`, the template's
/// `OpenItemsShards`): each is one partition of the index, 1,000 write units a second at most, so a peak
/// needs more of them (`bench capacity` sizes it). **Only ever raised**: an item stays under the shard it
/// was written with until its next write, and `hash % old` is below any larger count, so readers that ask
/// every shard below the new count still find items written under the old one; lowered, the items above the
/// new count would be invisible to the scanners until their next write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenShards(u64);

impl OpenShards {
    /// The template's default, what every deployment before the setting used.
    pub const DEFAULT: OpenShards = OpenShards(8);
    /// The fewest allowed: the default, so no deployment can go below what its items were written with.
    pub const MIN: u64 = 8;
    /// The most allowed: every scanner run queries each shard at least once.
    pub const MAX: u64 = 256;

    /// `n` shards, within [`Self::MIN`]..=[`Self::MAX`] (the template's `MinValue`/`MaxValue`).
    pub fn new(n: u64) -> Option<Self> {
        (Self::MIN..=Self::MAX).contains(&n).then_some(Self(n))
    }

    /// The count.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl Default for OpenShards {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The kind of open item: the prefix of its shard key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    Payment,
    Saga,
    /// An object Stripe failed to generate an event about, to read again at once (`store::recheck`).
    Recheck,
}

impl OpenKind {
    fn prefix(self) -> &'static str {
        match self {
            OpenKind::Payment => "PAYMENT",
            OpenKind::Saga => "SAGA",
            OpenKind::Recheck => "RECHECK",
        }
    }
}

/// FNV-1a: stable across processes and releases (std's hasher is not).
fn stable_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The shard key of the item `id` of `kind` among `shards`.
pub fn shard_of(kind: OpenKind, id: &str, shards: OpenShards) -> String {
    format!(
        "{}#{}",
        kind.prefix(),
        stable_hash(id).checked_rem(shards.get()).unwrap_or(0)
    )
}

/// The `pk`s of items of `kind` that opened at or before `opened_before_ms` and are still open, oldest first
/// per shard, at most `limit` in all: [`due_items`]' keys.
pub async fn open_since(
    client: &Client,
    table: &str,
    shards: OpenShards,
    kind: OpenKind,
    opened_before_ms: i64,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    due_items(client, table, shards, kind, opened_before_ms, limit)
        .await
        .map(|due| due.keys)
}

/// What a scanner's query of the index found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueItems {
    /// The items' `pk`s, oldest first per shard.
    pub keys: Vec<String>,
    /// Each item's sort key (`opened_at_ms`), in the order of `keys`: when it opened, for an item never
    /// backed off (a recheck's is when it came).
    pub sort_ms: Vec<Option<i64>>,
    /// The smallest sort key among them: each shard's first item is its oldest, so this is the oldest due
    /// item of every shard asked (`None` when none is due). A deferred item's sort key is its next due time
    /// minus the threshold (see the module's back-off), so this is NOT when the item opened: an item backed
    /// off for days still has a recent sort key. The item's own record holds its opening time.
    pub oldest_ms: Option<i64>,
}

impl DueItems {
    /// How long the oldest of them has been due, in whole seconds, for a query of items with a sort key at or
    /// before `due_before_ms` (the scanner's `now - threshold`); 0 when none is due. This is the scanner's lag
    /// (it grows only when runs stop getting through), not the age of the oldest open item: see `oldest_ms`.
    pub fn lag_seconds(&self, due_before_ms: i64) -> u64 {
        self.oldest_ms.map_or(0, |oldest| {
            u64::try_from(due_before_ms.saturating_sub(oldest) / 1000).unwrap_or(0)
        })
    }
}

/// Whole seconds from `since_ms` to `now_ms`, 0 for a clock behind it: an open item's age from its opening.
pub fn age_seconds(since_ms: i64, now_ms: i64) -> u64 {
    u64::try_from(now_ms.saturating_sub(since_ms) / 1000).unwrap_or(0)
}

/// The items of `kind` that opened at or before `opened_before_ms` and are still open, oldest first per
/// shard, at most `limit` in all, and the oldest one's sort key. Eventually consistent: callers re-read each
/// item before acting.
///
/// Fair to every shard: each gets an equal share of `limit` (at least one), so items that cannot be resolved
/// piling up in one shard never hide the other shards; when `limit` is smaller than the number of shards, the
/// first shard asked rotates with the clock (one shard a second, over all of them), so every shard is reached
/// over a few runs. What a shard does
/// not use of its share goes to the shards that had more, a share at a time in the same order, each
/// continuing where it stopped: a run is never cut short by empty shards while another has a backlog.
pub async fn due_items(
    client: &Client,
    table: &str,
    shards: OpenShards,
    kind: OpenKind,
    opened_before_ms: i64,
    limit: usize,
) -> Result<DueItems, StoreError> {
    let shards = usize::try_from(shards.get()).unwrap_or(usize::MAX);
    let share = limit.checked_div(shards).unwrap_or(limit).max(1);
    // Counted over every shard (it was the second of the minute, which never reached a shard past 60).
    let first = usize::try_from((crate::clock::now_ms() / 1000).rem_euclid(i64::try_from(shards).unwrap_or(i64::MAX)))
        .unwrap_or(0);
    let mut found = DueItems::default();
    // The shards that filled their share and have more, each with where its query stopped.
    let mut more = Vec::new();
    for n in (0..shards).map(|i| first.saturating_add(i).checked_rem(shards).unwrap_or(0)) {
        let budget = share.min(limit.saturating_sub(found.keys.len()));
        if budget == 0 {
            break;
        }
        let shard = format!("{}#{n}", kind.prefix());
        let (items, rest) = shard_since(client, table, &shard, opened_before_ms, budget, None).await?;
        found.add(items);
        if let Some(rest) = rest {
            more.push((shard, rest));
        }
    }
    // Rounds of one more share each, so a second crowded shard is not starved by the first.
    while !more.is_empty() {
        let mut still = Vec::new();
        for (shard, rest) in more {
            let budget = share.min(limit.saturating_sub(found.keys.len()));
            if budget == 0 {
                return Ok(found);
            }
            let (items, rest) = shard_since(client, table, &shard, opened_before_ms, budget, Some(rest)).await?;
            found.add(items);
            if let Some(rest) = rest {
                still.push((shard, rest));
            }
        }
        more = still;
    }
    Ok(found)
}

impl DueItems {
    /// Adds one shard's items (each `pk` with its sort key), keeping the oldest sort key.
    fn add(&mut self, items: Vec<(String, Option<i64>)>) {
        for (key, opened_at_ms) in items {
            self.oldest_ms = match (self.oldest_ms, opened_at_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.keys.push(key);
            self.sort_ms.push(opened_at_ms);
        }
    }
}

/// Up to `budget` open items of one shard, oldest first (after `start`, where an earlier query stopped):
/// each `pk` with its sort key, and where this query stopped if the shard may have more.
async fn shard_since(
    client: &Client,
    table: &str,
    shard: &str,
    opened_before_ms: i64,
    budget: usize,
    mut start: Option<super::item::Item>,
) -> Result<(Vec<(String, Option<i64>)>, Option<super::item::Item>), StoreError> {
    let mut found = Vec::new();
    loop {
        let remaining = budget.saturating_sub(found.len());
        if remaining == 0 {
            return Ok((found, start));
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
        found.extend(out.items().iter().filter_map(|i| {
            let key = i.get("pk").and_then(|v| v.as_s().ok()).cloned()?;
            let opened = i
                .get("opened_at_ms")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok());
            Some((key, opened))
        }));
        start = out.last_evaluated_key;
        if start.is_none() {
            return Ok((found, None));
        }
    }
}

/// The longest wait between two looks at an item that cannot be resolved.
pub const MAX_RECHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(6 * 3600);

/// The sort key that makes an item opened at `opened_ms` due again after its next exponential step: the
/// scanners ask for `opened_at_ms <= now - threshold`, so the item is due at `opened_ms + threshold * 2^k`
/// (the first such time after `now_ms`), or `now_ms + max_interval_ms` if that is sooner.
///
/// Total for every input, a corrupt stored time included (`i64::MIN` once made it spin forever: the sum
/// saturated below `now_ms`): the schedule is counted in `i128`, where nothing saturates, so the doubling
/// passes `now_ms` within [`MAX_DOUBLINGS`] steps (two `i64` times are less than 2^64 ms apart and a step is
/// at least 1 s), and the loop is bounded by that count as well. A negative threshold counts as 0.
pub fn next_due(opened_ms: i64, now_ms: i64, threshold_ms: i64, max_interval_ms: i64) -> i64 {
    let threshold = i128::from(threshold_ms.max(0));
    let (opened, now) = (i128::from(opened_ms), i128::from(now_ms));
    let mut span = i128::from(threshold_ms.max(1_000));
    for _ in 0..MAX_DOUBLINGS {
        if opened.saturating_add(span) > now {
            break;
        }
        span = span.saturating_mul(2);
    }
    let due = opened
        .saturating_add(span)
        .min(now.saturating_add(i128::from(max_interval_ms)));
    let key = due.saturating_sub(threshold);
    i64::try_from(key).unwrap_or(if key < 0 { i64::MIN } else { i64::MAX })
}

/// More doublings than any two `i64` times can need (see [`next_due`]).
const MAX_DOUBLINGS: u32 = 66;

/// Moves an open item's sort key to `opened_at_ms` (see [`next_due`]). An item that left the index
/// meanwhile is not put back. The change moves no version, so it removes a payment's `event_version`: its
/// stream record then carries no transition and the relay's filter keeps it out (`docs/OUTBOX.md`).
pub async fn defer(client: &Client, table: &str, key: super::item::Item, opened_at_ms: i64) -> Result<(), StoreError> {
    let result = client
        .update_item()
        .table_name(table)
        .set_key(Some(key))
        .update_expression("SET opened_at_ms = :due REMOVE event_version")
        .condition_expression("attribute_exists(open_shard)")
        .expression_attribute_values(":due", AttributeValue::N(opened_at_ms.to_string()))
        .send()
        .await;
    // An item no longer open (it closed meanwhile) has nothing to defer.
    StoreError::condition_held("defer open item", result).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unresolved_item_is_due_again_on_a_doubling_schedule_from_its_opening() {
        let (t0, threshold, max) = (1_000_000, 60_000, 6 * 3_600_000);
        // Looked at just after it became due: due again at 2x, then 4x, 8x ... the threshold after opening.
        let due = |now| next_due(t0, now, threshold, max) + threshold;
        assert_eq!(due(t0 + 61_000), t0 + 120_000);
        assert_eq!(due(t0 + 121_000), t0 + 240_000);
        assert_eq!(due(t0 + 241_000), t0 + 480_000);
        // Never more than the cap apart.
        let late = t0 + 100 * 3_600_000;
        assert_eq!(due(late), late + max);
        // The stored key satisfies the scanners' condition exactly at the due time.
        let key = next_due(t0, t0 + 61_000, threshold, max);
        assert!(key > t0 + 61_000 - threshold && key <= t0 + 120_000 - threshold);
    }

    #[test]
    fn a_corrupt_or_extreme_time_ends_the_schedule_too() {
        // Run on a thread with a deadline: a schedule that never ends fails this test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (max, now) = (6 * 3_600_000, 1_700_000_000_000_i64);
            let mut got = Vec::new();
            for (opened, now, threshold) in [
                (i64::MIN, now, 60_000),
                (i64::MIN, i64::MAX, 60_000),
                (i64::MIN + 1, 0, 1_000),
                (-1, i64::MAX, 60_000),
                (0, i64::MAX, i64::MAX),
                (i64::MAX, now, 60_000),
                (now, now, i64::MIN),
                (now, i64::MIN, 60_000),
            ] {
                got.push((opened, now, threshold, next_due(opened, now, threshold, max)));
            }
            let _ = tx.send(got);
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("next_due returns for every time, however corrupt");
        let (opened, now, threshold, key) = got[0];
        assert!(
            key + threshold > now && key + threshold <= now + 6 * 3_600_000,
            "a corrupt opening time is looked at again within the cap, not at every run: {opened} {key}"
        );
        for (opened, now, threshold, key) in got {
            // Due again within the cap, and not before now (unless the time itself is at the type's edge).
            let due = key.saturating_add(threshold.max(0));
            assert!(
                due <= now.saturating_add(6 * 3_600_000),
                "{opened} {now} {threshold}: {key}"
            );
        }
    }

    #[test]
    fn the_lag_is_whole_seconds_past_due_and_zero_when_none_is_due() {
        let due = DueItems {
            keys: vec!["PAYMENT#a".into()],
            sort_ms: vec![Some(1_000)],
            oldest_ms: Some(1_000),
        };
        assert_eq!(due.lag_seconds(62_999), 61);
        assert_eq!(due.lag_seconds(500), 0, "a clock behind the item is no negative lag");
        assert_eq!(DueItems::default().lag_seconds(62_999), 0);
        assert_eq!(age_seconds(1_000, 62_999), 61);
        assert_eq!(
            age_seconds(1_000, 500),
            0,
            "a clock behind the opening is no negative age"
        );
    }

    #[test]
    fn shards_are_stable_and_spread() {
        let eight = OpenShards::DEFAULT;
        assert_eq!(
            shard_of(OpenKind::Payment, "pay_1", eight),
            shard_of(OpenKind::Payment, "pay_1", eight)
        );
        assert!(shard_of(OpenKind::Saga, "order-1", eight).starts_with("SAGA#"));
        let shards: std::collections::HashSet<_> = (0..200)
            .map(|i| shard_of(OpenKind::Payment, &format!("pay_{i}"), eight))
            .collect();
        assert_eq!(shards.len() as u64, eight.get());
    }

    #[test]
    fn a_raised_count_keeps_every_old_shard_among_the_new_ones() {
        // Readers ask the shards 0..new; an item written under the old count is in 0..old.
        let (old, new) = (OpenShards::DEFAULT, OpenShards::new(24).expect("in range"));
        let number = |key: String| key.rsplit('#').next().and_then(|n| n.parse::<u64>().ok()).expect("n");
        for i in 0..500 {
            let id = format!("pay_{i}");
            assert!(number(shard_of(OpenKind::Payment, &id, old)) < new.get());
        }
        let spread: std::collections::HashSet<_> = (0..2000)
            .map(|i| shard_of(OpenKind::Payment, &format!("pay_{i}"), new))
            .collect();
        assert_eq!(spread.len() as u64, new.get(), "the new count is used, not the old");
    }

    #[test]
    fn the_count_is_kept_within_its_range() {
        assert_eq!(
            OpenShards::new(7),
            None,
            "below the default every deployment wrote with"
        );
        assert_eq!(OpenShards::new(257), None);
        assert_eq!(OpenShards::new(8), Some(OpenShards::DEFAULT));
        assert_eq!(OpenShards::new(256).map(OpenShards::get), Some(256));
    }
}
