//! The order projection: per order, the state of its payment as the checkout saga reads it, built from the
//! payment events exactly once and in version order by the shared consumer library.
//!
//! Item: `pk = ORDER#<order id>`, `sk = PAYMENT#<payment id>`, with `payment_status`, `amount_minor`,
//! `currency`, `refunded_minor`, `payment_version` and `last_event`; once the payment's charge is disputed,
//! `dispute` (`disputed` while open, `dispute_won`, `dispute_lost` or `dispute_closed`), `dispute_status`
//! (Stripe's) and `dispute_funds` (`withdrawn`, `reinstated`); while the payment's capture failed at the card
//! scheme (Adyen's `CAPTURE_FAILED`: a confirmed order whose money will not arrive), `capture_failed` with the
//! reason. Every event carries the payment's dispute and failed capture, so the item always shows them as of its
//! payment version.
//!
//! The item is its own cursor ([`Cursor::Carried`] on `payment_version`): each event is one conditional put of
//! it, 1 write unit, where the item and a cursor item in one transaction cost 4 (issue 43). Items written
//! before, beside a `CONSUMER#order-projection#<payment>` cursor item, already hold that cursor's version in
//! `payment_version` (the two were always written together), so they read as cursors as they are.

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use shared::consumer::{ConsumerError, Cursor, Projection};
use shared::{Dispute, DisputeStatus, OrderId, PaymentEvent, PaymentId};

pub const NAME: &str = "order-projection";

#[derive(Debug, Clone, Copy, Default)]
pub struct OrderProjection;

/// The projection item of one payment of an order.
pub fn key(order: &OrderId, payment: &PaymentId) -> shared::keys::Item {
    shared::keys::order_payment(order, payment)
}

impl Projection for OrderProjection {
    fn name(&self) -> &str {
        NAME
    }

    fn cursor(&self, order: &OrderId, payment: &PaymentId) -> Cursor {
        Cursor::Carried {
            key: key(order, payment),
            version_attribute: "payment_version",
        }
    }

    fn effects(&self, table: &str, e: &PaymentEvent) -> Result<Vec<TransactWriteItem>, ConsumerError> {
        let mut put = Put::builder()
            .table_name(table)
            .set_item(Some(key(&e.order_id, &e.payment_id)))
            .item("entity", AttributeValue::S("order_payment".into()))
            .item("payment_status", AttributeValue::S(e.status.as_str().into()))
            .item("amount_minor", AttributeValue::N(e.money.amount_minor().to_string()))
            .item("currency", AttributeValue::S(e.money.currency().to_string()))
            .item("refunded_minor", AttributeValue::N(e.refunded_minor.to_string()))
            .item("payment_version", AttributeValue::N(e.version.to_string()))
            .item("last_event", AttributeValue::S(e.kind.as_str().into()))
            .item("correlation_id", AttributeValue::S(e.correlation_id.to_string()));
        if let Some(d) = &e.dispute {
            put = put
                .item("dispute", AttributeValue::S(order_mark(d).into()))
                .item("dispute_status", AttributeValue::S(d.status.as_str().into()));
            if d.funds_withdrawn {
                let funds = if d.funds_reinstated { "reinstated" } else { "withdrawn" };
                put = put.item("dispute_funds", AttributeValue::S(funds.into()));
            }
        }
        if let Some(reason) = &e.capture_failed {
            put = put.item("capture_failed", AttributeValue::S(reason.clone()));
        }
        let put = put.build().map_err(|err| ConsumerError::Effect(err.into()))?;
        Ok(vec![TransactWriteItem::builder().put(put).build()])
    }
}

