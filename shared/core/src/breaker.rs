//! The PSP circuit breaker's rule, pure: which failures count, when they open the breaker, and when an open
//! state ends. The breaker in `psp::breaker` does the I/O (the shared DynamoDB item, the calls); the
//! protocol model calls these same functions, so what it checks is what runs.
//!
//! **What counts.** The breaker is about the PSP, not about one request. A failure is one *attempt* that got
//! no answer (timeout, connection, an answer cut off) or a 5xx (a 429, Stripe's or Adyen's, is throttling,
//! retried but not counted), counted when it happens: a PSP that hangs
//! costs one request timeout per attempt, and counting only whole calls (three attempts and their pauses)
//! would let a hanging PSP stay under any window. An answer the PSP replays for an idempotency key (Stripe
//! keeps a 500 for the key for 24 hours) says nothing about the PSP now and does not count; and one request
//! (an idempotency key; a call without one is its own request) counts at most [`PER_REQUEST_LIMIT`] times in
//! a window, so one saga retrying one poisoned key can never open the breaker for everyone: only failures
//! spread over several requests do.
//!
//! **When an open state ends.** The item stores the end (`open_until_ms`) and the change's time
//! (`changed_at_ms`). The end is read through [`open_end`], which always gives a time no later than
//! [`MAX_OPEN_COOL_DOWNS`] cool-downs after the change: a missing or unreadable end is the change plus one
//! cool-down, and an item with no readable change time (edited by hand, written by an older version) has
//! ended already, so the next call probes. No item can hold calls back until someone edits it.

use std::collections::VecDeque;

/// Failures one request (an idempotency key, or one call without a key) may count within a window.
pub const PER_REQUEST_LIMIT: usize = 2;

/// An open state ends at the latest this many cool-downs after it was written.
pub const MAX_OPEN_COOL_DOWNS: i64 = 10;

/// How far in the future a change time may lie (clocks of instances differ) before it is not believed.
pub const CLOCK_SKEW_MS: i64 = 60_000;

/// The breaker's thresholds, in epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerRule {
    /// Counted failures within `window_ms`, with no success in between, that open the breaker.
    pub failure_threshold: u32,
    pub window_ms: i64,
    /// How long calls stop before one probe is let through.
    pub cool_down_ms: i64,
}

impl BreakerRule {
    /// The latest an open state may end after its change: [`MAX_OPEN_COOL_DOWNS`] cool-downs.
    pub fn max_open_ms(&self) -> i64 {
        self.cool_down_ms.saturating_mul(MAX_OPEN_COOL_DOWNS)
    }
}

/// How one failed attempt of a PSP call ended, as the breaker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// No answer (timeout, connection, cut off), or a fresh 5xx: the PSP is failing now (a 429 is not).
    /// Counts.
    PspFailed,
    /// An answer the PSP replayed for the idempotency key (`Idempotent-Replayed: true`): saved earlier, it
    /// says nothing about the PSP now. Does not count.
    Replayed,
}

/// The request a call made, for the per-request bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// A call with an idempotency key (charge, cancel, refund): every call with the key is the same request.
    Keyed(&'a str),
    /// A call without one (a GET): the PSP asks afresh each time, so each call is its own request.
    Unkeyed,
}

/// What a window held when it reached the threshold: written on the item for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// Counted failures in the window.
    pub failures: u32,
    /// Distinct requests among them.
    pub requests: u32,
}

/// One instance's counted failures since the last success: (time, request) per counted failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failures {
    counted: VecDeque<(i64, Option<String>)>,
    /// Numbers the unkeyed calls, each its own request.
    calls: u64,
}

impl Failures {
    /// A call ended without a transient failure: the PSP answers, the count starts again.
    pub fn succeeded(&mut self) {
        self.counted.clear();
    }

