//! The checkout saga's state machine, as types.
//!
//! A checkout is a sequence of local transactions: reserve stock, charge (create the payment, saved in the
//! saga before the PSP is asked, then ask the PSP), wait for the payment's outcome, confirm the order. When a step fails, the completed steps are compensated
//! in reverse order: refund the payment if money was taken (or cancel it if not), then release the stock.
//! Compensations are new events, never deletions.
//!
//! Each state is its own type (`Saga<Started>`, `Saga<PaymentPending>`, ...) and only offers the
//! transitions that are valid from it, so charging after a cancel or confirming before the payment is a
//! compile error (see `tests/ui/saga_*.rs`). A transition consumes the saga and returns the next state plus
//! the one [`SagaEvent`] it appends; the engine persists both under the version token.
//!
//! A saga is reloaded from storage between steps, where types cannot follow it: [`Loaded::from_record`]
//! checks that a stored [`SagaRecord`] is one the transitions can produce (payment present once charged,
//! money refunded before stock is released after a capture, ...) before it hands out a typed state, so no
//! stored saga runs a step out of order (property-tested in `saga/tests.rs`).
//!
//! The stored form is in `record`, the check of a stored saga in `consistency`, the transitions of the
//! compensating states in `compensation` (and what they decide from the PSP's answers in `answers`), and what a loaded saga does next (the one table the runner,
//! `paymentsctl` and the protocol model use) in `next`.

mod answers;
mod compensation;
mod consistency;
mod deadline;
mod next;
mod record;

pub use answers::{
    after_refund, after_search, cancel_start, read_back, AfterRefund, CancelStart, ReadBack, RefundCalled,
};
pub use compensation::RefundImpossible;
pub use consistency::{check, InconsistentSaga};
pub use deadline::{
    after_resume, deadline, passed, set_aside_due, Deadline, Deadlines, OnDeadline, SetAside, Sweep,
    SET_ASIDE_FIRST_LOOK_MS, SET_ASIDE_MAX_RECHECK_MS,
};
pub use next::{
    authorization_lapsed, awaited, charge_call, AwaitDeadlines, Awaited, ChargeCall, IntentState, Next, NextStep,
    PSP_KEY_TRUSTED_FOR_MS,
};
pub use record::{Checkout, CheckoutPsp, Failure, SagaEvent, SagaEventKind, SagaRecord, Step};

use crate::ids::{OrderId, PaymentId, PspReference};
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;

/// A saga in state `S`. Built only by [`Saga::begin`], by transitions and by [`Loaded::from_record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saga<S> {
    record: SagaRecord,
    state: PhantomData<S>,
}

