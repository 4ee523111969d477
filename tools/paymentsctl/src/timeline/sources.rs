//! The timeline's sources (see the table in the module doc): each reads its items and adds their entries,
//! noting what it cannot read.

use super::checks::check_saga;
use super::read::{get, number, query, text, ParkedItem};
use super::{Cursor, Entry, LeaseView, Level, Options, Projection, SagaSummary, Source, Timeline};
use crate::deliveries::{self, Delivery};
use crate::escalations::{describe_next, peek, runner_step};
use crate::settings::{Ctx, QueueRole};
use crate::when::format_ms;
use checkout_saga::saga::{Loaded, SagaEvent, SagaEventKind, SagaRecord, SagaStore};
use shared::keys::{self, payment_pk, Item};
use shared::store::item::{event_from_item, event_of_payment_item};
use shared::telemetry::ErrorChain;
use shared::{EventKind, OrderId, Payment, PaymentEvent, PaymentId};

/// The intake's log lines about `p`'s deliveries: the local log with `--log`, else the Logs Insights query
/// when the log group is known (a failure is a note: the rest of the timeline stands), else the query only.
pub(super) async fn deliveries_of(
    ctx: &Ctx,
    t: &mut Timeline,
    p: &Payment,
    opts: &Options,
) -> Result<(), crate::Error> {
    let rows = if let Some(path) = &opts.local_log {
        deliveries::from_local_log(path, &deliveries::needles(p))?
    } else if let Some(group) = &opts.log_group {
        t.logs_queries.push(deliveries::insights_command(p, group, opts.now_ms));
        match deliveries::from_insights(&ctx.logs, group, p, opts.now_ms, opts.logs_deadline).await {
            Ok(rows) => rows,
            Err(e) => {
                t.find(
                    Level::Note,
                    format!(
                        "webhook deliveries not read from the intake's logs: {}",
                        shared::telemetry::ErrorChain(&e)
                    ),
                );
                return Ok(());
            }
        }
    } else {
        t.logs_queries
            .push(deliveries::insights_command(p, "<intake log group>", opts.now_ms));
        t.find(
            Level::Note,
            "deliveries that changed nothing (duplicate, stale, 503) write no item; they are in the intake's \
             logs: set INTAKE_LOG_GROUP or --log-group to have the timeline query them (Logs Insights, billed per \
             GB scanned), or --log <file> locally",
        );
        return Ok(());
    };
    for d in &rows {
        if let Some(at_ms) = d.at_ms {
            t.entries.push(delivery_entry(d, at_ms));
        }
    }
    t.deliveries.extend(rows);
    Ok(())
}

fn delivery_entry(d: &Delivery, at_ms: i64) -> Entry {
    let mut entry = Entry::new(at_ms, Source::Logs, d.result.clone().unwrap_or_else(|| d.level.clone()));
    entry.path = Some("webhook".to_owned());
    entry.correlation_id = d.correlation_id.clone();
    entry.psp_event_id = d.psp_event_id.clone();
    entry.detail = Some(d.message.clone());
    entry
}

pub(super) async fn payment_events(
    ctx: &Ctx,
    t: &mut Timeline,
    p: &Payment,
) -> Result<Vec<PaymentEvent>, crate::Error> {
    // The partition: the history items, then the payment item, which carries the newest event (the relay
    // may not have archived it yet).
    let mut events: Vec<PaymentEvent> = Vec::new();
    for item in query(ctx, payment_pk(&p.id), None).await? {
        let sk = text(&item, "sk").unwrap_or_default();
        let read = if sk == keys::PAYMENT_SK {
            event_of_payment_item(item).map(|carried| carried.filter(|c| events.iter().all(|e| e.version != c.version)))
        } else if sk.starts_with(keys::EVENT_SK_PREFIX) {
            event_from_item(item).map(Some)
        } else {
            Ok(None)
        };
        match read {
            Ok(e) => events.extend(e),
            Err(e) => t.find(
                Level::Anomaly,
                format!("event item {sk} is unreadable: {}", ErrorChain(&e)),
            ),
        }
    }
    events.sort_by_key(|e| e.version);
    for e in &events {
        let mut entry = Entry::new(e.recorded_at_ms, Source::Payment, e.kind.as_str());
        entry.version = Some(e.version);
        entry.status = match e.previous_status {
            Some(prev) => format!("{} -> {}", prev.as_str(), e.status.as_str()),
            None => format!("-> {}", e.status.as_str()),
        };
        entry.path = Some(e.path.as_str().to_owned());
        entry.correlation_id = Some(e.correlation_id.to_string());
        entry.trace_context = e.trace_context.clone();
        entry.psp_event_id = e.psp_event_id.as_ref().map(ToString::to_string);
        let mut detail = Vec::new();
        if let Some(r) = &e.reason {
            detail.push(r.clone());
        }
        if e.refunded_minor > 0 {
            detail.push(format!("refunded {} of {}", e.refunded_minor, e.money.amount_minor()));
        }
        if e.kind == EventKind::ActionRequired {
            detail.push("customer action withheld from the event (secrets are never in events)".into());
        }
        entry.detail = (!detail.is_empty()).then(|| detail.join("; "));
        t.entries.push(entry);
    }
    Ok(events)
}

