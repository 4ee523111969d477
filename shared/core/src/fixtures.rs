//! Builders for tests (enabled by the `fixtures` feature): a new payment and observations from any path.
// Test builders only (`cfg(test)` or the `fixtures` feature of dev-dependencies): a bad fixture is a bug in
// the test, and panicking there is what a test should do.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::ids::{CorrelationId, OrderId, PaymentId, PspEventId};
use crate::money::{Currency, Money};
use crate::observation::{Observation, Outcome, Path};
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

pub fn observe(path: Path, outcome: Outcome) -> Observation {
    Observation::new(path, outcome, correlation())
}

pub fn webhook(event_id: &str, at_ms: i64, outcome: Outcome) -> Observation {
    observe(Path::Webhook, outcome).with_event(PspEventId::parse(event_id).expect("valid id"), at_ms)
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
    }
}
