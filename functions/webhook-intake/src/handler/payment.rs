//! Steps 3 and 4 of a webhook, the ones on the payment: find it, take its lease with a read (or, for a
//! redelivery, read first and often stop there), and apply the event through the one finalize.

use super::{retry_later, Next};
use crate::metrics::RequestMetrics;
use crate::providers::Provider;
use crate::psp_event::{Ownership, PspEvent};
use crate::redact::redact;
use crate::App;
use shared::http::ApiError;
use shared::lease::HeldLease;
use shared::store::ParkedKind;
use shared::telemetry::ErrorChain;
use shared::{
    clock, decide, telemetry, Decision, FinalizeOutcome, FinalizeResult, IgnoreReason, Observation, Payment, PaymentId,
    StoreError,
};
use std::time::Duration;
use tracing::{info, warn, Instrument};

/// Step 3: find the payment, then take its lease and read it at once (two calls side by side); the lease
/// is held from here, released on every way out, the failed read's included.
pub(super) async fn leased(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Next<(HeldLease, Payment)>, ApiError> {
    if let Some(answer) = other_stage(event, metrics) {
        return Ok(Next::Answer(answer));
    }
    let Some(payment_id) = locate(app, event).await? else {
        return unknown_payment(app, provider, event, body, metrics)
            .await
            .map(Next::Answer);
    };
    telemetry::record_payment(&tracing::Span::current(), payment_id.as_str());
    let (lease, current) = tokio::join!(
        take_lease(app, event, &payment_id, metrics),
        app.store.get(&payment_id).instrument(telemetry::step_span("read")),
    );
    // A lease taken while the read failed is released as it drops.
    let (lease, current) = (lease?, current?);
    let Some(current) = current else {
        release(lease).await;
        return unknown_payment(app, provider, event, body, metrics)
            .await
            .map(Next::Answer);
    };
    if let Some(answer) = other_psp(provider, event, &current, metrics) {
        release(lease).await;
        return Ok(Next::Answer(answer));
    }
    Ok(Next::Go((lease, current)))
}

/// Frees the payment's lease now rather than when it expires (best effort).
async fn release(lease: HeldLease) {
    if let Err(e) = lease.release().await {
        warn!(error = %ErrorChain(&e), "lease release failed; it will expire");
    }
}

/// An event from one PSP's endpoint about a payment of another PSP (invariant 13: a payment belongs to the
/// PSP recorded at its creation): acknowledged and left alone, before anything is decided or written.
fn other_psp(
    provider: &Provider,
    event: &PspEvent,
    current: &Payment,
    metrics: &mut RequestMetrics,
) -> Option<&'static str> {
    let why = match provider.psp() {
        Ok(psp) if psp == current.provider => return None,
        Ok(psp) => format!("payment {} belongs to {}, not {psp}", current.id, current.provider),
        Err(e) => format!("the endpoint names no PSP: {e}"),
    };
    Some(not_ours(event, &why, metrics))
}

