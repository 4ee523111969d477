//! One second at a time: the webhooks the PSPs send (first deliveries drawn from a seeded Poisson process,
//! their retries from the PSPs' schedules, [`super::retries`]) meet the deployment's limits in the order a
//! request meets them (the intake being down, the route's and the account's token buckets, Lambda's
//! concurrency and its scaling, the table's throughput as on-demand grows it) and what is refused goes back
//! to its PSP. Flows, not single webhooks: counts are expected values, refusals fall on every kind of
//! delivery alike. Seconds to run: an idle stretch (nothing sent, nothing due) is skipped.

use super::retries::{Adyen, Calendar, Stripe};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What the simulation reads: the deployment's limits, the costs per delivery, the PSPs' schedules.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub seed: u64,
    /// Webhook deliveries per order, and the share of them from Stripe (the rest Adyen).
    pub deliveries_per_order: f64,
    pub stripe_share: f64,
    /// Other API requests per order (checkouts and their polls), sharing the account's rate.
    pub other_requests_per_order: f64,
    /// Orders that start a checkout, and the checkout route's throttle: checkouts past it are refused (429)
    /// and cost nothing further.
    pub checkout_share: f64,
    pub checkout_route_rate: f64,
    pub route_rate: f64,
    pub route_burst: f64,
    pub account_rate: f64,
    pub account_burst: f64,
    /// Executions the intake may have (its reservation, or what the account leaves it) and how many
    /// environments it may add a second on average (Lambda: 1,000 every 10 s, so up to 1,000 at once after a
    /// quiet 10 s: a bucket of ten seconds' worth); its mean invocation, s.
    pub lambda_limit: f64,
    pub lambda_added_per_s: f64,
    pub intake_s: f64,
    /// Write and read units per delivery (the profile's mix) and per order (its checkout).
    pub wcu_per_delivery: f64,
    pub rcu_per_delivery: f64,
    pub wcu_per_order: f64,
    pub rcu_per_order: f64,
    /// What the table serves at once before any peak (warm throughput, else a new table's), its quota, the
    /// multiple of the previous peak it serves at once and how long ago that peak must be.
    pub initial_wcu: f64,
    pub initial_rcu: f64,
    pub max_wcu: f64,
    pub max_rcu: f64,
    pub peak_multiple: f64,
    pub peak_window_s: u64,
    /// The table already served this (a warm table), write and read units; the intake's environments
    /// already running at the start.
    pub previous_peak: (f64, f64),
    pub initial_environments: f64,
    /// Stripe API requests a second: fixed (scanners) and per order; the account's limit; checkout-api's
    /// budget for its per-order calls (infinite when it has none).
    pub psp_fixed: f64,
    pub psp_per_order: f64,
    pub psp_limit: f64,
    pub psp_checkout_budget: f64,
    /// SQS FIFO calls per action: per applied delivery, per order (checkout events), the limit.
    pub fifo_per_applied: f64,
    pub fifo_per_order: f64,
    pub fifo_limit: f64,
    pub stripe_schedule_s: Vec<f64>,
    pub adyen_quick_s: Vec<f64>,
    pub adyen_queue_s: Vec<f64>,
    pub adyen_drain_per_s: f64,
}

/// The traffic: orders a second as a piecewise linear curve of (second, rate), and when the intake is down.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    pub orders: Vec<(u64, f64)>,
    pub outage: Option<(u64, u64)>,
}

impl Traffic {
    pub fn orders_at(&self, t: u64) -> f64 {
        let mut previous = (0, 0.0);
        for &(at, rate) in &self.orders {
            if t < at {
                let span = (at - previous.0) as f64;
                let into = (t - previous.0) as f64;
                return previous.1 + (rate - previous.1) * into / span.max(1.0);
            }
            previous = (at, rate);
        }
        0.0
    }

    pub fn end(&self) -> u64 {
        self.orders.last().map_or(0, |(t, _)| *t)
    }

