//! A deployment's settings as the model needs them, read from `infra/template.yaml` at the parameters of a
//! samconfig environment (its `parameter_overrides` over the template's defaults, then any given on the
//! command line), through the local world's reader of the template (`local_lambda::template`): route throttles,
//! reserved concurrency, event source mappings' batch sizes and maximum concurrency, the FIFO queue's
//! throughput mode, the table's warm throughput, the scanners' PSP rates and the open index's shards. Nothing
//! here is a second copy of a setting: a changed template changes the model's answer.

use local_lambda::template::{samconfig_parameters, Stack, Template};
use local_lambda::triggers::mapping::QueueMapping;
use local_lambda::triggers::route::{ApiSettings, Throttle};
use local_lambda::triggers::{FunctionTriggers, Trigger};
use serde_yaml_ng::Value;
use std::collections::BTreeMap;

/// The webhook route, as the template names it.
pub const WEBHOOK_ROUTE: &str = "POST /webhooks/{provider}";
/// The checkout's start route.
pub const CHECKOUT_ROUTE: &str = "POST /checkouts";

/// What the model reads of one deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    /// The samconfig environment (or `template defaults`) it was read at.
    pub name: String,
    /// The parameters given over the template's defaults.
    pub parameters: BTreeMap<String, String>,
    pub webhook_route: Throttle,
    pub checkout_route: Throttle,
    /// `ReservedConcurrentExecutions` by function (logical id), where one is set.
    pub reserved: BTreeMap<String, u64>,
    /// `MemorySize` of the webhook intake, MB.
    pub intake_memory_mb: u64,
    /// The payment events queue's consumer mapping: batch size and `ScalingConfig.MaximumConcurrency`.
    pub consumer_batch: u64,
    pub consumer_max_concurrency: Option<u64>,
    /// The outbox relay's stream mapping's batch size: the most events one invocation sends.
    pub relay_batch: u64,
    /// The payment events queue runs in high throughput mode (per message group limit, group dedup scope).
    pub fifo_high_throughput: bool,
    /// The table's `WarmThroughput`, read and write units per second, where set.
    pub warm_read: Option<f64>,
    pub warm_write: Option<f64>,
    /// The Stripe requests a second each scanner may make (`PspScanRatePerSecond`), and how many scanners
    /// (functions given it) there are.
    pub psp_scan_rate: f64,
    pub psp_scanners: usize,
    /// Stripe's events also arrive through EventBridge.
    pub eventbridge: bool,
    /// Stripe's rate limit of the account as the stack states it (its `StripeRateLimit` output).
    pub stripe_rate_limit: f64,
    /// The Stripe budget of every function that calls Stripe (it has `PSP_BASE_URL`).
    pub stripe_budgets: Vec<StripeBudget>,
    /// Partition key values of the `open-items` index per kind: `OPEN_ITEMS_SHARDS` as the functions get it
    /// (the template's `OpenItemsShards`).
    pub open_shards: u64,
}

/// One function's Stripe budget as the template gives it: a scanner's `PSP_SCAN_RATE_PER_SECOND` (one run at a
/// time), else `PSP_CALL_BUDGET_PER_SECOND` split among `PSP_CALL_BUDGET_INSTANCES` (`psp::pace::CallBudget`).
#[derive(Debug, Clone, PartialEq)]
pub struct StripeBudget {
    /// The function's logical id.
    pub function: String,
    /// Requests a second over all its instances; `None`: unpaced (no bound).
    pub per_second: Option<f64>,
    /// The instances it is split among; `None` with a budget: the function refuses to start.
    pub instances: Option<f64>,
}

