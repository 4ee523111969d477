//! What a saga does next: the one table from a loaded saga's state to the step the runner runs, and the
//! decisions inside those steps (the payment's outcome against the deadlines, the charge's first call, the
//! cancel's read of the PaymentIntent, what a failed step's error leads to).
//!
//! Every caller decides here and only does the I/O itself: `Runner::advance` dispatches on [`Next`] (typed,
//! so a step can only be given the state it belongs to) as [`Loaded::next_at`] gives it at the time of the
//! step, the deadlines included (a payment creation or a charge past its deadline is given up, the core's
//! [`passed`]); the runner's `action_name` and `paymentsctl escalations retry --dry-run` / `timeline` print
//! [`Loaded::step_at`]'s [`NextStep::name`] with the same deadlines, and the protocol model
//! (`tools/protocol-model`) calls the same functions at each of its steps, so what the checker explores is
//! what runs, not a retelling of it.

use super::{
    passed, CancellingPayment, Charging, Deadlines, Loaded, OnDeadline, PaymentCaptured, PaymentPending,
    RefundingPayment, ReleasingStock, Saga, SagaRecord, SagaStatus, Started, StockReserved,
};
use crate::ids::PspReference;
use crate::status::PaymentStatus;

/// The step a saga in a given state runs next. Its name is what the runner's spans, metrics and escalations
/// call it, and what an operator is told a retry runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NextStep {
    ReserveStock,
    CreatePayment,
    /// `stock_reserved` past its step deadline: no payment was created in time, the stock is released
    /// (`Saga::payment_not_created`).
    PaymentNotCreated,
    Charge,
    /// `charging` past the charge deadline: the charge is given up and what it made at the PSP canceled
    /// (`Saga::charge_given_up`).
    GiveUpCharge,
    AwaitPayment,
    ConfirmOrder,
    RefundPayment,
    CancelPayment,
    ReleaseStock,
    /// The saga has ended.
    Done,
}

impl NextStep {
    /// The step's name (`reserve_stock`, ..., `none` when the saga has ended).
    pub fn name(self) -> &'static str {
        match self {
            Self::ReserveStock => "reserve_stock",
            Self::CreatePayment => "create_payment",
            Self::PaymentNotCreated => "payment_not_created",
            Self::Charge => "charge",
            Self::GiveUpCharge => "give_up_charge",
            Self::AwaitPayment => "await_payment",
            Self::ConfirmOrder => "confirm_order",
            Self::RefundPayment => "refund_payment",
            Self::CancelPayment => "cancel_payment",
            Self::ReleaseStock => "release_stock",
            Self::Done => "none",
        }
    }

    /// What the step does, in words for an operator.
    pub fn describe(self) -> &'static str {
        match self {
            Self::ReserveStock => "reserve the stock (out of stock ends the saga)",
            Self::CreatePayment => "create the payment and save its id in the saga",
            Self::PaymentNotCreated => {
                "give the checkout up (no payment created before the step's deadline): release the reserved stock"
            }
            Self::Charge => {
                "charge the saved payment at the PSP (key <order>:charge; a PaymentIntent already bound is read instead)"
            }
            Self::GiveUpCharge => {
                "give the charge up (no answer before its deadline): cancel what it made at the PSP, fail the payment, then release the stock"
            }
            Self::AwaitPayment => "read the payment's outcome (past its deadline: hand it to recovery, or abandon it)",
            Self::ConfirmOrder => "confirm the order (cancelled meanwhile: refund the payment)",
            Self::RefundPayment => "refund the payment at the PSP (key <order>:refund), then release the stock",
            Self::CancelPayment => "cancel the PaymentIntent if it can be, make sure the payment is failed, then release the stock",
            Self::ReleaseStock => "release the reserved stock",
            Self::Done => "nothing: the saga has ended",
        }
    }
}

/// A loaded saga as the step it runs next: the one table. Each variant holds the typed saga its step takes,
/// so the runner cannot hand a step a saga in another state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    ReserveStock(Saga<Started>),
    CreatePayment(Saga<StockReserved>),
    /// Past the step deadline: give the checkout up before a payment exists.
    PaymentNotCreated(Saga<StockReserved>),
    Charge(Saga<Charging>),
    /// Past the charge deadline: give the charge up and compensate.
    GiveUpCharge(Saga<Charging>),
    AwaitPayment(Saga<PaymentPending>),
    ConfirmOrder(Saga<PaymentCaptured>),
    RefundPayment(Saga<RefundingPayment>),
    CancelPayment(Saga<CancellingPayment>),
    ReleaseStock(Saga<ReleasingStock>),
    /// Completed or compensated.
    Done(SagaStatus),
}

