//! The order: `pk = ORDER#<order id>`, `sk = ORDER`, with `status` `pending`, `confirmed` or `cancelled`
//! (by the customer), and the saga's `outcome` once it ends. The order projection's items
//! (`sk = PAYMENT#<payment id>`) share its partition.
//!
//! Confirming is conditioned on `pending`: an order the customer cancelled meanwhile cannot be confirmed,
//! and the saga compensates (refund, release) instead.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use shared::store::read_item;
use shared::{OrderId, StoreError};

fn key(order: &OrderId) -> shared::keys::Item {
    shared::keys::order(order)
}

fn request_error(context: &'static str, e: impl Into<shared::store::Cause>) -> StoreError {
    StoreError::request(context, e)
}

/// The new order, written with `SagaStarted`; fails its condition when the order exists.
pub fn create(table: &str, order: &OrderId, now_ms: i64) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(key(order)))
        .item("entity", AttributeValue::S("order".into()))
        .item("status", AttributeValue::S("pending".into()))
        .item("created_at_ms", AttributeValue::N(now_ms.to_string()))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .map_err(|e| request_error("order create", e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// Confirms a pending order; fails its condition when the order is not pending.
pub fn confirm(table: &str, order: &OrderId) -> Result<TransactWriteItem, StoreError> {
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(key(order)))
        .update_expression("SET #s = :confirmed, outcome = :completed")
        .condition_expression("#s = :pending")
        .expression_attribute_names("#s", "status")
        .expression_attribute_values(":confirmed", AttributeValue::S("confirmed".into()))
        .expression_attribute_values(":completed", AttributeValue::S("completed".into()))
        .expression_attribute_values(":pending", AttributeValue::S("pending".into()))
        .build()
        .map_err(|e| request_error("order confirm", e))?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// Records that the saga compensated (written with its last compensation).
pub fn compensated(table: &str, order: &OrderId) -> Result<TransactWriteItem, StoreError> {
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(key(order)))
        .update_expression("SET outcome = :compensated")
        .condition_expression("attribute_exists(pk)")
        .expression_attribute_values(":compensated", AttributeValue::S("compensated".into()))
        .build()
        .map_err(|e| request_error("order compensated", e))?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// What a cancel request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    Cancelled,
    /// Not pending any more (confirmed, or cancelled before): the current status.
    TooLate,
    NotFound,
}

/// The customer cancels a pending order.
pub async fn cancel(client: &Client, table: &str, order: &OrderId) -> Result<Cancel, StoreError> {
    let result = client
        .update_item()
        .table_name(table)
        .set_key(Some(key(order)))
        .update_expression("SET #s = :cancelled")
        .condition_expression("#s = :pending")
        .expression_attribute_names("#s", "status")
        .expression_attribute_values(":cancelled", AttributeValue::S("cancelled".into()))
        .expression_attribute_values(":pending", AttributeValue::S("pending".into()))
        .return_values_on_condition_check_failure(aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld)
        .return_values(ReturnValue::None)
        .send()
        .await;
    match result {
        Ok(_) => Ok(Cancel::Cancelled),
        Err(SdkError::ServiceError(e)) => match e.err() {
            UpdateItemError::ConditionalCheckFailedException(c) => Ok(if c.item().is_some() {
                Cancel::TooLate
            } else {
                Cancel::NotFound
            }),
            _ => Err(StoreError::from_sdk("order cancel", SdkError::ServiceError(e))),
        },
        Err(e) => Err(StoreError::from_sdk("order cancel", e)),
    }
}

/// The order's status and outcome (consistent read).
pub async fn status(
    client: &Client,
    table: &str,
    order: &OrderId,
) -> Result<Option<(String, Option<String>)>, StoreError> {
    let key = key(order);
    Ok(read_item(client, table, key, "read order").await?.map(|i| {
        let s = |k: &str| i.get(k).and_then(|v| v.as_s().ok()).cloned();
        (s("status").unwrap_or_default(), s("outcome"))
    }))
}