pub(super) async fn cursors(ctx: &Ctx, t: &mut Timeline, p: &Payment, opts: &Options) -> Result<(), crate::Error> {
    for name in &opts.consumers {
        let (item, version) = consumer_cursor(ctx, name, p).await?;
        let cursor = Cursor {
            payment_id: p.id.to_string(),
            consumer: name.clone(),
            applied_version: item
                .as_ref()
                .and_then(|i| number(i, version))
                .and_then(|v| u64::try_from(v).ok()),
            applied_event_id: item.as_ref().and_then(|i| text(i, "applied_event_id")),
            updated_at_ms: item.as_ref().and_then(|i| number(i, "updated_at_ms")),
        };
        match cursor.applied_version {
            Some(v) if v == p.version => {}
            Some(v) if v > p.version => t.find(
                Level::Anomaly,
                format!("consumer {name} applied v{v}, beyond the payment's v{}", p.version),
            ),
            applied => t.find(
                Level::Warning,
                format!(
                    "consumer {name} has applied {} of {}: the rest is in the queue, held back after a gap, or in \
                     the DLQ (`paymentsctl redrive-dlq --dry-run`, `paymentsctl replay payment {}`)",
                    applied.map_or("nothing".to_owned(), |v| format!("up to v{v}")),
                    p.version,
                    p.id
                ),
            ),
        }
        if let (Some(v), Some(at)) = (cursor.applied_version, cursor.updated_at_ms) {
            let mut entry = Entry::new(at, Source::Cursor, format!("{name} at v{v}"));
            entry.version = Some(v);
            entry.detail = cursor.applied_event_id.clone().map(|id| format!("last applied {id}"));
            t.entries.push(entry);
        }
        t.cursors.push(cursor);
    }
    Ok(())
}

/// Consumer `name`'s cursor for `p` and the attribute holding its version: the projection item that carries
/// it (`applied_by` names the consumer: the order projection's since issue 43,
/// `shared::consumer::Cursor::Carried`), else its own cursor item (a consumer that keeps one, or an order item
/// not written since: the cursor item of before stops moving once the item carries it).
async fn consumer_cursor(ctx: &Ctx, name: &str, p: &Payment) -> Result<(Option<Item>, &'static str), crate::Error> {
    let carried = get(ctx, keys::order_payment(&p.order_id, &p.id))
        .await?
        .filter(|i| text(i, "applied_by").as_deref() == Some(name));
    if carried.is_some() {
        return Ok((carried, "payment_version"));
    }
    Ok((get(ctx, keys::consumer_cursor(name, &p.id)).await?, "applied_version"))
}

/// The order projection's item for `p`, checked against the payment.
pub(super) async fn projection(ctx: &Ctx, t: &mut Timeline, p: &Payment) -> Result<(), crate::Error> {
    let item = get(ctx, keys::order_payment(&p.order_id, &p.id)).await?;
    if let Some(i) = item {
        let projection = Projection {
            payment_id: p.id.to_string(),
            payment_status: text(&i, "payment_status").unwrap_or_default(),
            payment_version: number(&i, "payment_version")
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0),
            last_event: text(&i, "last_event").unwrap_or_default(),
        };
        if projection.payment_version == p.version && projection.payment_status != p.status.as_str() {
            t.find(
                Level::Anomaly,
                format!(
                    "the order projection says {} at v{} but the payment is {}",
                    projection.payment_status,
                    projection.payment_version,
                    p.status.as_str()
                ),
            );
        }
        t.projections.push(projection);
    }
    Ok(())
}

pub(super) async fn lease(ctx: &Ctx, t: &mut Timeline, id: &PaymentId, now_ms: i64) -> Result<(), crate::Error> {
    if let Some(item) = get(ctx, keys::lease(id)).await? {
        let expires_at_ms = number(&item, "expires_at_ms").unwrap_or(0);
        let view = LeaseView {
            payment_id: id.to_string(),
            owner: text(&item, "owner").unwrap_or_default(),
            expires_at_ms,
            live: expires_at_ms >= now_ms,
        };
        if view.live {
            t.find(
                Level::Note,
                format!(
                    "lease held by {} until {}: intake or recovery is working on the payment now",
                    view.owner,
                    format_ms(expires_at_ms)
                ),
            );
        }
        t.leases.push(view);
    }
    Ok(())
}