/// The deployment of samconfig environment `env` (`None`: the template's defaults alone), with `extra`
/// parameters over it.
pub fn read(template: &Template, env: Option<&str>, extra: &[(String, String)]) -> Result<Deployment, String> {
    let mut parameters = match env {
        Some(env) => samconfig_parameters(&local_testkit::service::repo_root().join("samconfig.toml"), env)?,
        None => BTreeMap::new(),
    };
    parameters.extend(extra.iter().cloned());
    let stack = Stack {
        parameters: parameters.clone(),
        resources: BTreeMap::new(),
    };
    let api = ApiSettings::read(template, "HttpApi", &stack)?;
    let route = |key: &str| {
        let (method, path) = key.split_once(' ').unwrap_or_default();
        api.throttle(method, path)
            .ok_or_else(|| format!("the route {key} has no throttle in the template"))
    };
    let (consumer_batch, consumer_max_concurrency) = consumer_mapping(template, &stack)?;
    Ok(Deployment {
        name: env.unwrap_or("template defaults").to_owned(),
        webhook_route: route(WEBHOOK_ROUTE)?,
        checkout_route: route(CHECKOUT_ROUTE)?,
        reserved: reservations(template, &stack)?,
        intake_memory_mb: memory_mb(template, "WebhookIntakeFunction", &stack)?,
        consumer_batch,
        consumer_max_concurrency,
        relay_batch: relay_batch(template, &stack)?,
        fifo_high_throughput: high_throughput(template, &stack)?,
        warm_read: number(
            template,
            "PaymentsTable",
            &["Properties", "WarmThroughput", "ReadUnitsPerSecond"],
            &stack,
        )?,
        warm_write: number(
            template,
            "PaymentsTable",
            &["Properties", "WarmThroughput", "WriteUnitsPerSecond"],
            &stack,
        )?,
        psp_scan_rate: scan_rate(template, &stack)?,
        psp_scanners: scanners(template, &stack)?,
        eventbridge: template.condition("HasStripeEventBridge", &stack)?,
        stripe_rate_limit: stripe_rate_limit(template, &stack)?,
        stripe_budgets: stripe_budgets(template, &stack)?,
        open_shards: open_shards(template, &stack)?,
        parameters,
    })
}

/// A resolved property as a number; `None` when absent.
fn number(template: &Template, resource: &str, path: &[&str], stack: &Stack) -> Result<Option<f64>, String> {
    let Some(value) = template.property(resource, path, stack)? else {
        return Ok(None);
    };
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s,
        other => return Err(format!("{resource}.{}: {other:?} is no number", path.join("."))),
    };
    text.parse()
        .map(Some)
        .map_err(|_| format!("{resource}.{}: {text} is no number", path.join(".")))
}

/// Every function's `ReservedConcurrentExecutions`, where it has one in this stack.
fn reservations(template: &Template, stack: &Stack) -> Result<BTreeMap<String, u64>, String> {
    let mut reserved = BTreeMap::new();
    for function in template.functions() {
        if let Some(n) = FunctionTriggers::read(template, &function, stack)?.and_then(|t| t.reserved) {
            reserved.insert(function, n as u64);
        }
    }
    Ok(reserved)
}

/// A function's `MemorySize`, else the `Globals`', in MB.
fn memory_mb(template: &Template, function: &str, stack: &Stack) -> Result<u64, String> {
    let own = number(template, function, &["Properties", "MemorySize"], stack)?;
    let memory = own.or(template.global_memory_mb());
    memory
        .map(|mb| mb as u64)
        .ok_or_else(|| format!("{function} has no MemorySize, nor the Globals"))
}

/// The SQS event source mapping on `PaymentEventsQueue`: its batch size and maximum concurrency.
fn consumer_mapping(template: &Template, stack: &Stack) -> Result<(u64, Option<u64>), String> {
    for function in template.functions() {
        let Some(triggers) = FunctionTriggers::read(template, &function, stack)? else {
            continue;
        };
        for (_, trigger) in triggers.events {
            if let Trigger::Queue(QueueMapping {
                queue,
                batch_size,
                max_concurrency,
                ..
            }) = trigger
            {
                if queue == "PaymentEventsQueue" {
                    return Ok((batch_size, max_concurrency));
                }
            }
        }
    }
    Err("no function consumes PaymentEventsQueue in the template".into())
}

/// The batch size of the stream mapping on `PaymentsTable`'s stream (the outbox relay's).
fn relay_batch(template: &Template, stack: &Stack) -> Result<u64, String> {
    for function in template.functions() {
        let Some(triggers) = FunctionTriggers::read(template, &function, stack)? else {
            continue;
        };
        for (_, trigger) in triggers.events {
            if let Trigger::Stream(mapping) = trigger {
                if mapping.table == "PaymentsTable" {
                    return Ok(mapping.batch_size);
                }
            }
        }
    }
    Err("no function reads PaymentsTable's stream in the template".into())
}

