//! The order projection: per order, the state of its payment as the checkout saga reads it, built from the
//! payment events exactly once and in version order by the shared consumer library.
//!
//! Item: `pk = ORDER#<order id>`, `sk = PAYMENT#<payment id>`, with `payment_status`, `amount_minor`,
//! `currency`, `refunded_minor`, `payment_version` and `last_event`.
// Tests may count and index freely (the workspace lints keep them out of the request paths).
#![cfg_attr(
    test,
    allow(
        clippy::arithmetic_side_effects,
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use shared::consumer::{ConsumerError, Projection};
use shared::{OrderId, PaymentEvent, PaymentId};

pub const NAME: &str = "order-projection";

#[derive(Debug, Clone, Copy, Default)]
pub struct OrderProjection;

pub fn key(order: &OrderId, payment: &PaymentId) -> [(String, AttributeValue); 2] {
    [
        ("pk".to_owned(), AttributeValue::S(format!("ORDER#{order}"))),
        ("sk".to_owned(), AttributeValue::S(format!("PAYMENT#{payment}"))),
    ]
}

impl Projection for OrderProjection {
    fn name(&self) -> &str {
        NAME
    }

    fn effects(&self, table: &str, e: &PaymentEvent) -> Result<Vec<TransactWriteItem>, ConsumerError> {
        let [pk, sk] = key(&e.order_id, &e.payment_id);
        let put = Put::builder()
            .table_name(table)
            .item(pk.0, pk.1)
            .item(sk.0, sk.1)
            .item("entity", AttributeValue::S("order_payment".into()))
            .item("payment_status", AttributeValue::S(e.status.as_str().into()))
            .item("amount_minor", AttributeValue::N(e.money.amount_minor().to_string()))
            .item("currency", AttributeValue::S(e.money.currency().to_string()))
            .item("refunded_minor", AttributeValue::N(e.refunded_minor.to_string()))
            .item("payment_version", AttributeValue::N(e.version.to_string()))
            .item("last_event", AttributeValue::S(e.kind.as_str().into()))
            .item("correlation_id", AttributeValue::S(e.correlation_id.to_string()))
            .build()
            .map_err(|err| ConsumerError::Effect(err.to_string()))?;
        Ok(vec![TransactWriteItem::builder().put(put).build()])
    }
}
