//! The lease rule (`protocol_model::lease`) checked exhaustively: two takers of one payment's lease with
//! crashes, lost answers on the lease put and on the write, and TTL expiry; and the broken rules it catches.
//! Each run explores a few thousand states in well under a second.

use protocol_model::lease::{
    check, LeaseModel, Rule, ALL_APPLIED, NO_LOST_UPDATE, ONE_WRITER, RETRIED_OWN_PUT, TOOK_OVER_EXPIRED,
    TOOK_OVER_WRITTEN,
};

fn faults(rule: Rule) -> LeaseModel {
    LeaseModel {
        rule,
        workers: 2,
        crashes: 2,
        losses: 2,
    }
}

#[test]
fn main_keeps_one_writer_and_every_update_with_crashes_lost_answers_and_expiry() {
    let report = check(faults(Rule::Main));
    println!("{} states; {:?}", report.unique_states, report.discoveries);
    for property in [ONE_WRITER, NO_LOST_UPDATE] {
        assert!(!report.found(property), "{property}: {}", report.discoveries[property]);
    }
    for example in [TOOK_OVER_WRITTEN, TOOK_OVER_EXPIRED, RETRIED_OWN_PUT, ALL_APPLIED] {
        assert!(
            report.found(example),
            "never reached: {example} (the check would be vacuous)"
        );
    }
}

#[test]
fn a_takeover_on_an_equal_version_lets_two_workers_write_at_once() {
    let report = check(faults(Rule::EqualVersion));
    println!("{:?}", report.discoveries.get(ONE_WRITER));
    assert!(report.found(ONE_WRITER));
}

#[test]
fn a_takeover_without_reading_the_payment_lets_two_workers_write_at_once() {
    let report = check(faults(Rule::WithoutRead));
    println!("{:?}", report.discoveries.get(ONE_WRITER));
    assert!(report.found(ONE_WRITER));
}
