//! One owner per refund (issue 33): the saga's refund step and recovery's give-backs of one captured payment,
//! at Stripe or at Adyen, on a card whose refunds may fail, with lost answers, lost webhooks and (at Stripe)
//! idempotency keys forgotten after a day. The gates are the core's: the saga creates its refund only while
//! [`payments_core::saga_refund_settled`] says so, recovery gives back what [`payments_core::give_back_refund`]
//! names under its key, every report is applied by [`payments_core::decide`], and past
//! [`MAX_GIVE_BACKS`] failures the payment waits for a person ([`Payment::refund_for_operator`]).
//!
//! [`Owner::DoubleOwner`] is the saga before item 3 (it refunds "the rest" under `<order>:refund` on every
//! resume, whatever the payment's refunds say) and [`Owner::NoList`] the saga before it read Stripe's refunds
//! first (its gate sees only what the payment recorded, so a refund whose answer and webhooks were lost is
//! made again once Stripe forgot the key): the broken variants the checker must catch.
//!
//! | step | code |
//! |---|---|
//! | [`Step::SagaRefund`] | the runner's `steps::refund_payment`: the payment read, at Stripe `with_stripe_refunds` (`GET /v1/refunds?payment_intent=`, each unknown refund recorded), `saga_refund_settled`, then `Psp::refund` / `GuardedAdyen::refund` with `<order>:refund` and the answer recorded (`observe_refund`) |
//! | [`Step::GiveBack`] | `recovery::money`'s `give_back_failed_refund` / `recovery::adyen`'s `give_back`: `give_back_refund`; at Stripe the PaymentIntent's refunds read first (`list_refunds`, one the payment missed recorded instead); the refund under `give_back_key`, the answer recorded answering the give-back |
//! | [`Step::Settle`] | the PSP: a pending refund succeeds or fails (the failing card) |
//! | [`Step::Report`] | a refund's webhook or notification, or recovery's read-back by id (Stripe), applied by the one finalize |
//! | [`Step::DayPasses`] | Stripe prunes idempotency keys after 24 hours (Adyen keeps them at least 31 days: no step) |
//! | `lost` on a call | the PSP did the work, the caller never heard (it retries with the same key later) |

use payments_core::refund::{give_back_key, MAX_GIVE_BACKS};
use payments_core::{
    decide, give_back_refund, saga_refund_settled, Channel, Claims, CorrelationId, Decision, NewPayment, Observation,
    Outcome, Payment, PspEventId, PspName, PspReference, RefundEntry, RefundReport, RefundStatus, RefundStep,
};
use stateright::{Model, Property};
use std::hash::{Hash, Hasher};

use crate::ids;

/// Which PSP the payment is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Psp {
    /// Refunds listed by PaymentIntent; keys forgotten after a day.
    Stripe,
    /// No list; keys kept longer than the model's time.
    Adyen,
}

/// How the saga's refund step decides to call the PSP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Today's: at Stripe the refunds read first, then the core's gate.
    Main,
    /// Broken: the gate only, no read of Stripe's refunds.
    NoList,
    /// Broken: no gate, a refund on every resume (the code before issue 33 item 3).
    DoubleOwner,
}

/// A refund at the PSP.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PspRefund {
    pub key: String,
    pub status: RefundStatus,
    /// Made by the saga's step (else by recovery).
    pub by_saga: bool,
}

/// The payment item, hashed over every field the model changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored(pub Payment);

impl Hash for Stored {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let p = &self.0;
        (p.version, p.status, p.refunded_minor, p.refund_failures).hash(h);
        p.give_back.map(|g| (g.failure, g.amount_minor)).hash(h);
        for r in &p.refunds {
            (&r.refund_id, r.amount_minor, r.status).hash(h);
        }
        (p.anomalies, &p.seen_psp_events, &p.refused_psp_events).hash(h);
    }
}

/// The PSP's refunds and keys, our payment, the saga's step, and the fault budgets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefundWorld {
    pub refunds: Vec<PspRefund>,
    /// Keys the PSP still remembers (with the refund each made): a call under one replays it.
    pub keys: Vec<(String, usize)>,
    pub payment: Stored,
    pub saga_done: bool,
    pub losses_left: u8,
    pub days_left: u8,
    /// A refund the saga's read of Stripe's refunds found that the payment had not recorded.
    pub listed_unknown: bool,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    SagaRefund { lost: bool },
    GiveBack { lost: bool },
    Settle { refund: usize, succeeded: bool },
    Report(usize),
    DayPasses,
}

/// The model: one captured payment at `psp`, the saga's refund step by `owner`, recovery, fault budgets.
#[derive(Debug, Clone, Copy)]
pub struct RefundModel {
    pub psp: Psp,
    pub owner: Owner,
    pub losses: u8,
    pub days: u8,
}

pub const BOUNDED: &str = "refunds made at the PSP stay within the saga's one and MAX_GIVE_BACKS give-backs";
pub const ONE_SAGA_REFUND: &str = "the saga's step makes at most one refund at the PSP, however late it resumes";
pub const NEVER_OVER: &str = "the refunds not undone never ask back more than was captured";
pub const GIVEN_BACK: &str = "a give-back returns the money after the saga's refund failed";
pub const FOR_OPERATOR: &str = "refunds failed past the bound: the payment waits for a person";
pub const LISTED: &str = "the saga's read of Stripe's refunds finds one the payment missed";

