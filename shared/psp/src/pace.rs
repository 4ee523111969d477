//! [`Pace`]: the request rate the scanners (recovery, the webhook catch-up) keep to at each PSP, and
//! [`ScanRates`], its settings.
//!
//! Stripe limits an account to 25 requests/s in test mode (100 live), every endpoint to 25/s, and answers
//! more with `429 rate_limit`; Adyen throttles with 429 as well. A scan of a backlog (recovery after an outage,
//! the catch-up after lost webhooks) would otherwise call as fast as the PSP answers, take the account's
//! whole budget from the checkouts and be throttled with them. So a scanner's client waits, before each
//! request it sends (each attempt, retries included), until its [`Pace`] lets it go: a GCRA limiter
//! (`governor`) with a burst of one, so `n` requests span at least `(n - 1) / rate` seconds. The rate is per
//! instance; the reconciler's runs do not overlap (a 25 s run every 5 minutes), nor do the catch-up's, so the
//! defaults of both together stay under Stripe's test-mode limit with room for the checkouts. The checkout
//! functions are not paced: a customer waits on them, and they make a few calls per checkout.

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
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
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
        // One request per period; a period of at least 1 ns (1 s / u32::MAX rounds to 0), so the quota exists.
        let period = Duration::from_secs(1)
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
        let defaults = ScanRates::from(&env(&[])).unwrap();
        assert_eq!((defaults.stripe.get(), defaults.adyen.get()), (10, 10));
        let set = ScanRates::from(&env(&[
            ("PSP_SCAN_RATE_PER_SECOND", "4"),
            ("ADYEN_SCAN_RATE_PER_SECOND", "7"),
        ]));
        assert_eq!(set.map(|r| (r.stripe.get(), r.adyen.get())).unwrap(), (4, 7));
        assert!(ScanRates::from(&env(&[("PSP_SCAN_RATE_PER_SECOND", "0")])).is_err());
        assert!(ScanRates::from(&env(&[("ADYEN_SCAN_RATE_PER_SECOND", "fast")])).is_err());
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
