//! [`Pace`]: the request rate a function keeps to at a PSP; [`ScanRates`], the scanners' (recovery, the
//! webhook catch-up) settings of it, and [`CallBudget`], the checkout functions'.
//!
//! Stripe limits an account to 25 requests/s in test mode (100 live), every endpoint to 25/s, and answers
//! more with `429 rate_limit`; Adyen throttles with 429 as well. A scan of a backlog (recovery after an outage,
//! the catch-up after lost webhooks) would otherwise call as fast as the PSP answers, take the account's
//! whole budget from the checkouts and be throttled with them. So a scanner's client waits, before each
//! request it sends (each attempt, retries included), until its [`Pace`] lets it go: a GCRA limiter
//! (`governor`) with a burst of one, so `n` requests span at least `(n - 1) / rate` seconds. The rate is per
//! instance; the reconciler's runs do not overlap (a 25 s run every 5 minutes), nor do the catch-up's, so the
//! defaults of both together stay under Stripe's test-mode limit with room for the checkouts.
//!
//! The checkout functions (checkout-api, checkout-events, checkout-sweeper) keep to a [`CallBudget`] when the
//! deployment gives them one (issue 44: every function's budget, summed by `bench capacity`, under the
//! account's limit): the function's requests a second in all, shared by at most `instances` concurrent
//! instances (its reserved concurrency, its queue mapping's maximum concurrency, 1 for a schedule), so each
//! instance keeps to `budget / instances` with no shared counter (one would cost a DynamoDB write per call on
//! one partition). An instance that needs more waits; Lambda then runs more instances, up to the cap. Unset,
//! a function is unpaced (a customer waits on it; `bench capacity` names it unbudgeted).

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use shared::config::{ConfigError, Env};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// The scanners' request rate per PSP, read once per cold start by the reconciler and the webhook catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanRates {
    /// `PSP_SCAN_RATE_PER_SECOND` (default 10): Stripe requests per second of one scanner.
    pub stripe: NonZeroU32,
    /// `ADYEN_SCAN_RATE_PER_SECOND` (default 10): Adyen requests per second of one scanner.
    pub adyen: NonZeroU32,
}

/// Both scanners at their defaults (10 + 10) stay under Stripe's test-mode 25 requests/s.
const DEFAULT_RATE: NonZeroU32 = NonZeroU32::MIN.saturating_add(9);

impl ScanRates {
    /// The rates `env` sets (see the type); 0 or a value that is not a whole number fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            stripe: Self::stripe_from(env)?,
            adyen: rate(env, "ADYEN_SCAN_RATE_PER_SECOND")?,
        })
    }

    /// Stripe's rate alone (`PSP_SCAN_RATE_PER_SECOND`), for a scanner that calls only Stripe (the catch-up).
    pub fn stripe_from(env: &Env) -> Result<NonZeroU32, ConfigError> {
        rate(env, "PSP_SCAN_RATE_PER_SECOND")
    }
}

fn rate(env: &Env, name: &'static str) -> Result<NonZeroU32, ConfigError> {
    let value: u32 = env.number(name, DEFAULT_RATE.get())?;
    NonZeroU32::new(value).ok_or(ConfigError::Invalid {
        name,
        expected: "a rate of at least 1 request per second",
        value: value.to_string(),
    })
}

/// A function's PSP request budget (`PSP_CALL_BUDGET_PER_SECOND`, shared by `PSP_CALL_BUDGET_INSTANCES`
/// instances at most): each instance's [`Pace`] is `per_second / instances`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallBudget {
    /// The function's requests per second, over all its instances.
    pub per_second: NonZeroU32,
    /// The most instances that run at once (its concurrency cap), among which the budget is split.
    pub instances: NonZeroU32,
}

impl CallBudget {
    /// The budget `env` sets: none when `PSP_CALL_BUDGET_PER_SECOND` is unset or 0 (unpaced); with it,
    /// `PSP_CALL_BUDGET_INSTANCES` (at least 1) is required, since a budget split among an unknown number of
    /// instances bounds nothing.
    pub fn from_env(env: &Env) -> Result<Option<Self>, ConfigError> {
        let per_second: u32 = env.number("PSP_CALL_BUDGET_PER_SECOND", 0)?;
        let Some(per_second) = NonZeroU32::new(per_second) else {
            return Ok(None);
        };
        let instances: u32 = env.number("PSP_CALL_BUDGET_INSTANCES", 0)?;
        let instances = NonZeroU32::new(instances).ok_or(ConfigError::Missing(
            "PSP_CALL_BUDGET_INSTANCES (the function's concurrency cap, among which PSP_CALL_BUDGET_PER_SECOND is split)",
        ))?;
        Ok(Some(Self { per_second, instances }))
    }
}

/// One client's request rate: shared by the clones of the client (a scanner's calls, whatever their order).
#[derive(Clone)]
pub struct Pace {
    limiter: Arc<DefaultDirectRateLimiter>,
    rate: NonZeroU32,
}

impl fmt::Debug for Pace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pace({}/s)", self.rate)
    }
}

