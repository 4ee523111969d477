//! The limits table (`benchmarks/limits.toml`): every AWS and PSP limit the model and the simulation use,
//! each with its source and the date it was read, read by key so that no figure is written twice. Rendered
//! as the table of docs/CAPACITY.md (`bench limits`), which a test holds equal to the file.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// One limit, as the file states it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Limit {
    pub what: String,
    pub figure: f64,
    pub unit: String,
    pub scope: String,
    #[serde(default)]
    pub note: String,
    /// The times a schedule's steps fall at (a PSP's retries), seconds after the failure or between retries.
    #[serde(default)]
    pub schedule_s: Vec<f64>,
    pub source: String,
    pub read_on: String,
    /// The page was searched on `read_on` and states the figure.
    pub confirmed: bool,
    /// The default figure, where a deployment assumes a raise granted on request (`benchmarks/granted.toml`).
    #[serde(skip)]
    pub raised_from: Option<f64>,
}

/// The table, by key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct Limits(pub BTreeMap<String, Limit>);

impl Limits {
    /// The limit `key`, or an error naming it.
    pub fn limit(&self, key: &str) -> Result<&Limit, String> {
        self.0
            .get(key)
            .ok_or_else(|| format!("benchmarks/limits.toml has no limit {key:?}"))
    }

    /// The figure of the limit `key`.
    pub fn figure(&self, key: &str) -> Result<f64, String> {
        self.limit(key).map(|l| l.figure)
    }

    /// The schedule of the limit `key` (a PSP's retry steps), in seconds.
    pub fn schedule(&self, key: &str) -> Result<Vec<f64>, String> {
        let limit = self.limit(key)?;
        if limit.schedule_s.is_empty() {
            return Err(format!("benchmarks/limits.toml's {key} has no schedule_s"));
        }
        Ok(limit.schedule_s.clone())
    }

    /// The table with the raises `granted` (key: figure) applied; an unknown key is an error.
    pub fn granted(mut self, granted: &BTreeMap<String, f64>) -> Result<Self, String> {
        for (key, figure) in granted {
            let limit = self
                .0
                .get_mut(key)
                .ok_or_else(|| format!("benchmarks/granted.toml raises {key:?}, which the limits table has not"))?;
            limit.raised_from = Some(limit.figure);
            limit.figure = *figure;
        }
        Ok(self)
    }

    /// The table as docs/CAPACITY.md shows it.
    pub fn markdown(&self) -> String {
        let mut out = String::from("| key | what | figure | note | source | read on |\n|---|---|---|---|---|---|\n");
        for (key, l) in &self.0 {
            let confirmed = if l.confirmed { "" } else { " (not re-read)" };
            let figure = format!("{} {}", group_thousands(l.figure), l.unit);
            writeln!(
                out,
                "| `{key}` | {} | {figure} | {} | {} | {}{confirmed} |",
                l.what, l.note, l.source, l.read_on
            )
            .ok();
        }
        out
    }
}

/// `benchmarks/limits.toml` of the repository.
pub fn path() -> PathBuf {
    local_testkit::service::repo_root().join("benchmarks/limits.toml")
}

/// The raises a deployment (a samconfig environment) assumes were granted, from the file at `path`:
/// `[env]` tables of `key = figure`. None for an environment it does not name.
pub fn granted_for(path: &Path, env: Option<&str>) -> Result<BTreeMap<String, f64>, String> {
    let Some(env) = env else {
        return Ok(BTreeMap::new());
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let all: BTreeMap<String, BTreeMap<String, f64>> =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(all.get(env).cloned().unwrap_or_default())
}

/// `benchmarks/granted.toml` of the repository.
pub fn granted_path() -> PathBuf {
    local_testkit::service::repo_root().join("benchmarks/granted.toml")
}

/// The limits table with the raises granted to `env`.
pub fn for_deployment(env: Option<&str>) -> Result<Limits, String> {
    load(&path())?.granted(&granted_for(&granted_path(), env)?)
}

/// Reads the table at `path`.
pub fn load(path: &Path) -> Result<Limits, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `figure` with thousands separated by commas (12,000), and up to two decimals when it has them.
pub fn group_thousands(figure: f64) -> String {
    if figure.fract().abs() > 1e-9 || figure.abs() < 1.0 {
        return format!("{figure:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned();
    }
    let digits = format!("{:.0}", figure.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if figure < 0.0 {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_limit_the_issue_names_with_a_source_and_date() {
        let limits = load(&path()).unwrap();
        for key in [
            "api_gateway_account_rps",
            "lambda_account_concurrency",
            "lambda_scaling_per_10s",
            "sqs_mapping_start",
            "sqs_mapping_add_per_minute",
            "sqs_mapping_max",
            "dynamodb_new_table_wcu",
            "dynamodb_peak_multiple",
            "dynamodb_table_max_wcu",
            "dynamodb_partition_wcu",
            "sqs_fifo_calls_per_action",
            "sqs_fifo_high_throughput_calls_per_action",
            "eventbridge_target_invocations",
            "stripe_live_operations",
            "adyen_webhook_answer_within_s",
        ] {
            let l = limits.limit(key).unwrap();
            assert!(l.figure > 0.0 && !l.source.is_empty() && l.read_on.len() == 10, "{key}");
        }
        assert_eq!(
            limits.schedule("adyen_webhook_quick_retries").unwrap(),
            [9.0, 18.0, 27.0]
        );
        assert!(limits.figure("nothing").unwrap_err().contains("nothing"));
    }

    #[test]
    fn docs_capacity_shows_the_table_as_the_file_has_it() {
        let limits = load(&path()).unwrap();
        let doc = std::fs::read_to_string(local_testkit::service::repo_root().join("docs/CAPACITY.md")).unwrap();
        assert!(
            doc.contains(&limits.markdown()),
            "docs/CAPACITY.md's limits table differs from benchmarks/limits.toml: paste `bench limits`"
        );
    }

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(group_thousands(12_000.0), "12,000");
        assert_eq!(group_thousands(100.0), "100");
        assert_eq!(group_thousands(1_234_567.0), "1,234,567");
        assert_eq!(group_thousands(0.5), "0.5");
        assert_eq!(group_thousands(2.25), "2.25");
    }
}
