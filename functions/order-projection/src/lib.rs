//! The order projection: per order, the state of its payment as the checkout saga reads it, built from the
//! payment events exactly once and in version order by the shared consumer library.
//!
//! Item: `pk = ORDER#<order id>`, `sk = PAYMENT#<payment id>`, with `payment_status`, `amount_minor`,
//! `currency`, `refunded_minor`, `payment_version` and `last_event`.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use shared::consumer::{ConsumerError, Projection};
use shared::{OrderId, PaymentEvent, PaymentId};

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

    fn effects(&self, table: &str, e: &PaymentEvent) -> Result<Vec<TransactWriteItem>, ConsumerError> {
        let put = Put::builder()
            .table_name(table)
            .set_item(Some(key(&e.order_id, &e.payment_id)))
            .item("entity", AttributeValue::S("order_payment".into()))
            .item("payment_status", AttributeValue::S(e.status.as_str().into()))
            .item("amount_minor", AttributeValue::N(e.money.amount_minor().to_string()))
            .item("currency", AttributeValue::S(e.money.currency().to_string()))
            .item("refunded_minor", AttributeValue::N(e.refunded_minor.to_string()))
            .item("payment_version", AttributeValue::N(e.version.to_string()))
            .item("last_event", AttributeValue::S(e.kind.as_str().into()))
            .item("correlation_id", AttributeValue::S(e.correlation_id.to_string()))
            .build()
            .map_err(|err| ConsumerError::Effect(err.into()))?;
        Ok(vec![TransactWriteItem::builder().put(put).build()])
    }
}
