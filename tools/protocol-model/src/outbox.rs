//! The payment item as its own outbox (issue 43), on its own: writers put the payment under its version
//! carrying the transition, DynamoDB Streams records each change of the item once and in order, the relay
//! archives each transition's event in the history and sends it to the FIFO queue, the consumer applies it
//! once and in version order. With crashes of every actor between any two steps, lost answers (a put that
//! committed, a send SQS accepted, a delete SQS did), redeliveries, a change that moves no version and a TTL
//! deletion in the stream, and a stream that starts with records of the older form (an event item written
//! in a transaction: the migration).
//!
//! | step | code |
//! |---|---|
//! | [`Step::Read`], [`Step::Put`], [`Step::PutLost`], [`Step::Retry`] | `PaymentStore::finalize_from`: read, conditional `PutItem` (`transition_to_item`), on a lost answer the SDK's retry meets its own item (`WriteFailure::Ours`) |
//! | [`Step::EventPut`] | [`Form::DualWrite`] only: the broken form, an event item put after the payment, outside any transaction |
//! | [`Step::Defer`], [`Step::TtlDelete`] | `open_index::defer` (no version moved, `event_version` removed); a lease's TTL deletion |
//! | [`Step::Archive`], [`Step::Send`], [`Step::SendLost`], [`Step::Checkpoint`] | `outbox_relay::relay`: the mapping's filter (`shared::outbox::is_outbox_record`), `PaymentStore::archive`, `Publisher::publish`, the mapping's checkpoint past what was not reported |
//! | [`Step::Apply`], [`Step::Delete`], [`Step::DeleteLost`] | `shared::consumer`: skip what the cursor has, apply the next version with the cursor in one transaction, hold back a gap; the SQS mapping's delete |
//! | [`Step::Crash`] | any actor dies between two calls: a writer restarts from a fresh read (the PSP redelivers), the relay from its checkpoint, the consumer from the queue |

use stateright::{Model, Property};
use std::collections::BTreeSet;

/// How a transition and its event are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// The payment's one conditional put carries the transition; its stream record is the event.
    ChangeDataCapture,
    /// Broken: the payment put, then the event item in a second write (no transaction): the dual write.
    DualWrite,
}

/// How the relay moves its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// Past a record only after its send was confirmed (ReportBatchItemFailures).
    AfterSend,
    /// Broken: past the record before it is sent.
    BeforeSend,
}

/// One record of the table's stream, in the order of the writes to the payment's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Record {
    /// A payment change carrying the transition to `version` (`event_version` = `version`), by `writer`.
    Transition { version: u8, writer: u8 },
    /// An older writer's payment change (no `event_version`): the filter keeps it out.
    PaymentWithoutTransition,
    /// The INSERT of an `entity = event` item (older form, or [`Form::DualWrite`]).
    EventItem { version: u8, writer: u8 },
    /// A change that moved no version (`open_index::defer`), or a lease's TTL deletion.
    Filtered,
}

/// An event as the queue carries it: its version and the writer whose transition it describes.
pub type Event = (u8, u8);

/// Where a writer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pc {
    Idle,
    Read {
        seen: u8,
    },
    /// Its put committed but the answer was lost: the SDK sends the same put again.
    PutLost {
        seen: u8,
    },
    /// [`Form::DualWrite`]: the payment is written at `version`, its event item not yet.
    EventDue {
        version: u8,
    },
    Done,
}

/// Where the relay is with the record at its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RelayPc {
    AtCheckpoint,
    Archived,
    /// Sent and confirmed: the checkpoint may pass it.
    Sent,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutboxWorld {
    /// The payment item's version, and per version the writer whose transition wrote it (ghost: index 0
    /// is version 1, the creation).
    pub version: u8,
    pub written: Vec<u8>,
    pub writers: Vec<Pc>,
    pub stream: Vec<Record>,
    /// The history items (`EVENT#<version>`), by version: the writer each describes.
    pub history: BTreeSet<Event>,
    pub relay_checkpoint: usize,
    pub relay: RelayPc,
    /// The FIFO group of the payment (one group: its order is the queue's order).
    pub queue: Vec<Event>,
    /// The consumer's cursor and what it applied, in order.
    pub cursor: u8,
    pub applied: Vec<Event>,
    /// The head message was applied or skipped; its delete is due.
    pub delete_due: bool,
    pub crashes_left: u8,
    pub losses_left: u8,
    pub defers_left: u8,
    /// What the examples look for.
    pub own_put_recognized: bool,
    pub redelivery_skipped: bool,
    pub older_form_relayed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    Read(usize),
    Put(usize),
    PutLost(usize),
    Retry(usize),
    EventPut(usize),
    CrashWriter(usize),
    Defer,
    TtlDelete,
    Archive,
    Send,
    SendLost,
    Checkpoint,
    CrashRelay,
    Apply,
    Delete,
    DeleteLost,
    CrashConsumer,
}

