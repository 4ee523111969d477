//! The capacity model's arithmetic, pure: for each resource a peak meets, its demand as a straight line in
//! orders a second (`fixed + per_order * r`: the scanners' PSP budget is fixed, everything else grows with
//! the orders), against its limit from the template or the limits table. The highest rate a resource
//! sustains is where its line meets its limit; the first limit that binds is the one with the lowest such
//! rate, and the deployment's sustainable rate is that rate. Headroom is `1 - demand / limit` at the
//! profile's rate.
//!
//! Steady state only: what a fresh table, a cold function or a growing mapping do on the way up is the
//! simulation's ([`crate::simulate`]). The rows read every per-request cost from `benchmarks/costs.json`.

use super::deployment::{Deployment, CHECKOUT_ROUTE, WEBHOOK_ROUTE};
use super::limits::Limits;
use super::profile::Profile;
use crate::costs::{CheckoutCost, Costs, RequestCost};

/// One resource's demand against its limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub resource: String,
    /// Where the limit comes from: a template parameter or property, or a key of the limits table.
    pub limit_from: String,
    pub unit: &'static str,
    pub fixed: f64,
    pub per_order: f64,
    pub limit: f64,
    /// Reaching it delays or refuses money's news (a throttled write, a PSP 429), not only a request.
    pub money: bool,
}

impl Row {
    pub fn demand(&self, orders_per_s: f64) -> f64 {
        self.fixed + self.per_order * orders_per_s
    }

    /// `1 - demand / limit` at `orders_per_s` (negative: over the limit).
    pub fn headroom(&self, orders_per_s: f64) -> f64 {
        1.0 - self.demand(orders_per_s) / self.limit
    }

    /// The most orders a second this resource sustains (infinite if it does not grow with them).
    pub fn max_orders_per_s(&self) -> f64 {
        if self.per_order <= 0.0 {
            return f64::INFINITY;
        }
        ((self.limit - self.fixed) / self.per_order).max(0.0)
    }
}

/// The model's answer for one deployment and profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub rows: Vec<Row>,
    /// What the model could not price (a cost not measured yet).
    pub notes: Vec<String>,
    /// The Stripe budgets of every function that calls Stripe against the account's limit.
    pub budgets: StripeBudgets,
}

/// Every function's Stripe budget together: steady demand is in the rows; this is the bound the budgets
/// themselves set, which holds whatever the traffic (a backlog, a retry storm), if each is set.
#[derive(Debug, Clone, PartialEq)]
pub struct StripeBudgets {
    /// The budgets' sum, requests a second (of the budgeted functions).
    pub sum: f64,
    /// The account's limit they must stay under (the template's `StripeRateLimit`).
    pub limit: f64,
    /// What the model flags: budgets over the limit, functions with no budget (no bound), a budget no
    /// function can split (no instance count: the function would not start).
    pub flags: Vec<String>,
}

impl Answer {
    /// The row that binds first (the lowest sustainable rate).
    pub fn binding(&self) -> Option<&Row> {
        self.rows
            .iter()
            .min_by(|a, b| a.max_orders_per_s().total_cmp(&b.max_orders_per_s()))
    }

    /// The highest rate every resource sustains.
    pub fn sustainable(&self) -> f64 {
        self.binding().map_or(f64::INFINITY, Row::max_orders_per_s)
    }
}

/// Everything one run of the model reads.
pub struct Inputs<'a> {
    pub costs: &'a Costs,
    pub deployment: &'a Deployment,
    pub limits: &'a Limits,
    pub profile: &'a Profile,
}

/// Per-order demand of the webhooks: a figure of each kind's cost, weighted by the profile's deliveries.
fn per_webhook(inputs: &Inputs<'_>, figure: impl Fn(&RequestCost) -> f64) -> Result<f64, String> {
    let mut sum = 0.0;
    for (kind, deliveries) in inputs.profile.deliveries_by_kind() {
        sum += deliveries * figure(inputs.costs.webhook(kind)?);
    }
    Ok(sum)
}

/// The checkout's cost, and a note when it was not measured (then it counts as free).
fn checkout(inputs: &Inputs<'_>, notes: &mut Vec<String>) -> CheckoutCost {
    match &inputs.costs.checkout {
        Some(c) => c.clone(),
        None => {
            notes.push(
                "checkouts not measured (benchmarks/costs.json has no `checkout`: run `bench costs`): their \
                 DynamoDB units, PSP calls, events and Lambda time count as none"
                    .into(),
            );
            CheckoutCost::default()
        }
    }
}

