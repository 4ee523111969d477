//! Checks one configuration of the model and prints what it found, or serves stateright's Explorer.
//!
//! `cargo run -p protocol-model --example explore` checks the default configuration (the intended
//! protocol); `-- serve` opens the Explorer on http://127.0.0.1:3001 instead. Environment:
//! `MODEL_CANCEL=fails-while-processing|old-main` (another cancel step than main's), `MODEL_NO_SEARCH=1`
//! (a charge a day later does not search the PSP first), `MODEL_REFUND_READS_BACK=0` (the saga's refund
//! step before it read a refused refund back), `MODEL_DAY=1` (a day may pass), `MODEL_NO_CUSTOMER=1`,
//! `MODEL_WEBHOOKS_LOST=1` (a lost answer may be a webhook never delivered), `MODEL_RUNNERS`,
//! `MODEL_CRASHES`, `MODEL_LOSSES`, `MODEL_DUPLICATES`, `MODEL_SCENARIOS` (e.g. `ThreeDs,Processing`),
//! `MODEL_REFUSALS` (any of `dispute,key,charge,500,search,redirect`), `MODEL_REDIRECT_DROPS_ACTION=1` (the
//! client before it kept the secret of a refused redirect), `MODEL_SWEEPER=today` (the sweeper before the
//! fix), `MODEL_BREAKER=per-request|today`, `MODEL_NO_REFERENCE_COPY=1` (the saga before it copied the
//! payment's reference), `MODEL_BYSTANDER=1` (a second order in the shard), `MODEL_DEADLINES=1` (time may
//! pass each state's deadline, `saga::deadline`), `MODEL_TRACE=<property>` (print the path to its discovery, `all` for every one).

use protocol_model::check::check;
use protocol_model::model::{BreakerMode, Refusals, SweeperMode};
use protocol_model::psp::Scenario;
use protocol_model::{CancelMode, Config, ProtocolModel};
use stateright::Model;

fn config() -> Config {
    let var = |name: &str| std::env::var(name).ok();
    let mut config = Config::default();
    match var("MODEL_CANCEL").as_deref() {
        Some("fails-while-processing") => config.cancel = CancelMode::FailsWhileProcessing,
        Some("old-main") => config.cancel = CancelMode::OldMain,
        _ => {}
    }
    config.search_after_a_day = var("MODEL_NO_SEARCH").is_none();
    config.refused_refund_reads_back = var("MODEL_REFUND_READS_BACK").as_deref() != Some("0");
    config.day_passes = var("MODEL_DAY").is_some();
    config.customer = var("MODEL_NO_CUSTOMER").is_none();
    config.webhooks_lost = var("MODEL_WEBHOOKS_LOST").is_some();
    if let Some(n) = var("MODEL_RUNNERS").and_then(|v| v.parse().ok()) {
        config.runners = n;
    }
    for (name, slot) in [
        ("MODEL_CRASHES", &mut config.crashes),
        ("MODEL_LOSSES", &mut config.losses),
        ("MODEL_DUPLICATES", &mut config.duplicates),
    ] {
        if let Some(n) = var(name).and_then(|v| v.parse().ok()) {
            *slot = n;
        }
    }
    if let Some(names) = var("MODEL_REFUSALS") {
        let on = |name: &str| names.split(',').any(|n| n == name);
        config.refusals = Refusals {
            dispute: on("dispute"),
            key_rejected: on("key"),
            charge_refused: on("charge"),
            saved_500: on("500"),
            search_refused: on("search"),
            redirect_refused: on("redirect"),
        };
    }
    if var("MODEL_SWEEPER").as_deref() == Some("today") {
        config.sweeper = SweeperMode::Today;
    }
    match var("MODEL_BREAKER").as_deref() {
        Some("per-request") => config.breaker = BreakerMode::PerRequest,
        Some("today") => config.breaker = BreakerMode::Today,
        _ => {}
    }
    config.copies_reference = var("MODEL_NO_REFERENCE_COPY").is_none();
    config.bystander = var("MODEL_BYSTANDER").is_some();
    config.deadlines = var("MODEL_DEADLINES").is_some();
    config.redirect_drops_action = var("MODEL_REDIRECT_DROPS_ACTION").is_some();
    config.deadline_clears_set_aside = var("MODEL_DEADLINE_CLEARS_ASIDE").is_some();
    if let Some(names) = var("MODEL_SCENARIOS") {
        config.scenarios = Scenario::ALL
            .into_iter()
            .filter(|s| names.split(',').any(|n| n == format!("{s:?}")))
            .collect();
    }
    config
}

fn main() {
    let config = config();
    if std::env::args().nth(1).as_deref() == Some("serve") {
        println!("Explorer on http://127.0.0.1:3001");
        ProtocolModel::new(config).checker().threads(2).serve("127.0.0.1:3001");
        return;
    }
    let report = check(config, 2, false);
    println!("{}", report.summary());
    println!("failed: {:?}", report.failures());
    println!("examples not reached: {:?}", report.unreached_examples());
    let wanted = std::env::var("MODEL_TRACE").unwrap_or_default();
    for name in report.discoveries.keys() {
        if wanted == "all" || wanted == *name {
            println!("{}", report.trace(name));
        }
    }
}
