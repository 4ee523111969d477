//! Each function's cold init (process start to its first poll of the Lambda runtime API), its RSS at that
//! point, and the size of the release `bootstrap` binaries for arm64 if `cargo lambda build` made them.

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

pub const FUNCTIONS: [&str; 7] = [
    "sync-finalize",
    "webhook-intake",
    "outbox-relay",
    "checkout-api",
    "checkout-events",
    "checkout-sweeper",
    "reconciler",
];

fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| local_dev::service::repo_root().join("target"))
}

fn rss_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Spawns `binary` against a runtime API stub and waits for its first `invocation/next` poll.
async fn cold_init(binary: &PathBuf) -> Result<(Duration, Option<u64>), Box<dyn std::error::Error + Send + Sync>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Instant>(1);
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: hyper::Request<hyper::body::Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let _ = tx.send(Instant::now()).await;
                        // Hold the poll open: the function stays idle, as between invocations.
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let started = Instant::now();
    let mut child = tokio::process::Command::new(binary)
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "bench")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("TABLE_NAME", "bench")
        .env("QUEUE_URL", "http://127.0.0.1:9/queue.fifo")
        .env("ESCALATION_QUEUE_URL", "http://127.0.0.1:9/escalations")
        .env("PSP_BASE_URL", "https://psp.example")
        .env(
            "WEBHOOK_SECRETS",
            r#"{"stripe":["whsec_local_dev_stripe_signing_secret"],"standard":["whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA=="]}"#,
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let first_poll = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await?
        .ok_or("no poll")?;
    let rss = child.id().and_then(|pid| rss_kb(pid, "VmHWM:"));
    child.kill().await.ok();
    server.abort();
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