/// The model's rows for `inputs`.
pub fn answer(inputs: &Inputs<'_>) -> Result<Answer, String> {
    inputs.profile.check()?;
    let mut notes = Vec::new();
    let checkout = checkout(inputs, &mut notes);
    let mut rows = api_rows(inputs)?;
    rows.extend(lambda_rows(inputs, &checkout)?);
    rows.extend(dynamodb_rows(inputs, &checkout)?);
    rows.extend(queue_rows(inputs, &checkout)?);
    rows.extend(psp_rows(inputs, &checkout)?);
    let budgets = stripe_budgets(inputs)?;
    if inputs.deployment.eventbridge {
        let stripe = inputs.profile.webhooks_per_order * inputs.profile.stripe_share;
        rows.push(row(
            inputs,
            "EventBridge target invocations (Stripe's events)",
            "eventbridge_target_invocations",
            stripe,
        )?);
    }
    Ok(Answer { rows, notes, budgets })
}

/// A row whose limit is the limits table's `key`, growing by `per_order`.
fn row(inputs: &Inputs<'_>, resource: &str, key: &str, per_order: f64) -> Result<Row, String> {
    let limit = inputs.limits.limit(key)?;
    let limit_from = match limit.raised_from {
        Some(default) => format!("limits: {key}, raised from {default} on request (benchmarks/granted.toml)"),
        None => format!("limits: {key}"),
    };
    Ok(Row {
        resource: resource.into(),
        limit_from,
        unit: "/s",
        fixed: 0.0,
        per_order,
        limit: limit.figure,
        money: false,
    })
}

/// The routes' throttles (the template's) and the account's API Gateway rate.
fn api_rows(inputs: &Inputs<'_>) -> Result<Vec<Row>, String> {
    let (p, d) = (inputs.profile, inputs.deployment);
    let webhooks = p.deliveries_per_order();
    let checkouts = p.checkout_share;
    let polls = p.checkout_share * p.polls_per_checkout;
    // A refused webhook delays the news of money until the PSP's retry; a refused checkout, a sale.
    let route = |resource: &str, parameter: &str, rate: f64, per_order: f64| Row {
        resource: resource.into(),
        limit_from: format!("template: {parameter}"),
        unit: "requests/s",
        fixed: 0.0,
        per_order,
        limit: rate,
        money: resource.contains("webhooks"),
    };
    let mut account = row(
        inputs,
        "API Gateway, every route of the account",
        "api_gateway_account_rps",
        0.0,
    )?;
    account.per_order = webhooks + checkouts + polls;
    account.unit = "requests/s";
    Ok(vec![
        route(
            &format!("API route {WEBHOOK_ROUTE}"),
            "WebhookThrottlingRateLimit",
            d.webhook_route.rate,
            webhooks,
        ),
        route(
            &format!("API route {CHECKOUT_ROUTE}"),
            "ApiThrottlingRateLimit (every route without its own)",
            d.checkout_route.rate,
            checkouts,
        ),
        route(
            "API route GET /checkouts/{id}",
            "ApiThrottlingRateLimit (every route without its own)",
            d.checkout_route.rate,
            polls,
        ),
        account,
    ])
}

/// Concurrent executions: the intake's (against its reservation, if any) and every function's together
/// against what the account leaves them. Concurrency = rate x duration (Little's law).
fn lambda_rows(inputs: &Inputs<'_>, checkout: &CheckoutCost) -> Result<Vec<Row>, String> {
    let (p, d) = (inputs.profile, inputs.deployment);
    let mut intake = 0.0;
    for (kind, deliveries) in p.deliveries_by_kind() {
        intake += deliveries * inputs.costs.intake_seconds(kind)?;
    }
    let checkout_api = p.checkout_share * checkout.start_ms / 1e3;
    let others = consumer_concurrency(p, checkout);
    let account = inputs.limits.figure("lambda_account_concurrency")?;
    let mut rows = Vec::new();
    let reserved = d.reserved.get("WebhookIntakeFunction").copied();
    let reserved_total: u64 = d.reserved.values().sum();
    let mut all = row(
        inputs,
        "Lambda concurrency, unreserved functions",
        "lambda_account_concurrency",
        0.0,
    )?;
    all.unit = "executions";
    all.limit = account - reserved_total as f64;
    match reserved {
        Some(n) => rows.push(Row {
            resource: "Lambda concurrency, webhook-intake (reserved)".into(),
            limit_from: "template: WebhookReservedConcurrency".into(),
            unit: "executions",
            fixed: 0.0,
            per_order: intake,
            limit: n as f64,
            money: false,
        }),
        None => all.per_order += intake,
    }
    match d.reserved.get("CheckoutApiFunction").copied() {
        // Paced, each instance keeps to its share of the budget, so the charges need `charges * n / budget`
        // instances when that is more than their time does.
        Some(n) => rows.push(Row {
            resource: "Lambda concurrency, checkout-api (reserved)".into(),
            limit_from: "template: CheckoutReservedConcurrency".into(),
            unit: "executions",
            fixed: 0.0,
            per_order: checkout_api_budget(d).map_or(checkout_api, |budget| {
                let charges = p.checkout_share * p.stripe_share * checkout.psp_calls;
                checkout_api.max(charges * n as f64 / budget)
            }),
            limit: n as f64,
            money: false,
        }),
        None => all.per_order += checkout_api,
    }
    all.per_order += others;
    rows.push(all);
    Ok(rows)
}

