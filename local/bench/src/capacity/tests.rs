//! The model against a case computed by hand, and against the repository's own template, costs and limits:
//! a setting changed in the template changes the answer.

use super::deployment::{self, Deployment};
use super::limits::{Limit, Limits};
use super::model::{self, Inputs};
use super::profile::Profile;
use crate::costs::{CheckoutCost, Costs, RequestCost};
use local_lambda::template::Template;
use local_lambda::triggers::route::Throttle;
use std::collections::BTreeMap;

fn cost(rcu: f64, wcu: f64, open_items_units: f64) -> RequestCost {
    RequestCost {
        rcu,
        wcu,
        index_units: open_items_units,
        open_items_units,
        calls: BTreeMap::new(),
    }
}

/// Round figures for the hand-computed case.
fn costs() -> Costs {
    let kinds = [
        ("new", cost(1.0, 5.0, 2.0), 50.0),
        ("no_change", cost(1.0, 2.0, 0.0), 20.0),
        ("duplicate", cost(1.0, 0.0, 0.0), 10.0),
        ("not_ours", cost(0.0, 0.0, 0.0), 10.0),
    ];
    Costs {
        webhooks: kinds.iter().map(|(k, c, _)| ((*k).to_owned(), c.clone())).collect(),
        intake_ms: kinds.iter().map(|(k, _, ms)| ((*k).to_owned(), *ms)).collect(),
        sqs_requests_per_event: 3.0,
        archive_wcu_per_event: 1.0,
        checkout: Some(CheckoutCost {
            start: cost(2.0, 20.0, 4.0),
            delivery: cost(1.0, 10.0, 2.0),
            psp_calls: 2.0,
            events: 2.0,
            start_ms: 100.0,
            delivery_ms: 40.0,
        }),
        ..Costs::default()
    }
}

fn deployment() -> Deployment {
    Deployment {
        name: "hand".into(),
        parameters: BTreeMap::new(),
        webhook_route: Throttle { rate: 50.0, burst: 100 },
        checkout_route: Throttle {
            rate: 100.0,
            burst: 200,
        },
        reserved: BTreeMap::new(),
        intake_memory_mb: 256,
        consumer_batch: 10,
        consumer_max_concurrency: None,
        relay_batch: 100,
        fifo_high_throughput: true,
        warm_read: None,
        warm_write: None,
        psp_scan_rate: 10.0,
        psp_scanners: 2,
        eventbridge: false,
        stripe_rate_limit: 100.0,
        stripe_budgets: Vec::new(),
        open_shards: 8,
    }
}

fn limits() -> Limits {
    let figures = [
        ("api_gateway_account_rps", 10_000.0),
        ("lambda_account_concurrency", 1_000.0),
        ("dynamodb_table_max_wcu", 40_000.0),
        ("dynamodb_new_table_wcu", 4_000.0),
        ("dynamodb_table_max_rcu", 40_000.0),
        ("dynamodb_new_table_rcu", 12_000.0),
        ("dynamodb_partition_wcu", 1_000.0),
        ("sqs_fifo_calls_per_action", 300.0),
        ("sqs_fifo_high_throughput_calls_per_action", 70_000.0),
        ("sqs_mapping_max", 1_250.0),
        ("stripe_live_operations", 100.0),
    ];
    let limit = |figure| Limit {
        what: String::new(),
        figure,
        unit: String::new(),
        scope: String::new(),
        note: String::new(),
        schedule_s: Vec::new(),
        source: "hand".into(),
        read_on: "2026-12-05".into(),
        confirmed: true,
        raised_from: None,
    };
    Limits(figures.iter().map(|(k, f)| ((*k).to_owned(), limit(*f))).collect())
}

