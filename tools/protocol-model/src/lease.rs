//! The payment's lease on its own: two workers (two webhooks of one payment, or the intake and recovery)
//! take it, write under the payment's version and free it, with crashes, lost answers and TTL expiry, under
//! the rule of `shared/src/lease.rs`: the lease put succeeds when there is no lease, it expired, it is the
//! taker's own (the SDK's retry of a put whose answer was lost), or it was taken at a payment version below the
//! one the taker has just read (the holder, or someone, has written since). The write frees the lease by
//! moving the version; a holder that writes nothing deletes it (conditioned on its owner).
//!
//! The saga model ([`crate::model`]) keeps its lease as one step (who holds it); this model checks the rule
//! that frees it. [`Rule::EqualVersion`] (a takeover on an equal version) and [`Rule::WithoutRead`] (a
//! takeover that does not compare with a payment read) are the broken rules it must catch.
//!
//! | step | code |
//! |---|---|
//! | [`Step::Read`] | `PaymentStore::get` before the lease (`webhook_intake::handler::payment::read`, `Recovery::reconcile`); a redelivery of an applied event ends here |
//! | [`Step::Put`], [`Step::PutLost`], [`Step::Retry`] | `Leases::acquire` (its condition `FREE`); `hold_waiting` reads again after a refusal |
//! | [`Step::Write`], [`Step::WriteLost`] | `PaymentStore::finalize_from`: decide, put under `version = :expected`, on a conflict decide again from the winner; nothing to write: `lease::release` |
//! | [`Step::Crash`], [`Step::Restart`] | a worker dies between any two calls; the PSP (or the next run) tries again with a new owner token |
//! | [`Step::Expire`], [`Step::TtlDelete`] | a dead holder's lease passes `expires_at_ms`; DynamoDB's TTL deletes it later |

use stateright::{Model, Property};

/// Which lease rule the takers follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// `shared/src/lease.rs`: a takeover when the lease's version is below the payment version read.
    Main,
    /// Broken: a takeover when the lease's version is below or equal to the one read.
    EqualVersion,
    /// Broken: a takeover of any live lease, as if its holder had written, without comparing with a read.
    WithoutRead,
}

/// The lease item (`LEASE#<payment>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseItem {
    pub owner: u8,
    pub at_version: u64,
    /// Its `expires_at_ms` has passed (TTL has not deleted it yet).
    pub expired: bool,
}

/// Where a worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pc {
    /// To read the payment (a new delivery, or a retry after a refused lease).
    Idle,
    /// Read version `seen`; to take the lease.
    Read {
        seen: u64,
    },
    /// Its put committed but the answer was lost: the SDK retries with the same owner token.
    PutLost {
        seen: u64,
    },
    /// Holds the lease taken at `at`; `seen` is the payment it decides on.
    Holding {
        at: u64,
        seen: u64,
    },
    Done,
    Crashed,
}

/// A worker with the one event it applies (its id).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Worker {
    pub pc: Pc,
    /// The owner token of its current attempt (a new one after a crash).
    pub token: u8,
}

/// The table (payment version, the events applied in order, the lease) and the workers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseWorld {
    pub version: u64,
    pub applied: Vec<u8>,
    pub lease: Option<LeaseItem>,
    pub workers: Vec<Worker>,
    pub crashes_left: u8,
    pub losses_left: u8,
    pub next_token: u8,
    /// What happened that the examples look for.
    pub took_over_written: bool,
    pub took_over_expired: bool,
    pub retried_own_put: bool,
}

/// One step of worker `.0` (or of the table's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    Read(usize),
    Put(usize),
    PutLost(usize),
    Retry(usize),
    Write(usize),
    WriteLost(usize),
    Crash(usize),
    Restart(usize),
    Expire,
    TtlDelete,
}

/// The model: `workers` takers of one payment's lease, each applying its own event, with fault budgets.
#[derive(Debug, Clone, Copy)]
pub struct LeaseModel {
    pub rule: Rule,
    pub workers: u8,
    pub crashes: u8,
    pub losses: u8,
}

pub const ONE_WRITER: &str = "one worker at a time may write (holds a lease nobody has written past)";
pub const NO_LOST_UPDATE: &str = "every write lands on the version it read: each event applied once, none lost";
pub const TOOK_OVER_WRITTEN: &str = "a taker takes over a lease its holder's write freed";
pub const TOOK_OVER_EXPIRED: &str = "a taker takes over a dead holder's expired lease";
pub const RETRIED_OWN_PUT: &str = "a lease put whose answer was lost is taken on the retry";
pub const ALL_APPLIED: &str = "every worker's event applied";