/// The table's writes and reads against its quota and against what a table that never saw the peak serves
/// at once (its warm throughput, else a new table's), and the `open-items` index's partitions.
fn dynamodb_rows(inputs: &Inputs<'_>, checkout: &CheckoutCost) -> Result<Vec<Row>, String> {
    let (p, d) = (inputs.profile, inputs.deployment);
    // The relay archives every event it relays as a history item (off the webhook's path, on the same table).
    let archive = events_per_order(p, checkout) * inputs.costs.archive_wcu_per_event;
    let writes =
        per_webhook(inputs, |c| c.wcu)? + p.checkout_share * (checkout.start.wcu + checkout.delivery.wcu) + archive;
    let reads = per_webhook(inputs, |c| c.rcu)? + p.checkout_share * (checkout.start.rcu + checkout.delivery.rcu);
    let index = per_webhook(inputs, |c| c.open_items_units)?
        + p.checkout_share * (checkout.start.open_items_units + checkout.delivery.open_items_units);
    let money = |mut r: Row, unit: &'static str| {
        r.money = true;
        r.unit = unit;
        r
    };
    let at_once = |warm: Option<f64>, key: &str, resource: &str, per_order: f64| -> Result<Row, String> {
        let mut r = row(inputs, resource, key, per_order)?;
        if let Some(units) = warm {
            r.limit = units;
            r.limit_from = "template: PaymentsTable WarmThroughput".into();
        }
        Ok(r)
    };
    let mut shard = row(
        inputs,
        "DynamoDB open-items index, one shard's partition",
        "dynamodb_partition_wcu",
        index / d.open_shards as f64,
    )?;
    shard.limit_from = format!(
        "limits: dynamodb_partition_wcu; {} shards (template: OpenItemsShards)",
        d.open_shards
    );
    Ok(vec![
        money(
            row(inputs, "DynamoDB table writes", "dynamodb_table_max_wcu", writes)?,
            "WCU/s",
        ),
        money(
            at_once(
                d.warm_write,
                "dynamodb_new_table_wcu",
                "DynamoDB table writes, served at once",
                writes,
            )?,
            "WCU/s",
        ),
        money(
            row(inputs, "DynamoDB table reads", "dynamodb_table_max_rcu", reads)?,
            "RCU/s",
        ),
        money(
            at_once(
                d.warm_read,
                "dynamodb_new_table_rcu",
                "DynamoDB table reads, served at once",
                reads,
            )?,
            "RCU/s",
        ),
        money(shard, "WCU/s"),
    ])
}

/// The payment events queue (FIFO): calls a second per action, and its consumer mapping's concurrency.
fn queue_rows(inputs: &Inputs<'_>, checkout: &CheckoutCost) -> Result<Vec<Row>, String> {
    let (p, d) = (inputs.profile, inputs.deployment);
    let events = events_per_order(p, checkout);
    let per_action = inputs.costs.sqs_requests_per_event / 3.0;
    let key = if d.fifo_high_throughput {
        "sqs_fifo_high_throughput_calls_per_action"
    } else {
        "sqs_fifo_calls_per_action"
    };
    let mut calls = row(
        inputs,
        "SQS FIFO payment events, calls per action",
        key,
        events * per_action,
    )?;
    calls.unit = "calls/s";
    calls.money = true;
    let in_flight = consumer_concurrency(p, checkout);
    let mut mapping = row(
        inputs,
        "SQS mapping checkout-events, batches in flight",
        "sqs_mapping_max",
        in_flight,
    )?;
    mapping.unit = "batches";
    if let Some(max) = d.consumer_max_concurrency {
        mapping.limit = max as f64;
        mapping.limit_from = "template: ScalingConfig.MaximumConcurrency".into();
    }
    Ok(vec![calls, mapping])
}

