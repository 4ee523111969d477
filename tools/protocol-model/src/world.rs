//! The model's state: the DynamoDB items, the PSP, each actor's local state and the fault budgets; and the
//! two conditional writes every actor goes through.
//!
//! The items are the real types (`SagaRecord`, `Payment`), wrapped only to be hashed (stateright
//! fingerprints states by their hash, so every field that can differ between two states is hashed).
//!
//! - [`World::save_saga`] mirrors `SagaStore::save` (`functions/checkout-saga/src/saga.rs`): the saga put
//!   conditioned on the version it was loaded at, its event, and the step's own writes (the stock; the
//!   payment's creation in `payment_created`), in one transaction.
//! - [`World::finalize`] mirrors `PaymentStore::finalize_from` (`shared/src/store/finalize.rs`): the real
//!   [`payments_core::decide`] against the current item (a version conflict decides again from the item that
//!   won, so the write lands on the newest version), the payment put under the version token, and the lease
//!   released in the same transaction when the caller holds it (separately when nothing is written). Money
//!   taken on a failed payment is `decide`'s `stray_capture`: the payment stays open (`Payment::is_open`) and
//!   recovery gives the money back ([`crate::actors::recovery_ask`]).

use crate::actors::{CustomerPc, RecoveryPc, RunnerPc};
use crate::ids;
use crate::psp::{Psp, Scenario};
use payments_core::saga::{Saga, SagaEvent, SagaEventKind, SagaRecord, Started, Step};
use payments_core::{decide, Decision, EventKind, Observation, Payment, PaymentId, PaymentStatus};
use std::hash::{Hash, Hasher};

/// A stored saga record, hashed over every field the model can change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSaga(pub SagaRecord);

impl Hash for StoredSaga {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let r = &self.0;
        (
            r.version,
            r.status,
            &r.payment_id,
            &r.psp_reference,
            r.captured,
            r.refunded_minor,
        )
            .hash(h);
        (r.customer_action, r.recovery_requested, r.updated_at_ms).hash(h);
        (&r.refund_impossible, r.set_aside.as_ref().map(|a| a.at_ms)).hash(h);
        r.failure.as_ref().map(|f| (f.step, f.reason.as_str())).hash(h);
    }
}

/// A stored payment item, hashed over every field the model can change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPayment(pub Payment);

impl Hash for StoredPayment {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let p = &self.0;
        (
            &p.id,
            p.version,
            p.status,
            p.refunded_minor,
            &p.psp_reference,
            &p.reason,
        )
            .hash(h);
        (&p.seen_psp_events, p.last_psp_event_at_ms, p.anomalies, p.updated_at_ms).hash(h);
        (p.created_at_ms, p.stray_capture.map(|s| (s.anomaly, s.refunded))).hash(h);
        p.retry_token.as_ref().map(|t| t.expose().to_owned()).hash(h);
        p.action
            .as_ref()
            .map(|a| {
                (
                    a.client_secret().map(|s| s.expose().to_owned()),
                    a.redirect_url().map(|u| u.expose().to_owned()),
                )
            })
            .hash(h);
    }
}

/// The order item's status (`functions/checkout-saga/src/orders.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderStatus {
    Pending,
    Confirmed,
    /// Cancelled by the customer.
    Cancelled,
}

/// Who holds a payment's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    Intake,
    Recovery,
}

/// How the sweeper's `open-items` index holds the saga, beside what the record says (a set-aside saga is
/// marked on its record, [`payments_core::saga::after_resume`] reads it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Due {
    /// Resumed when a runner (the inbox consumer, or the sweeper on its back-off) loads it.
    #[default]
    Free,
    /// Its last step was deferred (the breaker open, the API key rejected): looked at again once that ends
    /// (the back-off between is not modelled: a deferred look changes nothing).
    WaitsForPsp,
    /// Today's sweeper: its last resume escalated; it stays due, the oldest of its shard, and the next sweep
    /// resumes it again.
    Escalated,
}

/// The PSP circuit breaker as one instance counts it, and whether it is open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breaker {
    pub open: bool,
    /// The rule ([`payments_core::breaker::Failures`]): failed attempts counted per request.
    pub failures: payments_core::breaker::Failures,
    /// Today's rule: every failure since the last success counts, whatever its request.
    pub counted: u8,
    /// It opened on the failures of one request alone.
    pub opened_by_one_request: bool,
}