impl LeaseModel {
    /// The lease put's condition (`FREE`) for a taker with `token` that read version `seen`.
    fn free(&self, lease: Option<&LeaseItem>, token: u8, seen: u64) -> bool {
        let Some(l) = lease else { return true };
        l.expired
            || l.owner == token
            || match self.rule {
                Rule::Main => l.at_version < seen,
                Rule::EqualVersion => l.at_version <= seen,
                Rule::WithoutRead => true,
            }
    }

    /// The put of worker `i` at `seen`: taken (the lease written) or refused (back to a fresh read).
    fn put(&self, w: &LeaseWorld, i: usize, seen: u64, lost: bool) -> Option<LeaseWorld> {
        let mut next = w.clone();
        let token = w.workers[i].token;
        if !self.free(w.lease.as_ref(), token, seen) {
            next.workers[i].pc = Pc::Idle;
            return Some(next);
        }
        if let Some(l) = &w.lease {
            next.took_over_written |= l.owner != token && !l.expired && l.at_version < seen;
            next.took_over_expired |= l.owner != token && l.expired;
        }
        next.retried_own_put |= w.lease.as_ref().is_some_and(|l| l.owner == token);
        next.lease = Some(LeaseItem {
            owner: token,
            at_version: seen,
            expired: false,
        });
        next.workers[i].pc = if lost {
            next.losses_left -= 1;
            Pc::PutLost { seen }
        } else {
            Pc::Holding { at: seen, seen }
        };
        Some(next)
    }

    /// The finalize of worker `i`'s event on `seen`: already applied, nothing to write (the lease deleted if
    /// still its own); else the versioned write, or on a conflict the winner to decide again on.
    fn write(&self, w: &LeaseWorld, i: usize, seen: u64, lost: bool) -> Option<LeaseWorld> {
        let mut next = w.clone();
        let event = u8::try_from(i).ok()?;
        if w.applied.contains(&event) && w.version == seen {
            if w.lease.as_ref().is_some_and(|l| l.owner == w.workers[i].token) {
                next.lease = None;
            }
            next.workers[i].pc = Pc::Done;
            return Some(next);
        }
        let Pc::Holding { at, .. } = w.workers[i].pc else {
            return None;
        };
        if w.version != seen {
            next.workers[i].pc = Pc::Holding { at, seen: w.version };
            return Some(next);
        }
        next.version += 1;
        next.applied.push(event);
        next.workers[i].pc = if lost {
            next.losses_left -= 1;
            // The SDK's retry meets its own write: a conflict, decided again on the item that won.
            Pc::Holding { at, seen }
        } else {
            Pc::Done
        };
        Some(next)
    }

    /// Whether worker `i` is at work as a holder: it took the lease and no write has passed the version it
    /// took it at, so its write may land (whatever the lease item says now: a taker that took it over does
    /// not stop the holder).
    fn may_write(w: &LeaseWorld, i: usize) -> bool {
        matches!(w.workers[i].pc, Pc::Holding { at, .. } if at == w.version)
    }

    /// Whether a live worker holds (or is taking) the lease with its token: its TTL outlasts any live holder.
    fn held_live(w: &LeaseWorld) -> bool {
        let Some(l) = &w.lease else { return false };
        w.workers
            .iter()
            .any(|wk| wk.token == l.owner && matches!(wk.pc, Pc::Holding { .. } | Pc::PutLost { .. }))
    }
}

impl Model for LeaseModel {
    type State = LeaseWorld;
    type Action = Step;

    fn init_states(&self) -> Vec<LeaseWorld> {
        vec![LeaseWorld {
            version: 1,
            applied: Vec::new(),
            lease: None,
            workers: (0..self.workers).map(|t| Worker { pc: Pc::Idle, token: t }).collect(),
            crashes_left: self.crashes,
            losses_left: self.losses,
            next_token: self.workers,
            took_over_written: false,
            took_over_expired: false,
            retried_own_put: false,
        }]
    }

