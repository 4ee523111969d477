//! Runs the model once and prints what the checker found, or serves stateright's Explorer.
//!
//! `cargo run -p protocol-model --example explore -- check` checks the default configuration;
//! `cargo run -p protocol-model --example explore -- serve` opens the Explorer on http://127.0.0.1:3001.

use protocol_model::{Config, ProtocolModel};
use stateright::{Checker, Model};
use std::time::Instant;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    let mut config = Config::default();
    if let Some(runners) = std::env::var("MODEL_RUNNERS").ok().and_then(|v| v.parse().ok()) {
        config.runners = runners;
    }
    if std::env::var("MODEL_MAIN").is_ok() {
        config.charge_mode = protocol_model::ChargeMode::IdempotencyRecord;
    }
    if std::env::var("MODEL_DAY").is_ok() {
        config.day_passes = true;
    }
    for (var, slot) in [
        ("MODEL_CRASHES", &mut config.crashes),
        ("MODEL_LOSSES", &mut config.losses),
        ("MODEL_DUPLICATES", &mut config.duplicates),
    ] {
        if let Some(n) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
            *slot = n;
        }
    }
    let model = ProtocolModel::new(config.clone());
    let model_for_trace = ProtocolModel::new(config);
    if mode == "serve" {
        model.checker().threads(2).serve("127.0.0.1:3001");
        return;
    }
    let started = Instant::now();
    let checker = model.checker().threads(2).spawn_bfs().join();
    println!(
        "states: {} unique, {} generated, max depth {}, {:?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    let mut found: Vec<_> = checker.discoveries().into_iter().collect();
    found.sort_by_key(|(name, _)| *name);
    for (name, path) in found {
        println!("-- {name}: {} steps", path.clone().into_actions().len());
        if std::env::var("MODEL_TRACE").is_ok_and(|v| v == name || v == "all") {
            let last = path.last_state().clone();
            for action in path.into_actions() {
                println!("   {action:?}");
            }
            println!("   last state: {last:#?}");
            if std::env::var("MODEL_FAIR").is_ok() {
                let end = protocol_model::model::fair_run(&model_for_trace, &last);
                println!("   fair run ends: {end:#?}");
            }
        }
    }
}