macro_rules! states {
    ($($(#[$doc:meta])* $name:ident => $stored:literal),* $(,)?) => {
        $( $(#[$doc])* #[derive(Debug, Clone, Copy, PartialEq, Eq)] pub struct $name; )*

        /// The stored state name. Each has a type of the same name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum SagaStatus { $( $(#[$doc])* $name, )* }

        impl SagaStatus {
            /// Every state, in the order of the forward steps and then of the compensations.
            pub const ALL: [SagaStatus; [$($stored),*].len()] = [$(Self::$name),*];

            /// The stored name (what serde writes).
            pub fn as_str(self) -> &'static str {
                match self { $( Self::$name => $stored, )* }
            }
        }

        /// A saga read back from storage, in the typed state its record was checked to be in.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Loaded { $( $name(Saga<$name>), )* }

        impl Loaded {
            /// Checks the stored record and types it; see [`check`] for what is checked.
            pub fn from_record(record: SagaRecord) -> Result<Self, InconsistentSaga> {
                check(&record)?;
                Ok(match record.status {
                    $( SagaStatus::$name => Loaded::$name(Saga { record, state: PhantomData }), )*
                })
            }

            pub fn record(&self) -> &SagaRecord {
                match self { $( Loaded::$name(s) => s.record(), )* }
            }
        }

        $(
            /// A saga a transition just produced (and the engine saved) needs no check to be loaded.
            impl From<Saga<$name>> for Loaded {
                fn from(saga: Saga<$name>) -> Self { Loaded::$name(saga) }
            }
        )*
    };
}

states!(
    /// Created; the stock is not reserved yet.
    Started => "started",
    /// Stock reserved; next: create the payment and save its id here.
    StockReserved => "stock_reserved",
    /// The payment exists and the saga knows it; next: ask the PSP to charge it (the same payment and the same
    /// idempotency key on every retry, however late).
    Charging => "charging",
    /// Charged; waiting for the payment's outcome event.
    PaymentPending => "payment_pending",
    /// Money taken; next: confirm the order.
    PaymentCaptured => "payment_captured",
    /// Order confirmed. Done.
    Completed => "completed",
    /// Compensating a charge that took no money.
    CancellingPayment => "cancelling_payment",
    /// Compensating a capture: refund.
    RefundingPayment => "refunding_payment",
    /// Compensating the reservation: release the stock.
    ReleasingStock => "releasing_stock",
    /// Every completed step compensated. Done.
    Compensated => "compensated",
);

impl<S> Saga<S> {
    pub fn record(&self) -> &SagaRecord {
        &self.record
    }

    pub fn order_id(&self) -> &OrderId {
        &self.record.order_id
    }

    pub fn into_record(self) -> SagaRecord {
        self.record
    }

    /// The one way to move: bump the version, set the status, produce the event.
    fn step<T>(
        mut self,
        status: SagaStatus,
        kind: SagaEventKind,
        step: Step,
        detail: Option<String>,
        now_ms: i64,
    ) -> (Saga<T>, SagaEvent) {
        self.record.version = self.record.version.saturating_add(1);
        self.record.status = status;
        // A move ends a set-aside: what failed is behind it (`deadline`).
        self.record.set_aside = None;
        self.record.updated_at_ms = now_ms;
        let event = SagaEvent {
            order_id: self.record.order_id.clone(),
            version: self.record.version,
            kind,
            step,
            status,
            detail,
            at_ms: now_ms,
        };
        (
            Saga {
                record: self.record,
                state: PhantomData,
            },
            event,
        )
    }

    /// The payment of a state that has one (each such state's `payment_id`).
    fn charged_payment_id(&self) -> &PaymentId {
        // Cannot panic: `from_record` refuses a record in a state that has a payment without its id, and
        // every transition into such a state sets one (the charge step creates it before anything can fail).
        #[allow(clippy::unreachable)]
        self.record.payment_id.as_ref().unwrap_or_else(|| unreachable!())
    }

    fn fail<T>(mut self, status: SagaStatus, step: Step, reason: String, now_ms: i64) -> (Saga<T>, SagaEvent) {
        self.record.failure = Some(Failure {
            step,
            reason: reason.clone(),
        });
        self.step(status, SagaEventKind::StepFailed, step, Some(reason), now_ms)
    }
}

impl Saga<Started> {
    /// A new checkout saga (version 1) and its `SagaStarted` event.
    pub fn begin(order_id: OrderId, checkout: Checkout, now_ms: i64, payment_timeout_ms: i64) -> (Self, SagaEvent) {
        let record = SagaRecord {
            order_id: order_id.clone(),
            version: 1,
            status: SagaStatus::Started,
            checkout,
            payment_id: None,
            psp_reference: None,
            captured: false,
            refunded_minor: 0,
            customer_action: false,
            recovery_requested: false,
            failure: None,
            refund_impossible: None,
            set_aside: None,
            started_at_ms: now_ms,
            updated_at_ms: now_ms,
            payment_deadline_ms: now_ms.saturating_add(payment_timeout_ms),
            trace_context: None,
        };
        let event = SagaEvent {
            order_id,
            version: 1,
            kind: SagaEventKind::SagaStarted,
            step: Step::ReserveStock,
            status: SagaStatus::Started,
            detail: None,
            at_ms: now_ms,
        };
        (
            Saga {
                record,
                state: PhantomData,
            },
            event,
        )
    }

    /// The new saga in the checkout's trace (`trace_context`, a W3C `traceparent`), before it is first saved.
    pub fn in_trace(mut self, trace_context: Option<String>) -> Self {
        self.record.trace_context = trace_context;
        self
    }

    pub fn stock_reserved(self, now_ms: i64) -> (Saga<StockReserved>, SagaEvent) {
        self.step(
            SagaStatus::StockReserved,
            SagaEventKind::StockReserved,
            Step::ReserveStock,
            None,
            now_ms,
        )
    }

    /// The reservation failed (out of stock): nothing was done, nothing to compensate.
    pub fn reservation_failed(self, reason: String, now_ms: i64) -> (Saga<Compensated>, SagaEvent) {
        self.fail(SagaStatus::Compensated, Step::ReserveStock, reason, now_ms)
    }
}

impl Saga<StockReserved> {
    /// The payment was created (in the same transaction as this transition): every charge attempt from now on
    /// is for this payment.
    pub fn payment_created(mut self, payment_id: PaymentId, now_ms: i64) -> (Saga<Charging>, SagaEvent) {
        let detail = Some(payment_id.to_string());
        self.record.payment_id = Some(payment_id);
        self.step(
            SagaStatus::Charging,
            SagaEventKind::PaymentCreated,
            Step::Charge,
            detail,
            now_ms,
        )
    }
}

impl Saga<Charging> {
    /// The payment this saga charged (always there in this state).
    pub fn payment_id(&self) -> &PaymentId {
        self.charged_payment_id()
    }

    pub fn payment_requested(
        mut self,
        psp_reference: Option<PspReference>,
        customer_action: bool,
        now_ms: i64,
    ) -> (Saga<PaymentPending>, SagaEvent) {
        let detail = Some(self.payment_id().to_string());
        self.record.psp_reference = psp_reference;
        self.record.customer_action = customer_action;
        self.step(
            SagaStatus::PaymentPending,
            SagaEventKind::PaymentRequested,
            Step::Charge,
            detail,
            now_ms,
        )
    }

    /// The PSP refused the charge outright.
    pub fn charge_failed(self, reason: String, now_ms: i64) -> (Saga<CancellingPayment>, SagaEvent) {
        self.fail(SagaStatus::CancellingPayment, Step::Charge, reason, now_ms)
    }
}

impl Saga<PaymentPending> {
    /// The payment this saga charged (always there in this state).
    pub fn payment_id(&self) -> &PaymentId {
        self.charged_payment_id()
    }

    /// The payment was captured under `reference`, its PSP reference as the payment holds it (bound by
    /// whichever path learnt it: the charge's answer, Adyen's `/payments/details` or notification, recovery):
    /// recorded here because the charge's answer may have had none (Adyen's answer to a payment waiting for
    /// the shopper), and captured money's refund needs it.
    pub fn payment_captured(mut self, reference: PspReference, now_ms: i64) -> (Saga<PaymentCaptured>, SagaEvent) {
        self.record.captured = true;
        self.record.psp_reference = Some(reference);
        self.step(
            SagaStatus::PaymentCaptured,
            SagaEventKind::PaymentCaptured,
            Step::AwaitPayment,
            None,
            now_ms,
        )
    }

    pub fn payment_failed(self, reason: String, now_ms: i64) -> (Saga<CancellingPayment>, SagaEvent) {
        self.fail(SagaStatus::CancellingPayment, Step::AwaitPayment, reason, now_ms)
    }

    /// The payment did not resolve before the deadline: handed to recovery; the saga keeps waiting.
    pub fn recovery_requested(mut self, now_ms: i64) -> (Saga<PaymentPending>, SagaEvent) {
        self.record.recovery_requested = true;
        self.step(
            SagaStatus::PaymentPending,
            SagaEventKind::RecoveryRequested,
            Step::AwaitPayment,
            None,
            now_ms,
        )
    }
}

impl Saga<PaymentCaptured> {
    /// The payment this saga charged (always there in this state).
    pub fn payment_id(&self) -> &PaymentId {
        self.charged_payment_id()
    }

    pub fn order_confirmed(self, now_ms: i64) -> (Saga<Completed>, SagaEvent) {
        self.step(
            SagaStatus::Completed,
            SagaEventKind::OrderConfirmed,
            Step::ConfirmOrder,
            None,
            now_ms,
        )
    }

    /// The order cannot be confirmed after the money was taken: refund, then release.
    pub fn confirmation_failed(self, reason: String, now_ms: i64) -> (Saga<RefundingPayment>, SagaEvent) {
        self.fail(SagaStatus::RefundingPayment, Step::ConfirmOrder, reason, now_ms)
    }
}

#[cfg(test)]
// Tests count versions and times freely (clippy.toml lets tests unwrap, expect, panic and index).
#[allow(clippy::arithmetic_side_effects)]
mod tests;