    fn down(&self, t: u64) -> bool {
        self.outage.is_some_and(|(from, to)| (from..to).contains(&t))
    }
}

/// One second's figures (per second).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Second {
    pub t: u64,
    pub orders: f64,
    pub first: f64,
    pub offered: f64,
    pub applied: f64,
    pub refused_429: f64,
    pub refused_5xx: f64,
    pub dynamodb_throttled: f64,
    pub backlog: f64,
    pub wcu: f64,
    pub wcu_capacity: f64,
}

/// The totals of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub first: f64,
    pub applied: f64,
    pub refused_429: f64,
    pub refused_5xx: f64,
    pub lambda_throttled: f64,
    pub dynamodb_throttled: f64,
    /// Checkouts refused by their route's throttle.
    pub checkouts_refused: f64,
    pub psp_over_limit: f64,
    /// Checkout charges over checkout-api's Stripe budget (they wait for its pace).
    pub psp_over_budget: f64,
    pub fifo_over_limit: f64,
    /// Retries that reached the intake after it came back, and how many of them were refused.
    pub resent_after_return: f64,
    pub resent_refused_after_return: f64,
    /// Every delivery refused after the intake came back, first deliveries and Adyen's queue included.
    pub refused_after_return: f64,
    /// The most deliveries a second offered after the intake came back (the resend wave's crest).
    pub crest_after_return: f64,
    pub stripe_given_up: f64,
    /// The last second a Stripe or an Adyen retry was applied.
    pub last_stripe_retry_applied: Option<u64>,
    pub last_adyen_retry_applied: Option<u64>,
    /// The last second anything was still waiting for its PSP's retry.
    pub last_backlog: Option<u64>,
    pub max_backlog: f64,
}

/// The state one run carries from second to second.
pub struct World {
    pub config: Config,
    pub traffic: Traffic,
    rng: StdRng,
    route_tokens: f64,
    account_tokens: f64,
    environments: f64,
    /// Environments the intake may still add at once (Lambda's 1,000 per 10 s, refilled at a tenth a second).
    scale_tokens: f64,
    /// The highest units consumed so far, each time it rose: (second, write, read).
    peaks: Vec<(u64, f64, f64)>,
    pub stripe: Stripe,
    pub adyen: Adyen,
    pub totals: Totals,
    pub seconds: Vec<Second>,
    /// The figures of the second being simulated, filled as it goes.
    current: Second,
    /// The refusals counted up to the last second (429, 5xx).
    counted: (f64, f64),
    /// Seconds the step being simulated stands for (more than one where an idle stretch was skipped: its
    /// limits' capacity is that many seconds').
    dt: f64,
}

/// Deliveries of one kind offered at a second: from which PSP, which attempt, how many.
#[derive(Debug, Clone, Copy)]
struct Offer {
    stripe: bool,
    attempt: usize,
    count: f64,
}

impl World {
    pub fn new(config: Config, traffic: Traffic) -> Self {
        let stripe = Stripe {
            schedule_s: config.stripe_schedule_s.clone(),
            calendar: Calendar::default(),
            given_up: 0.0,
        };
        let adyen = Adyen {
            quick_s: config.adyen_quick_s.clone(),
            queue_intervals_s: config.adyen_queue_s.clone(),
            calendar: Calendar::default(),
            queued: 0.0,
            head_due: None,
            interval: 0,
            drain_per_s: config.adyen_drain_per_s,
            draining: false,
        };
        Self {
            rng: StdRng::seed_from_u64(config.seed),
            route_tokens: config.route_burst,
            account_tokens: config.account_burst,
            environments: config.initial_environments,
            scale_tokens: config.lambda_added_per_s * 10.0,
            peaks: Vec::new(),
            stripe,
            adyen,
            totals: Totals::default(),
            seconds: Vec::new(),
            current: Second::default(),
            counted: (0.0, 0.0),
            dt: 1.0,
            config,
            traffic,
        }
    }

