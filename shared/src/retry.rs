//! Retries with exponential backoff and full jitter (AWS Architecture Blog, "Exponential Backoff And
//! Jitter"): attempt `n` sleeps a random time in `0..=min(cap, base * 2^n)`.

use crate::clock;
use std::future::Future;
use std::time::Duration;

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Attempts in all, the first included.
    pub attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    pub const fn new(attempts: u32, base: Duration, cap: Duration) -> Self {
        Self { attempts, base, cap }
    }

    /// The longest sleep before attempt `n + 1` (after `n + 1` failures): `min(cap, base * 2^n)`.
    pub fn ceiling(&self, failures_so_far: u32) -> Duration {
        let factor = 1u32.checked_shl(failures_so_far).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Runs `op` until it succeeds, fails permanently (`is_transient` false) or the attempts are used up;
    /// returns the last error and the number of attempts made.
    pub async fn retry<T, E, F, Fut>(&self, mut op: F, is_transient: impl Fn(&E) -> bool) -> Result<T, (E, u32)>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempt = 0;
        loop {
            match op(attempt).await {
                Ok(value) => return Ok(value),
                Err(e) => {
                    attempt = attempt.saturating_add(1);
                    if attempt >= self.attempts || !is_transient(&e) {
                        return Err((e, attempt));
                    }
                    tokio::time::sleep(clock::full_jitter(self.ceiling(attempt.saturating_sub(1)))).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let b = Backoff::new(6, Duration::from_millis(100), Duration::from_secs(1));
        let ceilings: Vec<u128> = (0..6).map(|n| b.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.ceiling(64), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn retries_transient_errors_only_and_counts_attempts() {
        let b = Backoff::new(4, Duration::from_millis(1), Duration::from_millis(2));
        let always: Result<(), _> = b.retry(|_| async { Err::<(), _>("down") }, |_| true).await;
        assert_eq!(always, Err(("down", 4)));
        let permanent: Result<(), _> = b.retry(|_| async { Err::<(), _>("refused") }, |_| false).await;
        assert_eq!(permanent, Err(("refused", 1)));
        let third = b
            .retry(
                |n| async move {
                    if n < 2 {
                        Err("down")
                    } else {
                        Ok(n)
                    }
                },
                |_| true,
            )
            .await;
        assert_eq!(third, Ok(2));
    }
}
