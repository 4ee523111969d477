//! What the query names: a payment id, an order id, a PSP reference or a PSP event id (the last by a Scan of
//! the event items when nothing else matches).

use super::read::{all_parked, get, query, text};
use super::{spinner, Options};
use crate::settings::Ctx;
use aws_sdk_dynamodb::types::AttributeValue;
use shared::keys::{self};
use shared::store::item::{ENTITY_EVENT, ENTITY_HISTORY};
use shared::{OrderId, PaymentId, PspReference};

/// What the query named.
pub(super) enum Resolved {
    Payment(PaymentId),
    /// An order: its saga (if any) and the payments the projection knows.
    Order(OrderId, Vec<PaymentId>),
}

/// Tries what `q` may name from the cheapest read to the dearest (a payment id, an order id, a bound PSP
/// reference, a parked webhook's key, then a Scan of the event items), so a usual query costs one read; says
/// which it was.
pub(super) async fn resolve(ctx: &Ctx, q: &str, opts: &Options) -> Result<(Resolved, &'static str), crate::Error> {
    let store = ctx.store();
    if let Ok(id) = PaymentId::parse(q) {
        if store.get(&id).await?.is_some() {
            return Ok((Resolved::Payment(id), "payment id"));
        }
    }
    if let Ok(order) = OrderId::parse(q) {
        if let Some(resolved) = resolve_order(ctx, order).await? {
            return Ok((resolved, "order id"));
        }
    }
    if let Ok(reference) = PspReference::parse(q) {
        if let Some(id) = store.find_by_psp_reference(&reference).await? {
            return Ok((Resolved::Payment(id), "PSP reference"));
        }
    }
    // A PSP event id: parked ones are in their key (a Query), applied ones on their event item (a Scan).
    if let Some(id) = resolve_parked(ctx, q).await? {
        return Ok((Resolved::Payment(id), "parked PSP event id"));
    }
    if let Some(id) = scan_for_psp_event(ctx, q, opts.progress).await? {
        return Ok((Resolved::Payment(id), "PSP event id"));
    }
    Err(format!(
        "nothing is known about {q:?}: not a payment id, order id, bound PSP reference, parked or applied PSP \
         event id"
    )
    .into())
}

/// An order known to the table: its saga's payment first, then those the order projection holds (a retry
/// after a decline is a new payment, which only the projection lists). `None` when neither knows the order.
async fn resolve_order(ctx: &Ctx, order: OrderId) -> Result<Option<Resolved>, crate::Error> {
    let saga = get(ctx, keys::saga(&order)).await?;
    let mut payments: Vec<PaymentId> = saga
        .as_ref()
        .and_then(|s| text(s, "payment_id"))
        .and_then(|p| PaymentId::parse(p).ok())
        .into_iter()
        .collect();
    for item in query(ctx, keys::order_pk(&order), Some(keys::ORDER_PAYMENT_SK_PREFIX)).await? {
        if let Some(p) = text(&item, "sk")
            .and_then(|sk| sk.strip_prefix(keys::ORDER_PAYMENT_SK_PREFIX).map(str::to_owned))
            .and_then(|p| PaymentId::parse(p).ok())
        {
            if !payments.contains(&p) {
                payments.push(p);
            }
        }
    }
    Ok((saga.is_some() || !payments.is_empty()).then_some(Resolved::Order(order, payments)))
}

/// A parked webhook whose key is `q`: the payment its body names (by id, else by PSP reference). An error
/// when no such payment exists yet, saying how to replay it once it does, since no other source can know it.
async fn resolve_parked(ctx: &Ctx, q: &str) -> Result<Option<PaymentId>, crate::Error> {
    let Some(item) = all_parked(ctx).await?.into_iter().find(|p| p.event_key == q) else {
        return Ok(None);
    };
    let store = ctx.store();
    let target = crate::parked::target(&ctx.env, &item);
    let found = match target.as_ref().map(|t| (&t.payment_id, &t.psp_reference)) {
        Some((Some(id), _)) if store.get(id).await?.is_some() => Some(id.clone()),
        Some((_, Some(reference))) => store.find_by_psp_reference(reference).await?,
        _ => None,
    };
    if found.is_some() {
        return Ok(found);
    }
    Err(format!(
        "{q} is a parked webhook ({}: {}) about {}, and no such payment exists; \
         `paymentsctl parked replay {} --dry-run` once it does",
        item.kind,
        item.reason,
        target.map_or("a payment its body does not name".to_owned(), |t| format!("{t:?}")),
        item.key
    )
    .into())
}

/// Scans the table for the event that applied PSP event `id` (an operator's tool, never a hot path): a
/// history item, or the newest event a payment item carries (which the relay may not have archived yet).
async fn scan_for_psp_event(ctx: &Ctx, id: &str, progress: bool) -> Result<Option<PaymentId>, crate::Error> {
    let bar = spinner(progress, "scanning the table for the PSP event id");
    let mut pages = ctx
        .dynamodb
        .scan()
        .table_name(ctx.table())
        .filter_expression(
            "(entity IN (:e, :h) AND psp_event_id = :id) OR (entity = :p AND last_event.psp_event = :id)",
        )
        .expression_attribute_values(":e", AttributeValue::S(ENTITY_EVENT.into()))
        .expression_attribute_values(":h", AttributeValue::S(ENTITY_HISTORY.into()))
        .expression_attribute_values(":p", AttributeValue::S("payment".into()))
        .expression_attribute_values(":id", AttributeValue::S(id.to_owned()))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| crate::aws_error("Scan", e))?;
        bar.inc(u64::try_from(page.scanned_count()).unwrap_or(0));
        if let Some(pid) = page
            .items()
            .first()
            .and_then(|i| text(i, "payment_id"))
            .and_then(|p| PaymentId::parse(p).ok())
        {
            bar.finish_and_clear();
            return Ok(Some(pid));
        }
    }
    bar.finish_and_clear();
    Ok(None)
}
