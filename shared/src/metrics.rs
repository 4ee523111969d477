//! The one writer of CloudWatch Embedded Metric Format records: a JSON line on stdout, which Lambda's log
//! pipeline turns into metrics (no API call, no added latency). Every function's metrics go through
//! [`emf`]; the alarms in `infra/template.yaml` watch what these records publish.

use serde_json::{json, Value};

/// One EMF record in `namespace`: each name of `metrics` (with its unit) published under every dimension
/// set of `dimensions` (`&[]` is the set with no dimension, the one alarms watch). `values` holds the metric
/// values, the dimension values and any other property worth having in Logs Insights.
pub fn emf(namespace: &str, dimensions: &[&[&str]], metrics: &[(&str, &str)], values: Value, now_ms: i64) -> Value {
    let mut out = json!({
        "_aws": { "Timestamp": now_ms, "CloudWatchMetrics": [{
            "Namespace": namespace,
            "Dimensions": dimensions,
            "Metrics": metrics.iter().map(|(n, u)| json!({ "Name": n, "Unit": u })).collect::<Vec<_>>(),
        }]},
    });
    if let (Some(o), Value::Object(v)) = (out.as_object_mut(), values) {
        o.extend(v);
    }
    out
}

/// Counts, all in one unit: the common case.
pub fn counts(namespace: &str, dimensions: &[&[&str]], names: &[&str], values: Value, now_ms: i64) -> Value {
    let metrics: Vec<(&str, &str)> = names.iter().map(|n| (*n, "Count")).collect();
    emf(namespace, dimensions, &metrics, values, now_ms)
}

/// Writes a record as one line to stdout.
pub fn emit(record: &Value) {
    println!("{record}");
}

/// Namespace of the metrics of the one finalize, whatever path called it.
pub const FINALIZE_NAMESPACE: &str = "Payments/Finalize";

/// An anomaly was recorded on a payment (money on a failed payment, an observation about other money):
/// `Anomalies` in [`FINALIZE_NAMESPACE`], with no dimension (alarmed) and by `Path`.
pub fn anomaly(path: &str, now_ms: i64) -> Value {
    counts(
        FINALIZE_NAMESPACE,
        &[&[], &["Path"]],
        &["Anomalies"],
        json!({ "Path": path, "Anomalies": 1 }),
        now_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_its_metrics_dimensions_and_values() {
        let r = anomaly("sync", 7);
        assert_eq!(r["_aws"]["Timestamp"], 7);
        let m = &r["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], FINALIZE_NAMESPACE);
        assert_eq!(m["Dimensions"], json!([[], ["Path"]]));
        assert_eq!(m["Metrics"], json!([{ "Name": "Anomalies", "Unit": "Count" }]));
        assert_eq!((r["Path"].as_str(), r["Anomalies"].as_u64()), (Some("sync"), Some(1)));
    }
}
