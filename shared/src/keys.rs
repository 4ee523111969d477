//! Every key of the one table, in one place: each item kind's partition and sort key. Nothing else in the
//! workspace spells a key prefix (`docs/ARCHITECTURE.md` has the table layout they make).

use crate::{OrderId, PaymentId, PspEventId, Sku};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// An item, or the key of one.
pub type Item = HashMap<String, AttributeValue>;

fn key(pk: String, sk: &str) -> Item {
    HashMap::from([
        ("pk".to_owned(), AttributeValue::S(pk)),
        ("sk".to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

/// The sort key prefix of a payment's or a saga's event log.
pub const EVENT_SK_PREFIX: &str = "EVENT#";
/// The sort key of a payment item.
pub const PAYMENT_SK: &str = "PAYMENT";

/// The partition key prefix of payments (the `open-items` index answers partition keys).
pub const PAYMENT_PK_PREFIX: &str = "PAYMENT#";

/// A payment and its event log share this partition.
pub fn payment_pk(id: &PaymentId) -> String {
    format!("{PAYMENT_PK_PREFIX}{id}")
}

/// The payment item.
pub fn payment(id: &PaymentId) -> Item {
    key(payment_pk(id), PAYMENT_SK)
}

/// The sort key of an event of version `version` (zero-padded, so the log sorts by version).
pub fn event_sk(version: u64) -> String {
    format!("{EVENT_SK_PREFIX}{version:010}")
}

/// A payment's lease.
pub fn lease(id: &PaymentId) -> Item {
    key(format!("LEASE#{id}"), "LEASE")
}

/// The `POST /payments` idempotency record of `key`.
pub fn idempotency(key_text: &str) -> Item {
    key(format!("IDEMPOTENCY#{key_text}"), "IDEMPOTENCY")
}

/// The partition of parked webhooks of one kind (`quarantined`, `unknown_payment`).
pub fn parked_pk(kind: &str) -> String {
    format!("PARKED#{kind}")
}

/// The sort key of a webhook from `provider` parked under `event_key`.
pub fn parked_sk(provider: &str, event_key: &str) -> String {
    format!("{provider}#{event_key}")
}

/// A parked webhook of `kind` (its sort key from [`parked_sk`]).
pub fn parked(kind: &str, sk: &str) -> Item {
    key(parked_pk(kind), sk)
}

/// The partition key prefix of checkout sagas.
pub const SAGA_PK_PREFIX: &str = "SAGA#";

/// A checkout saga and its log share this partition.
pub fn saga_pk(order: &OrderId) -> String {
    format!("{SAGA_PK_PREFIX}{order}")
}

/// The sort key of a saga's state item.
pub const SAGA_SK: &str = "SAGA";

/// A checkout saga's state item.
pub fn saga(order: &OrderId) -> Item {
    key(saga_pk(order), SAGA_SK)
}

/// An order and its payments' projection share this partition.
pub fn order_pk(order: &OrderId) -> String {
    format!("ORDER#{order}")
}

/// The order item.
pub fn order(order: &OrderId) -> Item {
    key(order_pk(order), "ORDER")
}

/// The sort key prefix of an order's payment projections.
pub const ORDER_PAYMENT_SK_PREFIX: &str = "PAYMENT#";

/// The projection of one payment of an order.
pub fn order_payment(order: &OrderId, payment: &PaymentId) -> Item {
    key(order_pk(order), &format!("{ORDER_PAYMENT_SK_PREFIX}{payment}"))
}

/// The stock of a SKU.
pub fn stock(sku: &Sku) -> Item {
    key(format!("SKU#{sku}"), "STOCK")
}

/// A consumer's cursor for one payment (the last version it applied).
pub fn consumer_cursor(consumer: &str, payment: &PaymentId) -> Item {
    key(format!("CONSUMER#{consumer}#{payment}"), "CURSOR")
}

/// The PSP circuit breaker `name`'s state.
pub fn breaker(name: &str) -> Item {
    key(format!("BREAKER#{name}"), "BREAKER")
}

/// The partition key prefix of the objects to read again at Stripe (`store::recheck`).
pub const RECHECK_PK_PREFIX: &str = "RECHECK#";

/// The object Stripe's event-generation failure `event` names, to read again at Stripe (`store::recheck`).
pub fn recheck(event: &PspEventId) -> Item {
    key(format!("{RECHECK_PK_PREFIX}{event}"), "RECHECK")
}

/// A scheduled job's cursor `name` (`stripe-events`: how far the webhook catch-up has read Stripe's events).
pub fn job_cursor(name: &str) -> Item {
    key(format!("CURSOR#{name}"), "CURSOR")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk_sk(item: &Item) -> (String, String) {
        let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        (text("pk"), text("sk"))
    }

    #[test]
    fn keys_are_what_the_layout_says() {
        let (p, o) = (PaymentId::parse("pay_1").unwrap(), OrderId::parse("o-1").unwrap());
        assert_eq!(pk_sk(&payment(&p)), ("PAYMENT#pay_1".into(), "PAYMENT".into()));
        assert_eq!(event_sk(7), "EVENT#0000000007");
        assert_eq!(pk_sk(&lease(&p)), ("LEASE#pay_1".into(), "LEASE".into()));
        assert_eq!(
            pk_sk(&job_cursor("stripe-events")),
            ("CURSOR#stripe-events".into(), "CURSOR".into())
        );
        assert_eq!(pk_sk(&saga(&o)), ("SAGA#o-1".into(), "SAGA".into()));
        assert_eq!(
            pk_sk(&order_payment(&o, &p)),
            ("ORDER#o-1".into(), "PAYMENT#pay_1".into())
        );
        assert_eq!(
            pk_sk(&consumer_cursor("c", &p)),
            ("CONSUMER#c#pay_1".into(), "CURSOR".into())
        );
        assert_eq!(
            pk_sk(&parked("quarantined", &parked_sk("stripe", "evt_1"))),
            ("PARKED#quarantined".into(), "stripe#evt_1".into())
        );
        let event = PspEventId::parse("evt_1").unwrap();
        assert_eq!(pk_sk(&recheck(&event)), ("RECHECK#evt_1".into(), "RECHECK".into()));
    }
}
