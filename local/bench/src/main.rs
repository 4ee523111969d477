//! `bench` prints the figures issue #6 asks for and writes them to `benchmarks/RESULTS.md`:
//! DynamoDB calls and capacity units per webhook, item sizes, latency and throughput at concurrency 1, 8
//! and 32 and contention for K = 2..64 against the running local stack (`API`), cold init and RSS of each
//! function, and the arm64 `bootstrap` sizes. Run it through `scripts/bench`, which starts what it needs.

mod coldinit;
mod counts;
mod load;

use shared::SigningSecret;
use std::fmt::Write;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let api = std::env::var("API").unwrap_or_else(|_| "http://127.0.0.1:3000".into());
    let per_level: usize = std::env::var("WEBHOOKS_PER_LEVEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let secret = SigningSecret::parse(
        std::env::var("WEBHOOK_SECRET").unwrap_or_else(|_| "whsec_local_dev_stripe_signing_secret".into()),
    )?;
    let mut out = String::new();
    writeln!(out, "# Benchmark results\n").ok();
    writeln!(out, "Produced by `scripts/bench` on this machine (2 cores); the arm64 `bootstrap` column needs the cross build, `ARM64=1 scripts/bench` (or `scripts/release-check`). Latency figures mostly measure DynamoDB Local and are informational; counts, units and sizes are the ones to hold. Intake CPU per webhook: `cargo bench -p webhook-intake --bench intake_cpu` (see the end of this file).\n").ok();
    counts::run(&mut out).await;
    writeln!(out).ok();
    load::latency(&mut out, &api, &secret, per_level).await?;
    load::contention(&mut out, &api, &secret).await?;
    coldinit::run(&mut out).await;
    print!("{out}");
    let path = local_dev::service::repo_root().join("benchmarks/RESULTS.md");
    std::fs::write(&path, out)?;
    eprintln!("written to {}", path.display());
    Ok(())
}