/// 4 webhooks an order, 2 applied, 25 % duplicates: 5 deliveries an order; every order a checkout, half on
/// Stripe.
fn profile() -> Profile {
    Profile {
        orders_per_s: 100.0,
        webhooks_per_order: 4.0,
        applied_per_order: 2.0,
        duplicate_share: 0.25,
        retry_share: 0.0,
        not_ours_share: 0.0,
        checkout_share: 1.0,
        stripe_share: 0.5,
        polls_per_checkout: 1.0,
        stripe_rate_limit: None,
    }
}

fn find<'a>(answer: &'a model::Answer, resource: &str) -> &'a model::Row {
    answer
        .rows
        .iter()
        .find(|r| r.resource.starts_with(resource))
        .unwrap_or_else(|| panic!("no row {resource}: {:#?}", answer.rows))
}

#[test]
fn the_arithmetic_matches_a_hand_computed_case() {
    let (costs, deployment, limits, profile) = (costs(), deployment(), limits(), profile());
    let inputs = Inputs {
        costs: &costs,
        deployment: &deployment,
        limits: &limits,
        profile: &profile,
    };
    let answer = model::answer(&inputs).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    // Webhook route: 5 deliveries an order against 50/s: 10 orders/s; at 100 orders/s 500/s, over by 900 %.
    let route = find(&answer, "API route POST /webhooks");
    assert!(close(route.per_order, 5.0) && close(route.max_orders_per_s(), 10.0));
    assert!(close(route.headroom(100.0), -9.0));
    // Table writes: 2 x 5 + 2 x 2 + 1 x 0 + 20 + 10, and the relay's archive of 4 events an order (2 applied
    // + 2 of the checkout) x 1 = 48 WCU an order: 40,000 / 48 = 833.3 orders/s.
    let writes = find(&answer, "DynamoDB table writes");
    assert!(close(writes.per_order, 48.0) && close(writes.max_orders_per_s(), 40_000.0 / 48.0));
    // A new table at once: 4,000 / 48 = 83.3.
    assert!(close(
        find(&answer, "DynamoDB table writes, served at once").max_orders_per_s(),
        4_000.0 / 48.0
    ));
    // Index: 2 x 2 + 4 + 2 = 10 units an order over 8 shards: 1.25 a shard, 800 orders/s.
    assert!(close(find(&answer, "DynamoDB open-items").max_orders_per_s(), 800.0));
    // Stripe: 20/s of scanners' budgets fixed, 2 calls x 0.5 an order: (100 - 20) / 1 = 80 orders/s.
    let stripe = find(&answer, "Stripe API");
    assert!(close(stripe.fixed, 20.0) && close(stripe.max_orders_per_s(), 80.0));
    // Lambda: intake 2 x 0.05 + 2 x 0.02 + 1 x 0.01 = 0.15 s an order; checkout-api 0.1; consumer 4 events
    // an order (2 applied + 2 of the checkout) x 0.02 s = 0.08: 0.33 executions an order.
    assert!(close(find(&answer, "Lambda concurrency, unreserved").per_order, 0.33));
    // FIFO in high throughput mode: 4 events an order, one call per action each: 70,000 / 4.
    assert!(close(find(&answer, "SQS FIFO").max_orders_per_s(), 17_500.0));
    let binding = answer.binding().unwrap();
    assert!(binding.resource.starts_with("API route POST /webhooks"), "{binding:?}");
    assert!(close(answer.sustainable(), 10.0));
}

#[test]
fn a_reservation_and_warm_throughput_change_their_rows() {
    let (costs, mut deployment, limits, profile) = (costs(), deployment(), limits(), profile());
    deployment.reserved.insert("WebhookIntakeFunction".into(), 30);
    deployment.warm_write = Some(48_000.0);
    deployment.fifo_high_throughput = false;
    let inputs = Inputs {
        costs: &costs,
        deployment: &deployment,
        limits: &limits,
        profile: &profile,
    };
    let answer = model::answer(&inputs).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    assert!(close(
        find(&answer, "Lambda concurrency, webhook-intake").max_orders_per_s(),
        200.0
    ));
    let rest = find(&answer, "Lambda concurrency, unreserved");
    assert!(close(rest.limit, 970.0) && close(rest.per_order, 0.18));
    assert!(close(
        find(&answer, "DynamoDB table writes, served at once").max_orders_per_s(),
        1_000.0
    ));
    assert!(close(find(&answer, "SQS FIFO").max_orders_per_s(), 75.0));
}

