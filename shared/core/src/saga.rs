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

use crate::ids::{OrderId, PaymentId, PspReference, Sku};
use crate::money::Money;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::marker::PhantomData;
use thiserror::Error;

/// The forward steps, in order. Their compensations run in the reverse order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    ReserveStock,
    Charge,
    AwaitPayment,
    ConfirmOrder,
}

impl Step {
    pub const ALL: [Step; 4] = [Step::ReserveStock, Step::Charge, Step::AwaitPayment, Step::ConfirmOrder];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::ReserveStock => "reserve_stock",
            Step::Charge => "charge",
            Step::AwaitPayment => "await_payment",
            Step::ConfirmOrder => "confirm_order",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The stored state name. Each has a type of the same name below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SagaStatus {
    Started,
    StockReserved,
    /// The payment is created and saved in the saga; the PSP is asked (again, after a crash) for it.
    Charging,
    PaymentPending,
    PaymentCaptured,
    Completed,
    /// Compensating a charge that took no money: make sure our payment is failed.
    CancellingPayment,
    /// Compensating a capture: refund the money.
    RefundingPayment,
    ReleasingStock,
    Compensated,
}

impl SagaStatus {
    pub const ALL: [SagaStatus; 10] = [
        Self::Started,
        Self::StockReserved,
        Self::Charging,
        Self::PaymentPending,
        Self::PaymentCaptured,
        Self::Completed,
        Self::CancellingPayment,
        Self::RefundingPayment,
        Self::ReleasingStock,
        Self::Compensated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::StockReserved => "stock_reserved",
            Self::Charging => "charging",
            Self::PaymentPending => "payment_pending",
            Self::PaymentCaptured => "payment_captured",
            Self::Completed => "completed",
            Self::CancellingPayment => "cancelling_payment",
            Self::RefundingPayment => "refunding_payment",
            Self::ReleasingStock => "releasing_stock",
            Self::Compensated => "compensated",
        }
    }

    /// Completed or compensated: nothing is left to run.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Compensated)
    }

    /// Compensations are running or ran.
    pub fn is_compensating(self) -> bool {
        matches!(
            self,
            Self::CancellingPayment | Self::RefundingPayment | Self::ReleasingStock | Self::Compensated
        )
    }
}

impl fmt::Display for SagaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is being bought.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkout {
    pub sku: Sku,
    pub quantity: u32,
    pub money: Money,
    /// The customer's payment method as the PSP knows it (the simulator reads its scenario from it).
    pub payment_method: String,
}

/// Why a step failed, kept on the saga while it compensates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub step: Step,
    pub reason: String,
}

/// The stored form of a saga: what the engine reads and writes under the version token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SagaRecord {
    /// The saga's id is the order's id: one checkout saga per order.
    pub order_id: OrderId,
    /// 1 at the start, +1 with every transition (and every event).
    pub version: u64,
    pub status: SagaStatus,
    pub checkout: Checkout,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<PaymentId>,
    /// Stored under another name than the payment's `psp_reference`, which keys the `by-psp-reference` index
    /// (a saga must never be found as the payment of a webhook).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "payment_psp_reference")]
    pub psp_reference: Option<PspReference>,
    /// Money was taken: the payment reached `captured`.
    pub captured: bool,
    /// Refunded by a compensation, in minor units.
    pub refunded_minor: u64,
    /// The payment needed a customer action (3-D Secure): such sagas are not held to the 30 s objective.
    pub customer_action: bool,
    /// The payment was handed to recovery after the payment timeout.
    pub recovery_requested: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    pub started_at_ms: i64,
    pub updated_at_ms: i64,
    /// When the payment must have resolved before it is handed to recovery.
    pub payment_deadline_ms: i64,
}

/// What a transition appends to the saga's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SagaEventKind {
    SagaStarted,
    StockReserved,
    /// The charge step created the payment and saved its id, before asking the PSP.
    PaymentCreated,
    PaymentRequested,
    PaymentCaptured,
    OrderConfirmed,
    RecoveryRequested,
    StepFailed,
    PaymentRefunded,
    /// A compensated step that had nothing to give back (a charge that took no money).
    StepCompensated,
    StockReleased,
}

impl SagaEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SagaStarted => "SagaStarted",
            Self::StockReserved => "StockReserved",
            Self::PaymentCreated => "PaymentCreated",
            Self::PaymentRequested => "PaymentRequested",
            Self::PaymentCaptured => "PaymentCaptured",
            Self::OrderConfirmed => "OrderConfirmed",
            Self::RecoveryRequested => "RecoveryRequested",
            Self::StepFailed => "StepFailed",
            Self::PaymentRefunded => "PaymentRefunded",
            Self::StepCompensated => "StepCompensated",
            Self::StockReleased => "StockReleased",
        }
    }
}

