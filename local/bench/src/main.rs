//! `bench` prints the figures issue #6 asks for and writes them to `benchmarks/RESULTS.md`:
//! DynamoDB calls and capacity units per webhook, item sizes, latency and throughput at concurrency 1, 8
//! and 32 and contention for K = 2..64 against the running local stack (`API`), cold init and RSS of each
//! function, the arm64 `bootstrap` sizes, the release intake's whole-process CPU per webhook, and the bill
//! (dollars per million webhooks at list prices, [`bill`]). Run it through `scripts/bench`, which starts
//! what it needs; `bench intake-cpu` runs only the intake's part and prints it (`INTAKE_CPU_WEBHOOKS`,
//! default 1000, webhooks per kind of delivery); `bench bill` the DynamoDB counts, the intake's part and the
//! bill, without the local stack; `bench guard` (CI, `scripts/release-check`) runs only the
//! DynamoDB counts and fails when a new webhook or a redelivery costs more than its target; `bench
//! write-latency` times the finalize write before and after issue 43 (`WRITES` each, default 1000).
//!
//! Issue 44's capacity planning: `bench costs` measures what each kind of request costs (the DynamoDB counts
//! and a checkout through the saga) into `benchmarks/costs.json` (`bench bill` and the full run write it too,
//! with the release intake's times); `bench capacity` is the model over it, the template and the limits table
//! ([`capacity`]); `bench simulate` the seeded simulation of the hardest hours ([`simulate`]); `bench limits`
//! prints the limits table; `bench openloop` the open-loop load run against the local world ([`openloop`]).

mod bill;
mod capacity;
mod checkout_costs;
mod coldinit;
mod costs;
mod counts;
mod intake_process;
mod load;
mod openloop;
mod prices;
mod simulate;
mod write_latency;

use shared::SigningSecret;

/// The local stack's development Stripe signing secret (`scripts/lib.sh`).
const WEBHOOK_SECRET: &str = "whsec_local_dev_stripe_signing_secret";
use std::fmt::Write;