/// `writers` webhooks of one payment (each its own transition), with fault budgets.
#[derive(Debug, Clone, Copy)]
pub struct OutboxModel {
    pub form: Form,
    pub checkpoint: Checkpoint,
    pub writers: u8,
    pub crashes: u8,
    pub losses: u8,
}

pub const IN_ORDER_ONCE: &str = "the consumer applies versions 1, 2, 3 ... each once, none skipped";
pub const STATE_AND_EVENT_AGREE: &str = "every event sent, applied or archived describes the write of its version";
pub const NOTHING_LOST: &str = "once every actor is done, every version was applied and is in the history";
pub const OWN_PUT_RECOGNIZED: &str = "a put whose answer was lost is recognized as the writer's own";
pub const REDELIVERY_SKIPPED: &str = "a redelivered event is skipped by the consumer";
pub const OLDER_FORM_RELAYED: &str = "an event item of the older form is relayed";

impl OutboxModel {
    /// The versioned put of writer `i` on `seen` (`finalize_from`'s write); on a conflict, a fresh decision on
    /// the winner (here: its transition applies on any version).
    fn put(&self, w: &OutboxWorld, i: usize, seen: u8, lost: bool) -> OutboxWorld {
        let mut next = w.clone();
        let writer = u8::try_from(i).unwrap_or(u8::MAX);
        if w.version != seen {
            next.writers[i] = Pc::Read { seen: w.version };
            return next;
        }
        next.version += 1;
        next.written.push(writer);
        next.writers[i] = match (self.form, lost) {
            (_, true) => {
                next.losses_left -= 1;
                Pc::PutLost { seen }
            }
            (Form::ChangeDataCapture, false) => Pc::Done,
            (Form::DualWrite, false) => Pc::EventDue { version: next.version },
        };
        next.stream.push(match self.form {
            Form::ChangeDataCapture => Record::Transition {
                version: next.version,
                writer,
            },
            Form::DualWrite => Record::PaymentWithoutTransition,
        });
        next
    }

    /// The SDK's retry of a put whose answer was lost: the condition fails and returns the item; it is the
    /// writer's own (`WriteFailure::Ours`) unless another writer wrote since.
    fn retry(&self, w: &OutboxWorld, i: usize, seen: u8) -> OutboxWorld {
        let mut next = w.clone();
        let writer = u8::try_from(i).unwrap_or(u8::MAX);
        let ours = w.written.get(usize::from(seen)) == Some(&writer) && w.version == seen + 1;
        next.own_put_recognized |= ours;
        next.writers[i] = match (ours, self.form) {
            (true, Form::ChangeDataCapture) => Pc::Done,
            (true, Form::DualWrite) => Pc::EventDue { version: seen + 1 },
            // Another writer moved it since: decided again on the winner, which holds this writer's event
            // already (a duplicate: nothing to write).
            (false, _) => Pc::Done,
        };
        next
    }

    /// The record at the relay's checkpoint, as the filter passes it: its event, or `None` (skipped).
    fn event_at(w: &OutboxWorld) -> Option<Option<Event>> {
        w.stream.get(w.relay_checkpoint).map(|r| match *r {
            Record::Transition { version, writer } | Record::EventItem { version, writer } => Some((version, writer)),
            Record::PaymentWithoutTransition | Record::Filtered => None,
        })
    }