/// How the order shows its payment's dispute: open (`disputed`) or how it closed.
pub fn order_mark(dispute: &Dispute) -> &'static str {
    match dispute.status {
        DisputeStatus::Won => "dispute_won",
        DisputeStatus::Lost => "dispute_lost",
        DisputeStatus::WarningClosed | DisputeStatus::Prevented => "dispute_closed",
        DisputeStatus::WarningNeedsResponse
        | DisputeStatus::WarningUnderReview
        | DisputeStatus::NeedsResponse
        | DisputeStatus::UnderReview => "disputed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{Channel, CorrelationId, DisputeId, EventKind, Money, PaymentStatus};

    fn event(dispute: Option<Dispute>) -> PaymentEvent {
        PaymentEvent {
            payment_id: PaymentId::parse("pay_1").unwrap(),
            order_id: OrderId::parse("o_1").unwrap(),
            version: 3,
            kind: EventKind::DisputeOpened,
            path: Channel::Webhook,
            status: PaymentStatus::Captured,
            previous_status: Some(PaymentStatus::Captured),
            money: Money::new(1000, shared::Currency::parse("EUR").unwrap()).unwrap(),
            refunded_minor: 0,
            refund: None,
            reason: None,
            psp_event_id: None,
            correlation_id: CorrelationId::parse("c").unwrap(),
            trace_context: None,
            recorded_at_ms: 0,
            dispute,
            capture_failed: None,
        }
    }

    /// The attribute `name` of the order item `e` writes.
    fn written(e: &PaymentEvent, name: &str) -> Option<String> {
        let effects = OrderProjection.effects("t", e).unwrap();
        let item = effects[0].put().unwrap().item();
        item.get(name).and_then(|v| v.as_s().ok()).cloned()
    }

    fn dispute(status: DisputeStatus, withdrawn: bool, reinstated: bool) -> Dispute {
        Dispute {
            id: DisputeId::parse("du_1").unwrap(),
            status,
            amount_minor: 1000,
            funds_withdrawn: withdrawn,
            funds_reinstated: reinstated,
        }
    }

    #[test]
    fn the_order_shows_its_payments_dispute() {
        assert_eq!(written(&event(None), "dispute"), None, "no dispute, no mark");
        let open = event(Some(dispute(DisputeStatus::NeedsResponse, true, false)));
        assert_eq!(written(&open, "dispute").as_deref(), Some("disputed"));
        assert_eq!(written(&open, "dispute_status").as_deref(), Some("needs_response"));
        assert_eq!(written(&open, "dispute_funds").as_deref(), Some("withdrawn"));
        let won = event(Some(dispute(DisputeStatus::Won, true, true)));
        assert_eq!(written(&won, "dispute").as_deref(), Some("dispute_won"));
        assert_eq!(written(&won, "dispute_funds").as_deref(), Some("reinstated"));
        let lost = event(Some(dispute(DisputeStatus::Lost, true, false)));
        assert_eq!(written(&lost, "dispute").as_deref(), Some("dispute_lost"));
        let inquiry = event(Some(dispute(DisputeStatus::WarningClosed, false, false)));
        assert_eq!(written(&inquiry, "dispute").as_deref(), Some("dispute_closed"));
        assert_eq!(written(&inquiry, "dispute_funds"), None);
    }

    #[test]
    fn the_order_shows_a_capture_that_failed_at_the_scheme_until_captured_again() {
        let mut failed = event(None);
        (failed.kind, failed.capture_failed) = (EventKind::CaptureFailed, Some("the capture failed".into()));
        assert_eq!(
            written(&failed, "capture_failed").as_deref(),
            Some("the capture failed")
        );
        assert_eq!(written(&failed, "payment_status").as_deref(), Some("captured"));
        let mut recaptured = failed.clone();
        (recaptured.kind, recaptured.capture_failed) = (EventKind::PaymentCaptured, None);
        assert_eq!(
            written(&recaptured, "capture_failed"),
            None,
            "the item is put whole: cleared"
        );
    }

    /// Manual capture (issue 34): the order tells an authorization (money held) from a capture (money taken).
    #[test]
    fn the_order_tells_authorized_from_captured() {
        let mut held = event(None);
        (held.kind, held.status, held.previous_status) = (
            EventKind::PaymentAuthorized,
            PaymentStatus::Authorized,
            Some(PaymentStatus::Pending),
        );
        assert_eq!(written(&held, "payment_status").as_deref(), Some("authorized"));
        let mut taken = held.clone();
        (taken.kind, taken.status) = (EventKind::PaymentCaptured, PaymentStatus::Captured);
        assert_eq!(written(&taken, "payment_status").as_deref(), Some("captured"));
    }
}
