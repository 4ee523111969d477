//! The simulation's figures, each derived from what the capacity model reads (the measured costs, the
//! template's settings at a samconfig environment's parameters, the limits table, the load profile) and
//! from nothing else, but one stated assumption: how fast Adyen drains an endpoint's queue once its head
//! gets through ([`ADYEN_DRAIN_PER_S`]; Adyen publishes no figure).

use super::world::Config;
use crate::capacity::deployment::{self, Deployment};
use crate::capacity::limits::Limits;
use crate::capacity::profile::Profile;
use crate::capacity::PEAK_ENV;
use crate::costs::{CheckoutCost, Costs};
use local_lambda::template::Template;

/// Webhooks a second an Adyen endpoint's queue delivers once its head was accepted (assumed: in order, a
/// few in flight at the intake's tens of milliseconds).
pub const ADYEN_DRAIN_PER_S: f64 = 100.0;

/// What one deployment's runs read.
pub struct Inputs {
    pub costs: Costs,
    pub deployment: Deployment,
    pub limits: Limits,
    pub profile: Profile,
}

impl Inputs {
    /// The repository's costs and limits, the deployment of `env` with `parameters` over it, the profile
    /// `profile`.
    pub fn read(env: Option<&str>, parameters: &[(String, String)], profile: &str) -> Result<Self, String> {
        let template = Template::from_repo()?;
        Ok(Self {
            costs: crate::costs::load(&crate::costs::path())?,
            deployment: deployment::read(&template, env, parameters)?,
            limits: crate::capacity::limits::for_deployment(env)?,
            profile: crate::capacity::profile(profile, &[])?,
        })
    }
}

/// A deployment RESULTS.md shows: its name, samconfig environment and parameters over it.
pub type Variant = (String, Option<String>, Vec<(String, String)>);

/// The deployments RESULTS.md shows: the template's defaults, and where samconfig has the peak environment,
/// it and it without its warm throughput (what a first peak does to a table that never saw it).
pub fn deployments() -> Result<Vec<Variant>, String> {
    let peak = local_lambda::template::samconfig_parameters(
        &local_testkit::service::repo_root().join("samconfig.toml"),
        PEAK_ENV,
    )?;
    let mut out = vec![("default".to_owned(), None, Vec::new())];
    if peak.contains_key("Stage") {
        let cold = vec![("TableWarmWriteUnits".to_owned(), "0".to_owned())];
        out.push((PEAK_ENV.to_owned(), Some(PEAK_ENV.to_owned()), Vec::new()));
        out.push((
            format!("{PEAK_ENV}-no-warm-throughput"),
            Some(PEAK_ENV.to_owned()),
            cold,
        ));
    }
    Ok(out)
}

/// The head of the simulation's section of RESULTS.md.
pub fn results_head(profile: &str, seed: u64) -> String {
    format!(
        "## The hardest hours, simulated (`bench simulate --results`, profile `{profile}`, seed {seed})\n\n\
         One-second steps, flows of webhooks (expected counts), first deliveries a seeded Poisson draw. **ramp**: \
         the quiet profile's rate for 10 min, up to the peak over 30 min, held an hour, down again, on a table \
         that never saw it. **outage**: the peak for three hours on a table that served it before, the intake \
         down from minute 30 to minute 90, then the PSPs' retries (Stripe: the limits table's back-off over \
         three days, about 5 min, 30 min, 2, 4, 8, 16 h, then daily, as reported from its Dashboard, Stripe \
         publishes no steps; Adyen: 9, 18, 27 s, then its queue per endpoint, drained at {ADYEN_DRAIN_PER_S}/s \
         once its head got through, an assumption). Lambda adds at most 1,000 environments in any 10 s. A refusal is a 429 (route or account throttle) or a 5xx \
         (intake down, Lambda throttled, DynamoDB throttled); DynamoDB throttling, Stripe calls over its limit \
         and FIFO calls over its limit are the limits that delay money. Plots: `scripts/plot-simulation` \
         (benchmarks/sim/*.png).\n\n"
    )
}

/// Per order: the mean of `figure` over the profile's deliveries, weighted by kind.
fn per_delivery(inputs: &Inputs, figure: impl Fn(&Costs, &str) -> Result<f64, String>) -> Result<f64, String> {
    let total = inputs.profile.deliveries_per_order();
    let mut sum = 0.0;
    for (kind, n) in inputs.profile.deliveries_by_kind() {
        sum += n * figure(&inputs.costs, kind)?;
    }
    Ok(sum / total.max(1e-9))
}