    fn relay_step(&self, w: &OutboxWorld, step: Step) -> Option<OutboxWorld> {
        let mut next = w.clone();
        match (step, w.relay) {
            (Step::Archive, RelayPc::AtCheckpoint) => {
                let Some(e) = Self::event_at(w)? else {
                    next.relay_checkpoint += 1;
                    return Some(next);
                };
                if matches!(w.stream[w.relay_checkpoint], Record::Transition { .. }) {
                    next.history.insert(e);
                } else {
                    next.older_form_relayed = true;
                }
                next.relay = RelayPc::Archived;
                if self.checkpoint == Checkpoint::BeforeSend {
                    next.relay_checkpoint += 1;
                }
            }
            (Step::Send | Step::SendLost, RelayPc::Archived) => {
                let index = match self.checkpoint {
                    Checkpoint::AfterSend => w.relay_checkpoint,
                    Checkpoint::BeforeSend => w.relay_checkpoint.checked_sub(1)?,
                };
                let Some(Record::Transition { version, writer } | Record::EventItem { version, writer }) =
                    w.stream.get(index).copied()
                else {
                    return None;
                };
                next.queue.push((version, writer));
                next.relay = if step == Step::SendLost {
                    // Sent, but reported failed: the stream delivers the record again.
                    next.losses_left -= 1;
                    RelayPc::AtCheckpoint
                } else {
                    RelayPc::Sent
                };
                if self.checkpoint == Checkpoint::BeforeSend && step == Step::Send {
                    next.relay = RelayPc::AtCheckpoint;
                }
            }
            (Step::Checkpoint, RelayPc::Sent) => {
                next.relay_checkpoint += 1;
                next.relay = RelayPc::AtCheckpoint;
            }
            _ => return None,
        }
        Some(next)
    }

    /// The consumer on the head of the FIFO group: skip what the cursor has, apply the next version (with the
    /// cursor, in one transaction), hold back a gap (nothing happens until it is filled).
    fn apply(w: &OutboxWorld) -> Option<OutboxWorld> {
        let &(version, writer) = w.queue.first()?;
        let mut next = w.clone();
        if version <= w.cursor {
            next.redelivery_skipped = true;
        } else if version == w.cursor + 1 {
            next.cursor = version;
            next.applied.push((version, writer));
        } else {
            return None;
        }
        next.delete_due = true;
        Some(next)
    }

    fn writer_actions(w: &OutboxWorld, actions: &mut Vec<Step>) {
        for (i, pc) in w.writers.iter().enumerate() {
            match pc {
                Pc::Idle => actions.push(Step::Read(i)),
                Pc::Read { .. } => {
                    actions.push(Step::Put(i));
                    if w.losses_left > 0 {
                        actions.push(Step::PutLost(i));
                    }
                }
                Pc::PutLost { .. } => actions.push(Step::Retry(i)),
                Pc::EventDue { .. } => actions.push(Step::EventPut(i)),
                Pc::Done => {}
            }
            if w.crashes_left > 0 && !matches!(pc, Pc::Idle | Pc::Done) {
                actions.push(Step::CrashWriter(i));
            }
        }
    }

    /// Whether every version written has been applied and archived (or written by the older form).
    fn caught_up(w: &OutboxWorld) -> bool {
        let all: BTreeSet<Event> = (1..=w.version).zip(w.written.iter().copied()).collect();
        w.cursor == w.version && w.history == all
    }
}

impl Model for OutboxModel {
    type State = OutboxWorld;
    type Action = Step;

    fn init_states(&self) -> Vec<OutboxWorld> {
        // Created by an older writer before the deploy: its payment record and its event item (history).
        let creator = self.writers;
        vec![OutboxWorld {
            version: 1,
            written: vec![creator],
            writers: vec![Pc::Idle; usize::from(self.writers)],
            stream: vec![
                Record::PaymentWithoutTransition,
                Record::EventItem {
                    version: 1,
                    writer: creator,
                },
            ],
            history: [(1, creator)].into(),
            relay_checkpoint: 0,
            relay: RelayPc::AtCheckpoint,
            queue: Vec::new(),
            cursor: 0,
            applied: Vec::new(),
            delete_due: false,
            crashes_left: self.crashes,
            losses_left: self.losses,
            defers_left: 1,
            own_put_recognized: false,
            redelivery_skipped: false,
            older_form_relayed: false,
        }]
    }

