//! Adyen items accepted but not applicable yet, and their retry.
//!
//! Adyen answers a 503 by retrying the endpoint's whole queue, every payment's notifications behind the one
//! that failed. So the intake accepts an item it cannot apply now (its payment's lease held, its payment not
//! written yet, a refund or dispute before the capture, storage refusing the write) and parks it
//! ([`ParkedKind::Retrying`]): the verified item's signed fields, the verifying key's mode and when it was
//! first received, nothing else (no signature, no `additionalData`; a reason only for a refusal). The retry
//! ([`run`], on the catch-up job's schedule) applies each parked item through the same steps as its
//! delivery, read first as a redelivery; one that is done (applied, a duplicate, stale, quarantined, parked
//! as an unknown payment after the intake's unknown-payment window) is removed. One still not applicable
//! after [`IntakeSettings::adyen_retry_deadline`](crate::IntakeSettings) is quarantined, which alarms
//! (`Quarantines`), and removed: the wait ends, an operator takes it from there (`paymentsctl parked`).
//!
//! Parking is idempotent per item: an item parked again (Adyen's duplicate delivery) keeps its first time.

use super::intake::{handle, Handled};
use super::parked::ParkedItem;
use crate::app::App;
use crate::metrics::RequestMetrics;
use crate::providers::Provider;
use serde::Serialize;
use shared::store::ParkedKind;
use shared::{clock, CorrelationId, StoreError};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{info, warn};

/// What one retry run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetryReport {
    /// Parked items looked at.
    pub retried: u32,
    /// Done with now (applied, duplicate, stale, ignored, quarantined, unknown payment): removed.
    pub done: u32,
    /// Still not applicable, within their deadline: left for the next run.
    pub waiting: u32,
    /// Past their deadline: quarantined (alarmed) and removed.
    pub expired: u32,
    /// Parked bodies that are not an item (written by hand?): quarantined and removed.
    pub unreadable: u32,
}

/// Retries the parked items of `provider` until `until`; an item past `deadline` since its first receipt
/// is quarantined. `Err` when storage fails (the next run goes on).
pub async fn run(
    app: &App,
    provider: &Provider,
    deadline: Duration,
    until: Instant,
) -> Result<RetryReport, StoreError> {
    let mut report = RetryReport::default();
    let parked = app.store.parked(ParkedKind::Retrying).await?;
    for entry in parked.iter().filter(|p| p.provider == provider.name) {
        if Instant::now() >= until {
            break;
        }
        report.retried = report.retried.saturating_add(1);
        let Ok(item) = serde_json::from_str::<ParkedItem>(&entry.body) else {
            report.unreadable = report.unreadable.saturating_add(1);
            expire(
                app,
                provider,
                &entry.event_key,
                "parked Adyen item unreadable",
                &entry.body,
            )
            .await?;
            continue;
        };
        let mut metrics = RequestMetrics {
            provider: provider.name.clone(),
            ..RequestMetrics::default()
        };
        let correlation = CorrelationId::derived("adyen-retry", &entry.event_key);
        match handle(app, provider, &item, true, correlation, &mut metrics).await {
            Ok(Handled::Done(answer)) => {
                app.store
                    .unpark(ParkedKind::Retrying, &provider.name, &entry.event_key)
                    .await?;
                info!(key = %entry.event_key, answer = answer.as_str(), "parked Adyen item done with");
                report.done = report.done.saturating_add(1);
                metrics.result = answer.as_str().to_owned();
            }
            Ok(Handled::NotNow(why)) | Err(why) if past(&item, deadline) => {
                let reason = format!(
                    "not applicable within {} s of its receipt: {}",
                    deadline.as_secs(),
                    why.message
                );
                expire(app, provider, &entry.event_key, &reason, &entry.body).await?;
                metrics.quarantines = 1;
                metrics.result = "quarantined".to_owned();
                report.expired = report.expired.saturating_add(1);
            }
            Ok(Handled::NotNow(_)) | Err(_) => {
                report.waiting = report.waiting.saturating_add(1);
                metrics.result = "parked".to_owned();
            }
        }
        metrics.emit();
    }
    Ok(report)
}

fn past(item: &ParkedItem, deadline: Duration) -> bool {
    let age = (clock::now_ms() / 1000).saturating_sub(item.created);
    u64::try_from(age).is_ok_and(|age| age >= deadline.as_secs())
}

/// The end of an item's wait: quarantined for an operator (the `Quarantines` alarm), then removed here.
async fn expire(app: &App, provider: &Provider, key: &str, reason: &str, body: &str) -> Result<(), StoreError> {
    app.store
        .park(ParkedKind::Quarantined, &provider.name, key, reason, body)
        .await?;
    app.store.unpark(ParkedKind::Retrying, &provider.name, key).await?;
    warn!(key, reason, "Adyen item quarantined after its retry deadline");
    Ok(())
}
