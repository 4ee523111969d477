//! Whole-process CPU per webhook of the release `webhook-intake` binary, run as Lambda runs it: the bench
//! plays the Lambda runtime API, hands the process signed webhooks one at a time for payments in DynamoDB
//! Local, and divides the CPU time the process spent (user + system, every thread, from `/proc`) by their
//! number. Four kinds of delivery: a first delivery (read, lease at the version read, write), a late first
//! delivery (the PSP's retry of an event we never applied: the same calls), a redelivery of an event already
//! applied (one read, nothing else) and an event not ours (no marker, no payment: one index query). Each
//! kind's median latency and the bytes the process wrote to its log (stdout: log lines and EMF metrics, what
//! CloudWatch Logs ingests) per webhook feed the bill ([`crate::bill`]).

use crate::coldinit::{rss_kb, target_dir};
use crate::counts::signed;
use integration_tests::TestContext;
use local_lambda::runtime_api::{Output, RuntimeApi};
use payments_core::fixtures;
use serde_json::json;
use serde_json::Value;
use shared::SigningSecret;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use webhook_signatures::samples::stripe_event;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ: 100 on Linux, x86_64 and arm64 alike).
const TICKS_PER_SECOND: f64 = 100.0;

/// How long before its signature a late delivery's event was created (well past the intake's redelivery
/// threshold, as a PSP's retry after a failed first delivery is).
const LATE_BY_SECS: i64 = 600;

/// The CPU time `pid` has used so far (all threads, the exited ones included), in seconds.
fn cpu_seconds(pid: u32) -> Result<f64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces): state is the first, utime the 12th, stime the 13th.
    let after_name = stat.rsplit_once(')').ok_or("unreadable /proc stat")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64, BoxError> { Ok(fields.get(i).ok_or("short /proc stat")?.parse::<f64>()?) };
    Ok((ticks(11)? + ticks(12)?) / TICKS_PER_SECOND)
}

/// One kind of delivery: a `payment_intent.succeeded` event for each payment, created `late_by_secs` before
/// the phase starts and signed just before it is sent (so a long run stays within the signature tolerance
/// and a first delivery stays one), and the answer every one of them must get.
struct Phase {
    name: &'static str,
    payments: Vec<String>,
    late_by_secs: i64,
    expect: &'static str,
    /// Sent without `metadata` (another system's PaymentIntent: no marker, no payment id).
    foreign: bool,
    /// The bill's scenario this phase measures ([`crate::counts`]'s names).
    bill: Option<&'static str>,
}

/// What one phase cost.
struct Measured {
    cpu_per_webhook: Duration,
    p50: Duration,
    p99: Duration,
    answers: BTreeMap<String, usize>,
    log_bytes_per_webhook: f64,
}

/// What the release process measured of one of the bill's scenarios.
#[derive(Debug, Clone, Copy)]
pub struct ProcessFigures {
    /// The median time of one invocation, as the runtime API saw it.
    pub p50: Duration,
    /// Bytes written to stdout per webhook.
    pub log_bytes: f64,
}

/// `n` new payments `pay_<prefix>_<i>` in the context's table.
async fn payments(ctx: &TestContext, prefix: &str, n: usize) -> Result<Vec<String>, BoxError> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("pay_{prefix}_{i}");
        ctx.store.create(fixtures::new_payment(&id, 1000)).await?;
        ids.push(id);
    }
    Ok(ids)
}

/// The `result` (or HTTP status) of the function's API Gateway answer.
fn result_of(answer: &Value) -> String {
    let body: Value = answer["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    match body["result"].as_str() {
        Some(result) => result.to_owned(),
        None => format!("HTTP {}", answer["statusCode"]),
    }
}

/// The size of the process's log so far (0 before its first line).
fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

async fn measure(
    api: &mut RuntimeApi,
    pid: u32,
    phase: &Phase,
    secret: &SigningSecret,
    log: &Path,
) -> Result<Measured, BoxError> {
    let mut latencies = Vec::with_capacity(phase.payments.len());
    let mut answers = BTreeMap::new();
    let created = shared::clock::now_ms() / 1000 - phase.late_by_secs;
    let (before, log_before) = (cpu_seconds(pid)?, log_len(log));
    for id in &phase.payments {
        let mut event = stripe_event(&format!("evt_{id}"), "payment_intent.succeeded", id, created);
        // As an endpoint set up by `paymentsctl stripe setup` renders it: another version is warned of on
        // every event (and alarmed), a misconfiguration, not what a webhook costs.
        event["api_version"] = json!(psp::stripe::STRIPE_API_VERSION);
        if phase.foreign {
            event["data"]["object"]["metadata"] = json!({});
        }
        let webhook = signed(secret, &event, shared::clock::now_ms() / 1000)?;
        let started = Instant::now();
        let answer = api.invoke(webhook).await?;
        latencies.push(started.elapsed());
        let result = if answer.is_error {
            "invocation error".to_owned()
        } else {
            result_of(&answer.body)
        };
        *answers.entry(result).or_insert(0) += 1;
    }
    let cpu = cpu_seconds(pid)? - before;
    // The process writes each line before it answers; a moment lets the last one reach the file.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log_bytes = log_len(log).saturating_sub(log_before);
    if answers.get(phase.expect) != Some(&phase.payments.len()) {
        return Err(format!(
            "{}: expected {} for every webhook, got {answers:?}",
            phase.name, phase.expect
        )
        .into());
    }
    latencies.sort();
    let count = phase.payments.len().max(1);
    Ok(Measured {
        cpu_per_webhook: Duration::from_secs_f64(cpu / count as f64),
        p50: latencies.get(count / 2).copied().unwrap_or_default(),
        p99: latencies.get(count * 99 / 100).copied().unwrap_or_default(),
        answers,
        log_bytes_per_webhook: log_bytes as f64 / count as f64,
    })
}