    fn actions(&self, w: &OutboxWorld, actions: &mut Vec<Step>) {
        Self::writer_actions(w, actions);
        if w.defers_left > 0 {
            actions.extend([Step::Defer, Step::TtlDelete]);
        }
        if w.relay_checkpoint < w.stream.len() || w.relay != RelayPc::AtCheckpoint {
            actions.extend([Step::Archive, Step::Send, Step::Checkpoint]);
            if w.losses_left > 0 {
                actions.push(Step::SendLost);
            }
            if w.crashes_left > 0 && w.relay != RelayPc::AtCheckpoint {
                actions.push(Step::CrashRelay);
            }
        }
        if w.delete_due {
            actions.push(Step::Delete);
            if w.losses_left > 0 {
                actions.push(Step::DeleteLost);
            }
            if w.crashes_left > 0 {
                actions.push(Step::CrashConsumer);
            }
        } else if !w.queue.is_empty() {
            actions.push(Step::Apply);
        }
    }

    fn next_state(&self, w: &OutboxWorld, step: Step) -> Option<OutboxWorld> {
        let mut next = w.clone();
        match step {
            Step::Read(i) => next.writers[i] = Pc::Read { seen: w.version },
            Step::Put(i) | Step::PutLost(i) => {
                let Pc::Read { seen } = w.writers[i] else { return None };
                return Some(self.put(w, i, seen, step == Step::PutLost(i)));
            }
            Step::Retry(i) => {
                let Pc::PutLost { seen } = w.writers[i] else {
                    return None;
                };
                return Some(self.retry(w, i, seen));
            }
            Step::EventPut(i) => {
                let Pc::EventDue { version } = w.writers[i] else {
                    return None;
                };
                let writer = u8::try_from(i).ok()?;
                next.stream.push(Record::EventItem { version, writer });
                next.history.insert((version, writer));
                next.writers[i] = Pc::Done;
            }
            Step::CrashWriter(i) => {
                next.crashes_left -= 1;
                // The PSP redelivers: a fresh read; a writer whose transition is in the item is done.
                let writer = u8::try_from(i).ok()?;
                next.writers[i] = if w.written.contains(&writer) {
                    Pc::Done
                } else {
                    Pc::Idle
                };
            }
            Step::Defer | Step::TtlDelete => {
                next.defers_left -= 1;
                next.stream.push(Record::Filtered);
            }
            Step::Archive | Step::Send | Step::SendLost | Step::Checkpoint => return self.relay_step(w, step),
            Step::CrashRelay => {
                next.crashes_left -= 1;
                next.relay = RelayPc::AtCheckpoint;
            }
            Step::Apply => return Self::apply(w),
            Step::Delete => {
                next.queue.remove(0);
                next.delete_due = false;
            }
            Step::DeleteLost | Step::CrashConsumer => {
                // The message comes back after its visibility timeout, still at the head of its group.
                if step == Step::DeleteLost {
                    next.losses_left -= 1;
                } else {
                    next.crashes_left -= 1;
                }
                next.delete_due = false;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(IN_ORDER_ONCE, |_, w: &OutboxWorld| {
                w.applied.iter().enumerate().all(|(k, (v, _))| usize::from(*v) == k + 1)
            }),
            Property::always(STATE_AND_EVENT_AGREE, |_, w: &OutboxWorld| {
                let agrees = |(v, writer): &Event| w.written.get(usize::from(*v) - 1) == Some(writer);
                w.queue.iter().chain(&w.applied).chain(&w.history).all(agrees)
            }),
            // Where nothing but the optional changes can happen any more (a run's end, or stuck), every writer
            // is done, the relay and the consumer caught up, and every version applied and in the history.
            Property::always(NOTHING_LOST, |m: &OutboxModel, w: &OutboxWorld| {
                let mut actions = Vec::new();
                m.actions(w, &mut actions);
                let can_move = actions
                    .into_iter()
                    .filter(|a| !matches!(a, Step::Defer | Step::TtlDelete))
                    .any(|a| m.next_state(w, a).is_some());
                can_move || (w.writers.iter().all(|p| *p == Pc::Done) && OutboxModel::caught_up(w))
            }),
            Property::sometimes(OWN_PUT_RECOGNIZED, |_, w: &OutboxWorld| w.own_put_recognized),
            Property::sometimes(REDELIVERY_SKIPPED, |_, w: &OutboxWorld| w.redelivery_skipped),
            Property::sometimes(OLDER_FORM_RELAYED, |_, w: &OutboxWorld| w.older_form_relayed),
        ]
    }
}
