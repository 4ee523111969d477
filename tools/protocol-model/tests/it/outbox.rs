//! The payment item as its own outbox (`protocol_model::outbox`) checked exhaustively: two webhooks of one
//! payment written as one conditional put each, the relay and the consumer, with crashes, lost answers and
//! redeliveries, a stream that starts with the older form's records; and the broken forms it catches.

use protocol_model::lease::check;
use protocol_model::outbox::{
    Checkpoint, Form, OutboxModel, IN_ORDER_ONCE, NOTHING_LOST, OLDER_FORM_RELAYED, OWN_PUT_RECOGNIZED,
    REDELIVERY_SKIPPED, STATE_AND_EVENT_AGREE,
};

fn faults(form: Form, checkpoint: Checkpoint) -> OutboxModel {
    OutboxModel {
        form,
        checkpoint,
        writers: 2,
        crashes: 1,
        losses: 2,
    }
}

#[test]
fn one_put_per_transition_loses_doubles_and_reorders_no_event() {
    let report = check(faults(Form::ChangeDataCapture, Checkpoint::AfterSend));
    println!("{} states; {:?}", report.unique_states, report.discoveries);
    for property in [IN_ORDER_ONCE, STATE_AND_EVENT_AGREE, NOTHING_LOST] {
        assert!(!report.found(property), "{property}: {}", report.discoveries[property]);
    }
    for example in [OWN_PUT_RECOGNIZED, REDELIVERY_SKIPPED, OLDER_FORM_RELAYED] {
        assert!(
            report.found(example),
            "never reached: {example} (the check would be vacuous)"
        );
    }
}

#[test]
fn an_event_item_written_apart_from_the_payment_can_be_lost_or_reordered() {
    let report = check(faults(Form::DualWrite, Checkpoint::AfterSend));
    println!("{:?}", report.discoveries.get(NOTHING_LOST));
    assert!(report.found(NOTHING_LOST));
}

#[test]
fn a_relay_that_moves_its_checkpoint_before_sending_can_lose_an_event() {
    let report = check(faults(Form::ChangeDataCapture, Checkpoint::BeforeSend));
    println!("{:?}", report.discoveries.get(NOTHING_LOST));
    assert!(report.found(NOTHING_LOST));
}