    /// Counts the failed attempts of one call made as `request`, at `attempts` (epoch ms each, those that
    /// count: [`Attempt::PspFailed`]), and says whether the breaker opens now. Failures older than the window
    /// are dropped; a request adds at most [`PER_REQUEST_LIMIT`] within the window. When the threshold is
    /// reached the count starts again (the open state takes over).
    pub fn record(
        &mut self,
        rule: &BreakerRule,
        request: Request<'_>,
        attempts: &[i64],
        now_ms: i64,
    ) -> Option<Opening> {
        let since = now_ms.saturating_sub(rule.window_ms);
        self.counted.retain(|(at, _)| *at >= since);
        let id = match request {
            Request::Keyed(key) => format!("key:{key}"),
            Request::Unkeyed => {
                self.calls = self.calls.wrapping_add(1);
                format!("call:{}", self.calls)
            }
        };
        let already = self
            .counted
            .iter()
            .filter(|(_, r)| r.as_deref() == Some(id.as_str()))
            .count();
        let room = PER_REQUEST_LIMIT.saturating_sub(already);
        for at in attempts.iter().copied().filter(|at| *at >= since).take(room) {
            self.counted.push_back((at, Some(id.clone())));
        }
        let failures = u32::try_from(self.counted.len()).unwrap_or(u32::MAX);
        if failures < rule.failure_threshold.max(1) {
            return None;
        }
        let mut ids: Vec<&Option<String>> = self.counted.iter().map(|(_, r)| r).collect();
        ids.sort();
        ids.dedup();
        let requests = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        self.counted.clear();
        Some(Opening { failures, requests })
    }

    /// Counted failures held now (within the last window as of the last record).
    pub fn len(&self) -> usize {
        self.counted.len()
    }

    /// No failure counted.
    pub fn is_empty(&self) -> bool {
        self.counted.is_empty()
    }
}

