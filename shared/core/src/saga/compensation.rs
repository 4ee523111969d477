//! The transitions of the compensating states: refund a capture (or find it impossible), cancel a charge that
//! took no money (or find it succeeded meanwhile), release the stock. The forward steps are in the parent
//! module; both move only through its `step`.

use super::{CancellingPayment, Compensated, PaymentCaptured, RefundingPayment, ReleasingStock, Saga, SagaEvent};
use super::{SagaEventKind, SagaStatus, Step};
use crate::ids::{PaymentId, PspReference};

/// Why a refund of a capture can never be made, so the compensation must end without it: a refusal of the
/// PSP that no retry and no later attempt can turn (any other refusal is read back: the charge may be
/// refunded already).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefundImpossible {
    /// The charge is disputed (a chargeback): Stripe refuses every refund of it (`charge_disputed`); the money
    /// goes back to the cardholder through the dispute, if at all.
    Disputed,
    /// Any other refusal for good of the refund (an error that no retry turns, `PspError::Refused`) while the
    /// charge, read back, does not show the money returned: a person must give it back another way.
    Refused,
}

impl RefundImpossible {
    /// The one table: the PSP's error codes that make a refund impossible.
    const BY_PSP_CODE: [(&'static str, RefundImpossible); 1] = [("charge_disputed", RefundImpossible::Disputed)];

    /// The impossibility a refused refund's error code (Stripe's `code`) names; `None` for any other refusal.
    pub fn from_psp_code(code: Option<&str>) -> Option<Self> {
        let code = code?;
        Self::BY_PSP_CODE
            .iter()
            .find(|(known, _)| *known == code)
            .map(|(_, why)| *why)
    }

    /// What the saga records (its `refund_impossible` and the event's detail).
    pub fn reason(self) -> &'static str {
        match self {
            Self::Disputed => "refund impossible: disputed",
            Self::Refused => "refund impossible: refused by the PSP",
        }
    }
}

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

    /// The refund can never be made (`why`): the stock is released all the same, and the saga ends
    /// compensated with the money still taken and the reason on record. Terminal, so nothing retries the
    /// refund; the caller tells a person once.
    pub fn refund_impossible(mut self, why: RefundImpossible, now_ms: i64) -> (Saga<ReleasingStock>, SagaEvent) {
        let reason = why.reason().to_owned();
        self.record.refund_impossible = Some(reason.clone());
        self.step(
            SagaStatus::ReleasingStock,
            SagaEventKind::RefundImpossible,
            Step::Charge,
            Some(reason),
            now_ms,
        )
    }
}

impl Saga<CancellingPayment> {
    /// The payment this saga charged (always there in this state).
    pub fn payment_id(&self) -> &PaymentId {
        self.charged_payment_id()
    }

    /// The reason our payment is failed with when the cancel finds that the PSP took nothing (Stripe's cancel,
    /// Adyen's, and the protocol model's): `checkout cancelled: <why the saga compensates>`. A saga in this
    /// state always holds its failure (a stored one without it does not load); the bare text is for one
    /// built otherwise.
    pub fn payment_failure_reason(&self) -> String {
        match &self.record.failure {
            Some(failure) => format!("checkout cancelled: {}", failure.reason),
            None => "checkout cancelled".to_owned(),
        }
    }

    /// The PSP refused the cancel because the payment succeeded meanwhile: the money was taken, so the saga
    /// continues from the capture (the order is confirmed, or, when the customer cancelled it, refunded).
    /// `reference` is the payment's PSP reference as the capture recorded it (whichever path captured it: the
    /// charge's answer, a webhook, recovery): a refund needs it.
    pub fn payment_succeeded(mut self, reference: PspReference, now_ms: i64) -> (Saga<PaymentCaptured>, SagaEvent) {
        self.record.captured = true;
        self.record.psp_reference = Some(reference);
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
