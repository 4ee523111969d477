//! `bench simulate`: the hardest hours, simulated (issue 44, item 2). Deterministic for a seed, seconds to
//! run. Two scenarios over a deployment (a samconfig environment, as `bench capacity` reads it) and a load
//! profile:
//!
//! - **ramp**: quiet, then up to the profile's peak over 30 minutes, held for an hour, on a table that never
//!   saw it (it serves its warm throughput or a new table's 4,000 write units at once, then twice its peak of
//!   30 minutes before);
//! - **outage**: the peak for three hours on a table that served it before, the intake down for the second
//!   half hour to the 90th minute; then the PSPs' own retries (Stripe's back-off over three days, Adyen's
//!   three quick retries and its queue per endpoint).
//!
//! Each answers how long until every webhook is applied, how many were refused on the way (429 by a
//! throttle, 5xx by the outage, Lambda or DynamoDB), whether a limit that delays money bound (DynamoDB
//! throttling, the PSP's rate limit, the FIFO queue's calls), and writes a per-minute CSV beside the numbers
//! (`benchmarks/sim/<deployment>-<scenario>.csv`) that `scripts/plot-simulation` draws as PNG images.
//!
//! `bench simulate [--config-env ENV] [--profile NAME] [--seed N] [--results]`.

mod config;
mod retries;
mod world;

use crate::capacity::limits::group_thousands;
use std::fmt::Write;
use world::{Totals, Traffic, World};

/// The seed of the runs in RESULTS.md.
pub const SEED: u64 = 44;
/// The longest run: Adyen's queue retries for 30 days.
const HORIZON_S: u64 = 31 * 86_400;

