//! What one request costs, as the bench measured it, in a machine-readable file: `benchmarks/costs.json`.
//! The capacity model ([`crate::capacity`]) and the simulation ([`crate::simulate`]) read their per-request
//! figures from it and from nowhere else, so a change that makes a webhook cheaper or dearer (a write path
//! of fewer units) moves the model's answer once `bench costs` has measured it again; no figure is copied
//! into the model by hand.
//!
//! `bench costs` writes it from the DynamoDB counts ([`crate::counts`]); `bench bill` and the full `bench`
//! also put in the release intake's median invocation time per kind of delivery ([`crate::intake_process`]).
//! Without one, `intake_ms` keeps the file's earlier figures: Lambda time moves with the machine, units do not.

use crate::counts::{Measured, Scenario, BY_REFERENCE, DUPLICATE, NEW_WEBHOOK, NOT_OURS, NO_CHANGE};
use crate::intake_process::ProcessFigures;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The kinds of webhook delivery the file holds, by their key in it, and the bench's scenario each one is.
pub const WEBHOOK_KINDS: [(&str, &str); 5] = [
    ("new", NEW_WEBHOOK),
    ("no_change", NO_CHANGE),
    ("duplicate", DUPLICATE),
    ("not_ours", NOT_OURS),
    ("by_reference", BY_REFERENCE),
];

/// SQS FIFO requests per applied event: the relay's send, the consumer's mapping's receive and delete, at
/// one message a batch, a quiet hour's case and the most calls an event can make: the capacity model's
/// figure for the queue's per-action call limits. The bill prices a peak's full batches
/// ([`crate::bill::sqs_requests_at_full_batches`], 0.3 with the template's batch sizes).
pub const SQS_REQUESTS_PER_EVENT: f64 = 3.0;

/// One kind of request's cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestCost {
    /// Read units on the table (strongly consistent, as DynamoDB Local reported them).
    pub rcu: f64,
    /// Write units on the table, transactions at the transactional rate.
    pub wcu: f64,
    /// Units of the global secondary indexes (the `open-items` entry put or deleted, a query of one).
    pub index_units: f64,
    /// Of those, the `open-items` index's (its few partition keys are what a peak can heat).
    #[serde(default)]
    pub open_items_units: f64,
    /// DynamoDB calls, by operation.
    pub calls: BTreeMap<String, usize>,
}

/// The file: what each kind of request costs, and how and when that was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// The command that wrote it.
    pub measured_by: String,
    /// The date of the measurement (UTC).
    pub measured_on: String,
    /// Each kind of webhook delivery ([`WEBHOOK_KINDS`]).
    pub webhooks: BTreeMap<String, RequestCost>,
    /// The intake's invocation per kind, in ms, against DynamoDB Local on this machine (an upper bound of the
    /// time in AWS, where DynamoDB answers in single-digit ms): the release process's median when `bench bill`
    /// or the full bench ran, else one in-process delivery of `bench costs` (a debug build).
    pub intake_ms: BTreeMap<String, f64>,
    /// SQS FIFO requests per applied event ([`SQS_REQUESTS_PER_EVENT`]).
    pub sqs_requests_per_event: f64,
    /// Table write units per applied event off the webhook's path: the relay archives the event as its
    /// history item (measured from the item's size).
    #[serde(default)]
    pub archive_wcu_per_event: f64,
    /// A happy checkout through the saga ([`crate::checkout_costs`]); `None` until measured.
    #[serde(default)]
    pub checkout: Option<CheckoutCost>,
}

/// What one happy checkout through the saga costs: its start (`checkout-api`, up to the wait for the
/// payment's outcome) and the delivery of its payment's events (`checkout-events`: the consumer, then the
/// saga's resume up to its end), the PSP requests it made, and the time each half took in process here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckoutCost {
    pub start: RequestCost,
    pub delivery: RequestCost,
    /// PSP API requests of the whole checkout (the simulator's count of authorized requests).
    pub psp_calls: f64,
    /// The payment's events a checkout produces (each one SQS message, one consumer delivery).
    pub events: f64,
    /// Wall time of the start and of the delivery in process against DynamoDB Local and the simulator, ms.
    pub start_ms: f64,
    pub delivery_ms: f64,
}

impl Costs {
    /// The cost of the webhook kind `key`, or an error naming it and the file.
    pub fn webhook(&self, key: &str) -> Result<&RequestCost, String> {
        self.webhooks
            .get(key)
            .ok_or_else(|| format!("benchmarks/costs.json has no webhook kind {key:?}: run `bench costs`"))
    }

    /// The intake's median invocation of kind `key` in seconds, or an error naming it.
    pub fn intake_seconds(&self, key: &str) -> Result<f64, String> {
        self.intake_ms
            .get(key)
            .map(|ms| ms / 1e3)
            .ok_or_else(|| format!("benchmarks/costs.json has no intake_ms of {key:?}: run `bench bill`"))
    }
}