/// The repository's template, costs and limits at the peak profile, with `parameters` given.
fn repository_answer(parameters: &[(&str, &str)]) -> model::Answer {
    let given: Vec<(String, String)> = parameters.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    let profile = super::profile("peak", &[]).unwrap();
    super::run(None, &given, &profile).unwrap().0
}

#[test]
fn the_default_deployment_binds_first_at_the_webhook_routes_throttle() {
    let answer = repository_answer(&[]);
    let binding = answer.binding().unwrap();
    assert!(binding.resource.contains("/webhooks"), "{binding:?}");
    assert_eq!(binding.limit, 50.0, "the template's WebhookThrottlingRateLimit");
}

#[test]
fn a_setting_changed_in_the_template_changes_the_answer() {
    let before = repository_answer(&[]).sustainable();
    let after = repository_answer(&[("WebhookThrottlingRateLimit", "25")]).sustainable();
    assert!((after - before / 2.0).abs() < 1e-6, "{before} -> {after}");
    // A setting of the template's own text, not a parameter: the throttle of the route itself.
    let mut text = std::fs::read_to_string(local_testkit::service::repo_root().join("infra/template.yaml")).unwrap();
    text = text.replace(
        "ThrottlingRateLimit: !Ref WebhookThrottlingRateLimit",
        "ThrottlingRateLimit: 10",
    );
    let dir = std::env::temp_dir().join(format!("capacity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("template.yaml"), text).unwrap();
    let template = Template::load(&dir.join("template.yaml")).unwrap();
    let changed = deployment::read(&template, None, &[]).unwrap();
    assert_eq!(changed.webhook_route.rate, 10.0);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn samconfig_environments_are_read_with_their_overrides() {
    let template = Template::from_repo().unwrap();
    let prod = deployment::read(&template, Some("prod"), &[]).unwrap();
    assert_eq!(prod.webhook_route.rate, 100.0, "prod's WebhookThrottlingRateLimit");
    assert!(prod.fifo_high_throughput);
    assert_eq!(prod.psp_scanners, 2, "the reconciler and the catch-up");
}

#[test]
fn the_peak_environment_holds_1000_orders_a_second_with_30_percent_headroom_on_every_limit() {
    // samconfig.toml's `peak`, with the raises of benchmarks/granted.toml, at the `peak` profile.
    let profile = super::profile("peak", &[]).unwrap();
    let (answer, _) = super::run(Some(super::PEAK_ENV), &[], &profile).unwrap();
    let short: Vec<(&str, f64)> = answer
        .rows
        .iter()
        .filter(|r| r.headroom(profile.orders_per_s) < 0.3)
        .map(|r| (r.resource.as_str(), r.headroom(profile.orders_per_s)))
        .collect();
    assert_eq!(short, [], "{answer:#?}");
    let shard = find(&answer, "DynamoDB open-items index");
    assert!(
        shard.limit_from.contains("16 shards (template: OpenItemsShards)"),
        "{shard:?}"
    );
    // Every function that calls Stripe has a budget, and together they stay under the granted limit.
    assert_eq!(answer.budgets.flags, Vec::<String>::new());
    assert_eq!((answer.budgets.sum, answer.budgets.limit), (1_380.0, 1_500.0));
}

#[test]
fn the_open_items_shards_are_read_from_the_template_and_change_the_answer() {
    let row = |parameters: &[(&str, &str)]| find(&repository_answer(parameters), "DynamoDB open-items index").clone();
    let (eight, sixteen) = (row(&[]), row(&[("OpenItemsShards", "16")]));
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    assert!(
        eight.limit_from.contains("8 shards"),
        "the template's default: {eight:?}"
    );
    assert!(close(sixteen.per_order * 2.0, eight.per_order), "{eight:?} {sixteen:?}");
    assert!(close(sixteen.max_orders_per_s(), 2.0 * eight.max_orders_per_s()));
    // Out of the functions' range: the model refuses it as a function would refuse to start.
    let profile = super::profile("peak", &[]).unwrap();
    let err = super::run(None, &[("OpenItemsShards".into(), "4".into())], &profile).unwrap_err();
    assert!(
        err.contains("OPEN_ITEMS_SHARDS") && err.contains("from 8 to 256"),
        "{err}"
    );
}

#[test]
fn the_stripe_budgets_are_summed_against_the_accounts_limit_and_flagged_over_it() {
    // The template's defaults: the checkout functions are unpaced, so nothing bounds their calls.
    let defaults = repository_answer(&[]).budgets;
    assert_eq!(defaults.limit, 100.0, "the template's StripeRateLimit");
    assert_eq!(defaults.sum, 20.0, "the two scanners' PspScanRatePerSecond");
    for function in [
        "CheckoutApiFunction",
        "CheckoutEventsFunction",
        "CheckoutSweeperFunction",
    ] {
        assert!(
            defaults
                .flags
                .iter()
                .any(|f| f.starts_with(function) && f.contains("no Stripe budget")),
            "{function}: {defaults:?}"
        );
    }
    let budgeted = [
        ("CheckoutApiStripeBudget", "50"),
        ("CheckoutReservedConcurrency", "10"),
        ("CheckoutEventsStripeBudget", "20"),
        ("EventsConsumerMaxConcurrency", "10"),
        ("CheckoutSweeperStripeBudget", "5"),
    ];
    let under = repository_answer(&budgeted).budgets;
    assert_eq!(
        (under.sum, under.flags.clone()),
        (95.0, Vec::<String>::new()),
        "{under:?}"
    );
    // One budget raised past the limit: flagged, naming the sum.
    let mut over = budgeted.to_vec();
    over[0] = ("CheckoutApiStripeBudget", "80");
    let over = repository_answer(&over).budgets;
    assert_eq!(over.sum, 125.0);
    assert!(over.flags.iter().any(|f| f.contains("add up to 125/s")), "{over:?}");
    // A budget with nothing to split it among: the function would refuse to start.
    let unsplit = repository_answer(&[("CheckoutApiStripeBudget", "50")]).budgets;
    assert!(
        unsplit.flags.iter().any(|f| f.contains("no instance count")),
        "{unsplit:?}"
    );
    // A limit the template claims but the account was not granted is refused.
    let profile = super::profile("peak", &[]).unwrap();
    let err = super::run(None, &[("StripeRateLimit".into(), "500".into())], &profile).unwrap_err();
    assert!(err.contains("above the account's known limit"), "{err}");
}

#[test]
fn checkout_apis_budget_is_a_row_and_paces_its_reserved_concurrency() {
    let answer = repository_answer(&[("CheckoutApiStripeBudget", "80"), ("CheckoutReservedConcurrency", "40")]);
    let budget = find(&answer, "Stripe budget of checkout-api");
    assert_eq!(budget.limit, 80.0);
    // Every checkout on Stripe charges once (costs.json), 80 % of them on Stripe at the peak profile.
    assert!((budget.max_orders_per_s() - 100.0).abs() < 1e-6, "{budget:?}");
    let lambda = find(&answer, "Lambda concurrency, checkout-api (reserved)");
    // Each instance keeps to 2 requests a second: 0.8 charges an order need 0.4 instances an order.
    assert!((lambda.per_order - 0.4).abs() < 1e-6, "{lambda:?}");
}
