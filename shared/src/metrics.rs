//! The one writer of CloudWatch Embedded Metric Format records: a JSON line on stdout, which Lambda's log
//! pipeline turns into metrics (no API call, no added latency). Every function's metrics go through
//! [`emf`]; the alarms in `infra/template.yaml` watch what these records publish.
//!
//! **Every record names its stage.** Two stages deployed in one account publish into the same namespaces, so
//! a metric without the stage would mix dev's traffic into prod's dashboard and page prod's on-call for dev's
//! failures. The writer itself adds the `Stage` dimension, first, to each dimension set its caller asks for
//! (and the stage's value to the record), as Powertools adds its `service`: no caller can forget it. The
//! stage is the process's `STAGE`, fixed once per cold start ([`init_stage`], which fails a Lambda started
//! without one); local runs, tests and tools that set none publish as [`LOCAL_STAGE`].

use crate::{ConfigError, Env};
use serde_json::{json, Value};
use std::sync::OnceLock;

/// The dimension every metric carries.
pub const STAGE_DIMENSION: &str = "Stage";
/// The stage of a process that sets no `STAGE` outside Lambda (local runs, tests, tools).
pub const LOCAL_STAGE: &str = "local";

static STAGE: OnceLock<String> = OnceLock::new();

/// The stage `env` names: `STAGE`, which must match the template's pattern for it (`[a-z0-9-]+`); unset, it
/// is [`LOCAL_STAGE`] outside Lambda and an error in Lambda (`AWS_LAMBDA_FUNCTION_NAME` set), where a
/// default would publish into another stage's metrics.
pub fn stage_from(env: &Env) -> Result<String, ConfigError> {
    match env.optional("STAGE") {
        Some(stage)
            if stage
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') =>
        {
            Ok(stage)
        }
        Some(value) => Err(ConfigError::Invalid {
            name: "STAGE",
            expected: "stage name (a-z, 0-9, -)",
            value,
        }),
        None if env.optional("AWS_LAMBDA_FUNCTION_NAME").is_some() => Err(ConfigError::Missing("STAGE")),
        None => Ok(LOCAL_STAGE.to_owned()),
    }
}

/// Fixes the stage of every record this process writes, from `env` ([`stage_from`]); once per cold start
/// (`ColdStart::begin` does it). Returns the stage in effect: the first one fixed, if called again.
pub fn init_stage(env: &Env) -> Result<&'static str, ConfigError> {
    let stage = stage_from(env)?;
    Ok(STAGE.get_or_init(|| stage))
}

/// The stage records carry: the one [`init_stage`] fixed, else the process's own `STAGE` (a process that
/// never called it), else [`LOCAL_STAGE`].
pub fn stage() -> &'static str {
    STAGE.get_or_init(|| stage_from(&Env::process()).unwrap_or_else(|_| LOCAL_STAGE.to_owned()))
}

/// One EMF record in `namespace`: each name of `metrics` (with its unit) published under every dimension
/// set of `dimensions`, each with [`STAGE_DIMENSION`] put first (`&[&[]]`, the set alarms watch, is
/// `[Stage]`; `&["Path"]` is `[Stage, Path]`; no set at all is `[Stage]` too). `values` holds the metric
/// values, the other dimensions' values and any property worth having in Logs Insights; the record also
/// holds the stage.
pub fn emf(namespace: &str, dimensions: &[&[&str]], metrics: &[(&str, &str)], values: Value, now_ms: i64) -> Value {
    staged(stage(), namespace, dimensions, metrics, values, now_ms)
}

/// [`emf`] for a given stage.
fn staged(
    stage: &str,
    namespace: &str,
    dimensions: &[&[&str]],
    metrics: &[(&str, &str)],
    values: Value,
    now_ms: i64,
) -> Value {
    let sets: &[&[&str]] = if dimensions.is_empty() { &[&[]] } else { dimensions };
    let sets: Vec<Vec<&str>> = sets
        .iter()
        .map(|set| {
            let others = set.iter().copied().filter(|d| *d != STAGE_DIMENSION);
            std::iter::once(STAGE_DIMENSION).chain(others).collect()
        })
        .collect();
    let mut out = json!({
        "_aws": { "Timestamp": now_ms, "CloudWatchMetrics": [{
            "Namespace": namespace,
            "Dimensions": sets,
            "Metrics": metrics.iter().map(|(n, u)| json!({ "Name": n, "Unit": u })).collect::<Vec<_>>(),
        }]},
    });
    if let Some(o) = out.as_object_mut() {
        if let Value::Object(v) = values {
            o.extend(v);
        }
        o.insert(STAGE_DIMENSION.to_owned(), Value::from(stage));
    }
    out
}