    /// Runs until the traffic has ended and nothing waits for a retry, or `horizon_s`.
    pub fn run(&mut self, horizon_s: u64) {
        let mut t = 0;
        while t < horizon_s {
            self.step(t);
            let next = self.next_second(t);
            self.dt = next.saturating_sub(t).max(1) as f64;
            t = next;
        }
    }

    /// The next second worth simulating: the next one while traffic flows or a queue drains, else the next
    /// retry due (`u64::MAX` when nothing is left).
    fn next_second(&self, t: u64) -> u64 {
        let busy = t < self.traffic.end() || self.adyen.draining;
        if busy {
            return t + 1;
        }
        let due = [
            self.stripe.calendar.next(),
            self.adyen.calendar.next(),
            self.adyen.head_due,
        ];
        due.into_iter()
            .flatten()
            .map(|d| d.max(t + 1))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// First deliveries at `t`: a Poisson draw around the orders' webhooks.
    fn first_deliveries(&mut self, orders: f64) -> f64 {
        poisson(&mut self.rng, orders * self.config.deliveries_per_order)
    }

    fn step(&mut self, t: u64) {
        let orders = self.traffic.orders_at(t);
        let first = self.first_deliveries(orders);
        let mut offers = vec![
            Offer {
                stripe: true,
                attempt: 0,
                count: first * self.config.stripe_share,
            },
            Offer {
                stripe: false,
                attempt: 0,
                count: first * (1.0 - self.config.stripe_share),
            },
        ];
        for (attempt, count) in self.stripe.calendar.take_due(t).into_iter().enumerate() {
            if count > 0.0 {
                offers.push(Offer {
                    stripe: true,
                    attempt,
                    count,
                });
            }
        }
        for (attempt, count) in self.adyen.calendar.take_due(t).into_iter().enumerate() {
            if count > 0.0 {
                offers.push(Offer {
                    stripe: false,
                    attempt,
                    count,
                });
            }
        }
        let queue = self.adyen.offered(t);
        let offered: f64 = offers.iter().map(|o| o.count).sum::<f64>() + queue;
        let accepted = self.admit(t, orders, offered);
        let share = if offered > 0.0 { accepted / offered } else { 1.0 };
        self.answer(t, &offers, share);
        self.adyen.answered(t, queue, queue * share);
        if self.traffic.outage.is_some_and(|(_, to)| t >= to) {
            // Adyen's queue resends what it held: each is a resend after the return.
            self.totals.resent_after_return += queue;
            self.totals.resent_refused_after_return += queue * (1.0 - share);
            self.totals.refused_after_return += queue * (1.0 - share);
        }
        if queue * share / self.dt >= 0.05 {
            self.totals.last_adyen_retry_applied = Some(t);
        }
        self.record(t, orders, first, offered, accepted);
    }

    /// How many of `offered` deliveries at `t` get through every limit; the refusals counted by kind.
    fn admit(&mut self, t: u64, orders: f64, offered: f64) -> f64 {
        let (c, dt) = (&self.config, self.dt);
        // Orders whose checkout got through its route: the checkouts' own load follows them.
        let checkouts = (orders * c.checkout_share).min(c.checkout_route_rate);
        self.totals.checkouts_refused += (orders * c.checkout_share - checkouts) * dt;
        let orders = if c.checkout_share > 0.0 {
            checkouts / c.checkout_share
        } else {
            orders
        };
        // A bucket of `burst` tokens refilled at `rate`: over `dt` seconds of spread arrivals it passes the
        // tokens it holds and `rate` a second; what it does not pass stays, up to `burst`.
        let route = self.route_tokens.min(c.route_burst) + c.route_rate * dt;
        let others = orders * c.other_requests_per_order * dt;
        let account = (self.account_tokens.min(c.account_burst) + c.account_rate * dt - others).max(0.0);
        let through_api = if self.traffic.down(t) {
            0.0
        } else {
            offered.min(route).min(account)
        };
        self.route_tokens = (route - through_api).min(c.route_burst);
        self.account_tokens = (account - through_api).min(c.account_burst);
        if self.traffic.down(t) {
            self.totals.refused_5xx += offered;
            return 0.0;
        }
        self.totals.refused_429 += offered - through_api;
        let served = self.lambda(through_api);
        let applied = self.dynamodb(t, orders, served);
        self.psp_and_fifo(orders, applied);
        applied
    }

    /// Lambda: the intake's environments (grown by at most 1,000 in any 10 s, never above its limit) serve
    /// `intake_s` each; the rest is throttled (a 5xx to the PSP).
    fn lambda(&mut self, requests: f64) -> f64 {
        let c = &self.config;
        let needed = requests * c.intake_s / self.dt;
        let tokens = (self.scale_tokens + c.lambda_added_per_s * self.dt).min(c.lambda_added_per_s * 10.0);
        let available = (self.environments + tokens).min(c.lambda_limit);
        let grown = self.environments.max(needed.min(available));
        self.scale_tokens = (tokens - (grown - self.environments)).max(0.0);
        self.environments = grown;
        let served = requests.min(available / c.intake_s.max(1e-9) * self.dt);
        self.totals.lambda_throttled += requests - served;
        self.totals.refused_5xx += requests - served;
        served
    }

    /// DynamoDB: what the table serves at `t` (twice its peak of at least a window ago, never less than at
    /// first, never above its quota); a throttled write fails its webhook (a 5xx, retried by the PSP).
    fn dynamodb(&mut self, t: u64, orders: f64, requests: f64) -> f64 {
        let c = &self.config;
        // Units a second over the step.
        let (wcu, rcu) = (
            requests * c.wcu_per_delivery / self.dt + orders * c.wcu_per_order,
            requests * c.rcu_per_delivery / self.dt + orders * c.rcu_per_order,
        );
        let (peak_w, peak_r) = self.peak_before(t);
        let cap_w = (c.peak_multiple * peak_w).max(c.initial_wcu).min(c.max_wcu);
        let cap_r = (c.peak_multiple * peak_r).max(c.initial_rcu).min(c.max_rcu);
        let ratio = (cap_w / wcu.max(1e-9)).min(cap_r / rcu.max(1e-9)).min(1.0);
        let applied = requests * ratio;
        self.totals.dynamodb_throttled += requests - applied;
        self.totals.refused_5xx += requests - applied;
        let consumed = (wcu * ratio, rcu * ratio);
        let last = self.peaks.last().map_or(c.previous_peak, |p| (p.1, p.2));
        if consumed.0 > last.0 || consumed.1 > last.1 {
            self.peaks.push((t, last.0.max(consumed.0), last.1.max(consumed.1)));
        }
        self.current.wcu = consumed.0;
        self.current.wcu_capacity = cap_w;
        self.current.dynamodb_throttled = requests - applied;
        applied
    }

    /// The highest units consumed at least a window before `t` (the table's previous peak).
    fn peak_before(&self, t: u64) -> (f64, f64) {
        let previous = self.config.previous_peak;
        let Some(at) = t.checked_sub(self.config.peak_window_s) else {
            return previous;
        };
        let seen = self.peaks.partition_point(|p| p.0 <= at);
        match seen.checked_sub(1).and_then(|i| self.peaks.get(i)) {
            Some(p) => (p.1.max(previous.0), p.2.max(previous.1)),
            None => previous,
        }
    }

    /// The PSP's API and the FIFO queue: what goes over their limits is delayed (a 429 the saga retries,
    /// a send the relay retries), counted.
    fn psp_and_fifo(&mut self, orders: f64, applied: f64) {
        let c = &self.config;
        let psp = c.psp_fixed + orders * c.psp_per_order;
        self.totals.psp_over_limit += (psp - c.psp_limit).max(0.0) * self.dt;
        self.totals.psp_over_budget += (orders * c.psp_per_order - c.psp_checkout_budget).max(0.0) * self.dt;
        let fifo = applied / self.dt * c.fifo_per_applied + orders * c.fifo_per_order;
        self.totals.fifo_over_limit += (fifo - c.fifo_limit).max(0.0) * self.dt;
    }

    /// Each offer's share of `share` is applied; the rest goes back to its PSP's retries.
    fn answer(&mut self, t: u64, offers: &[Offer], share: f64) {
        let returned = self.traffic.outage.is_some_and(|(_, to)| t >= to);
        // Retries applied this step, Stripe's and Adyen's: a tail thinner than one webhook in 20 s of flow
        // is not counted as the last one landing.
        let mut retried = (0.0, 0.0);
        for offer in offers {
            let (applied, refused) = (offer.count * share, offer.count * (1.0 - share));
            if offer.attempt > 0 && returned {
                self.totals.resent_after_return += offer.count;
                self.totals.resent_refused_after_return += refused;
            }
            if returned {
                self.totals.refused_after_return += refused;
            }
            if offer.stripe {
                retried.0 += if offer.attempt > 0 { applied } else { 0.0 };
                self.stripe.refused(t, offer.attempt, refused);
            } else {
                retried.1 += if offer.attempt > 0 { applied } else { 0.0 };
                self.adyen.refused(t, offer.attempt, refused);
            }
        }
        if retried.0 / self.dt >= 0.05 {
            self.totals.last_stripe_retry_applied = Some(t);
        }
        if retried.1 / self.dt >= 0.05 {
            self.totals.last_adyen_retry_applied = Some(t);
        }
    }

    /// The second's figures, kept.
    fn record(&mut self, t: u64, orders: f64, first: f64, offered: f64, accepted: f64) {
        if self.traffic.outage.is_some_and(|(_, to)| t >= to) {
            self.totals.crest_after_return = self.totals.crest_after_return.max(offered / self.dt);
        }
        let backlog = self.stripe.calendar.pending() + self.adyen.calendar.pending() + self.adyen.queued;
        let totals = &mut self.totals;
        totals.first += first;
        totals.applied += accepted;
        totals.stripe_given_up = self.stripe.given_up;
        totals.max_backlog = totals.max_backlog.max(backlog);
        if backlog >= 0.5 {
            totals.last_backlog = Some(t);
        }
        let dt = self.dt;
        let second = Second {
            t,
            orders,
            first: first / dt,
            offered: offered / dt,
            applied: accepted / dt,
            refused_429: (totals.refused_429 - self.counted.0) / dt,
            refused_5xx: (totals.refused_5xx - self.counted.1) / dt,
            backlog,
            dynamodb_throttled: self.current.dynamodb_throttled / dt,
            // While the intake is down nothing reaches the table: it still serves what it served.
            wcu_capacity: if self.current.wcu_capacity > 0.0 {
                self.current.wcu_capacity
            } else {
                self.seconds.last().map_or(0.0, |s| s.wcu_capacity)
            },
            ..self.current
        };
        self.counted = (totals.refused_429, totals.refused_5xx);
        self.seconds.push(second);
        self.current = Second::default();
    }
}

/// A Poisson draw of mean `mean` (Knuth's method below 30, a normal approximation above).
pub fn poisson(rng: &mut StdRng, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    if mean < 30.0 {
        let limit = (-mean).exp();
        let (mut k, mut p) = (0.0, 1.0);
        loop {
            p *= rng.random::<f64>();
            if p <= limit {
                return k;
            }
            k += 1.0;
        }
    }
    let (u1, u2): (f64, f64) = (rng.random::<f64>().max(1e-12), rng.random());
    let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (mean + normal * mean.sqrt()).round().max(0.0)
}
