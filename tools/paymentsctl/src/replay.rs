//! Republishing payment events and redriving the events DLQ (moved here from `outbox-relay`'s `replay`
//! binary). Safe to run twice: consumers apply each event once and in version order, and the FIFO queue drops
//! a message whose deduplication id (`<payment id>:<version>`) it saw in the last 5 minutes.
//!
//! Publishing goes through the relay's own [`outbox_relay::Publisher`] (one entry per payment per batch, the
//! order per payment kept) and the redrive through [`outbox_relay::redrive_dlq`]. A range replay scans the
//! table (the stream keeps records 24 hours only): it shows a spinner with the items scanned.

use crate::settings::{Ctx, QueueRole};
use crate::timeline::spinner;
use crate::when::format_ms;
use aws_sdk_sqs::types::QueueAttributeName;
use outbox_relay::Publisher;
use serde::Serialize;
use shared::{PaymentEvent, PaymentId};

#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub dry_run: bool,
    pub queue_url: String,
    pub events: usize,
    pub payments: usize,
    pub first_at_ms: Option<i64>,
    pub last_at_ms: Option<i64>,
    pub published: usize,
}

impl ReplayReport {
    fn new(events: &[PaymentEvent], queue_url: String, dry_run: bool) -> Self {
        let mut payments: Vec<&PaymentId> = events.iter().map(|e| &e.payment_id).collect();
        payments.sort();
        payments.dedup();
        Self {
            dry_run,
            queue_url,
            events: events.len(),
            payments: payments.len(),
            first_at_ms: events.iter().map(|e| e.recorded_at_ms).min(),
            last_at_ms: events.iter().map(|e| e.recorded_at_ms).max(),
            published: 0,
        }
    }

    pub fn render(&self) -> String {
        let span = match (self.first_at_ms, self.last_at_ms) {
            (Some(a), Some(b)) => format!(" recorded {} .. {}", format_ms(a), format_ms(b)),
            _ => String::new(),
        };
        if self.dry_run {
            format!(
                "dry run: would publish {} event(s) of {} payment(s){span} to {}; nothing sent\n",
                self.events, self.payments, self.queue_url
            )
        } else {
            format!(
                "published {} event(s) of {} payment(s){span} to {}\n",
                self.published, self.payments, self.queue_url
            )
        }
    }
}

/// Publishes `events` to the events queue (`queue`, else its setting), or with `dry_run` only counts them.
pub async fn publish(
    ctx: &Ctx,
    events: Vec<PaymentEvent>,
    queue: Option<&str>,
    dry_run: bool,
) -> Result<ReplayReport, crate::Error> {
    let url = ctx.queue_url(QueueRole::Events, queue).await?;
    let mut report = ReplayReport::new(&events, url.clone(), dry_run);
    if !dry_run {
        Publisher::new(ctx.sqs.clone(), url)
            .publish(&events)
            .await
            .map_err(|k| {
                format!(
                    "publishing stopped at event {k} of {}: run the same command again",
                    events.len()
                )
            })?;
        report.published = events.len();
    }
    Ok(report)
}

/// `replay payment <id>`: one payment's events, in version order.
pub async fn payment(ctx: &Ctx, id: &str, queue: Option<&str>, dry_run: bool) -> Result<ReplayReport, crate::Error> {
    let id = PaymentId::parse(id)?;
    let events = ctx.store().events(&id).await?;
    if events.is_empty() {
        return Err(format!("payment {id} has no events").into());
    }
    publish(ctx, events, queue, dry_run).await
}

/// `replay range --from/--to | --last`: every event recorded in `[from_ms, to_ms)`, per payment in version
/// order.
pub async fn range(
    ctx: &Ctx,
    from_ms: i64,
    to_ms: i64,
    queue: Option<&str>,
    dry_run: bool,
    progress: bool,
) -> Result<ReplayReport, crate::Error> {
    let events = range_events(ctx, from_ms, to_ms, progress).await?;
    publish(ctx, events, queue, dry_run).await
}

/// Every event recorded in `[from_ms, to_ms)`, per payment in version order (a table scan, with a spinner).
pub async fn range_events(
    ctx: &Ctx,
    from_ms: i64,
    to_ms: i64,
    progress: bool,
) -> Result<Vec<PaymentEvent>, crate::Error> {
    let bar = spinner(progress, "scanning the table for event items");
    let events = outbox_relay::events_between(&ctx.store(), from_ms, to_ms, |n| bar.inc(n)).await;
    bar.finish_and_clear();
    Ok(events?)
}

#[derive(Debug, Clone, Serialize)]
pub struct RedriveReport {
    pub dry_run: bool,
    pub dlq_url: String,
    pub queue_url: String,
    /// SQS's approximate count before the redrive (visible plus in flight).
    pub approximate: u64,
    pub moved: usize,
}

impl RedriveReport {
    pub fn render(&self) -> String {
        if self.dry_run {
            format!(
                "dry run: about {} message(s) in {} would move back to {}; nothing moved\n",
                self.approximate, self.dlq_url, self.queue_url
            )
        } else {
            format!(
                "moved {} message(s) from {} back to {}\n",
                self.moved, self.dlq_url, self.queue_url
            )
        }
    }
}

/// SQS's approximate count of the queue at `url`: visible plus in flight (`call` names the read in an error).
pub async fn approximate_count(ctx: &Ctx, url: &str, call: &str) -> Result<u64, crate::Error> {
    let attrs = ctx
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| crate::aws_error(call, e))?;
    let count = |name: QueueAttributeName| {
        attrs
            .attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(count(QueueAttributeName::ApproximateNumberOfMessages)
        + count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
}

/// `redrive-dlq [--dlq URL] [--dry-run]`.
pub async fn redrive(
    ctx: &Ctx,
    dlq: Option<&str>,
    queue: Option<&str>,
    dry_run: bool,
) -> Result<RedriveReport, crate::Error> {
    let dlq_url = ctx.queue_url(QueueRole::EventsDlq, dlq).await?;
    let queue_url = ctx.queue_url(QueueRole::Events, queue).await?;
    let approximate = approximate_count(ctx, &dlq_url, "reading the DLQ (GetQueueAttributes)").await?;
    let moved = if dry_run {
        0
    } else {
        outbox_relay::redrive_dlq(&ctx.sqs, &dlq_url, &queue_url).await?
    };
    Ok(RedriveReport {
        dry_run,
        dlq_url,
        queue_url,
        approximate,
        moved,
    })
}
