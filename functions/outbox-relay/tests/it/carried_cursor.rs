//! Issue 43 item 6: the order projection's item is its own cursor (`shared::consumer::Cursor::Carried` on
//! `payment_version`). Each event is one conditional put of the item: 1 write unit where the item and a
//! cursor item in one transaction cost 4. Applied once and in order, a redelivery skipped, a gap held back;
//! and an item written before, beside a `CONSUMER#order-projection#<payment>` cursor item, reads as a cursor as
//! it is, so a live stack moves without a migration.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use integration_tests::{CapacityMeter, Interceptors, TestContext};
use order_projection::OrderProjection;
use payments_core::fixtures;
use shared::consumer::{Consumer, MessageOutcome, Projection};
use shared::{Channel, Outcome, PaymentEvent, PaymentId};

/// A payment with three events: created, processing, captured.
async fn three_events(ctx: &TestContext, name: &str) -> (PaymentId, Vec<PaymentEvent>) {
    let id = ctx.store.create(fixtures::new_payment(name, 1000)).await.unwrap().id;
    for outcome in [Outcome::Processing, Outcome::Succeeded] {
        ctx.store
            .finalize(&id, &fixtures::observe(Channel::Sync, outcome), None)
            .await
            .unwrap();
    }
    let events = ctx.events(&id).await.unwrap();
    assert_eq!(events.len(), 3);
    (id, events)
}

/// The order item of `e`'s payment, as DynamoDB holds it.
async fn order_item(ctx: &TestContext, e: &PaymentEvent) -> std::collections::HashMap<String, AttributeValue> {
    ctx.client
        .get_item()
        .table_name(&ctx.table)
        .set_key(Some(order_projection::key(&e.order_id, &e.payment_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap_or_default()
}

#[tokio::test]
async fn each_event_is_one_put_of_the_order_item_applied_once_and_in_order() {
    let ctx = TestContext::new().await;
    let (id, events) = three_events(&ctx, "pay_cc1").await;
    let meter = CapacityMeter::new();
    let client = integration_tests::client(
        &integration_tests::dynamodb_local::endpoint(),
        Interceptors {
            capacity: Some(meter.clone()),
            ..Interceptors::default()
        },
    );
    let consumer = Consumer::new(client, &ctx.table, OrderProjection);

    assert_eq!(consumer.apply(&events[0]).await.unwrap(), MessageOutcome::Applied);
    assert_eq!(meter.units().write, 1.0, "one put of a small item, no transaction");
    // Version 3 before 2: held back; 2 then 3 apply; a redelivered 2 is skipped.
    assert_eq!(consumer.apply(&events[2]).await.unwrap(), MessageOutcome::HeldBack);
    assert_eq!(consumer.apply(&events[1]).await.unwrap(), MessageOutcome::Applied);
    assert_eq!(consumer.apply(&events[2]).await.unwrap(), MessageOutcome::Applied);
    assert_eq!(consumer.apply(&events[1]).await.unwrap(), MessageOutcome::Skipped);
    assert_eq!(consumer.applied_version(&events[0].order_id, &id).await.unwrap(), 3);

    let item = order_item(&ctx, &events[2]).await;
    let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    assert_eq!(text("payment_status").as_deref(), Some("captured"));
    assert_eq!(text("applied_by").as_deref(), Some(order_projection::NAME));
    assert_eq!(text("applied_event_id"), Some(events[2].event_id()));
    let cursor_item = ctx
        .client
        .get_item()
        .table_name(&ctx.table)
        .set_key(Some(shared::keys::consumer_cursor(order_projection::NAME, &id)))
        .send()
        .await
        .unwrap();
    assert!(cursor_item.item.is_none(), "no cursor item of its own any more");
}

#[tokio::test]
async fn an_order_item_written_beside_a_cursor_item_reads_as_the_cursor() {
    let ctx = TestContext::new().await;
    let (id, events) = three_events(&ctx, "pay_cc2").await;
    // As the consumer before issue 43 committed versions 1 and 2: the item and its cursor item together.
    for e in &events[..2] {
        let mut items = OrderProjection.effects(&ctx.table, e).unwrap();
        let cursor = Put::builder()
            .table_name(&ctx.table)
            .set_item(Some(shared::keys::consumer_cursor(order_projection::NAME, &id)))
            .item("applied_version", AttributeValue::N(e.version.to_string()))
            .build()
            .unwrap();
        items.push(TransactWriteItem::builder().put(cursor).build());
        ctx.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .unwrap();
    }
    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, OrderProjection);
    assert_eq!(consumer.applied_version(&events[0].order_id, &id).await.unwrap(), 2);
    assert_eq!(consumer.apply(&events[1]).await.unwrap(), MessageOutcome::Skipped);
    assert_eq!(consumer.apply(&events[2]).await.unwrap(), MessageOutcome::Applied);
    assert_eq!(consumer.apply(&events[2]).await.unwrap(), MessageOutcome::Skipped);
    assert_eq!(consumer.applied_version(&events[0].order_id, &id).await.unwrap(), 3);
}