/// Step 3 of a redelivery: most are retries of events already applied, so the payment is read first and
/// such an event (or one the payment has moved past) is answered from that read alone: one call, no lease.
/// Otherwise the lease is taken and the read reused; the versioned write catches a change in between.
pub(super) async fn read_first(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    observation: &Observation,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Next<(HeldLease, Payment)>, ApiError> {
    if let Some(answer) = other_stage(event, metrics) {
        return Ok(Next::Answer(answer));
    }
    let found = match locate(app, event).await? {
        Some(payment_id) => {
            telemetry::record_payment(&tracing::Span::current(), payment_id.as_str());
            app.store
                .get(&payment_id)
                .instrument(telemetry::step_span("read"))
                .await?
        }
        None => None,
    };
    let Some(current) = found else {
        return unknown_payment(app, provider, event, body, metrics)
            .await
            .map(Next::Answer);
    };
    if let Some(answer) = other_psp(provider, event, &current, metrics) {
        return Ok(Next::Answer(answer));
    }
    // The payment's record only moves forward: an event it holds, or has moved past, stays so.
    if let Decision::Ignore(reason) = decide(&current, observation, clock::now_ms()) {
        let result = FinalizeResult::Ignored(reason);
        info!(result = ?result, conflicts = 0, psp_event_id = %event.id, redelivery = true, "webhook finalized");
        return answer(result).map(Next::Answer);
    }
    let lease = take_lease(app, event, &current.id, metrics).await?;
    Ok(Next::Go((lease, current)))
}

/// The payment's lease, waited for a little; still held by another worker, a 503 the PSP retries.
async fn take_lease(
    app: &App,
    event: &PspEvent,
    payment_id: &PaymentId,
    metrics: &mut RequestMetrics,
) -> Result<HeldLease, ApiError> {
    let acquired = app
        .leases
        .acquire_waiting(payment_id, app.settings.lease_attempts, app.settings.lease_max_wait)
        .instrument(telemetry::step_span("lease"))
        .await?;
    match acquired {
        Some(lease) => Ok(app.leases.hold(lease)),
        None => {
            metrics.lease_deferrals = 1;
            // A 503 writes no item: this line is its only record (`paymentsctl timeline` reads it).
            info!(result = "Deferred(LeaseHeld)", psp_event_id = %event.id, "webhook deferred: the payment's lease is held");
            Err(retry_later("another worker is processing this payment; retry"))
        }
    }
}

/// Step 4: check the event against the endpoint, then the one finalize, which checks it against the payment
/// and releases the lease in its transaction; an event the payment refuses is recorded and quarantined.
#[allow(clippy::too_many_arguments)] // the request's parts, each step's result: one call site, above
pub(super) async fn applied(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    lease: HeldLease,
    current: Payment,
    observation: Observation,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<&'static str, ApiError> {
    let outcome = finalize(app, lease, current, observation).await?;
    metrics.version_conflicts = outcome.version_conflicts;
    if let Some(reason) = &outcome.refused {
        return quarantine(app, provider, event, reason, body, metrics).await;
    }
    info!(result = ?outcome.result, conflicts = outcome.version_conflicts, psp_event_id = %event.id, "webhook finalized");
    if outcome.result == FinalizeResult::Applied(shared::EventKind::AnomalyRecorded) {
        metrics.anomalies = 1;
    }
    answer(outcome.result)
}

/// The one finalize under the payment's lease, which its transaction releases; on a failure the lease is
/// released here, and a transient one is a 503 the PSP retries.
async fn finalize(
    app: &App,
    lease: HeldLease,
    current: Payment,
    mut observation: Observation,
) -> Result<FinalizeOutcome, ApiError> {
    let finalize_span = telemetry::step_span("finalize");
    // The event item carries the finalize step's context: the relay and the consumer continue this trace.
    observation.trace_context = telemetry::traceparent_of(&finalize_span);
    match app
        .store
        .finalize_from(current, &observation, Some(lease.lease()))
        .instrument(finalize_span)
        .await
    {
        Ok(outcome) => {
            if outcome.lease_released {
                lease.released_by_write();
            }
            // Otherwise (the lease was taken over meanwhile) `lease` tries once more when dropped.
            Ok(outcome)
        }
        Err(e) => {
            // Free the payment for the PSP's retry now rather than when the lease expires (best effort:
            // if DynamoDB is down, the lease expires by itself).
            if let Err(release) = lease.release().await {
                warn!(error = %ErrorChain(&release), "lease release after a failed finalize failed; it will expire");
            }
            Err(if e.is_transient() {
                retry_later("storage is temporarily unavailable; retry")
            } else {
                e.into()
            })
        }
    }
}

/// The event is not about the payment (the finalize recorded an anomaly and applied nothing): its redacted
/// body is parked for an operator, and the PSP is answered `quarantined`.
async fn quarantine(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    reason: &str,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<&'static str, ApiError> {
    metrics.anomalies = 1;
    metrics.quarantines = 1;
    app.store
        .park(
            ParkedKind::Quarantined,
            &provider.name,
            event.id.as_str(),
            reason,
            &redact(body),
        )
        .await?;
    warn!(
        reason,
        "webhook inconsistent with the payment: anomaly recorded, not applied"
    );
    Ok("quarantined")
}

/// What the PSP is told of a finalize's result.
fn answer(result: FinalizeResult) -> Result<&'static str, ApiError> {
    match result {
        FinalizeResult::Applied(_) => Ok("applied"),
        FinalizeResult::Ignored(IgnoreReason::Duplicate | IgnoreReason::NoOp) => Ok("duplicate"),
        FinalizeResult::Ignored(IgnoreReason::Stale) => Ok("stale"),
        FinalizeResult::Deferred(reason) => Err(retry_later(&format!("cannot apply yet ({reason:?}); retry later"))),
    }
}

/// The payment an event names: its payment id, else the payment its PSP reference is bound to.
pub(crate) async fn locate(app: &App, event: &PspEvent) -> Result<Option<PaymentId>, StoreError> {
    event.target.locate(&app.store).await
}

/// An event about another stage's object (its marker says so): acknowledged and ignored before any read or
/// lease, so it writes nothing; counted, never parked or alarmed.
fn other_stage(event: &PspEvent, metrics: &mut RequestMetrics) -> Option<&'static str> {
    match event.target.ownership(shared::metrics::stage()) {
        Ownership::OtherStage(stage) => Some(not_ours(event, &format!("marked for stage {stage}"), metrics)),
        Ownership::Claimed | Ownership::Unmarked => None,
    }
}

/// The answer to an event that is not this deployment's: `ignored`, a `ForeignEvents` count and a line
/// saying why (the PSP stops retrying; nothing to park, no one to page).
fn not_ours(event: &PspEvent, why: &str, metrics: &mut RequestMetrics) -> &'static str {
    metrics.foreign_events = 1;
    info!(result = "Ignored(NotOurs)", psp_event_id = %event.id, target = ?event.target, why, "webhook not ours; acknowledged");
    "ignored"
}

/// No payment holds the event's object. Unmarked and unbound, it is not ours (another product's or
/// system's PaymentIntent in the same PSP account): ignored at once. Claimed by our marker or payment id,
/// the webhook outran the payment's creation: 503 while the event is young (the PSP retries), then parked
/// and acknowledged, because PSPs disable endpoints that keep failing.
async fn unknown_payment(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<&'static str, ApiError> {
    if event.target.ownership(shared::metrics::stage()) != Ownership::Claimed {
        return Ok(not_ours(
            event,
            "no marker, no payment id, and no payment holds its reference",
            metrics,
        ));
    }
    let age_secs = (clock::now_ms() / 1000).saturating_sub(event.created_secs);
    let age = Duration::from_secs(u64::try_from(age_secs).unwrap_or(0));
    if age < app.settings.unknown_payment_window {
        // No payment id on the request span yet: the line names what the event does (`paymentsctl timeline`).
        info!(result = "Deferred(UnknownPayment)", psp_event_id = %event.id, target = ?event.target, "webhook deferred: payment not known yet");
        return Err(retry_later("payment not known yet; retry"));
    }
    metrics.unknown_payments = 1;
    let reason = format!("no payment for {:?} after {} s", event.target, age.as_secs());
    app.store
        .park(
            ParkedKind::UnknownPayment,
            &provider.name,
            event.id.as_str(),
            &reason,
            &redact(body),
        )
        .await?;
    warn!(reason, "webhook for an unknown payment parked");
    Ok("unknown_payment")
}
