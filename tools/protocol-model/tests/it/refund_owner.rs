//! One owner per refund (`protocol_model::refund_owner`) checked exhaustively at both PSPs: the saga's
//! refund step and recovery's give-backs of one captured payment on a card whose refunds may fail, with lost
//! answers, lost webhooks and (Stripe) a day after which its keys are forgotten; and the broken saga steps it
//! catches (a refund on every resume; the gate without reading Stripe's refunds first).

use protocol_model::refund_owner::{
    check, Owner, Psp, RefundModel, BOUNDED, FOR_OPERATOR, GIVEN_BACK, LISTED, NEVER_OVER, ONE_SAGA_REFUND,
};

fn faults(psp: Psp, owner: Owner) -> RefundModel {
    RefundModel {
        psp,
        owner,
        losses: 1,
        days: 1,
    }
}

#[test]
fn main_keeps_one_owner_and_the_bound_at_both_psps() {
    for psp in [Psp::Stripe, Psp::Adyen] {
        let report = check(faults(psp, Owner::Main));
        println!("{psp:?}: {} states", report.unique_states);
        for property in [BOUNDED, ONE_SAGA_REFUND, NEVER_OVER] {
            assert!(
                !report.found(property),
                "{psp:?} {property}: {}",
                report.discoveries[property]
            );
        }
        for example in [GIVEN_BACK, FOR_OPERATOR] {
            assert!(report.found(example), "{psp:?}: never reached: {example} (vacuous)");
        }
    }
    assert!(
        check(faults(Psp::Stripe, Owner::Main)).found(LISTED),
        "a lost refund is found by the read of Stripe's refunds"
    );
}

#[test]
fn a_saga_that_refunds_on_every_resume_is_a_second_owner() {
    let report = check(faults(Psp::Stripe, Owner::DoubleOwner));
    println!("{:?}", report.discoveries.get(ONE_SAGA_REFUND));
    assert!(report.found(ONE_SAGA_REFUND));
    assert!(report.found(BOUNDED), "past the give-back bound");
}

#[test]
fn a_saga_that_does_not_read_stripes_refunds_refunds_again_after_a_lost_answer_and_a_day() {
    let report = check(faults(Psp::Stripe, Owner::NoList));
    println!("{:?}", report.discoveries.get(ONE_SAGA_REFUND));
    assert!(report.found(ONE_SAGA_REFUND));
    // Adyen keeps the saga's key: the same gate makes no second refund there.
    assert!(!check(faults(Psp::Adyen, Owner::NoList)).found(ONE_SAGA_REFUND));
}
