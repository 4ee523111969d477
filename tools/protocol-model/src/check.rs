//! Running the checker: one exhaustive breadth-first run of a [`Config`], and what it found, in words.

use crate::actors::RunnerPc;
use crate::model::{Action, Config, ProtocolModel};
use crate::world::World;
use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// What one run found.
#[derive(Debug)]
pub struct Report {
    /// Distinct states explored.
    pub unique_states: usize,
    /// States generated (with repeats).
    pub generated_states: usize,
    /// The longest path explored, in steps.
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Every property with a discovery: a counterexample for `always`/`eventually`, an example for
    /// `sometimes`; the path as actions, and a summary of the state it ends in.
    pub discoveries: BTreeMap<&'static str, Discovery>,
    /// The names of the `always`/`eventually` properties, whose discoveries are failures.
    pub failing_kinds: Vec<&'static str>,
    /// The names of the `sometimes` properties.
    pub examples: Vec<&'static str>,
    /// What was checked.
    pub config: Config,
}

/// One discovery's path.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// Each action with the state it was taken in.
    pub steps: Vec<(World, Action)>,
    pub last_state: World,
}

impl Report {
    /// The failed properties (counterexamples found).
    pub fn failures(&self) -> Vec<&'static str> {
        self.failing_kinds
            .iter()
            .copied()
            .filter(|name| self.discoveries.contains_key(name))
            .collect()
    }

    /// The `sometimes` properties no path reached.
    pub fn unreached_examples(&self) -> Vec<&'static str> {
        self.examples
            .iter()
            .copied()
            .filter(|name| !self.discoveries.contains_key(name))
            .collect()
    }

    /// One line of counts.
    pub fn summary(&self) -> String {
        format!(
            "{} unique states ({} generated), max depth {}, in {:.1?}",
            self.unique_states, self.generated_states, self.max_depth, self.elapsed
        )
    }

    /// The path to `property`'s discovery, one action a line, and the state it ends in.
    pub fn trace(&self, property: &str) -> String {
        let Some(d) = self.discoveries.get(property) else {
            return format!("{property}: no discovery");
        };
        let mut out = format!("{property}: {} steps\n", d.steps.len());
        for (i, (before, action)) in d.steps.iter().enumerate() {
            let _ = writeln!(out, "  {:>2}. {}", i + 1, name_step(before, action));
        }
        let _ = writeln!(out, "  ends in: {}", describe(&d.last_state));
        if property == crate::model::LIVENESS {
            let model = ProtocolModel::new(self.config.clone());
            let end = crate::model::fair_run(&model, &d.last_state);
            let _ = writeln!(
                out,
                "  a fair run from there ends in: {}",
                end.as_ref().map_or_else(|| "(no end)".to_owned(), describe)
            );
        }
        out
    }
}

/// An action, with the step it is for a runner (the sub-step it was at) or recovery.
pub fn name_step(before: &World, action: &Action) -> String {
    match action {
        Action::Runner { runner, lose } => {
            let what = match before.runners.get(usize::from(*runner)) {
                Some(RunnerPc::At { saga, step, .. }) => format!("{step:?} (loaded {})", saga.0.status),
                _ => format!("load the saga ({})", before.saga.0.status),
            };
            let lost = if *lose { ", the PSP's answer lost" } else { "" };
            format!("runner {runner}: {what}{lost}")
        }
        other => format!("{other:?}"),
    }
}

/// The facts of a state that the properties judge, on one line.
pub fn describe(w: &World) -> String {
    let payments: Vec<String> = w
        .payments
        .iter()
        .map(|p| {
            let p = &p.0;
            let reference = p.psp_reference.as_ref().map_or("-", |r| r.as_str());
            format!(
                "{} {} (PSP {reference}, refunded {}, anomalies {})",
                p.id, p.status, p.refunded_minor, p.anomalies
            )
        })
        .collect();
    let intents: Vec<String> = w
        .psp
        .intents
        .iter()
        .enumerate()
        .map(|(i, pi)| {
            format!(
                "pi_{} {:?} for {} refunded {}",
                i + 1,
                pi.status,
                pi.payment,
                pi.refunded
            )
        })
        .collect();
    format!(
        "saga {}{} (captured {}, refunded {}); log {:?}; payments [{}]; PSP [{}]; order {:?}; stock {}; clock {}; \
         escalations {}, idle calls {}, looks {}",
        w.saga.0.status,
        if w.saga.0.set_aside.is_some() { " set aside" } else { "" },
        w.saga.0.captured,
        w.saga.0.refunded_minor,
        w.saga_log.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        payments.join("; "),
        intents.join("; "),
        w.order,
        w.available,
        w.clock,
        w.escalations,
        w.idle_calls,
        w.looks
    )
}

/// Checks `config` breadth-first, exhaustively (or until the first failure with `stop_at_first_failure`),
/// on `threads` threads.
pub fn check(config: Config, threads: usize, stop_at_first_failure: bool) -> Report {
    let model = ProtocolModel::new(config);
    let properties = model.properties();
    let failing_kinds = properties
        .iter()
        .filter(|p| p.expectation != Expectation::Sometimes)
        .map(|p| p.name)
        .collect();
    let examples = properties
        .iter()
        .filter(|p| p.expectation == Expectation::Sometimes)
        .map(|p| p.name)
        .collect();
    let started = Instant::now();
    let kept = model.config.clone();
    let mut builder = model.checker().threads(threads);
    if stop_at_first_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let discoveries = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| {
            let last_state = path.last_state().clone();
            let steps = path
                .into_vec()
                .into_iter()
                .filter_map(|(state, action)| action.map(|a| (state, a)))
                .collect();
            (name, Discovery { steps, last_state })
        })
        .collect();
    Report {
        unique_states: checker.unique_state_count(),
        generated_states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        discoveries,
        failing_kinds,
        examples,
        config: kept,
    }
}