/// The settings a deployed function gets, for the functions the bench runs as processes: the stage every
/// function needs, `table`, and the settings the checkout functions and the reconciler refuse to start
/// without (none of them is used here).
fn deployed_settings(table: &str) -> Vec<(String, String)> {
    [
        ("STAGE", "bench"),
        ("TABLE_NAME", table),
        ("QUEUE_URL", "http://127.0.0.1:9/queue.fifo"),
        ("ESCALATION_QUEUE_URL", "http://127.0.0.1:9/escalations"),
        ("PSP_BASE_URL", "https://psp.example"),
        ("PSP_API_KEY", "sk_test_bench"),
        ("PSP_REDIRECTS", "never"),
        (
            "WEBHOOK_SECRETS",
            r#"{"stripe":["whsec_local_dev_stripe_signing_secret"],"standard":["whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA=="]}"#,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Writes `benchmarks/costs.json` from what was measured (the earlier file's intake times and checkout kept
/// where this run measured none).
fn save_costs(
    command: &str,
    units: &counts::Measured,
    process: Option<&std::collections::BTreeMap<&'static str, intake_process::ProcessFigures>>,
    checkout: Option<costs::CheckoutCost>,
) -> Result<(), String> {
    let earlier = costs::load(&costs::path()).ok();
    let mut measured = costs::from_measured(command, units, process, earlier.as_ref());
    measured.checkout = checkout.or_else(|| earlier.and_then(|e| e.checkout));
    costs::save(&costs::path(), &measured)?;
    eprintln!("written to {}", costs::path().display());
    Ok(())
}

/// Fails, naming each difference, when `benchmarks/costs.json` no longer holds what the code costs (a
/// change that made a request cheaper or dearer without `bench costs` after it).
async fn current_costs(units: &counts::Measured) -> Result<(), String> {
    let file = costs::load(&costs::path())?;
    let mut measured = costs::from_measured("bench guard", units, None, Some(&file));
    measured.checkout = Some(checkout_costs::run().await.map_err(|e| e.to_string())?);
    let stale = costs::stale(&file, &measured);
    if stale.is_empty() {
        return Ok(());
    }
    Err(format!(
        "benchmarks/costs.json is stale (the capacity model reads it): run `bench costs` (scripts/capacity)\n{}",
        stale.join("\n")
    ))
}

/// The subcommands that need no DynamoDB: the model, the simulation, the limits table.
fn offline(mode: &str, rest: &[String]) -> Option<Result<(), String>> {
    match mode {
        "capacity" => Some(capacity::command(rest)),
        "simulate" => Some(simulate::command(rest)),
        "limits" => Some(capacity::limits::load(&capacity::limits::path()).map(|l| print!("{}", l.markdown()))),
        _ => None,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().cloned().unwrap_or_default();
    if let Some(done) = offline(&mode, args.get(1..).unwrap_or_default()) {
        return done.map_err(Into::into);
    }
    let intake_webhooks: usize = std::env::var("INTAKE_CPU_WEBHOOKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    if mode == "openloop" {
        return openloop::command(args.get(1..).unwrap_or_default()).await;
    }
    if mode == "costs" {
        // What each kind of request costs, for the model: the counts and a checkout, no release build.
        let mut out = String::new();
        let units = counts::run(&mut out).await;
        let checkout = checkout_costs::run().await?;
        save_costs("bench costs", &units, None, Some(checkout))?;
        return Ok(());
    }
    if mode == "guard" {
        // CI's guard (scripts/release-check): the units of a new webhook and of a redelivery, and the costs
        // the capacity model reads (benchmarks/costs.json) still what the code costs.
        let mut out = String::new();
        let measured = counts::run(&mut out).await;
        print!("{out}");
        measured
            .guard()
            .map_err(|breaches| format!("cost guard failed:\n{breaches}"))?;
        return current_costs(&measured).await.map_err(Into::into);
    }
    if mode == "bill" {
        // The bill's own figures only (no local stack): the counts, the release intake's, the bill.
        let mut out = String::new();
        let units = counts::run(&mut out).await;
        let figures = intake_process::run(&mut out, intake_webhooks).await?;
        bill::write(&mut out, &units, &figures);
        print!("{out}");
        save_costs("bench bill", &units, Some(&figures), None)?;
        bill::log_guard(&figures)?;
        return units
            .guard()
            .map_err(|breaches| format!("cost guard failed:\n{breaches}").into());
    }
    if mode == "write-latency" {
        // The finalize write before and after issue 43, alternated (`WRITES`, default 1000 each).
        let n = std::env::var("WRITES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        let mut out = String::new();
        write_latency::run(&mut out, n).await;
        print!("{out}");
        return Ok(());
    }
    if mode == "intake-cpu" {
        let mut out = String::new();
        intake_process::run(&mut out, intake_webhooks).await?;
        print!("{out}");
        return Ok(());
    }
    full(intake_webhooks).await
}

/// The full run (`scripts/bench`): every figure against the running local stack, written to RESULTS.md.
async fn full(intake_webhooks: usize) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let api = std::env::var("API").unwrap_or_else(|_| "http://127.0.0.1:3000".into());
    let per_level: usize = std::env::var("WEBHOOKS_PER_LEVEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let secret = SigningSecret::parse(std::env::var("WEBHOOK_SECRET").unwrap_or_else(|_| WEBHOOK_SECRET.into()))?;
    let mut out = String::new();
    writeln!(out, "# Benchmark results\n").ok();
    writeln!(out, "Produced by `scripts/bench` on this machine (2 cores); the arm64 `bootstrap` column needs the cross build, `ARM64=1 scripts/bench` (or `scripts/release-check`). Latency figures mostly measure DynamoDB Local and are informational; counts, units and sizes are the ones to hold. Intake CPU per webhook: `cargo bench -p webhook-intake --bench intake_cpu` (see the end of this file).\n").ok();
    let units = counts::run(&mut out).await;
    writeln!(out).ok();
    load::latency(&mut out, &api, &secret, per_level).await?;
    load::contention(&mut out, &api, &secret).await?;
    coldinit::run(&mut out).await;
    let figures = intake_process::run(&mut out, intake_webhooks).await?;
    bill::write(&mut out, &units, &figures);
    print!("{out}");
    let path = local_testkit::service::repo_root().join("benchmarks/RESULTS.md");
    std::fs::write(&path, out)?;
    eprintln!("written to {}", path.display());
    save_costs("bench", &units, Some(&figures), None)?;
    bill::log_guard(&figures)?;
    units
        .guard()
        .map_err(|breaches| format!("cost guard failed:\n{breaches}").into())
}
