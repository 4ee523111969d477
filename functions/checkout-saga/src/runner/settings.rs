//! The runner's settings: the saga's deadlines, its retries, its clock and the PSP of new checkouts.

use crate::saga::{CheckoutPsp, Deadlines, Loaded, NextStep};
use shared::clock::WallClock;
use shared::retry::Backoff;
use std::time::Duration;

/// The runner's settings ([`Settings::from_env`]).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a payment may stay unresolved before the saga hands it to recovery.
    pub payment_timeout: Duration,
    /// How long after the start a payment still waiting for the customer (a 3-D Secure challenge, a retry
    /// after a decline) is abandoned: the PaymentIntent is canceled and the checkout compensated.
    pub abandon_after: Duration,
    pub backoff: Backoff,
    /// The time the saga goes by (the system clock; moved ahead in tests).
    pub clock: WallClock,
    /// How long a step on our own items may keep failing (past it: escalated once, or, before the payment
    /// exists, compensated).
    pub step_deadline: Duration,
    /// How long the charge may go unanswered before it is given up and compensated.
    pub charge_deadline: Duration,
    /// How long a refund or a cancel at the PSP may wait or fail before a person is told (once).
    pub compensation_deadline: Duration,
    /// `SAGA_PSP`: the PSP a new checkout's payment is created for and charged through when its request names
    /// none (`POST /checkouts`' `psp`), and the one of sagas started before checkouts named theirs.
    pub new_checkouts: CheckoutPsp,
}

/// `SAGA_PSP`: the PSP a checkout goes to when its request names none, `stripe` (default) or `adyen`.
pub fn default_checkout_psp(env: &shared::Env) -> Result<CheckoutPsp, shared::ConfigError> {
    match env.optional("SAGA_PSP").as_deref().map(str::trim) {
        None => Ok(CheckoutPsp::Stripe),
        Some(name) => CheckoutPsp::parse(name).ok_or_else(|| shared::ConfigError::Invalid {
            name: "SAGA_PSP",
            expected: "stripe or adyen",
            value: name.to_owned(),
        }),
    }
}

impl Settings {
    /// Every state's deadline, for the core's decision (`payments_core::saga::deadline`).
    pub fn deadlines(&self) -> Deadlines {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Deadlines {
            step_ms: ms(self.step_deadline),
            charge_ms: ms(self.charge_deadline),
            compensation_ms: ms(self.compensation_deadline),
            abandon_after_ms: ms(self.abandon_after),
        }
    }

    /// The step the runner takes for `loaded` now: the core's `Loaded::step_at` with these deadlines and this
    /// clock, the step `Runner::advance` is handed (a payment creation or a charge past its deadline given
    /// up). What [`action_name`] names and `paymentsctl` prints.
    pub fn next_step(&self, loaded: &Loaded) -> NextStep {
        loaded.step_at(&self.deadlines(), self.clock.now_ms())
    }

    /// The runner's settings a deployment sets (`SAGA_PAYMENT_TIMEOUT_SECONDS`, default 120;
    /// `CHECKOUT_ABANDON_AFTER_SECONDS`, default 900; `SAGA_PSP`, default `stripe`), the rest the defaults: what
    /// the saga's functions run with and `paymentsctl` decides a saga's next step by.
    pub fn from_env(env: &shared::Env) -> Result<Self, shared::ConfigError> {
        let defaults = Self::default();
        let new_checkouts = default_checkout_psp(env)?;
        Ok(Self {
            payment_timeout: env.seconds("SAGA_PAYMENT_TIMEOUT_SECONDS", defaults.payment_timeout)?,
            abandon_after: env.seconds("CHECKOUT_ABANDON_AFTER_SECONDS", defaults.abandon_after)?,
            new_checkouts,
            ..defaults
        })
    }
}

/// `CHECKOUT_ABANDON_AFTER_SECONDS`' default: a 3-D Secure challenge or a retry has 15 minutes.
pub const DEFAULT_ABANDON_AFTER: Duration = Duration::from_secs(15 * 60);

impl Default for Settings {
    fn default() -> Self {
        Self {
            payment_timeout: Duration::from_secs(120),
            abandon_after: DEFAULT_ABANDON_AFTER,
            backoff: Backoff::new(5, Duration::from_millis(100), Duration::from_secs(2)),
            clock: WallClock::SYSTEM,
            step_deadline: from_ms(Deadlines::DEFAULT.step_ms),
            charge_deadline: from_ms(Deadlines::DEFAULT.charge_ms),
            compensation_deadline: from_ms(Deadlines::DEFAULT.compensation_ms),
            new_checkouts: CheckoutPsp::Stripe,
        }
    }
}

fn from_ms(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The name of the step the runner takes for `loaded` now under `settings` (in its spans, metrics and
/// escalations): [`Settings::next_step`], the core's one table with the deadlines, which the runner's
/// `advance` dispatches on and `paymentsctl escalations retry --dry-run` prints.
pub fn action_name(settings: &Settings, loaded: &Loaded) -> &'static str {
    settings.next_step(loaded).name()
}