/// Whether `PaymentEventsQueue` is in high throughput mode: throughput per message group and deduplication
/// per message group.
fn high_throughput(template: &Template, stack: &Stack) -> Result<bool, String> {
    let text = |key: &str| -> Result<Option<String>, String> {
        Ok(template
            .property("PaymentEventsQueue", &["Properties", key], stack)?
            .and_then(|v| v.as_str().map(str::to_owned)))
    };
    Ok(text("FifoThroughputLimit")?.as_deref() == Some("perMessageGroupId")
        && text("DeduplicationScope")?.as_deref() == Some("messageGroup"))
}

/// `PSP_SCAN_RATE_PER_SECOND` as the reconciler gets it.
fn scan_rate(template: &Template, stack: &Stack) -> Result<f64, String> {
    let path = ["Properties", "Environment", "Variables", "PSP_SCAN_RATE_PER_SECOND"];
    number(template, "ReconcilerFunction", &path, stack)?
        .ok_or_else(|| "ReconcilerFunction has no PSP_SCAN_RATE_PER_SECOND".into())
}

/// How many functions are given a Stripe scan rate (each may use all of it).
fn scanners(template: &Template, stack: &Stack) -> Result<usize, String> {
    let mut n = 0;
    for function in template.functions() {
        let path = ["Properties", "Environment", "Variables", "PSP_SCAN_RATE_PER_SECOND"];
        if FunctionTriggers::read(template, &function, stack)?.is_some()
            && template.property(&function, &path, stack)?.is_some()
        {
            n += 1;
        }
    }
    Ok(n)
}

/// `OPEN_ITEMS_SHARDS` as every function gets it, read through the functions' own loader
/// (`shared::Config`, so an out-of-range value is the error a function would start with); refused when two
/// functions would get different counts (a scanner reading fewer shards than a writer writes misses items).
fn open_shards(template: &Template, stack: &Stack) -> Result<u64, String> {
    let mut found: Option<(String, u64)> = None;
    for function in template.functions() {
        // Unset, a function runs on the loader's default: that is the count it uses.
        let value = template.variable(&function, "OPEN_ITEMS_SHARDS", stack)?;
        let env = shared::Env::from_lookup(move |name| match name {
            "OPEN_ITEMS_SHARDS" => value.clone(),
            "TABLE_NAME" => Some("payments".into()),
            _ => None,
        });
        let shards = shared::Config::from_env(&env)
            .map_err(|e| format!("{function}: {e}"))?
            .open_shards
            .get();
        match &found {
            Some((first, n)) if *n != shards => {
                return Err(format!(
                    "{first} gets OPEN_ITEMS_SHARDS {n} but {function} {shards}: every function must use one count"
                ))
            }
            Some(_) => {}
            None => found = Some((function, shards)),
        }
    }
    found
        .map(|(_, n)| n)
        .ok_or_else(|| "the template has no function".into())
}

/// The `StripeRateLimit` output: the Stripe limit the stack's budgets are sized against.
fn stripe_rate_limit(template: &Template, stack: &Stack) -> Result<f64, String> {
    let text = template
        .output("StripeRateLimit", stack)?
        .ok_or("the template has no StripeRateLimit output")?;
    text.parse()
        .map_err(|_| format!("the StripeRateLimit output {text} is no number"))
}

/// Every function's Stripe budget (the functions given `PSP_BASE_URL`).
fn stripe_budgets(template: &Template, stack: &Stack) -> Result<Vec<StripeBudget>, String> {
    let figure = |function: &str, name: &str| -> Result<Option<f64>, String> {
        template
            .variable(function, name, stack)?
            .map(|v| {
                v.parse::<f64>()
                    .map_err(|_| format!("{function}'s {name}: {v} is no number"))
            })
            .transpose()
    };
    let mut budgets = Vec::new();
    for function in template.functions() {
        if template.variable(&function, "PSP_BASE_URL", stack)?.is_none() {
            continue;
        }
        let budget = match figure(&function, "PSP_SCAN_RATE_PER_SECOND")? {
            Some(rate) => StripeBudget {
                function,
                per_second: Some(rate),
                instances: Some(1.0),
            },
            None => StripeBudget {
                per_second: figure(&function, "PSP_CALL_BUDGET_PER_SECOND")?.filter(|b| *b > 0.0),
                instances: figure(&function, "PSP_CALL_BUDGET_INSTANCES")?,
                function,
            },
        };
        budgets.push(budget);
    }
    Ok(budgets)
}