impl Next {
    /// The step, without the saga.
    pub fn step(&self) -> NextStep {
        match self {
            Self::ReserveStock(_) => NextStep::ReserveStock,
            Self::CreatePayment(_) => NextStep::CreatePayment,
            Self::PaymentNotCreated(_) => NextStep::PaymentNotCreated,
            Self::Charge(_) => NextStep::Charge,
            Self::GiveUpCharge(_) => NextStep::GiveUpCharge,
            Self::AwaitPayment(_) => NextStep::AwaitPayment,
            Self::ConfirmOrder(_) => NextStep::ConfirmOrder,
            Self::RefundPayment(_) => NextStep::RefundPayment,
            Self::CancelPayment(_) => NextStep::CancelPayment,
            Self::ReleaseStock(_) => NextStep::ReleaseStock,
            Self::Done(_) => NextStep::Done,
        }
    }
}

impl Loaded {
    /// The step this saga's state runs, with the typed saga it runs on, no deadline considered (the runner
    /// takes [`Loaded::next_at`]).
    pub fn next(self) -> Next {
        match self {
            Loaded::Started(s) => Next::ReserveStock(s),
            Loaded::StockReserved(s) => Next::CreatePayment(s),
            Loaded::Charging(s) => Next::Charge(s),
            Loaded::PaymentPending(s) => Next::AwaitPayment(s),
            Loaded::PaymentCaptured(s) => Next::ConfirmOrder(s),
            Loaded::RefundingPayment(s) => Next::RefundPayment(s),
            Loaded::CancellingPayment(s) => Next::CancelPayment(s),
            Loaded::ReleasingStock(s) => Next::ReleaseStock(s),
            Loaded::Completed(s) => Next::Done(s.record().status),
            Loaded::Compensated(s) => Next::Done(s.record().status),
        }
    }

    /// The step this saga's state runs ([`Loaded::next`] without giving the saga up), no deadline considered.
    pub fn next_step(&self) -> NextStep {
        self.clone().next().step()
    }

    /// The step the runner takes for this saga at `now_ms` under `limits`: its state's step, unless the
    /// state's deadline has passed and gives the step up ([`passed`] says [`OnDeadline::Compensate`]): a
    /// `stock_reserved` saga then releases its stock without a payment, a `charging` one gives the charge up.
    /// Past any other deadline the step is the state's (a wait is escalated or handed to recovery by the
    /// step itself, or beside it).
    pub fn next_at(self, limits: &Deadlines, now_ms: i64) -> Next {
        let give_up = passed(self.record(), limits, now_ms) == Some(OnDeadline::Compensate);
        match self {
            Loaded::StockReserved(s) if give_up => Next::PaymentNotCreated(s),
            Loaded::Charging(s) if give_up => Next::GiveUpCharge(s),
            other => other.next(),
        }
    }

    /// The step the runner takes at `now_ms` ([`Loaded::next_at`] without giving the saga up): what the
    /// runner's spans and escalations name and what `paymentsctl` tells an operator a retry runs.
    pub fn step_at(&self, limits: &Deadlines, now_ms: i64) -> NextStep {
        self.clone().next_at(limits, now_ms).step()
    }
}

/// Where a waiting saga (`payment_pending`) stands against its deadlines at `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AwaitDeadlines {
    /// Past the payment deadline: the payment is handed to recovery (once).
    pub past_deadline: bool,
    /// Past the abandonment deadline (counted from the start): a payment still waiting for the customer is
    /// given up.
    pub abandoned: bool,
}

impl AwaitDeadlines {
    /// The deadlines of `saga` at `now_ms`, abandoning `abandon_after_ms` after the start.
    pub fn of(saga: &SagaRecord, now_ms: i64, abandon_after_ms: i64) -> Self {
        Self {
            past_deadline: now_ms >= saga.payment_deadline_ms,
            abandoned: now_ms >= saga.started_at_ms.saturating_add(abandon_after_ms),
        }
    }