/// More refunds than any correct run makes: a broken variant stops there (its violation is already seen).
const REFUNDS_CAP: usize = 2 + MAX_GIVE_BACKS as usize;

/// Writes to the payment after which a run is cut (see `next_state`).
const VERSION_CAP: u64 = 16;

/// The refund report of `refund` (its PSP id is its index) as the PSP's answer to a call tells it.
fn report(refund: usize, status: RefundStatus, answers_give_back: Option<u32>) -> Observation {
    let report = RefundReport {
        refund: RefundEntry {
            refund_id: format!("re_{refund}"),
            amount_minor: ids::AMOUNT,
            status,
        },
        failure_reason: status.is_undone().then(|| "expired_or_canceled_card".into()),
        answers_give_back,
    };
    let mut observation = Observation::new(Channel::Recovery, Outcome::Refund(report), correlation());
    observation.claims = Claims {
        amount_minor: None,
        currency: Some(ids::currency()),
    };
    observation
}

/// The webhook (or notification) of `refund` in `status`: one event per refund and status, as the PSP sends
/// it, so a redelivery is a duplicate to the finalize, never a second change.
fn webhook(refund: usize, status: RefundStatus) -> Observation {
    let event = ids::valid(PspEventId::parse(format!("evt_{refund}_{status}")));
    Observation {
        path: Channel::Webhook,
        ..report(refund, status, None)
    }
    .with_event(event, 0)
}

fn correlation() -> CorrelationId {
    ids::valid(CorrelationId::parse("refund-model"))
}

/// `PaymentStore::finalize`: the payment as `observation` leaves it (unchanged when ignored or deferred).
fn finalize(payment: &Payment, observation: &Observation) -> Payment {
    match decide(payment, observation, 0) {
        Decision::Apply(t) => t.payment,
        Decision::Ignore(_) | Decision::Defer(_) => payment.clone(),
    }
}

/// The payment the model starts from: created, then captured through the one finalize.
fn captured() -> Payment {
    let new = NewPayment {
        id: ids::payment(1),
        order_id: ids::order(),
        money: ids::checkout().money,
        provider: PspName::Stripe,
        psp_reference: None,
        metadata: Default::default(),
        correlation_id: correlation(),
        trace_context: None,
        now_ms: 0,
    };
    let mut succeeded = Observation::new(Channel::Webhook, Outcome::Succeeded, correlation());
    succeeded.psp_reference = Some(ids::valid(PspReference::parse("pi_1")));
    succeeded.claims = Claims {
        amount_minor: Some(ids::AMOUNT),
        currency: Some(ids::currency()),
    };
    finalize(&new.into_payment().0, &succeeded)
}

impl RefundModel {
    /// The PSP's refund call under `key`: the first answer replayed for a key it remembers; refused when the
    /// refunds not undone already ask it all back (Stripe's `amount_too_large`, Adyen's balance rule); else
    /// a new pending refund. The refund's index, or `None` when refused.
    fn call(&self, w: &mut RefundWorld, key: &str, by_saga: bool) -> Option<usize> {
        if let Some((_, made)) = w.keys.iter().find(|(k, _)| k == key) {
            return Some(*made);
        }
        let asked = w.refunds.iter().filter(|r| !r.status.is_undone()).count();
        if asked > 0 {
            return None;
        }
        w.refunds.push(PspRefund {
            key: key.to_owned(),
            status: RefundStatus::Pending,
            by_saga,
        });
        let made = w.refunds.len() - 1;
        w.keys.push((key.to_owned(), made));
        Some(made)
    }

    /// The saga's refund step (see the module's table).
    fn saga_refund(&self, w: &RefundWorld, lost: bool) -> Option<RefundWorld> {
        let mut next = w.clone();
        let owed = ids::AMOUNT;
        if self.owner == Owner::Main && self.psp == Psp::Stripe && saga_refund_settled(&w.payment.0, owed).is_none() {
            // `with_stripe_refunds`: every refund of the PaymentIntent the payment does not know, recorded.
            while let Some(missed) = Self::unrecorded(&next) {
                next.listed_unknown = true;
                let before = next.payment.0.version;
                next.payment.0 = finalize(&next.payment.0, &report(missed, next.refunds[missed].status, None));
                if next.payment.0.version == before {
                    break;
                }
            }
        }
        let settled = match self.owner {
            Owner::DoubleOwner => None,
            Owner::Main | Owner::NoList => saga_refund_settled(&next.payment.0, owed),
        };
        match settled {
            Some(RefundStep::Done) => next.saga_done = true,
            Some(RefundStep::Waiting | RefundStep::Undone) => {}
            None => {
                let made = self.call(&mut next, &format!("{}:refund", ids::order()), true);
                if lost {
                    next.losses_left -= 1;
                } else if let Some(made) = made {
                    let status = next.refunds[made].status;
                    next.payment.0 = finalize(&next.payment.0, &report(made, status, None));
                }
            }
        }
        (next != *w).then_some(next)
    }

