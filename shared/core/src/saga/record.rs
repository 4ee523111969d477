//! The saga's stored form: its record (state, checkout, payment, failure, times), the log entries its
//! transitions append, and the names of its steps and states as they are stored.

use super::{SagaStatus, SetAside};
use crate::ids::{OrderId, PaymentId, PspReference, Sku};
use crate::money::Money;
use crate::provider::PspName;
use serde::{Deserialize, Serialize};
use std::fmt;

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

impl SagaStatus {
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
    /// The PSP the checkout's payment is created for (`POST /checkouts`' `psp`); absent on sagas started
    /// before the field existed, whose payment goes to the deployment's `SAGA_PSP` as it did then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psp: Option<CheckoutPsp>,
}

/// A PSP a checkout can be charged through: the saga has steps for these two only (a Standard Webhooks
/// provider only sends webhooks), so no other can be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckoutPsp {
    #[default]
    Stripe,
    Adyen,
}

impl CheckoutPsp {
    /// `stripe` or `adyen` (the names `SAGA_PSP` and a checkout's `psp` take).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "stripe" => Some(Self::Stripe),
            "adyen" => Some(Self::Adyen),
            _ => None,
        }
    }

    /// The checkout PSP of a payment that recorded `provider`; `None` for a provider no checkout charges
    /// through (a Standard Webhooks provider's payment is never a saga's).
    pub fn of(provider: &PspName) -> Option<Self> {
        match provider {
            PspName::Stripe => Some(Self::Stripe),
            PspName::Adyen => Some(Self::Adyen),
            _ => None,
        }
    }

    /// The name the payment records.
    pub fn name(self) -> PspName {
        match self {
            Self::Stripe => PspName::Stripe,
            Self::Adyen => PspName::Adyen,
        }
    }
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
    /// Why the captured money could not be refunded (the PSP refused the refund for good: `refund impossible:
    /// disputed`): the compensation ended without it and a person was told. Absent on every other saga (and on
    /// records written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_impossible: Option<String>,
    /// The saga's first escalation, until its next move: later failures of the same step are not escalated
    /// again, and the sweeper looks at it only on a doubling schedule (`deadline`). Absent on every other
    /// saga.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<SetAside>,
    pub started_at_ms: i64,
    pub updated_at_ms: i64,
    /// When the payment must have resolved before it is handed to recovery.
    pub payment_deadline_ms: i64,
    /// The checkout's trace (the W3C `traceparent` of the request that started the saga): the payment the
    /// saga creates and what it applies to it carry it, so the payment's events, the relay and the consumers
    /// continue the checkout's trace whichever invocation runs the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_context: Option<String>,
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
    /// The refund of a capture was refused for good (a disputed charge, any permanent refusal the charge does
    /// not show refunded): the compensation goes on without it.
    RefundImpossible,
    /// A compensated step that had nothing to give back (a charge that took no money).
    StepCompensated,
    /// The saga's first escalation: a step kept failing, or a wait passed its deadline; the saga stays in its
    /// state, set aside until its next move.
    SagaSetAside,
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
            Self::RefundImpossible => "RefundImpossible",
            Self::StepCompensated => "StepCompensated",
            Self::SagaSetAside => "SagaSetAside",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkout_stored_before_it_named_its_psp_reads_without_one_and_a_named_one_round_trips() {
        let old =
            r#"{"sku":"sku-1","quantity":1,"money":{"amount_minor":2500,"currency":"EUR"},"payment_method":"pm_x"}"#;
        let checkout: Checkout = serde_json::from_str(old).expect("an old checkout");
        assert_eq!(checkout.psp, None, "the deployment's SAGA_PSP decides, as before");
        let named = Checkout {
            psp: Some(CheckoutPsp::Adyen),
            ..checkout
        };
        let text = serde_json::to_string(&named).expect("encode");
        assert!(text.contains(r#""psp":"adyen""#), "{text}");
        assert_eq!(serde_json::from_str::<Checkout>(&text).expect("decode"), named);
        assert_eq!(CheckoutPsp::parse("adyen").map(CheckoutPsp::name), Some(PspName::Adyen));
        assert_eq!(CheckoutPsp::parse("paypal"), None);
    }
}