/// One entry of the saga's log, written with the state it led to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SagaEvent {
    pub order_id: OrderId,
    pub version: u64,
    pub kind: SagaEventKind,
    pub step: Step,
    pub status: SagaStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub at_ms: i64,
}

/// A stored saga that no transition could have produced.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("stored saga {order_id} (version {version}, {status}) is inconsistent: {reason}")]
pub struct InconsistentSaga {
    pub order_id: String,
    pub version: u64,
    pub status: SagaStatus,
    pub reason: &'static str,
}

/// A saga in state `S`. Built only by [`Saga::begin`], by transitions and by [`Loaded::from_record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saga<S> {
    record: SagaRecord,
    state: PhantomData<S>,
}

macro_rules! states {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $( $(#[$doc])* #[derive(Debug, Clone, Copy, PartialEq, Eq)] pub struct $name; )*

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
    Started,
    /// Stock reserved; next: create the payment and save its id here.
    StockReserved,
    /// The payment exists and the saga knows it; next: ask the PSP to charge it (the same payment and the same
    /// idempotency key on every retry, however late).
    Charging,
    /// Charged; waiting for the payment's outcome event.
    PaymentPending,
    /// Money taken; next: confirm the order.
    PaymentCaptured,
    /// Order confirmed. Done.
    Completed,
    /// Compensating a charge that took no money.
    CancellingPayment,
    /// Compensating a capture: refund.
    RefundingPayment,
    /// Compensating the reservation: release the stock.
    ReleasingStock,
    /// Every completed step compensated. Done.
    Compensated,
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
        self.record.version += 1;
        self.record.status = status;
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
            started_at_ms: now_ms,
            updated_at_ms: now_ms,
            payment_deadline_ms: now_ms.saturating_add(payment_timeout_ms),
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
    pub fn payment_id(&self) -> &PaymentId {
        // Checked on load and set by the only transition into this state.
        self.record.payment_id.as_ref().unwrap_or_else(|| unreachable!())
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
    pub fn payment_id(&self) -> &PaymentId {
        // Checked on load and set by the only transition into this state.
        self.record.payment_id.as_ref().unwrap_or_else(|| unreachable!())
    }

    pub fn payment_captured(mut self, now_ms: i64) -> (Saga<PaymentCaptured>, SagaEvent) {
        self.record.captured = true;
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
    pub fn payment_id(&self) -> &PaymentId {
        self.record.payment_id.as_ref().unwrap_or_else(|| unreachable!())
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

impl Saga<RefundingPayment> {
    pub fn payment_id(&self) -> &PaymentId {
        self.record.payment_id.as_ref().unwrap_or_else(|| unreachable!())
    }

    pub fn refunded(mut self, amount_minor: u64, now_ms: i64) -> (Saga<ReleasingStock>, SagaEvent) {
        self.record.refunded_minor = amount_minor;
        self.step(
            SagaStatus::ReleasingStock,
            SagaEventKind::PaymentRefunded,
            Step::Charge,
            Some(amount_minor.to_string()),
            now_ms,
        )
    }
}

impl Saga<CancellingPayment> {
    pub fn payment_id(&self) -> &PaymentId {
        // Checked on load: the charge step creates the payment before anything can fail.
        self.record.payment_id.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// The PSP refused the cancel because the payment succeeded meanwhile: the money was taken, so the saga
    /// continues from the capture (the order is confirmed, or, when the customer cancelled it, refunded).
    pub fn payment_succeeded(mut self, now_ms: i64) -> (Saga<PaymentCaptured>, SagaEvent) {
        self.record.captured = true;
        self.record.failure = None;
        self.step(
            SagaStatus::PaymentCaptured,
            SagaEventKind::PaymentCaptured,
            Step::AwaitPayment,
            Some("succeeded before the cancel reached the PSP".into()),
            now_ms,
        )
    }

    /// The charge took no money and our payment is failed.
    pub fn payment_cancelled(self, now_ms: i64) -> (Saga<ReleasingStock>, SagaEvent) {
        self.step(
            SagaStatus::ReleasingStock,
            SagaEventKind::StepCompensated,
            Step::Charge,
            Some("no money taken".into()),
            now_ms,
        )
    }
}

impl Saga<ReleasingStock> {
    pub fn stock_released(self, now_ms: i64) -> (Saga<Compensated>, SagaEvent) {
        self.step(
            SagaStatus::Compensated,
            SagaEventKind::StockReleased,
            Step::ReserveStock,
            None,
            now_ms,
        )
    }
}

fn inconsistent(r: &SagaRecord, reason: &'static str) -> InconsistentSaga {
    InconsistentSaga {
        order_id: r.order_id.to_string(),
        version: r.version,
        status: r.status,
        reason,
    }
}

/// Is `record` one the transitions can produce? Checked on every load:
/// - version at least the number of transitions that lead to the status;
/// - a payment exists once charged (pending, captured, completed, refunding) and not before;
/// - `captured` exactly where money was taken (never in a state that cancels without refunding);
/// - a refund only after a capture, and before the stock is released after a capture;
/// - a failure (with the step it happened in) exactly in the compensating states, the step matching the state.
pub fn check(r: &SagaRecord) -> Result<(), InconsistentSaga> {
    use SagaStatus as S;
    let min_version = match r.status {
        S::Started => 1,
        S::StockReserved | S::Compensated => 2,
        S::Charging => 3,
        S::PaymentPending | S::CancellingPayment => 4,
        S::PaymentCaptured | S::ReleasingStock => 5,
        S::Completed | S::RefundingPayment => 6,
    };
    if r.version < min_version {
        return Err(inconsistent(r, "version lower than the steps behind this status"));
    }
    if r.checkout.quantity == 0 {
        return Err(inconsistent(r, "quantity is zero"));
    }
    let needs_payment = matches!(
        r.status,
        S::Charging
            | S::PaymentPending
            | S::PaymentCaptured
            | S::Completed
            | S::RefundingPayment
            | S::CancellingPayment
    );
    let no_payment_yet = matches!(r.status, S::Started | S::StockReserved);
    if needs_payment && r.payment_id.is_none() {
        return Err(inconsistent(r, "charged without a payment"));
    }
    if no_payment_yet && (r.payment_id.is_some() || r.psp_reference.is_some()) {
        return Err(inconsistent(r, "a payment before the charge step"));
    }
    if r.status == S::Charging && r.psp_reference.is_some() {
        return Err(inconsistent(r, "a PSP reference before the PSP answered the charge"));
    }
    let must_be_captured = matches!(r.status, S::PaymentCaptured | S::Completed | S::RefundingPayment);
    let never_captured = matches!(
        r.status,
        S::Started | S::StockReserved | S::Charging | S::PaymentPending | S::CancellingPayment
    );
    if (must_be_captured && !r.captured) || (never_captured && r.captured) {
        return Err(inconsistent(r, "capture flag does not match the status"));
    }
    let refund_done = matches!(r.status, S::ReleasingStock | S::Compensated);
    if r.refunded_minor > 0 && !(refund_done && r.captured) {
        return Err(inconsistent(r, "a refund outside the refunded states"));
    }
    if r.captured && refund_done && r.refunded_minor != r.checkout.money.amount_minor() {
        return Err(inconsistent(r, "captured money not refunded before releasing stock"));
    }
    if (r.recovery_requested || r.captured || r.psp_reference.is_some()) && r.payment_id.is_none() {
        return Err(inconsistent(r, "payment facts without a payment"));
    }
    let failed_step = r.failure.as_ref().map(|f| f.step);
    let failure_ok = match r.status {
        S::Started | S::StockReserved | S::Charging | S::PaymentPending | S::PaymentCaptured | S::Completed => {
            failed_step.is_none()
        }
        S::CancellingPayment => matches!(failed_step, Some(Step::Charge | Step::AwaitPayment)),
        S::RefundingPayment => failed_step == Some(Step::ConfirmOrder),
        S::ReleasingStock => match failed_step {
            Some(Step::ConfirmOrder) => r.captured,
            Some(Step::Charge | Step::AwaitPayment) => !r.captured,
            _ => false,
        },
        S::Compensated => match failed_step {
            Some(Step::ReserveStock) => !r.captured && r.payment_id.is_none(),
            Some(Step::ConfirmOrder) => r.captured,
            Some(Step::Charge | Step::AwaitPayment) => !r.captured,
            None => false,
        },
    };
    if !failure_ok {
        return Err(inconsistent(r, "failure does not match the status"));
    }
    Ok(())
}

/// What the engine does next with a loaded saga. Exactly one action per state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAction {
    Run(Step),
    RefundPayment,
    CancelPayment,
    ReleaseStock,
    Done,
}

impl Loaded {
    pub fn next_action(&self) -> NextAction {
        match self {
            Loaded::Started(_) => NextAction::Run(Step::ReserveStock),
            Loaded::StockReserved(_) | Loaded::Charging(_) => NextAction::Run(Step::Charge),
            Loaded::PaymentPending(_) => NextAction::Run(Step::AwaitPayment),
            Loaded::PaymentCaptured(_) => NextAction::Run(Step::ConfirmOrder),
            Loaded::RefundingPayment(_) => NextAction::RefundPayment,
            Loaded::CancellingPayment(_) => NextAction::CancelPayment,
            Loaded::ReleasingStock(_) => NextAction::ReleaseStock,
            Loaded::Completed(_) | Loaded::Compensated(_) => NextAction::Done,
        }
    }
}

#[cfg(test)]
mod tests;