    /// The first refund at the PSP the payment has not recorded as it stands (`psp::stripe::unrecorded`).
    fn unrecorded(w: &RefundWorld) -> Option<usize> {
        w.refunds.iter().enumerate().position(|(i, r)| {
            let id = format!("re_{i}");
            !w.payment
                .0
                .refunds
                .iter()
                .any(|k| k.refund_id == id && k.status == r.status)
        })
    }

    /// Recovery's give-back of what failed refunds left, under the failure's key; at Stripe the
    /// PaymentIntent's refunds are read first and one the payment missed is recorded instead (the look ends).
    fn give_back(&self, w: &RefundWorld, lost: bool) -> Option<RefundWorld> {
        let due = give_back_refund(&w.payment.0)?;
        let failure = due.answers_give_back?;
        let mut next = w.clone();
        if self.psp == Psp::Stripe {
            if let Some(missed) = Self::unrecorded(w) {
                next.payment.0 = finalize(&w.payment.0, &report(missed, w.refunds[missed].status, None));
                return (next != *w).then_some(next);
            }
        }
        let made = self.call(&mut next, &give_back_key(&w.payment.0.id, failure), false);
        if lost {
            next.losses_left -= 1;
        } else if let Some(made) = made {
            let status = next.refunds[made].status;
            next.payment.0 = finalize(&next.payment.0, &report(made, status, Some(failure)));
        }
        (next != *w).then_some(next)
    }
}

impl Model for RefundModel {
    type State = RefundWorld;
    type Action = Step;

    fn init_states(&self) -> Vec<RefundWorld> {
        vec![RefundWorld {
            refunds: Vec::new(),
            keys: Vec::new(),
            payment: Stored(captured()),
            saga_done: false,
            losses_left: self.losses,
            days_left: if self.psp == Psp::Stripe { self.days } else { 0 },
            listed_unknown: false,
        }]
    }

    fn actions(&self, w: &RefundWorld, actions: &mut Vec<Step>) {
        let room = w.refunds.len() < REFUNDS_CAP;
        for lost in [false, true] {
            if room && (!lost || w.losses_left > 0) {
                if !w.saga_done {
                    actions.push(Step::SagaRefund { lost });
                }
                actions.push(Step::GiveBack { lost });
            }
        }
        for (i, r) in w.refunds.iter().enumerate() {
            if r.status.is_pending() {
                actions.extend([true, false].map(|succeeded| Step::Settle { refund: i, succeeded }));
            }
            actions.push(Step::Report(i));
        }
        if w.days_left > 0 {
            actions.push(Step::DayPasses);
        }
    }

    fn next_state(&self, w: &RefundWorld, step: Step) -> Option<RefundWorld> {
        // A run longer than this many writes to the payment is cut: every correct run ends well before it,
        // and a broken variant's violation is found before it too (the bound keeps the search finite when a
        // repeated answer records an anomaly each time).
        if w.payment.0.version >= VERSION_CAP {
            return None;
        }
        match step {
            Step::SagaRefund { lost } => self.saga_refund(w, lost),
            Step::GiveBack { lost } => self.give_back(w, lost),
            Step::Settle { refund, succeeded } => {
                let mut next = w.clone();
                next.refunds[refund].status = if succeeded {
                    RefundStatus::Succeeded
                } else {
                    RefundStatus::Failed
                };
                Some(next)
            }
            Step::Report(refund) => {
                let mut next = w.clone();
                next.payment.0 = finalize(&w.payment.0, &webhook(refund, w.refunds[refund].status));
                (next != *w).then_some(next)
            }
            Step::DayPasses => {
                let mut next = w.clone();
                next.days_left -= 1;
                next.keys.clear();
                Some(next)
            }
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(BOUNDED, |_, w: &RefundWorld| {
                w.refunds.len() <= 1 + MAX_GIVE_BACKS as usize
            }),
            Property::always(ONE_SAGA_REFUND, |_, w: &RefundWorld| {
                w.refunds.iter().filter(|r| r.by_saga).count() <= 1
            }),
            Property::always(NEVER_OVER, |_, w: &RefundWorld| {
                w.refunds.iter().filter(|r| !r.status.is_undone()).count() <= 1
            }),
            Property::sometimes(GIVEN_BACK, |_, w: &RefundWorld| {
                w.refunds
                    .first()
                    .is_some_and(|r| r.by_saga && r.status == RefundStatus::Failed)
                    && w.refunds
                        .iter()
                        .any(|r| !r.by_saga && r.status == RefundStatus::Succeeded)
            }),
            Property::sometimes(FOR_OPERATOR, |_, w: &RefundWorld| w.payment.0.refund_for_operator()),
            Property::sometimes(LISTED, |_, w: &RefundWorld| w.listed_unknown),
        ]
    }
}

/// Checks `model` breadth-first, every reachable state (the lease model's run: [`crate::lease::check`]).
pub fn check(model: RefundModel) -> crate::lease::LeaseReport {
    crate::lease::check(model)
}