/// `benchmarks/costs.json` of the repository.
pub fn path() -> PathBuf {
    local_testkit::service::repo_root().join("benchmarks/costs.json")
}

/// Reads the costs file at `path`.
pub fn load(path: &Path) -> Result<Costs, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e} (run `bench costs`)", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The costs of what `units` measured (and `process`, the release intake's times, when it ran), by `command`;
/// the intake times of `earlier` kept where `process` has none.
pub fn from_measured(
    command: &str,
    units: &Measured,
    process: Option<&BTreeMap<&'static str, ProcessFigures>>,
    earlier: Option<&Costs>,
) -> Costs {
    let cost = |s: &Scenario| RequestCost {
        rcu: s.units.read,
        wcu: s.units.write,
        index_units: s.units.index,
        open_items_units: s.units.open_items,
        calls: s.calls.clone(),
    };
    let mut costs = Costs {
        measured_by: command.to_owned(),
        measured_on: today(),
        sqs_requests_per_event: SQS_REQUESTS_PER_EVENT,
        archive_wcu_per_event: units.archive_wcu_per_event as f64,
        intake_ms: earlier.map(|e| e.intake_ms.clone()).unwrap_or_default(),
        ..Costs::default()
    };
    for (key, scenario) in WEBHOOK_KINDS {
        if let Some(s) = units.scenarios.get(scenario) {
            costs.webhooks.insert(key.to_owned(), cost(s));
        }
        // The release process's median where it ran, else the earlier file's, else this in-process run's.
        let ms = match (process.and_then(|p| p.get(scenario)), costs.intake_ms.get(key)) {
            (Some(figures), _) => Some(figures.p50.as_secs_f64() * 1e3),
            (None, Some(_)) => None,
            (None, None) => units.scenarios.get(scenario).map(|s| s.elapsed.as_secs_f64() * 1e3),
        };
        if let Some(ms) = ms {
            costs.intake_ms.insert(key.to_owned(), ms);
        }
    }
    costs
}

/// Writes `costs` to `path` as pretty JSON.
pub fn save(path: &Path, costs: &Costs) -> Result<(), String> {
    let text = serde_json::to_string_pretty(costs).map_err(|e| e.to_string())?;
    std::fs::write(path, format!("{text}\n")).map_err(|e| format!("write {}: {e}", path.display()))
}

/// Where `file` (the committed costs) differs from `measured` (this run's) in what the model reads as a
/// count: each webhook kind's units, the checkout's units, PSP calls and events (never the times, which
/// move with the machine). Empty when the file is current.
pub fn stale(file: &Costs, measured: &Costs) -> Vec<String> {
    let units = |c: &RequestCost| (c.rcu, c.wcu, c.index_units, c.open_items_units);
    let mut out = Vec::new();
    for (key, now) in &measured.webhooks {
        match file.webhooks.get(key) {
            Some(then) if units(then) == units(now) => {}
            then => out.push(format!(
                "webhook {key}: (rcu, wcu, index, open-items) {:?} in the file, {:?} measured",
                then.map(units),
                units(now)
            )),
        }
    }
    if file.archive_wcu_per_event != measured.archive_wcu_per_event {
        out.push(format!(
            "the relay's archive: {} WCU per event in the file, {} measured",
            file.archive_wcu_per_event, measured.archive_wcu_per_event
        ));
    }
    if let (Some(then), Some(now)) = (&file.checkout, &measured.checkout) {
        let figures = |c: &CheckoutCost| (units(&c.start), units(&c.delivery), c.psp_calls, c.events);
        if figures(then) != figures(now) {
            out.push(format!(
                "checkout: (start, delivery, PSP calls, events) {:?} in the file, {:?} measured",
                figures(then),
                figures(now)
            ));
        }
    }
    out
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
fn today() -> String {
    let days = shared::clock::now_ms().div_euclid(86_400_000);
    civil_date(days)
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_unit_makes_the_file_stale_a_changed_time_does_not() {
        let file = load(&path()).unwrap();
        let mut measured = file.clone();
        measured.intake_ms.insert("new".into(), 1.0);
        assert!(stale(&file, &measured).is_empty());
        if let Some(new) = measured.webhooks.get_mut("new") {
            new.wcu -= 2.0;
        }
        let found = stale(&file, &measured);
        assert!(found.len() == 1 && found[0].starts_with("webhook new"), "{found:?}");
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(20_792), "2026-12-05");
        assert_eq!(civil_date(11_016), "2000-02-29");
    }

    #[test]
    fn the_repositorys_costs_file_reads_and_names_every_kind() {
        let costs = load(&path()).unwrap();
        for (key, _) in WEBHOOK_KINDS {
            assert!(costs.webhook(key).is_ok(), "{key}");
        }
        assert!(costs.webhook("nothing").unwrap_err().contains("bench costs"));
    }
}