/// The simulation's figures for `inputs`; `warm`: the table served the profile's peak before and the
/// intake runs the environments it needs for it.
pub fn derive(inputs: &Inputs, seed: u64, warm: bool) -> Result<Config, String> {
    let (p, d, l) = (&inputs.profile, &inputs.deployment, &inputs.limits);
    let checkout = inputs.costs.checkout.clone().unwrap_or_default();
    let wcu = per_delivery(inputs, |c, k| Ok(c.webhook(k)?.wcu))?;
    let rcu = per_delivery(inputs, |c, k| Ok(c.webhook(k)?.rcu))?;
    let order_wcu = p.checkout_share * (checkout.start.wcu + checkout.delivery.wcu);
    let order_rcu = p.checkout_share * (checkout.start.rcu + checkout.delivery.rcu);
    let deliveries = p.deliveries_per_order();
    let peak = (
        p.orders_per_s * (deliveries * wcu + order_wcu),
        p.orders_per_s * (deliveries * rcu + order_rcu),
    );
    Ok(Config {
        seed,
        deliveries_per_order: deliveries,
        stripe_share: p.stripe_share,
        other_requests_per_order: p.checkout_share * (1.0 + p.polls_per_checkout),
        checkout_share: p.checkout_share,
        checkout_route_rate: d.checkout_route.rate,
        route_rate: d.webhook_route.rate,
        route_burst: d.webhook_route.burst as f64,
        account_rate: l.figure("api_gateway_account_rps")?,
        account_burst: l.figure("api_gateway_account_burst")?,
        lambda_limit: lambda_limit(inputs, &checkout)?,
        lambda_added_per_s: l.figure("lambda_scaling_per_10s")? / 10.0,
        intake_s: per_delivery(inputs, |c, k| c.intake_seconds(k))?,
        wcu_per_delivery: wcu,
        rcu_per_delivery: rcu,
        wcu_per_order: order_wcu,
        rcu_per_order: order_rcu,
        initial_wcu: d.warm_write.map_or_else(|| l.figure("dynamodb_new_table_wcu"), Ok)?,
        initial_rcu: d.warm_read.map_or_else(|| l.figure("dynamodb_new_table_rcu"), Ok)?,
        max_wcu: l.figure("dynamodb_table_max_wcu")?,
        max_rcu: l.figure("dynamodb_table_max_rcu")?,
        peak_multiple: l.figure("dynamodb_peak_multiple")?,
        peak_window_s: l.figure("dynamodb_peak_window_s")? as u64,
        previous_peak: if warm { peak } else { (0.0, 0.0) },
        initial_environments: if warm {
            p.orders_per_s * deliveries * per_delivery(inputs, |c, k| c.intake_seconds(k))?
        } else {
            0.0
        },
        psp_fixed: d.psp_scan_rate * d.psp_scanners as f64,
        psp_per_order: p.checkout_share * p.stripe_share * checkout.psp_calls,
        psp_limit: p
            .stripe_rate_limit
            .map_or_else(|| l.figure("stripe_live_operations"), Ok)?,
        psp_checkout_budget: d
            .stripe_budgets
            .iter()
            .find(|b| b.function == "CheckoutApiFunction")
            .and_then(|b| b.per_second)
            .unwrap_or(f64::INFINITY),
        fifo_per_applied: fifo_per_applied(inputs),
        fifo_per_order: p.checkout_share * checkout.events * inputs.costs.sqs_requests_per_event / 3.0,
        fifo_limit: l.figure(if d.fifo_high_throughput {
            "sqs_fifo_high_throughput_calls_per_action"
        } else {
            "sqs_fifo_calls_per_action"
        })?,
        stripe_schedule_s: l.schedule("stripe_webhook_retry_days")?,
        adyen_quick_s: l.schedule("adyen_webhook_quick_retries")?,
        adyen_queue_s: l.schedule("adyen_webhook_queue_intervals")?,
        adyen_drain_per_s: ADYEN_DRAIN_PER_S,
    })
}

/// The intake's executions: its reservation, or what the account leaves it after the reservations and the
/// other functions' concurrency at the peak (the model's figures).
fn lambda_limit(inputs: &Inputs, checkout: &CheckoutCost) -> Result<f64, String> {
    let (p, d) = (&inputs.profile, &inputs.deployment);
    if let Some(n) = d.reserved.get("WebhookIntakeFunction") {
        return Ok(*n as f64);
    }
    let reserved: u64 = d.reserved.values().sum();
    let per_event_s = checkout.delivery_ms / 1e3 / checkout.events.max(1.0);
    let events = p.applied_per_order + p.webhooks_per_order * p.retry_share + p.checkout_share * checkout.events;
    let others = p.orders_per_s * (p.checkout_share * checkout.start_ms / 1e3 + events * per_event_s);
    Ok((inputs.limits.figure("lambda_account_concurrency")? - reserved as f64 - others).max(0.0))
}

/// FIFO calls per action per accepted delivery: the share of deliveries that apply an event.
fn fifo_per_applied(inputs: &Inputs) -> f64 {
    let p = &inputs.profile;
    let applied = p.applied_per_order + p.webhooks_per_order * p.retry_share;
    applied / p.deliveries_per_order().max(1e-9) * inputs.costs.sqs_requests_per_event / 3.0
}
