//! `paymentsctl escalations retry --dry-run` tells the operator the step a retry runs: the step the runner
//! takes, for every state, and for every open state set aside after an escalation (what an operator retries; the
//! runner's resume runs a set-aside saga's step as any other's). No storage needed: both come from the saga
//! as it loads from its stored record.

use payments_core::fixtures::saga_in;
use paymentsctl::escalations::describe_next;
use shared::saga::{Loaded, SagaStatus};

/// The saga as `retry` reads it: from its stored record.
fn stored(loaded: &Loaded) -> Loaded {
    Loaded::from_record(loaded.record().clone()).expect("the stored saga loads")
}

#[test]
fn the_step_paymentsctl_prints_is_the_step_the_runner_takes_in_every_state() {
    for status in SagaStatus::ALL {
        let fresh = saga_in(status);
        // An ended saga is never set aside (it does not load so).
        let aside = (!status.is_terminal()).then(|| {
            fresh
                .clone()
                .set_aside("charge", "kept failing".into(), 1_800_000_000_000)
                .0
        });
        for loaded in [Some(stored(&fresh)), aside.as_ref().map(stored)].into_iter().flatten() {
            assert_eq!(loaded.record().status, status);
            let set_aside = loaded.record().set_aside.is_some();
            let printed = describe_next(loaded.next_step());
            let runs = checkout_saga::runner::action_name(&loaded);
            assert!(
                printed.starts_with(&format!("{runs}:")),
                "saga in {status} (set aside: {set_aside}): paymentsctl prints {printed:?}, the runner runs {runs}"
            );
        }
    }
}