/// Counts, all in one unit: the common case.
pub fn counts(namespace: &str, dimensions: &[&[&str]], names: &[&str], values: Value, now_ms: i64) -> Value {
    let metrics: Vec<(&str, &str)> = names.iter().map(|n| (*n, "Count")).collect();
    emf(namespace, dimensions, &metrics, values, now_ms)
}

/// Namespace of the items a batch function reports failed (partial batch failures).
pub const BATCH_ITEMS_NAMESPACE: &str = "Payments/BatchItems";
/// The version of the function a process runs, as Lambda names it (`AWS_LAMBDA_FUNCTION_VERSION`: the
/// version number when invoked through an alias; `$LATEST` outside Lambda).
static VERSION: OnceLock<String> = OnceLock::new();

/// Fixes the function version [`failed_items`] records carry, from `env` (`ColdStart::begin` does it).
pub fn init_version(env: &Env) -> &'static str {
    let version = env
        .optional("AWS_LAMBDA_FUNCTION_VERSION")
        .unwrap_or_else(|| "$LATEST".to_owned());
    VERSION.get_or_init(|| version)
}

/// `failed` items of one batch that `function` reported failed: `FailedItems` in [`BATCH_ITEMS_NAMESPACE`]
/// by stage, `Function` and `Version`. A function that reports failures per item (ReportBatchItemFailures)
/// never fails its invocation, so Lambda's `Errors` stays 0 however many records a new version fails: this
/// per-version count is what its canary rolls back on.
pub fn failed_items(function: &str, failed: u64, now_ms: i64) -> Value {
    let version = VERSION.get().map_or("$LATEST", String::as_str);
    counts(
        BATCH_ITEMS_NAMESPACE,
        &[&["Function", "Version"]],
        &["FailedItems"],
        json!({ "Function": function, "Version": version, "FailedItems": failed }),
        now_ms,
    )
}

/// Writes a record as one line to stdout.
pub fn emit(record: &Value) {
    println!("{record}");
}

/// Namespace of the metrics of the one finalize, whatever path called it.
pub const FINALIZE_NAMESPACE: &str = "Payments/Finalize";

/// An anomaly was recorded on a payment (money on a failed payment, an observation about other money):
/// `Anomalies` in [`FINALIZE_NAMESPACE`], by stage (alarmed) and by stage and `Path`.
pub fn anomaly(path: &str, now_ms: i64) -> Value {
    counts(
        FINALIZE_NAMESPACE,
        &[&[], &["Path"]],
        &["Anomalies"],
        json!({ "Path": path, "Anomalies": 1 }),
        now_ms,
    )
}

/// A payment's charge was disputed (its first dispute event, whichever path applied it): `DisputesOpened` in
/// [`FINALIZE_NAMESPACE`], by stage (alarmed: a dispute has a deadline to answer) and by stage and `Path`.
pub fn dispute_opened(path: &str, now_ms: i64) -> Value {
    counts(
        FINALIZE_NAMESPACE,
        &[&[], &["Path"]],
        &["DisputesOpened"],
        json!({ "Path": path, "DisputesOpened": 1 }),
        now_ms,
    )
}

