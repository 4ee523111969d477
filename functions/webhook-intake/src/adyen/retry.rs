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
use crate::handler::App;
use crate::metrics::RequestMetrics;
use crate::providers::Provider;
use crate::psp_event::{Parsed, Unparseable};
use crate::redact::redact;
use serde::{Deserialize, Serialize};
use shared::http::ApiError;
use shared::store::ParkedKind;
use shared::{clock, CorrelationId, StoreError};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{info, warn};
use webhook_signatures::adyen::{Item, Mode};

/// A verified item as parked: what a retry needs to apply it as its delivery would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedItem {
    #[serde(flatten)]
    pub item: Item,
    /// The mode of the key that verified it.
    pub livemode: bool,
    /// When it was first received (epoch seconds): the start of its unknown-payment window and deadline.
    pub created: i64,
}

impl ParkedItem {
    /// The item as it may be kept: the signed fields, and a reason only for a refusal (an authorisation's
    /// reason holds the card's last digits and expiry).
    pub fn new(mut item: Item, mode: Mode, received_secs: i64) -> Self {
        item.additional_data = None;
        if item.success.as_deref() != Some("false") {
            item.reason = None;
        }
        Self {
            item,
            livemode: mode.is_live(),
            created: received_secs,
        }
    }

    pub fn mode(&self) -> Mode {
        if self.livemode {
            Mode::Live
        } else {
            Mode::Test
        }
    }

    /// The JSON kept (and redacted again by the parking, which keeps exactly these fields).
    pub fn to_body(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The key it is parked under: its identity when it has one (what the dedup uses), else a hash of what
    /// Adyen signed, so one item is one parked entry however often it comes.
    pub fn key(&self) -> String {
        use sha2::{Digest, Sha256};
        match super::fact::parse(&self.item, self.mode(), self.created) {
            Ok(Some(n)) => n.event.id.to_string(),
            _ => format!(
                "sha256-{}",
                hex::encode(Sha256::digest(self.item.signing_string().as_bytes()))
            ),
        }
    }
}

/// Parks an item the intake cannot apply now, saying why; `Err` (a 503) only if even that fails.
pub(super) async fn park(app: &App, provider: &Provider, parked: &ParkedItem, why: &ApiError) -> Result<(), ApiError> {
    let key = parked.key();
    app.store
        .park(
            ParkedKind::Retrying,
            &provider.name,
            &key,
            &why.message,
            &redact(&parked.to_body()),
        )
        .await?;
    info!(result = "Parked(Retrying)", psp_event_id = %key, reason = %why.message, "Adyen item accepted and parked for the retry");
    Ok(())
}

/// A parked item's body read back as the intake reads it (`paymentsctl parked`): its event, with the
/// outcome of a payment without a capture for a `CANCEL_OR_REFUND` (the intake decides that on the payment).
pub fn parse_parked(body: &[u8]) -> Result<Parsed, Unparseable> {
    let parked: ParkedItem = serde_json::from_slice(body).map_err(Unparseable::because)?;
    Ok(match super::fact::parse(&parked.item, parked.mode(), parked.created)? {
        Some(n) => Parsed::Event(Box::new(n.event)),
        None => Parsed::Ignored {
            event_type: parked.item.event_code.unwrap_or_default(),
        },
    })
}

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
                info!(key = %entry.event_key, answer, "parked Adyen item done with");
                report.done = report.done.saturating_add(1);
                metrics.result = answer.to_owned();
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