impl Hash for Breaker {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self.open, self.counted, self.opened_by_one_request).hash(h);
        if !self.failures.is_empty() {
            format!("{:?}", self.failures).hash(h);
        }
    }
}

/// Model time: 0 at the start, 1 past the payment timeout, 2 past the abandonment deadline.
pub type Tick = u8;

/// The whole system at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct World {
    pub clock: Tick,
    /// A day passed: the PSP pruned its idempotency keys and our 24-hour idempotency records expired.
    pub day_passed: bool,

    // --- DynamoDB ---
    pub saga: StoredSaga,
    /// The saga's event log, in the order the transitions were saved.
    pub saga_log: Vec<(SagaEventKind, Step)>,
    /// Payment items, `pay-1`, `pay-2`, ... in creation order.
    pub payments: Vec<StoredPayment>,
    /// The payment's lease item (`LEASE#<payment>`), if taken and not expired.
    pub lease: Option<(PaymentId, Holder)>,
    /// The SKU's `available` count.
    pub available: u32,
    pub order: OrderStatus,
    /// The order projection's payment status (fed by the outbox; best effort).
    pub projection: Option<PaymentStatus>,
    /// Anomalies "money taken on a failed payment" recorded, in all (whatever path reported them).
    pub late_successes_recorded: u8,

    // --- the PSP ---
    pub psp: Psp,

    // --- escalations, the sweeper, the breaker ---
    /// Escalations sent about the saga (saturating).
    pub escalations: u8,
    /// PSP calls runners made for the saga that moved nothing (refused, failed or deferred; saturating).
    pub idle_calls: u8,
    pub due: Due,
    /// Time passed the deadline of the saga's state (reset by its next transition; being set aside keeps it).
    pub late: bool,
    /// The sweeper's looks at the saga while set aside, so far ([`crate::actors::look`]).
    pub looks: u8,
    /// A look is due: a runner may load the set-aside saga once.
    pub look_pending: bool,
    /// The other order of the saga's shard, waiting for the sweeper (limit one saga a run, oldest first).
    pub bystander_waiting: bool,
    pub breaker: Breaker,

    // --- actors' local state ---
    pub runners: Vec<RunnerPc>,
    pub recovery: RecoveryPc,
    pub customer: CustomerPc,

    // --- fault budgets ---
    pub crashes_left: u8,
    pub losses_left: u8,
    pub duplicates_left: u8,
}

/// What one finalize did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finalized {
    /// The payment's status afterwards.
    pub status: PaymentStatus,
    /// Written (an event was recorded).
    pub applied: bool,
    /// Deferred (a refund before its capture): the webhook is answered 5xx and comes again.
    pub deferred: bool,
}

impl World {
    /// The start: the saga and the pending order written (`Runner::start`), stock on the shelf, nothing at
    /// the PSP yet.
    pub fn new(scenario: Scenario, runners: usize, crashes: u8, losses: u8, duplicates: u8) -> Self {
        let (saga, event) = Saga::<Started>::begin(ids::order(), ids::checkout(), 0, ids::PAYMENT_TIMEOUT_MS);
        Self {
            clock: 0,
            day_passed: false,
            saga: StoredSaga(saga.into_record()),
            saga_log: vec![(event.kind, event.step)],
            payments: Vec::new(),
            lease: None,
            available: ids::INITIAL_STOCK,
            order: OrderStatus::Pending,
            projection: None,
            late_successes_recorded: 0,
            psp: Psp::new(scenario),
            escalations: 0,
            idle_calls: 0,
            due: Due::Free,
            late: false,
            looks: 0,
            look_pending: false,
            bystander_waiting: false,
            breaker: Breaker::default(),
            runners: vec![RunnerPc::Idle; runners],
            recovery: RecoveryPc::Idle,
            customer: CustomerPc::default(),
            crashes_left: crashes,
            losses_left: losses,
            duplicates_left: duplicates,
        }
    }

    /// Model time in ms, compared with the saga's deadlines.
    pub fn now_ms(&self) -> i64 {
        i64::from(self.clock) * 1000
    }

