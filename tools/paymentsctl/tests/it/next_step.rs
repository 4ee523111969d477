//! `paymentsctl escalations retry --dry-run` tells the operator the step a retry runs: the step the runner
//! takes, for every state (no storage needed: both come from the loaded saga).

use payments_core::fixtures::saga_in;
use paymentsctl::escalations::describe_next;
use shared::saga::SagaStatus;

#[test]
fn the_step_paymentsctl_prints_is_the_step_the_runner_takes_in_every_state() {
    for status in SagaStatus::ALL {
        let loaded = saga_in(status);
        assert_eq!(loaded.record().status, status);
        let printed = describe_next(loaded.next_step());
        let runs = checkout_saga::runner::action_name(&loaded);
        assert!(
            printed.starts_with(&format!("{runs}:")),
            "saga in {status}: paymentsctl prints {printed:?}, the runner runs {runs}"
        );
    }
}
