//! Reading the table for the timeline: one item, one partition (by key prefix), attribute values, and the
//! parked webhooks (also what `paymentsctl parked` lists).

use crate::settings::Ctx;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use shared::keys::{self, Item};
use shared::store::ParkedKind;

pub(super) async fn get(ctx: &Ctx, key: Item) -> Result<Option<Item>, crate::Error> {
    let out = ctx
        .dynamodb
        .get_item()
        .table_name(ctx.table())
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| crate::aws_error("GetItem", e))?;
    Ok(out.item)
}

pub(super) async fn query(ctx: &Ctx, pk: String, sk_prefix: Option<&str>) -> Result<Vec<Item>, crate::Error> {
    let mut q = ctx
        .dynamodb
        .query()
        .table_name(ctx.table())
        .consistent_read(true)
        .expression_attribute_values(":pk", AttributeValue::S(pk));
    q = match sk_prefix {
        Some(prefix) => q
            .key_condition_expression("pk = :pk AND begins_with(sk, :p)")
            .expression_attribute_values(":p", AttributeValue::S(prefix.to_owned())),
        None => q.key_condition_expression("pk = :pk"),
    };
    q.into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| crate::aws_error("Query", e))
}

pub(super) fn text(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

pub(super) fn number(item: &Item, name: &str) -> Option<i64> {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok())
}

/// A parked webhook as stored.
#[derive(Debug, Clone, Serialize)]
pub struct ParkedItem {
    pub kind: String,
    /// `<provider>#<event key>`: the argument of `parked replay`.
    pub key: String,
    pub provider: String,
    pub event_key: String,
    pub reason: String,
    pub body: String,
    pub recorded_at_ms: i64,
    pub replayed_at_ms: Option<i64>,
    pub replay_result: Option<String>,
}

/// Every parked webhook of `kind`.
pub async fn parked_items(ctx: &Ctx, kind: ParkedKind) -> Result<Vec<ParkedItem>, crate::Error> {
    let items = query(ctx, keys::parked_pk(kind.as_str()), None).await?;
    Ok(items
        .iter()
        .map(|i| ParkedItem {
            kind: kind.as_str().to_owned(),
            key: text(i, "sk").unwrap_or_default(),
            provider: text(i, "provider").unwrap_or_default(),
            event_key: text(i, "event_key").unwrap_or_default(),
            reason: text(i, "reason").unwrap_or_default(),
            body: text(i, "body").unwrap_or_default(),
            recorded_at_ms: number(i, "recorded_at_ms").unwrap_or(0),
            replayed_at_ms: number(i, "replayed_at_ms"),
            replay_result: text(i, "replay_result"),
        })
        .collect())
}

pub(super) async fn all_parked(ctx: &Ctx) -> Result<Vec<ParkedItem>, crate::Error> {
    let mut all = parked_items(ctx, ParkedKind::Quarantined).await?;
    all.extend(parked_items(ctx, ParkedKind::UnknownPayment).await?);
    Ok(all)
}