/// Runs the four phases of `n` webhooks each against the release binary and writes their table; returns
/// the figures of the bill's scenarios.
pub async fn run(out: &mut String, n: usize) -> Result<BTreeMap<&'static str, ProcessFigures>, BoxError> {
    let binary = release_binary()?;
    let secret = SigningSecret::parse(crate::WEBHOOK_SECRET)?;
    let ctx = TestContext::new().await;
    let warm = payments(&ctx, "cpu_warm", 50.min(n)).await?;
    let phases = phases(
        payments(&ctx, "cpu_first", n).await?,
        payments(&ctx, "cpu_late", n).await?,
        (0..n).map(|i| format!("pay_cpu_foreign_{i}")).collect(),
    );
    // The intake's own `Timeout` (infra/template.yaml's Globals).
    let mut api = RuntimeApi::start(Duration::from_secs(10)).await?;
    let log = local_testkit::service::repo_root().join(".local/bench-intake.log");
    let child = api.spawn(
        &[binary.as_os_str()],
        "bench",
        &crate::deployed_settings(&ctx.table),
        Output::File(&log),
    )?;
    let pid = child.id().ok_or("the intake exited at once")?;
    // Warm-up (connections, lazy tables): not counted.
    let warm_up = Phase {
        name: "warm-up",
        payments: warm,
        late_by_secs: 0,
        expect: "applied",
        foreign: false,
        bill: None,
    };
    measure(&mut api, pid, &warm_up, &secret, &log).await?;
    write_table_head(out, n);
    let mut figures = BTreeMap::new();
    for phase in &phases {
        let m = measure(&mut api, pid, phase, &secret, &log).await?;
        write_row(out, phase, &m);
        if let Some(scenario) = phase.bill {
            let (p50, log_bytes) = (m.p50, m.log_bytes_per_webhook);
            figures.insert(scenario, ProcessFigures { p50, log_bytes });
        }
    }
    if let Some(kb) = rss_kb(pid, "VmHWM:") {
        writeln!(
            out,
            "\nPeak RSS of the intake process after these: {:.1} MiB.",
            kb as f64 / 1024.0
        )
        .ok();
    }
    Ok(figures)
}

/// The release `webhook-intake` binary: the bench measures what Lambda runs, so it refuses a missing one
/// rather than build it (a release build is the caller's choice).
fn release_binary() -> Result<std::path::PathBuf, BoxError> {
    let binary = target_dir().join("release").join("webhook-intake");
    if !binary.exists() {
        return Err(format!(
            "{} not built (`cargo build --release -p webhook-intake`)",
            binary.display()
        )
        .into());
    }
    Ok(binary)
}

/// The four kinds of delivery measured: `first` payments' first deliveries, then `late` ones' late first
/// deliveries and their redeliveries (the same payments, so the events are applied by then), then events
/// about `foreign` PaymentIntents no payment of ours holds.
fn phases(first: Vec<String>, late: Vec<String>, foreign: Vec<String>) -> [Phase; 4] {
    let phase = |name, payments, late_by_secs, expect, bill| Phase {
        name,
        payments,
        late_by_secs,
        expect,
        foreign: false,
        bill,
    };
    [
        phase(
            "first delivery: read, lease at the version read, write",
            first,
            0,
            "applied",
            Some(crate::counts::NEW_WEBHOOK),
        ),
        phase(
            "late first delivery (a PSP retry, not applied yet): read, lease, write",
            late.clone(),
            LATE_BY_SECS,
            "applied",
            None,
        ),
        phase(
            "redelivery of an applied event: one read",
            late,
            LATE_BY_SECS,
            "duplicate",
            Some(crate::counts::DUPLICATE),
        ),
        Phase {
            foreign: true,
            ..phase(
                "an event not ours (no marker, no payment): one index query",
                foreign,
                0,
                "ignored",
                Some(crate::counts::NOT_OURS),
            )
        },
    ]
}

/// One phase's row: CPU per webhook, median and p99 latency, log bytes and the answers counted.
fn write_row(out: &mut String, phase: &Phase, m: &Measured) {
    let answers: Vec<String> = m.answers.iter().map(|(r, c)| format!("{r} {c}")).collect();
    writeln!(
        out,
        "| {} | {:.3} ms | {:.1} ms | {:.1} ms | {:.0} | {} |",
        phase.name,
        m.cpu_per_webhook.as_secs_f64() * 1e3,
        m.p50.as_secs_f64() * 1e3,
        m.p99.as_secs_f64() * 1e3,
        m.log_bytes_per_webhook,
        answers.join(", ")
    )
    .ok();
}

/// The table's title, what it measures and how, and its header row.
fn write_table_head(out: &mut String, n: usize) {
    writeln!(
        out,
        "\n## Whole-process CPU per webhook of the release intake ({n} webhooks each, against DynamoDB Local)\n"
    )
    .ok();
    writeln!(
        out,
        "The release `webhook-intake` binary run as Lambda runs it (this bench plays the Lambda runtime API, one \
         invocation at a time); CPU is the process's user + system time over the webhooks (every thread, from \
         `/proc/<pid>/stat`) divided by their number. Its log lines go to `.local/bench-intake.log`.\n"
    )
    .ok();
    writeln!(
        out,
        "| delivery | CPU per webhook | p50 latency | p99 latency | log bytes per webhook | answers |\n|---|---|---|---|---|---|"
    )
    .ok();
}
