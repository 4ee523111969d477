//! The simulation is the same for the same seed, and it sees what it should: a throttle refuses, an outage
//! is drained by the PSPs' retries.

use super::world::{Config, Traffic, World};
use super::{csv, markdown, Run};

/// A small deployment: a 100/s route, plenty of everything else.
fn config(seed: u64) -> Config {
    Config {
        seed,
        deliveries_per_order: 4.0,
        stripe_share: 0.5,
        other_requests_per_order: 2.0,
        checkout_share: 1.0,
        checkout_route_rate: 1_000.0,
        route_rate: 100.0,
        route_burst: 200.0,
        account_rate: 10_000.0,
        account_burst: 5_000.0,
        lambda_limit: 1_000.0,
        lambda_added_per_s: 100.0,
        intake_s: 0.05,
        wcu_per_delivery: 4.0,
        rcu_per_delivery: 1.0,
        wcu_per_order: 20.0,
        rcu_per_order: 3.0,
        initial_wcu: 4_000.0,
        initial_rcu: 12_000.0,
        max_wcu: 40_000.0,
        max_rcu: 40_000.0,
        peak_multiple: 2.0,
        peak_window_s: 1_800,
        previous_peak: (0.0, 0.0),
        initial_environments: 0.0,
        psp_fixed: 20.0,
        psp_per_order: 1.0,
        psp_limit: 100.0,
        psp_checkout_budget: f64::INFINITY,
        fifo_per_applied: 0.5,
        fifo_per_order: 2.0,
        fifo_limit: 300.0,
        stripe_schedule_s: vec![60.0, 120.0, 240.0, 480.0, 960.0, 1_920.0, 3_840.0, 7_680.0],
        adyen_quick_s: vec![9.0, 18.0, 27.0],
        adyen_queue_s: vec![120.0, 300.0, 600.0, 900.0, 1_800.0, 3_600.0],
        adyen_drain_per_s: 100.0,
    }
}

fn run(seed: u64, orders: f64, outage: Option<(u64, u64)>) -> Run {
    let traffic = Traffic {
        orders: vec![(0, orders), (1_200, orders)],
        outage,
    };
    let mut world = World::new(config(seed), traffic);
    world.run(3 * 86_400);
    Run {
        scenario: "test",
        outage,
        totals: world.totals.clone(),
        seconds: world.seconds,
    }
}

#[test]
fn the_same_seed_gives_the_same_result_and_another_seed_another() {
    let (a, b) = (run(7, 20.0, Some((300, 600))), run(7, 20.0, Some((300, 600))));
    assert_eq!(a.totals, b.totals);
    assert_eq!(csv(&a), csv(&b));
    assert_eq!(markdown("x", &[a]), markdown("x", &[b]));
    let c = run(8, 20.0, Some((300, 600)));
    assert_ne!(run(7, 20.0, Some((300, 600))).totals.first, c.totals.first);
}

#[test]
fn under_its_limits_everything_is_applied_at_once() {
    let r = run(1, 20.0, None);
    assert!(r.totals.first > 90_000.0, "{:?}", r.totals);
    assert!((r.totals.applied - r.totals.first).abs() < 1e-6);
    assert_eq!(r.totals.refused_429 + r.totals.refused_5xx, 0.0);
    assert_eq!(r.totals.last_backlog, None);
}

#[test]
fn an_outage_is_refused_then_applied_by_the_psps_retries() {
    let r = run(2, 20.0, Some((300, 600)));
    let t = &r.totals;
    assert!(t.refused_5xx > 20_000.0, "{t:?}");
    assert!((t.applied - t.first).abs() < 1.0, "{t:?}");
    assert_eq!(t.stripe_given_up, 0.0);
    assert!(t.last_stripe_retry_applied.unwrap() > 600 && t.last_adyen_retry_applied.unwrap() > 600);
    assert!(t.resent_after_return > 0.0);
}

#[test]
fn over_the_routes_throttle_webhooks_are_refused_429() {
    let r = run(3, 50.0, None);
    assert!(r.totals.refused_429 > 0.0, "{:?}", r.totals);
    assert!(r.totals.last_backlog.is_some());
}

#[test]
fn a_new_table_throttles_a_surge_past_what_it_serves_at_once() {
    // 250 orders/s x (4 x 4 + 20) = 9,000 WCU against a new table's 4,000: throttled until the peak is old
    // enough to double.
    let mut c = config(4);
    c.route_rate = 10_000.0;
    c.route_burst = 5_000.0;
    let traffic = Traffic {
        orders: vec![(0, 250.0), (600, 250.0)],
        outage: None,
    };
    let mut world = World::new(c, traffic);
    world.run(86_400);
    assert!(world.totals.dynamodb_throttled > 0.0, "{:?}", world.totals);
}

/// Issue 44: with samconfig's `peak` (and the raises of granted.toml), an hour's outage of the intake at the
/// peak profile: every webhook the PSPs resend after the intake's return is applied at that resend, none
/// refused by a throttle (route, account, Lambda), no DynamoDB throttling, no Stripe call past the account's
/// limit or checkout-api's budget; the same for the same seed.
#[test]
fn the_peak_environments_outage_applies_every_resend_at_its_first_try_and_throttles_nothing() {
    let outage = |seed| {
        let runs = super::run_only(Some(crate::capacity::PEAK_ENV), &[], "peak", seed, |s| s == "outage").unwrap();
        runs.into_iter().next().expect("the outage run")
    };
    let run = outage(super::SEED);
    let t = &run.totals;
    assert!(t.resent_after_return > 10_000_000.0, "a real wave: {t:?}");
    assert_eq!(t.resent_refused_after_return, 0.0, "{t:?}");
    assert_eq!(t.refused_after_return, 0.0, "{t:?}");
    assert_eq!(t.refused_429, 0.0, "no throttle refuses, before or after: {t:?}");
    assert_eq!((t.dynamodb_throttled, t.lambda_throttled), (0.0, 0.0), "{t:?}");
    assert_eq!(
        (t.psp_over_limit, t.psp_over_budget, t.fifo_over_limit),
        (0.0, 0.0, 0.0),
        "{t:?}"
    );
    assert_eq!(t.stripe_given_up, 0.0);
    assert!((t.applied - t.first).abs() < 1.0, "every webhook applied: {t:?}");
    // What the outage refused it refused by being down, and nothing else.
    assert!(t.refused_5xx > 0.0);
    let again = outage(super::SEED);
    assert_eq!(again.totals, run.totals);
    assert_eq!(csv(&again), csv(&run));
}
