//! Stock: one item per SKU, `pk = SKU#<sku>`, `sk = STOCK`, with the number `available`.
//!
//! A reservation is a conditional decrement (`available >= :q`) and a release the matching increment; both
//! are written inside the saga's step transaction, so stock moves exactly when the saga's state does.

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use shared::store::read_item;
use shared::{Sku, StoreError};

fn key(sku: &Sku) -> shared::keys::Item {
    shared::keys::stock(sku)
}

fn update(
    table: &str,
    sku: &Sku,
    expression: &str,
    condition: &str,
    quantity: u32,
) -> Result<TransactWriteItem, StoreError> {
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(key(sku)))
        .update_expression(expression)
        .condition_expression(condition)
        .expression_attribute_values(":q", AttributeValue::N(quantity.to_string()))
        .build()
        .map_err(|e| StoreError::request("stock update", e))?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// Takes `quantity` off the shelf; fails its condition when not enough is available.
pub fn reserve(table: &str, sku: &Sku, quantity: u32) -> Result<TransactWriteItem, StoreError> {
    update(
        table,
        sku,
        "SET available = available - :q",
        "available >= :q",
        quantity,
    )
}

/// Puts `quantity` back.
pub fn release(table: &str, sku: &Sku, quantity: u32) -> Result<TransactWriteItem, StoreError> {
    update(
        table,
        sku,
        "SET available = available + :q",
        "attribute_exists(pk)",
        quantity,
    )
}

/// Sets the stock of a SKU (operations and seeding).
pub async fn put_stock(client: &Client, table: &str, sku: &Sku, available: u64) -> Result<(), StoreError> {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(key(sku)))
        .item("entity", AttributeValue::S("stock".into()))
        .item("available", AttributeValue::N(available.to_string()))
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("put stock", e))?;
    Ok(())
}

/// The available stock of a SKU (consistent read); `None` for an unknown SKU.
pub async fn available(client: &Client, table: &str, sku: &Sku) -> Result<Option<u64>, StoreError> {
    let key = key(sku);
    Ok(read_item(client, table, key, "read stock").await?.and_then(|i| {
        i.get("available")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
    }))
}
