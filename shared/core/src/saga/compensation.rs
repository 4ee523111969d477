//! The transitions of the compensating states: refund a capture, cancel a charge that took no money (or
//! find it succeeded meanwhile), release the stock. The forward steps are in the parent module; both move
//! only through its `step`.

use super::{CancellingPayment, Compensated, PaymentCaptured, RefundingPayment, ReleasingStock, Saga, SagaEvent};
use super::{SagaEventKind, SagaStatus, Step};
use crate::ids::PaymentId;

impl Saga<RefundingPayment> {
    /// The payment this saga charged (always there in this state).
    pub fn payment_id(&self) -> &PaymentId {
        self.charged_payment_id()
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
    /// The payment this saga charged (always there in this state).
    pub fn payment_id(&self) -> &PaymentId {
        self.charged_payment_id()
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