/// A refund the PSP reported failed or canceled (whichever path applied it): `RefundsFailed` in
/// [`FINALIZE_NAMESPACE`], by stage (alarmed: the money is the merchant's again until recovery gives it back,
/// and past the give-back bound only an operator does) and by stage and `Path`.
pub fn refund_failed(path: &str, now_ms: i64) -> Value {
    counts(
        FINALIZE_NAMESPACE,
        &[&[], &["Path"]],
        &["RefundsFailed"],
        json!({ "Path": path, "RefundsFailed": 1 }),
        now_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::BatchReport;

    /// The dimension sets of a record, and the stage it holds.
    fn sets_and_stage(r: &Value) -> (Vec<Vec<String>>, Option<String>) {
        let sets = serde_json::from_value(r["_aws"]["CloudWatchMetrics"][0]["Dimensions"].clone()).unwrap();
        (sets, r[STAGE_DIMENSION].as_str().map(str::to_owned))
    }

    /// Every dimension set starts with `Stage`, names it once, and the record holds the stage's value (which
    /// CloudWatch needs to publish it).
    fn assert_staged(r: &Value, stage: &str) {
        let (sets, value) = sets_and_stage(r);
        assert!(!sets.is_empty(), "{r}");
        for set in &sets {
            assert_eq!(set.first().map(String::as_str), Some(STAGE_DIMENSION), "{r}");
            assert_eq!(set.iter().filter(|d| *d == STAGE_DIMENSION).count(), 1, "{r}");
        }
        assert_eq!(value.as_deref(), Some(stage), "{r}");
    }

    #[test]
    fn failed_items_are_counted_per_function_and_version() {
        let record = failed_items("outbox-relay", 3, 1_000);
        let (sets, _) = sets_and_stage(&record);
        assert_eq!(sets, vec![vec!["Stage", "Function", "Version"]]);
        assert_eq!(
            record["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            BATCH_ITEMS_NAMESPACE
        );
        assert_eq!(record["Function"], "outbox-relay");
        assert_eq!(record["FailedItems"], 3);
        assert_eq!(
            record["Version"], "$LATEST",
            "no cold start fixed a version in this test process"
        );
    }

    #[test]
    fn a_record_names_its_metrics_dimensions_and_values() {
        let r = anomaly("sync", 7);
        assert_eq!(r["_aws"]["Timestamp"], 7);
        let m = &r["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], FINALIZE_NAMESPACE);
        assert_eq!(m["Dimensions"], json!([["Stage"], ["Stage", "Path"]]));
        assert_eq!(m["Metrics"], json!([{ "Name": "Anomalies", "Unit": "Count" }]));
        assert_eq!((r["Path"].as_str(), r["Anomalies"].as_u64()), (Some("sync"), Some(1)));
        assert_eq!(r["Stage"].as_str(), Some(stage()));
        let d = dispute_opened("webhook", 7);
        assert_eq!(
            d["_aws"]["CloudWatchMetrics"][0]["Metrics"],
            json!([{ "Name": "DisputesOpened", "Unit": "Count" }])
        );
        assert_eq!(d["DisputesOpened"].as_u64(), Some(1));
        let f = refund_failed("webhook", 7);
        assert_eq!(
            f["_aws"]["CloudWatchMetrics"][0]["Metrics"],
            json!([{ "Name": "RefundsFailed", "Unit": "Count" }])
        );
        assert_eq!(f["RefundsFailed"].as_u64(), Some(1));
    }

    #[test]
    fn the_writer_puts_the_stage_first_in_every_dimension_set() {
        let values = json!({ "Path": "sync", "Stage": "forged", "N": 1 });
        let r = staged(
            "prod",
            "N",
            &[&[], &["Path"], &["Stage", "Path"]],
            &[("N", "Count")],
            values,
            1,
        );
        assert_eq!(
            r["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stage"], ["Stage", "Path"], ["Stage", "Path"]])
        );
        assert_staged(&r, "prod");
        // A caller that names no dimension set at all still publishes per stage, never account-wide.
        let none = staged("dev", "N", &[], &[("N", "Count")], json!({ "N": 1 }), 1);
        assert_eq!(none["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Stage"]]));
        assert_staged(&none, "dev");
    }

    #[test]
    fn every_record_of_the_shared_library_carries_the_stage() {
        let records = [
            anomaly("webhook", 1),
            dispute_opened("webhook", 1),
            refund_failed("recovery", 1),
            counts("N", &[&[], &["A", "B"]], &["X"], json!({ "X": 1 }), 1),
            crate::consumer::emf("orders", &BatchReport::default(), 1),
        ];
        for r in &records {
            assert_staged(r, stage());
        }
    }

    #[test]
    fn the_stage_is_required_in_lambda_and_defaults_to_local_elsewhere() {
        let env = |pairs: &'static [(&str, &str)]| {
            Env::from_lookup(move |n| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| (*v).to_owned()))
        };
        assert_eq!(stage_from(&env(&[])).as_deref(), Ok(LOCAL_STAGE));
        assert_eq!(stage_from(&env(&[("STAGE", "prod-2")])).as_deref(), Ok("prod-2"));
        assert_eq!(
            stage_from(&env(&[("AWS_LAMBDA_FUNCTION_NAME", "f")])),
            Err(ConfigError::Missing("STAGE"))
        );
        assert!(matches!(
            stage_from(&env(&[("STAGE", "Prod stage")])),
            Err(ConfigError::Invalid { name: "STAGE", .. })
        ));
    }
}