/// Parked webhooks that name this payment (id, PSP reference) or one of its PSP event ids.
pub(super) fn parked_for(t: &mut Timeline, p: &Payment, events: &[PaymentEvent], parked: &[ParkedItem]) {
    let mut needles: Vec<String> = vec![p.id.to_string()];
    needles.extend(p.psp_reference.as_ref().map(ToString::to_string));
    let event_ids: Vec<String> = events
        .iter()
        .filter_map(|e| e.psp_event_id.as_ref().map(ToString::to_string))
        .collect();
    for item in parked {
        let named = needles.iter().any(|n| item.body.contains(n.as_str())) || event_ids.contains(&item.event_key);
        if !named {
            continue;
        }
        let mut entry = Entry::new(item.recorded_at_ms, Source::Parked, item.kind.clone());
        entry.psp_event_id = Some(item.event_key.clone());
        entry.detail = Some(format!("{} (key {})", item.reason, item.key));
        entry.status = item
            .replay_result
            .as_ref()
            .map(|r| format!("replayed: {r}"))
            .unwrap_or_default();
        t.entries.push(entry);
        if item.replayed_at_ms.is_none() {
            t.find(
                Level::Warning,
                format!(
                    "webhook {} is parked as {} ({}); `paymentsctl parked replay {} --kind {} --dry-run`",
                    item.event_key, item.kind, item.reason, item.key, item.kind
                ),
            );
        }
    }
}

pub(super) async fn saga(
    ctx: &Ctx,
    t: &mut Timeline,
    order: &OrderId,
    payment: Option<&Payment>,
    opts: &Options,
) -> Result<(), crate::Error> {
    let Some(item) = get(ctx, keys::saga(order)).await? else {
        if payment.is_some() {
            t.find(
                Level::Note,
                format!("no checkout saga for order {order} (a payment created through /payments directly)"),
            );
        }
        return Ok(());
    };
    let record: SagaRecord = match serde_dynamo::from_item(item) {
        Ok(r) => r,
        Err(e) => {
            t.find(Level::Anomaly, format!("saga {order} is unreadable: {e}"));
            return Ok(());
        }
    };
    let next = match Loaded::from_record(record.clone()) {
        Ok(loaded) => describe_next(runner_step(&ctx.env, &loaded)?),
        Err(e) => {
            t.find(Level::Anomaly, format!("saga does not load: {e}"));
            "none: the saga does not load".to_owned()
        }
    };
    let log = SagaStore::new(ctx.dynamodb.clone(), ctx.table(), ctx.config.open_shards)
        .events(order)
        .await?;
    for e in &log {
        t.entries.push(saga_entry(e));
    }
    check_saga(t, &record, &log, payment, opts);
    t.saga = Some(SagaSummary {
        order_id: order.to_string(),
        status: record.status.as_str().to_owned(),
        version: record.version,
        payment_id: record.payment_id.as_ref().map(ToString::to_string),
        captured: record.captured,
        refunded_minor: record.refunded_minor,
        failure: record.failure.as_ref().map(|f| format!("{}: {}", f.step, f.reason)),
        next,
        started_at_ms: record.started_at_ms,
        updated_at_ms: record.updated_at_ms,
    });
    Ok(())
}

fn is_compensation(kind: SagaEventKind) -> bool {
    matches!(
        kind,
        SagaEventKind::PaymentRefunded
            | SagaEventKind::RefundImpossible
            | SagaEventKind::StepCompensated
            | SagaEventKind::StockReleased
    )
}

fn saga_entry(e: &SagaEvent) -> Entry {
    let mut entry = Entry::new(e.at_ms, Source::Saga, e.kind.as_str());
    entry.version = Some(e.version);
    entry.status = e.status.as_str().to_owned();
    entry.compensation = is_compensation(e.kind);
    let step = if entry.compensation {
        format!("compensates {}", e.step)
    } else {
        format!("step {}", e.step)
    };
    entry.detail = Some(match &e.detail {
        Some(d) => format!("{step}: {d}"),
        None => step,
    });
    entry.correlation_id = Some(format!("checkout-{}", e.order_id));
    entry
}

pub(super) async fn escalations(ctx: &Ctx, t: &mut Timeline, order: &OrderId, opts: &Options) {
    let url = match &opts.escalation_queue {
        Some(url) => Some(url.clone()),
        None => ctx.queue_url(QueueRole::Escalations, None).await.ok(),
    };
    let Some(url) = url else {
        t.find(
            Level::Note,
            "escalations not checked: ESCALATION_QUEUE_URL is not set (the stack's output SagaEscalationQueueUrl)",
        );
        return;
    };
    match peek(&ctx.sqs, &url).await {
        Ok(messages) => {
            for m in messages.into_iter().filter(|m| m.order_id == order.as_str()) {
                let mut entry = Entry::new(m.escalated_at_ms, Source::Escalation, "escalated");
                entry.detail = Some(format!("{} after {} attempts: {}", m.action, m.attempts, m.error));
                t.entries.push(entry);
                t.find(
                    Level::Anomaly,
                    format!(
                        "escalated: {} failed {} times; `paymentsctl escalations retry {order} --dry-run`",
                        m.action, m.attempts
                    ),
                );
                t.escalations.push(m);
            }
        }
        // The whole chain: the queue's error code is in the cause, not in the outer text.
        Err(e) => t.find(
            Level::Note,
            format!("escalations not checked: {}", ErrorChain(e.as_ref())),
        ),
    }
}
