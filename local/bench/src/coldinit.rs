//! Each function's cold init (process start to its first poll of the Lambda runtime API), its RSS at that
//! point, and the size of the release `bootstrap` binaries for arm64 if `cargo lambda build` made them.

use local_lambda::runtime_api::{Output, RuntimeApi, INIT_DEADLINE};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const FUNCTIONS: [&str; 7] = [
    "payments-api",
    "webhook-intake",
    "outbox-relay",
    "checkout-api",
    "checkout-events",
    "checkout-sweeper",
    "reconciler",
];

/// Where cargo put the release binaries.
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| local_testkit::service::repo_root().join("target"))
}

/// A `VmHWM:`-style field of `/proc/<pid>/status`, in KiB.
pub fn rss_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Spawns `binary` against the runtime API stand-in and waits for its first `invocation/next` poll.
async fn cold_init(binary: &Path) -> Result<(Duration, Option<u64>), Box<dyn std::error::Error + Send + Sync>> {
    let mut api = RuntimeApi::start(Duration::from_secs(30)).await?;
    let started = Instant::now();
    let mut child = api.spawn(
        &[binary.as_os_str()],
        "bench",
        &crate::deployed_settings("bench"),
        Output::Inherit,
    )?;
    // A function that refuses its configuration exits before it polls: say so rather than wait it out.
    let first_poll = api
        .ready(&mut child, "bench", INIT_DEADLINE)
        .await
        .map_err(|failed| format!("cold start failed: {}", failed.payload))?;
    let rss = child.id().and_then(|pid| rss_kb(pid, "VmHWM:"));
    child.kill().await.ok();
    Ok((first_poll - started, rss))
}

pub async fn run(out: &mut String) {
    writeln!(
        out,
        "\n## Cold init and memory (release build for this machine; process start to first runtime poll)\n"
    )
    .ok();
    writeln!(
        out,
        "| function | cold init (median of 5) | peak RSS at init | arm64 `bootstrap` |\n|---|---|---|---|"
    )
    .ok();
    for function in FUNCTIONS {
        let binary = target_dir().join("release").join(function);
        // `cargo lambda build` may use its own target directory (LAMBDA_TARGET_DIR), as scripts/release-check does.
        let lambda_dir = std::env::var("LAMBDA_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| target_dir());
        let bootstrap = lambda_dir.join("lambda").join(function).join("bootstrap");
        let size = std::fs::metadata(&bootstrap)
            .map(|m| format!("{:.2} MiB", m.len() as f64 / 1_048_576.0))
            .unwrap_or_else(|_| "not built (`cargo lambda build --release --arm64`)".into());
        if !binary.exists() {
            writeln!(
                out,
                "| {function} | not built (`cargo build --release -p {function}`) | | {size} |"
            )
            .ok();
            continue;
        }
        let mut times = Vec::new();
        let mut rss = None;
        for _ in 0..5 {
            match cold_init(&binary).await {
                Ok((t, r)) => {
                    times.push(t);
                    rss = rss.max(r);
                }
                Err(e) => {
                    writeln!(out, "| {function} | failed: {e} | | {size} |").ok();
                    break;
                }
            }
        }
        if times.len() == 5 {
            times.sort();
            writeln!(
                out,
                "| {function} | {:.1} ms | {} | {size} |",
                times[2].as_secs_f64() * 1e3,
                rss.map(|kb| format!("{:.1} MiB", kb as f64 / 1024.0))
                    .unwrap_or_default()
            )
            .ok();
        }
    }
}