    /// The wall clock for what is measured in hours: the start, or a day later once the day passed.
    pub fn wall_ms(&self) -> i64 {
        if self.day_passed {
            ids::DAY_MS
        } else {
            Self::STAMP_MS
        }
    }

    /// The time the real code stamps on what it writes (`updated_at_ms`): a constant, since nothing the
    /// model checks reads it back and a varying stamp would only multiply states.
    pub const STAMP_MS: i64 = 0;

    /// The payment item `id`.
    pub fn payment(&self, id: &PaymentId) -> Option<&Payment> {
        self.payments.iter().map(|p| &p.0).find(|p| &p.id == id)
    }

    fn payment_mut(&mut self, id: &PaymentId) -> Option<&mut Payment> {
        self.payments.iter_mut().map(|p| &mut p.0).find(|p| &p.id == id)
    }

    /// The payment the saga is about (saved by `payment_created`).
    pub fn saga_payment_id(&self) -> Option<&PaymentId> {
        self.saga.0.payment_id.as_ref()
    }

    /// `SagaStore::save`: the transition from the record loaded at `loaded_version`, if nobody moved the saga
    /// since. `false` on a version conflict (nothing written).
    pub fn save_saga<S>(&mut self, loaded_version: u64, saga: Saga<S>, event: SagaEvent) -> bool {
        if self.saga.0.version != loaded_version {
            return false;
        }
        self.saga = StoredSaga(saga.into_record());
        self.saga_log.push((event.kind, event.step));
        // A new state: its deadline is counted from now; a move ends the set-aside and its looks (but for a
        // deadline's move, which keeps them: `actors::given_up_at_deadline`).
        self.late = false;
        self.look_pending = false;
        true
    }

    /// [`World::save_saga`] for a record moved without a change of its typed state (set aside).
    pub fn save_record(&mut self, loaded_version: u64, record: SagaRecord, event: SagaEvent) -> bool {
        if self.saga.0.version != loaded_version {
            return false;
        }
        self.saga = StoredSaga(record);
        self.saga_log.push((event.kind, event.step));
        true
    }

    /// Creates payment `id` (version 1, pending) unless it exists, stamped [`World::STAMP_MS`], or a day
    /// later once the day passed (the charge step measures the PSP key's age from it).
    pub fn create_payment(&mut self, id: &PaymentId) {
        if self.payment(id).is_some() {
            return;
        }
        let new = payments_core::NewPayment {
            id: id.clone(),
            order_id: ids::order(),
            money: ids::checkout().money,
            provider: payments_core::PspName::Stripe,
            psp_reference: None,
            metadata: Default::default(),
            correlation_id: ids::valid(payments_core::CorrelationId::parse("model")),
            trace_context: None,
            now_ms: self.wall_ms(),
        };
        self.payments.push(StoredPayment(new.into_payment().0));
    }

    /// Releases the lease on `id` if `holder` still owns it (the conditional delete).
    pub fn release_lease(&mut self, id: &PaymentId, holder: Holder) {
        if self.lease.as_ref() == Some(&(id.clone(), holder)) {
            self.lease = None;
        }
    }

    /// `PaymentStore::finalize_from`: decide against the current item and write under its version; release
    /// `holder`'s lease. `None` when the payment does not exist.
    pub fn finalize(&mut self, id: &PaymentId, observation: &Observation, holder: Option<Holder>) -> Option<Finalized> {
        let now = Self::STAMP_MS;
        let current = self.payment(id)?.clone();
        if let Some(holder) = holder {
            self.release_lease(id, holder);
        }
        Some(match decide(&current, observation, now) {
            Decision::Apply(t) => {
                let late_success = t.event.kind == EventKind::AnomalyRecorded
                    && observation.outcome == payments_core::Outcome::Succeeded
                    && t.refused.is_none();
                let status = t.payment.status;
                if late_success {
                    self.late_successes_recorded = self.late_successes_recorded.saturating_add(1);
                }
                if let Some(slot) = self.payment_mut(id) {
                    *slot = t.payment;
                }
                Finalized {
                    status,
                    applied: true,
                    deferred: false,
                }
            }
            Decision::Ignore(_) => Finalized {
                status: current.status,
                applied: false,
                deferred: false,
            },
            Decision::Defer(_) => Finalized {
                status: current.status,
                applied: false,
                deferred: true,
            },
        })
    }
}