/// Payment events per order, each one SQS message: every applied webhook's, and a checkout's own (its log
/// as measured, the outcome included, which a webhook may have brought: an upper bound).
fn events_per_order(p: &Profile, checkout: &CheckoutCost) -> f64 {
    p.applied_per_order + p.webhooks_per_order * p.retry_share + p.checkout_share * checkout.events
}

/// The consumer's (`checkout-events`) concurrency per order: each event in a batch of its own, as long as the
/// measured delivery took per event.
fn consumer_concurrency(p: &Profile, checkout: &CheckoutCost) -> f64 {
    let per_event_s = checkout.delivery_ms / 1e3 / checkout.events.max(1.0);
    events_per_order(p, checkout) * per_event_s
}

/// Stripe's limit for this deployment: the profile's, else the template's `StripeRateLimit`, which may not
/// claim more than the account is known to have (the limits table, with the raises of granted.toml).
fn stripe_limit(inputs: &Inputs<'_>) -> Result<(f64, String), String> {
    if let Some(limit) = inputs.profile.stripe_rate_limit {
        return Ok((limit, "profile: stripe_rate_limit".into()));
    }
    let known = inputs.limits.figure("stripe_live_operations")?;
    let stated = inputs.deployment.stripe_rate_limit;
    if stated > known {
        return Err(format!(
            "the template's StripeRateLimit {stated} is above the account's known limit {known} \
             (limits.toml stripe_live_operations; a raise Stripe granted goes into benchmarks/granted.toml)"
        ));
    }
    let from = row(inputs, "", "stripe_live_operations", 0.0)?.limit_from;
    Ok((stated, format!("template: StripeRateLimit ({from}: {known})")))
}

/// The budgets' sum against the limit, and what cannot be bounded.
fn stripe_budgets(inputs: &Inputs<'_>) -> Result<StripeBudgets, String> {
    let (limit, _) = stripe_limit(inputs)?;
    let mut flags = Vec::new();
    let mut sum = 0.0;
    for b in &inputs.deployment.stripe_budgets {
        match (b.per_second, b.instances) {
            (None, _) => flags.push(format!("{} has no Stripe budget: its calls have no bound", b.function)),
            (Some(_), None) => flags.push(format!(
                "{} has a Stripe budget but no instance count to split it among (it would not start)",
                b.function
            )),
            (Some(per_second), Some(_)) => sum += per_second,
        }
    }
    if sum >= limit {
        flags.push(format!(
            "the Stripe budgets add up to {sum}/s, not under the account's limit of {limit}/s"
        ));
    }
    Ok(StripeBudgets { sum, limit, flags })
}

/// Stripe's API: the checkouts' calls and the scanners' budgets against the account's rate limit; and
/// checkout-api's calls against its own budget, where it has one (past it, checkouts wait for their charge).
fn psp_rows(inputs: &Inputs<'_>, checkout: &CheckoutCost) -> Result<Vec<Row>, String> {
    let (p, d) = (inputs.profile, inputs.deployment);
    let (limit, limit_from) = stripe_limit(inputs)?;
    let charges = p.checkout_share * p.stripe_share * checkout.psp_calls;
    let mut rows = Vec::new();
    if let Some(budget) = checkout_api_budget(d) {
        rows.push(Row {
            resource: "Stripe budget of checkout-api (its charges)".into(),
            limit_from: "template: CheckoutApiStripeBudget".into(),
            unit: "requests/s",
            fixed: 0.0,
            per_order: charges,
            limit: budget,
            money: true,
        });
    }
    rows.push(Row {
        resource: format!(
            "Stripe API requests (checkouts, plus {} scanners' budgets of {}/s)",
            d.psp_scanners, d.psp_scan_rate
        ),
        limit_from,
        unit: "requests/s",
        fixed: d.psp_scan_rate * d.psp_scanners as f64,
        per_order: charges,
        limit,
        money: true,
    });
    Ok(rows)
}

/// checkout-api's Stripe budget, where it has one.
fn checkout_api_budget(d: &Deployment) -> Option<f64> {
    d.stripe_budgets
        .iter()
        .find(|b| b.function == "CheckoutApiFunction")
        .and_then(|b| b.per_second)
}