    fn actions(&self, w: &LeaseWorld, actions: &mut Vec<Step>) {
        for (i, worker) in w.workers.iter().enumerate() {
            match worker.pc {
                Pc::Idle => actions.push(Step::Read(i)),
                Pc::Read { .. } => actions.extend(
                    [Step::Put(i)]
                        .into_iter()
                        .chain((w.losses_left > 0).then_some(Step::PutLost(i))),
                ),
                Pc::PutLost { .. } => actions.push(Step::Retry(i)),
                Pc::Holding { .. } => actions.extend(
                    [Step::Write(i)]
                        .into_iter()
                        .chain((w.losses_left > 0).then_some(Step::WriteLost(i))),
                ),
                Pc::Done => {}
                Pc::Crashed => actions.push(Step::Restart(i)),
            }
            if w.crashes_left > 0 && !matches!(worker.pc, Pc::Done | Pc::Crashed | Pc::Idle) {
                actions.push(Step::Crash(i));
            }
        }
        match &w.lease {
            Some(l) if !l.expired && !Self::held_live(w) => actions.push(Step::Expire),
            Some(l) if l.expired => actions.push(Step::TtlDelete),
            _ => {}
        }
    }

    fn next_state(&self, w: &LeaseWorld, step: Step) -> Option<LeaseWorld> {
        let mut next = w.clone();
        match step {
            Step::Read(i) => {
                let event = u8::try_from(i).ok()?;
                // A redelivery of an applied event is answered from the read: no lease, no write.
                next.workers[i].pc = if w.applied.contains(&event) {
                    Pc::Done
                } else {
                    Pc::Read { seen: w.version }
                };
            }
            Step::Put(i) | Step::PutLost(i) => {
                let Pc::Read { seen } = w.workers[i].pc else {
                    return None;
                };
                return self.put(w, i, seen, matches!(step, Step::PutLost(_)));
            }
            Step::Retry(i) => {
                let Pc::PutLost { seen } = w.workers[i].pc else {
                    return None;
                };
                next.workers[i].pc = Pc::Read { seen };
                return self.put(&next, i, seen, false);
            }
            Step::Write(i) | Step::WriteLost(i) => {
                let Pc::Holding { seen, .. } = w.workers[i].pc else {
                    return None;
                };
                return self.write(w, i, seen, matches!(step, Step::WriteLost(_)));
            }
            Step::Crash(i) => {
                next.crashes_left -= 1;
                next.workers[i].pc = Pc::Crashed;
            }
            Step::Restart(i) => {
                next.workers[i] = Worker {
                    pc: Pc::Idle,
                    token: w.next_token,
                };
                next.next_token += 1;
            }
            Step::Expire => next.lease.as_mut()?.expired = true,
            Step::TtlDelete => next.lease = None,
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_WRITER, |_, w: &LeaseWorld| {
                (0..w.workers.len()).filter(|&i| LeaseModel::may_write(w, i)).count() <= 1
            }),
            Property::always(NO_LOST_UPDATE, |_, w: &LeaseWorld| {
                let mut events = w.applied.clone();
                events.sort_unstable();
                events.dedup();
                events.len() == w.applied.len() && w.version == 1 + w.applied.len() as u64
            }),
            Property::sometimes(TOOK_OVER_WRITTEN, |_, w: &LeaseWorld| w.took_over_written),
            Property::sometimes(TOOK_OVER_EXPIRED, |_, w: &LeaseWorld| w.took_over_expired),
            Property::sometimes(RETRIED_OWN_PUT, |_, w: &LeaseWorld| w.retried_own_put),
            Property::sometimes(ALL_APPLIED, |m: &LeaseModel, w: &LeaseWorld| {
                w.applied.len() == usize::from(m.workers)
            }),
        ]
    }
}

/// What one exhaustive run of a small model (the lease's, [`crate::refund_owner`]'s) found.
#[derive(Debug)]
pub struct LeaseReport {
    pub unique_states: usize,
    /// Each discovery by property name: its path, one step a line.
    pub discoveries: std::collections::BTreeMap<&'static str, String>,
}

impl LeaseReport {
    /// Whether `property` has a discovery (a counterexample for `always`, an example for `sometimes`).
    pub fn found(&self, property: &str) -> bool {
        self.discoveries.contains_key(property)
    }
}

/// Checks `model` (the lease's, or another small model's) breadth-first, every reachable state.
pub fn check<M>(model: M) -> LeaseReport
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Eq + Send + Sync,
{
    use stateright::Checker;
    let checker = model.checker().threads(2).spawn_bfs().join();
    let discoveries = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| {
            let steps: Vec<String> = path
                .into_vec()
                .into_iter()
                .filter_map(|(_, step)| step.map(|s| format!("{s:?}")))
                .collect();
            (name, steps.join(" -> "))
        })
        .collect();
    LeaseReport {
        unique_states: checker.unique_state_count(),
        discoveries,
    }
}