    /// Must the payment item itself be read, beside the order projection (`projected`)? Past a deadline, a
    /// projection that shows no outcome is not trusted to be complete (an event may have been lost on the way).
    pub fn read_item(self, projected: Option<PaymentStatus>) -> bool {
        (self.past_deadline || self.abandoned) && !projected.is_some_and(PaymentStatus::is_terminal)
    }
}

/// What a waiting saga does with its payment's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Awaited {
    /// Money taken: `payment_captured`.
    Captured,
    /// The money is held for us (manual capture): capture it now, as the order is about to be confirmed,
    /// unless the order was cancelled or the authorization lapsed ([`authorization_lapsed`]): then
    /// `payment_failed`, and the cancel releases it (no refund). Never handed to recovery: the saga acts.
    Authorized,
    /// The payment ended without money (`failed`, `refunded`): `payment_failed`, then cancel and release.
    Failed(PaymentStatus),
    /// Still the customer's turn past the abandonment deadline: given up (`payment_failed`), the PaymentIntent
    /// is then canceled.
    Abandoned(PaymentStatus),
    /// Past the payment deadline and not yet handed over: ask recovery once (`recovery_requested`).
    HandToRecovery,
    /// Nothing to do yet: the saga waits.
    Wait,
}

/// What a saga in `payment_pending` does, given its deadlines and the payment's `outcome` as read.
pub fn awaited(saga: &SagaRecord, deadlines: AwaitDeadlines, outcome: Option<PaymentStatus>) -> Awaited {
    match outcome {
        Some(PaymentStatus::Captured) => Awaited::Captured,
        Some(PaymentStatus::Authorized) => Awaited::Authorized,
        Some(status @ (PaymentStatus::Failed | PaymentStatus::Refunded)) => Awaited::Failed(status),
        Some(status @ (PaymentStatus::Pending | PaymentStatus::RequiresAction | PaymentStatus::AttemptFailed))
            if deadlines.abandoned =>
        {
            Awaited::Abandoned(status)
        }
        _ if deadlines.past_deadline && !saga.recovery_requested => Awaited::HandToRecovery,
        _ => Awaited::Wait,
    }
}

/// An authorization past its capture deadline (`capture_before_ms`, the charge's `capture_before`) can no
/// longer be captured: the PSP released it (Stripe then reports the PaymentIntent `canceled`). Without a
/// known deadline it is asked to capture, and the PSP's answer says.
pub fn authorization_lapsed(capture_before_ms: Option<i64>, now_ms: i64) -> bool {
    capture_before_ms.is_some_and(|before| now_ms >= before)
}

/// Stripe keeps an idempotency key for 24 hours: a charge first tried longer ago than this (with a margin)
/// may have outlived its key.
pub const PSP_KEY_TRUSTED_FOR_MS: i64 = 23 * 3600 * 1000;

/// The charge step's first call to the PSP.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChargeCall {
    /// The payment's PaymentIntent is known (a webhook or an earlier answer bound it): read it, never charge.
    Retrieve(PspReference),
    /// The payment was created so long ago that the PSP may have forgotten the charge's key: search for the
    /// first PaymentIntent of the payment, and charge only if there is none.
    SearchFirst,
    /// Create and confirm the PaymentIntent (key `<order>:charge`, the same on every retry).
    Charge,
}

/// The charge step's first call for a payment bound to `reference` (if any), created at `created_at_ms`.
pub fn charge_call(reference: Option<&PspReference>, created_at_ms: i64, now_ms: i64) -> ChargeCall {
    match reference {
        Some(reference) => ChargeCall::Retrieve(reference.clone()),
        None if now_ms.saturating_sub(created_at_ms) >= PSP_KEY_TRUSTED_FOR_MS => ChargeCall::SearchFirst,
        None => ChargeCall::Charge,
    }
}

/// A PaymentIntent as the cancel step sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntentState {
    /// Waiting for the customer (an action, or a new payment method after a decline): can be canceled.
    Open,
    /// Stripe is taking the money and cannot cancel it now.
    Processing,
    Succeeded,
    Canceled,
}

impl IntentState {
    /// After the cancel step read or canceled it: it may still take money, so the saga cannot say "no money
    /// taken" and waits for its outcome (the sweeper resumes it; a capture continues from there).
    pub fn may_still_take_money(self) -> bool {
        matches!(self, Self::Open | Self::Processing)
    }

    /// The cancel step asks the PSP to cancel it (read first: one that ended or is processing is used as read).
    pub fn to_cancel(self) -> bool {
        self == Self::Open
    }
}
