//! Builders for tests (enabled by the `fixtures` feature): a new payment and observations from any path.
// Test builders only (`cfg(test)` or the `fixtures` feature of dev-dependencies): a bad fixture is a bug in
// the test, and panicking there is what a test should do.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::ids::{CorrelationId, OrderId, PaymentId, PspEventId};
use crate::money::{Currency, Money};
use crate::observation::{Channel, Observation, Outcome};
use crate::payment::{CustomerAction, NewPayment, Payment};
use crate::secret::{ClientSecret, RedirectUrl, RetryToken};

pub const SECRET: &str = "pi_3Ox_secret_FIXTUREsecret";
pub const REDIRECT: &str = "https://hooks.psp.example/3ds/FIXTUREtoken";
pub const RETRY: &str = "retry_FIXTUREtoken";

pub fn correlation() -> CorrelationId {
    CorrelationId::parse("corr-test").expect("valid id")
}

pub fn new_payment(id: &str, amount_minor: u64) -> NewPayment {
    NewPayment {
        id: PaymentId::parse(id).expect("valid id"),
        order_id: OrderId::parse(format!("order-{id}")).expect("valid id"),
        money: Money::new(amount_minor, Currency::parse("EUR").expect("EUR")).expect("valid amount"),
        provider: crate::PspName::Stripe,
        psp_reference: None,
        metadata: Default::default(),
        correlation_id: correlation(),
        trace_context: None,
        now_ms: 1_700_000_000_000,
    }
}

/// A payment at version 1, `pending`, 10.00 EUR.
pub fn payment(id: &str) -> Payment {
    new_payment(id, 1000).into_payment().0
}

pub fn action() -> CustomerAction {
    CustomerAction::new(
        Some(ClientSecret::parse(SECRET).expect("secret")),
        Some(RedirectUrl::parse(REDIRECT).expect("url")),
    )
    .expect("action")
}

pub fn requires_action() -> Outcome {
    Outcome::RequiresAction(action())
}

pub fn attempt_failed() -> Outcome {
    Outcome::AttemptFailed {
        reason: "card_declined".into(),
        retry_token: Some(RetryToken::parse(RETRY).expect("token")),
    }
}

pub fn failed() -> Outcome {
    Outcome::Failed {
        reason: "canceled".into(),
    }
}

pub fn refunded(total: u64, capture_proven: bool) -> Outcome {
    Outcome::Refunded {
        refunded_total_minor: total,
        capture_proven,
    }
}

/// The report of refund `id` of `amount` minor units, now `status`.
pub fn refund(id: &str, amount: u64, status: crate::refund::RefundStatus) -> Outcome {
    Outcome::Refund(crate::observation::RefundReport {
        refund: crate::refund::RefundEntry {
            refund_id: id.into(),
            amount_minor: amount,
            status,
        },
        failure_reason: status.is_undone().then(|| "expired_or_canceled_card".into()),
        answers_give_back: None,
    })
}

pub fn observe(path: Channel, outcome: Outcome) -> Observation {
    Observation::new(path, outcome, correlation())
}

pub fn webhook(event_id: &str, at_ms: i64, outcome: Outcome) -> Observation {
    observe(Channel::Webhook, outcome).with_event(PspEventId::parse(event_id).expect("valid id"), at_ms)
}

/// True when `text` contains any of the fixture secrets.
pub fn contains_fixture_secret(text: &str) -> bool {
    [SECRET, REDIRECT, RETRY].iter().any(|s| text.contains(s))
}

/// A checkout of 2 x `sku-1` for 25.00 EUR with the `pm_succeeded` payment method.
pub fn checkout() -> crate::saga::Checkout {
    crate::saga::Checkout {
        sku: crate::ids::Sku::parse("sku-1").expect("valid sku"),
        quantity: 2,
        money: Money::new(2500, Currency::parse("EUR").expect("EUR")).expect("valid amount"),
        payment_method: "pm_succeeded".into(),
        psp: None,
    }
}

/// A saga in `status`, walked there by the real transitions from a new checkout (so it loads): the charge
/// that took money for the forward states and the refund, the decline for the cancel.
pub fn saga_in(status: crate::saga::SagaStatus) -> crate::saga::Loaded {
    use crate::saga::{Loaded, Saga, SagaStatus as S};
    const T0: i64 = 1_700_000_000_000;
    let order = OrderId::parse("order-fixture").expect("valid id");
    let (started, _) = Saga::begin(order, checkout(), T0, 60_000);
    let (reserved, _) = started.clone().stock_reserved(T0 + 1);
    let (charging, _) = reserved
        .clone()
        .payment_created(PaymentId::parse("pay-fixture").expect("valid id"), T0 + 2);
    let reference = crate::ids::PspReference::parse("pi_fixture").expect("valid reference");
    let (pending, _) = charging
        .clone()
        .payment_requested(Some(reference.clone()), false, T0 + 3);
    let (captured, _) = pending.clone().payment_captured(reference, T0 + 4);
    let (refunding, _) = captured.clone().confirmation_failed("order cancelled".into(), T0 + 5);
    let (cancelling, _) = pending.clone().payment_failed("declined".into(), T0 + 4);
    let (releasing, _) = refunding.clone().refunded(2500, T0 + 6);
    match status {
        S::Started => started.into(),
        S::StockReserved => reserved.into(),
        S::Charging => charging.into(),
        S::PaymentPending => pending.into(),
        S::PaymentCaptured => captured.into(),
        S::Completed => Loaded::from(captured.order_confirmed(T0 + 5).0),
        S::RefundingPayment => refunding.into(),
        S::CancellingPayment => cancelling.into(),
        S::ReleasingStock => releasing.into(),
        S::Compensated => Loaded::from(releasing.stock_released(T0 + 7).0),
    }
}
