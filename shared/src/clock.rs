//! Wall-clock time in the units the items use (epoch milliseconds; DynamoDB TTL wants epoch seconds), and
//! the monotonic clock that caches and refreshed keys measure their age by.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Epoch seconds rounded up, for a TTL attribute that must not fire before `ms`.
pub fn ceil_secs(ms: i64) -> i64 {
    ms.saturating_add(999).div_euclid(1000)
}

/// The instant by which an invocation must have answered: Lambda's deadline (epoch milliseconds, from the
/// invocation's context) less `margin` for what runs after the work (the answer, the telemetry flush).
pub fn invocation_deadline(deadline_epoch_ms: u64, margin: std::time::Duration) -> tokio::time::Instant {
    let left_ms = i64::try_from(deadline_epoch_ms)
        .unwrap_or(i64::MAX)
        .saturating_sub(now_ms());
    let left = std::time::Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
    let now = tokio::time::Instant::now();
    now.checked_add(left.saturating_sub(margin)).unwrap_or(now)
}

/// What a function keeps back from its deadline for answering and flushing telemetry.
pub const ANSWER_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A random duration in `0..=max` (full jitter), for backoff and bounded waits.
pub fn full_jitter(max: std::time::Duration) -> std::time::Duration {
    use rand::Rng;
    rand::rng().random_range(std::time::Duration::ZERO..=max)
}

/// The time a component goes by: the system clock, or (in tests) the system clock moved ahead, so that "a
/// day later" can be tested without waiting a day. Every decision that compares times takes it from here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WallClock {
    ahead_ms: i64,
}

impl WallClock {
    /// The system clock.
    pub const SYSTEM: WallClock = WallClock { ahead_ms: 0 };

    /// The system clock moved `by` ahead.
    pub fn ahead(by: std::time::Duration) -> Self {
        Self {
            ahead_ms: i64::try_from(by.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// Epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        now_ms().saturating_add(self.ahead_ms)
    }
}

/// A monotonic clock, injectable for tests (`Arc::new(Instant::now)` otherwise): what a cache of secrets or a
/// refreshed key measures its age by. [`WallClock`] is the time decisions compare with stored times.
pub type MonotonicClock = Arc<dyn Fn() -> Instant + Send + Sync>;