impl Pace {
    /// At most `rate` requests per second, one at a time: no burst, so a scan never starts with one.
    pub fn per_second(rate: NonZeroU32) -> Self {
        Self::share(CallBudget {
            per_second: rate,
            instances: NonZeroU32::MIN,
        })
    }

    /// One instance's share of `budget`: `per_second / instances` requests a second, one at a time.
    pub fn share(budget: CallBudget) -> Self {
        let rate = budget.per_second;
        // One request per period; a period of at least 1 ns (1 s / u32::MAX rounds to 0), so the quota exists.
        let period = Duration::from_secs(u64::from(budget.instances.get()))
            .checked_div(rate.get())
            .unwrap_or_default()
            .max(Duration::from_nanos(1));
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(rate))
            .allow_burst(NonZeroU32::MIN);
        Self {
            limiter: Arc::new(RateLimiter::direct(quota)),
            rate,
        }
    }

    /// Waits until the next request may go (at most one period of the rate per request waiting before it).
    pub async fn ready(&self) {
        self.limiter.until_ready().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> Env {
        Env::from_lookup(move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned()))
    }

    #[test]
    fn rates_default_under_stripes_test_mode_limit_and_refuse_zero() {
        let defaults = ScanRates::from_env(&env(&[])).unwrap();
        assert_eq!((defaults.stripe.get(), defaults.adyen.get()), (10, 10));
        let set = ScanRates::from_env(&env(&[
            ("PSP_SCAN_RATE_PER_SECOND", "4"),
            ("ADYEN_SCAN_RATE_PER_SECOND", "7"),
        ]));
        assert_eq!(set.map(|r| (r.stripe.get(), r.adyen.get())).unwrap(), (4, 7));
        assert!(ScanRates::from_env(&env(&[("PSP_SCAN_RATE_PER_SECOND", "0")])).is_err());
        assert!(ScanRates::from_env(&env(&[("ADYEN_SCAN_RATE_PER_SECOND", "fast")])).is_err());
    }

    #[test]
    fn a_budget_is_unset_or_split_among_a_known_number_of_instances() {
        assert_eq!(CallBudget::from_env(&env(&[])), Ok(None));
        assert_eq!(
            CallBudget::from_env(&env(&[("PSP_CALL_BUDGET_PER_SECOND", "0")])),
            Ok(None)
        );
        assert!(matches!(
            CallBudget::from_env(&env(&[("PSP_CALL_BUDGET_PER_SECOND", "100")])),
            Err(ConfigError::Missing(name)) if name.starts_with("PSP_CALL_BUDGET_INSTANCES")
        ));
        let budget = CallBudget::from_env(&env(&[
            ("PSP_CALL_BUDGET_PER_SECOND", "100"),
            ("PSP_CALL_BUDGET_INSTANCES", "40"),
        ]));
        assert_eq!(
            budget.map(|b| b.map(|b| (b.per_second.get(), b.instances.get()))),
            Ok(Some((100, 40)))
        );
    }

    /// Issue 44: a function never exceeds its budget. Its `instances` instances, each calling as fast as its
    /// pace lets it for 3 seconds, make at most the budget's calls in any window of a second (and not far
    /// fewer: the pace is not stricter than the budget). Real time: `governor` sleeps on its own timer, not
    /// on tokio's, so tokio's paused clock would not move it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_instances_of_a_function_together_keep_to_its_budget_in_every_second() {
        let budget = CallBudget {
            per_second: NonZeroU32::new(100).unwrap(),
            instances: NonZeroU32::new(4).unwrap(),
        };
        let start = std::time::Instant::now();
        let run = Duration::from_secs(3);
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut instances = Vec::new();
        for _ in 0..budget.instances.get() {
            let (pace, calls) = (Pace::share(budget), calls.clone());
            instances.push(tokio::spawn(async move {
                loop {
                    pace.ready().await;
                    if start.elapsed() >= run {
                        return;
                    }
                    calls.lock().unwrap().push(start.elapsed());
                }
            }));
        }
        for instance in instances {
            instance.await.unwrap();
        }
        let mut calls = calls.lock().unwrap().clone();
        calls.sort();
        // Each instance's first call goes at once, then one every 40 ms: at most 100 in any second, plus the
        // one call per instance a cold start makes at once.
        for (i, at) in calls.iter().enumerate() {
            let within = calls[i..]
                .iter()
                .take_while(|c| **c < *at + Duration::from_secs(1))
                .count();
            assert!(within <= 104, "{within} calls within a second of {at:?}");
        }
        assert!(calls.len() <= 304, "{} calls in 3 s", calls.len());
        assert!(
            calls.len() >= 150,
            "the pace is not far stricter than the budget: {}",
            calls.len()
        );
    }

    #[tokio::test]
    async fn requests_are_spaced_by_the_rate_from_the_first() {
        let pace = Pace::per_second(NonZeroU32::new(50).unwrap());
        let start = std::time::Instant::now();
        for _ in 0..6 {
            pace.ready().await;
        }
        // Five gaps of 20 ms after the first request, which goes at once.
        assert!(start.elapsed() >= Duration::from_millis(100), "{:?}", start.elapsed());
    }
}