/// When an open state ends (epoch ms), from the item's `open_until_ms` and `changed_at_ms` as read (`None`:
/// missing or not a number). Never later than the change plus [`BreakerRule::max_open_ms`]; a missing or
/// negative end is the change plus one cool-down; without a believable change time (missing, or more than
/// [`CLOCK_SKEW_MS`] in the future) the state has ended already (`i64::MIN`): the next call probes.
pub fn open_end(rule: &BreakerRule, open_until_ms: Option<i64>, changed_at_ms: Option<i64>, now_ms: i64) -> i64 {
    let Some(changed) = changed_at_ms.filter(|c| *c <= now_ms.saturating_add(CLOCK_SKEW_MS)) else {
        return i64::MIN;
    };
    let cap = changed.saturating_add(rule.max_open_ms());
    let end = open_until_ms
        .filter(|u| *u >= 0)
        .unwrap_or_else(|| changed.saturating_add(rule.cool_down_ms));
    end.min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: BreakerRule = BreakerRule {
        failure_threshold: 5,
        window_ms: 60_000,
        cool_down_ms: 30_000,
    };

    #[test]
    fn one_key_failing_again_and_again_counts_at_most_the_limit_and_never_opens() {
        let mut f = Failures::default();
        for call in 0..20 {
            let at = 1_000 + call * 100;
            assert_eq!(
                f.record(
                    &RULE,
                    Request::Keyed("order-1:charge"),
                    &[at, at + 10, at + 20],
                    at + 20
                ),
                None
            );
        }
        assert_eq!(f.len(), PER_REQUEST_LIMIT);
        // Two poisoned keys still do not: five counted failures need three requests.
        assert_eq!(
            f.record(&RULE, Request::Keyed("order-2:charge"), &[5_000, 5_001, 5_002], 5_002),
            None
        );
        assert_eq!(f.len(), 2 * PER_REQUEST_LIMIT);
    }

    #[test]
    fn failures_spread_over_requests_open_it_and_say_what_opened_it() {
        let mut f = Failures::default();
        assert_eq!(f.record(&RULE, Request::Unkeyed, &[100, 200, 300], 300), None);
        assert_eq!(f.record(&RULE, Request::Keyed("a"), &[400, 500], 500), None);
        assert_eq!(
            f.record(&RULE, Request::Unkeyed, &[600], 600),
            Some(Opening {
                failures: 5,
                requests: 3
            })
        );
        assert!(f.is_empty(), "the open state takes over; the count starts again");
    }

    #[test]
    fn a_hanging_psp_opens_it_within_the_window_from_one_instance() {
        // Request timeout 5 s, three attempts per call with pauses: one instance's calls one after another.
        let mut f = Failures::default();
        let mut now = 0;
        let mut opened_at = None;
        for _call in 0..4 {
            let attempts = [now + 5_000, now + 10_500, now + 16_500];
            now += 16_500;
            if f.record(&RULE, Request::Unkeyed, &attempts, now).is_some() {
                opened_at = Some(now);
                break;
            }
        }
        assert_eq!(opened_at, Some(3 * 16_500), "the third hanging call opens it");
    }

    #[test]
    fn failures_outside_the_window_and_a_success_between_do_not_add_up() {
        let mut f = Failures::default();
        f.record(&RULE, Request::Unkeyed, &[0, 1], 1);
        f.record(&RULE, Request::Unkeyed, &[2, 3], 3);
        assert_eq!(
            f.record(&RULE, Request::Unkeyed, &[70_000], 70_000),
            None,
            "the first four are too old"
        );
        f.succeeded();
        assert!(f.is_empty());
        f.record(&RULE, Request::Unkeyed, &[70_001, 70_002], 70_002);
        assert_eq!(f.len(), 2);
    }

    proptest::proptest! {
        /// However often one request fails, and whatever its attempts' times, it never opens the breaker alone.
        #[test]
        fn one_request_alone_never_opens_it(calls in proptest::collection::vec(proptest::collection::vec(0i64..200_000, 0..6), 0..40)) {
            let mut f = Failures::default();
            let mut now: i64 = 0;
            for attempts in calls {
                now = now.saturating_add(1_000);
                let at: Vec<i64> = attempts.iter().map(|a| now.saturating_sub(*a.min(&now))).collect();
                proptest::prop_assert_eq!(f.record(&RULE, Request::Keyed("k"), &at, now), None);
                proptest::prop_assert!(f.len() <= PER_REQUEST_LIMIT);
            }
        }

        /// An open state ends no later than ten cool-downs after a believable change, whatever its stored end.
        #[test]
        fn an_open_state_never_outlasts_the_cap(until in proptest::option::of(proptest::num::i64::ANY), changed in proptest::option::of(proptest::num::i64::ANY), now in 0i64..4_000_000_000_000) {
            let end = open_end(&RULE, until, changed, now);
            proptest::prop_assert!(end <= now.saturating_add(CLOCK_SKEW_MS).saturating_add(RULE.max_open_ms()));
            if let Some(c) = changed.filter(|c| *c <= now.saturating_add(CLOCK_SKEW_MS)) {
                proptest::prop_assert!(end <= c.saturating_add(RULE.max_open_ms()));
            }
        }
    }

    #[test]
    fn an_open_state_always_ends_within_the_cap() {
        let now = 10_000_000;
        let changed = now - 1_000;
        assert_eq!(
            open_end(&RULE, Some(changed + 30_000), Some(changed), now),
            changed + 30_000
        );
        // Missing or negative end: the change plus one cool-down.
        assert_eq!(open_end(&RULE, None, Some(changed), now), changed + 30_000);
        assert_eq!(open_end(&RULE, Some(-5), Some(changed), now), changed + 30_000);
        // An end far away is capped at ten cool-downs after the change.
        assert_eq!(open_end(&RULE, Some(i64::MAX), Some(changed), now), changed + 300_000);
        // No believable change time: ended already.
        assert_eq!(open_end(&RULE, Some(now + 3_600_000), None, now), i64::MIN);
        assert_eq!(open_end(&RULE, None, None, now), i64::MIN);
        assert_eq!(open_end(&RULE, Some(now + 10), Some(now + 3_600_000), now), i64::MIN);
        assert_eq!(
            open_end(&RULE, None, Some(now + 1_000), now),
            now + 31_000,
            "skew tolerated"
        );
    }
}