/// One scenario: its name, its traffic at `peak` orders a second after `quiet`, and whether the table has
/// served the peak before.
pub fn scenarios(quiet: f64, peak: f64) -> [(&'static str, Traffic, bool); 2] {
    [
        (
            "ramp",
            Traffic {
                orders: vec![
                    (0, quiet),
                    (600, quiet),
                    (2_400, peak),
                    (6_000, peak),
                    (6_600, quiet),
                    (7_200, quiet),
                ],
                outage: None,
            },
            false,
        ),
        (
            "outage",
            Traffic {
                orders: vec![(0, peak), (10_800, peak), (11_400, quiet), (14_400, quiet)],
                outage: Some((1_800, 5_400)),
            },
            true,
        ),
    ]
}

/// A finished run: its scenario, totals and the per-second figures.
pub struct Run {
    pub scenario: &'static str,
    pub outage: Option<(u64, u64)>,
    pub totals: Totals,
    pub seconds: Vec<world::Second>,
}

/// Runs both scenarios for `env` (with `parameters` over it) at `profile`, seeded.
pub fn run(env: Option<&str>, parameters: &[(String, String)], profile: &str, seed: u64) -> Result<Vec<Run>, String> {
    run_only(env, parameters, profile, seed, |_| true)
}

/// Runs the scenarios `wanted` names (see [`run`]).
pub fn run_only(
    env: Option<&str>,
    parameters: &[(String, String)],
    profile: &str,
    seed: u64,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<Run>, String> {
    let inputs = config::Inputs::read(env, parameters, profile)?;
    let quiet = crate::capacity::profile("quiet", &[])?.orders_per_s;
    let mut runs = Vec::new();
    for (scenario, traffic, warm) in scenarios(quiet, inputs.profile.orders_per_s) {
        if !wanted(scenario) {
            continue;
        }
        let config = config::derive(&inputs, seed, warm)?;
        let outage = traffic.outage;
        let mut world = World::new(config, traffic);
        world.run(HORIZON_S);
        runs.push(Run {
            scenario,
            outage,
            totals: world.totals.clone(),
            seconds: world.seconds,
        });
    }
    Ok(runs)
}

/// `h:mm` of `seconds`, days when longer.
fn clock(seconds: u64) -> String {
    let (d, h, m) = (seconds / 86_400, seconds % 86_400 / 3600, seconds % 3600 / 60);
    if d > 0 {
        format!("{d} d {h} h {m:02} min")
    } else {
        format!("{h} h {m:02} min")
    }
}

/// The runs of one deployment as a markdown table.
pub fn markdown(name: &str, runs: &[Run]) -> String {
    let mut out = format!(
        "### {name}\n\n| scenario | webhooks sent | applied | refused 429 | refused 5xx | of those, DynamoDB throttled \
         | Lambda throttled | resent after the return (refused); the wave's crest | refused after the return | Stripe gave up | checkouts refused 429 | Stripe calls \
         over its limit / past checkout-api's budget | FIFO calls over its limit | last Stripe retry applied | last Adyen retry applied | every \
         webhook applied |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let n = |x: f64| group_thousands(x.round());
    for r in runs {
        let t = &r.totals;
        let at = |s: Option<u64>| s.map_or("none".into(), clock);
        let drained = match t.last_backlog {
            _ if t.stripe_given_up >= 0.5 => "never (Stripe gave up)".to_owned(),
            Some(s) => format!("{} after the start", clock(s + 1)),
            None => "at once".into(),
        };
        let resent = if r.outage.is_some() {
            format!(
                "{} ({}); crest {}/s",
                n(t.resent_after_return),
                n(t.resent_refused_after_return),
                n(t.crest_after_return)
            )
        } else {
            "no outage".into()
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {resent} | {} | {} | {} | {} / {} | {} | {} | {} | {drained} |",
            r.scenario,
            n(t.first),
            n(t.applied),
            n(t.refused_429),
            n(t.refused_5xx),
            n(t.dynamodb_throttled),
            n(t.lambda_throttled),
            if r.outage.is_some() {
                n(t.refused_after_return)
            } else {
                "no outage".into()
            },
            n(t.stripe_given_up),
            n(t.checkouts_refused),
            n(t.psp_over_limit),
            n(t.psp_over_budget),
            n(t.fifo_over_limit),
            at(t.last_stripe_retry_applied),
            at(t.last_adyen_retry_applied),
        )
        .ok();
    }
    out
}

/// The per-minute CSV of a run: each minute's means (per second) and its last backlog.
pub fn csv(run: &Run) -> String {
    let mut out = String::from(
        "minute,orders,first,offered,applied,refused_429,refused_5xx,dynamodb_throttled,backlog,wcu,wcu_capacity\n",
    );
    let mut minute: Option<(u64, Vec<world::Second>)> = None;
    let flush = |m: u64, s: &[world::Second], out: &mut String| {
        let n = s.len().max(1) as f64;
        let mean = |f: fn(&world::Second) -> f64| s.iter().map(f).sum::<f64>() / n;
        let last = s.last().copied().unwrap_or_default();
        writeln!(
            out,
            "{m},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.0},{:.0},{:.0}",
            mean(|x| x.orders),
            mean(|x| x.first),
            mean(|x| x.offered),
            mean(|x| x.applied),
            mean(|x| x.refused_429),
            mean(|x| x.refused_5xx),
            mean(|x| x.dynamodb_throttled),
            last.backlog,
            mean(|x| x.wcu),
            last.wcu_capacity,
        )
        .ok();
    };
    for s in &run.seconds {
        let m = s.t / 60;
        match &mut minute {
            Some((at, group)) if *at == m => group.push(*s),
            _ => {
                if let Some((at, group)) = minute.take() {
                    flush(at, &group, &mut out);
                    // An idle stretch skipped: a minute of nothing after the last one, so a plot does not
                    // draw the flow of that minute across the gap.
                    if m > at + 1 {
                        let last = group.last().copied().unwrap_or_default();
                        let idle = world::Second {
                            t: (at + 1) * 60,
                            backlog: last.backlog,
                            wcu_capacity: last.wcu_capacity,
                            ..world::Second::default()
                        };
                        flush(at + 1, &[idle], &mut out);
                        if m > at + 2 {
                            flush(m - 1, &[idle], &mut out);
                        }
                    }
                }
                minute = Some((m, vec![*s]));
            }
        }
    }
    if let Some((at, group)) = minute {
        flush(at, &group, &mut out);
    }
    out
}

/// The command line of `bench simulate`.
struct Args {
    config_env: Option<String>,
    profile: String,
    seed: u64,
    results: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut out = Args {
        config_env: None,
        profile: "peak".into(),
        seed: SEED,
        results: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--config-env" => out.config_env = Some(value()?),
            "--profile" => out.profile = value()?,
            "--seed" => out.seed = value()?.parse().map_err(|_| "--seed: not a number")?,
            "--results" => out.results = true,
            other => return Err(format!("bench simulate: unknown argument {other}")),
        }
    }
    Ok(out)
}

/// Writes each run's CSV under `benchmarks/sim/` as `<deployment>-<scenario>.csv`.
fn write_csvs(deployment: &str, runs: &[Run]) -> Result<(), String> {
    let dir = local_testkit::service::repo_root().join("benchmarks/sim");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for r in runs {
        let path = dir.join(format!("{deployment}-{}.csv", r.scenario));
        std::fs::write(&path, csv(r)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// `bench simulate`: prints the runs; `--results` runs the default deployment and the peak environment and
/// writes their section of RESULTS.md and their CSVs.
pub fn command(args: &[String]) -> Result<(), String> {
    let args = parse(args)?;
    if !args.results {
        let runs = run(args.config_env.as_deref(), &[], &args.profile, args.seed)?;
        let name = args.config_env.clone().unwrap_or_else(|| "default".into());
        print!("{}", markdown(&name, &runs));
        return write_csvs(&name, &runs);
    }
    let mut section = config::results_head(&args.profile, args.seed);
    for (name, env, parameters) in config::deployments()? {
        let runs = run(env.as_deref(), &parameters, &args.profile, args.seed)?;
        let given: Vec<String> = parameters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let title = if given.is_empty() {
            name.clone()
        } else {
            format!("{name} ({})", given.join(" "))
        };
        section.push_str(&markdown(&title, &runs));
        section.push('\n');
        write_csvs(&name, &runs)?;
    }
    print!("{section}");
    crate::capacity::report::replace_in_results("simulation", &section)
}

#[cfg(test)]
mod tests;
