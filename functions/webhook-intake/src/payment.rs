//! Steps 3 and 4 of every delivery, whichever scheme brought it (the Adyen path calls them too), the ones on
//! the payment: find it, read it (a redelivery often stops there), take its lease at the version read, and
//! apply the event through the one finalize ([`on_payment_with`]).
//!
//! Every step reads the same delivery (the intake, the endpoint, the event, its body) and counts into the
//! same metrics: they travel together as one [`Delivery`]. The lease and the finalize under it are
//! `shared::apply`'s, the sequence `paymentsctl parked replay` runs too.

use crate::answer::{retry_later, Answer, Flow};
use crate::app::App;
use crate::metrics::RequestMetrics;
use crate::providers::Provider;
use crate::psp_event::{Ownership, PspEvent};
use crate::redact::redact;
use shared::apply::{finalize_leased, ApplyError, LeaseWait};
use shared::http::ApiError;
use shared::lease::HeldLease;
use shared::store::ParkedKind;
use shared::telemetry::ErrorChain;
use shared::{
    clock, decide, telemetry, Decision, FinalizeOutcome, FinalizeResult, Observation, Payment, PaymentId, StoreError,
};

/// One delivery on its way through the steps on the payment: what each step reads, and the request's
/// metrics each counts into.
pub(crate) struct Delivery<'a> {
    pub app: &'a App,
    pub provider: &'a Provider,
    pub event: &'a PspEvent,
    /// The body as delivered: parked (redacted) when the event is quarantined or its payment unknown.
    pub body: &'a [u8],
    pub metrics: &'a mut RequestMetrics,
}
use std::time::Duration;
use tracing::{info, warn, Instrument};

/// Step 3: find the payment and read it, then take its lease at the version read (the lease's condition
/// needs that version, so the two calls follow each other); the lease is held from here, released on every
/// way out.
pub(crate) async fn leased(d: &mut Delivery<'_>) -> Result<Flow<(HeldLease, Payment)>, ApiError> {
    let current = match read(d).await? {
        Flow::Go(current) => current,
        Flow::Answered(answer) => return Ok(Flow::Answered(answer)),
    };
    take_lease(d, current).await.map(Flow::Go)
}

/// Finds the event's payment and reads it: an event of another stage, of no payment or of another PSP's
/// payment is answered here, before any lease is taken or anything written.
async fn read(d: &mut Delivery<'_>) -> Result<Flow<Payment>, ApiError> {
    if let Some(answer) = other_stage(d) {
        return Ok(Flow::Answered(answer));
    }
    let found = match locate(d.app, d.event).await? {
        Some(payment_id) => {
            telemetry::record_payment(&tracing::Span::current(), payment_id.as_str());
            d.app
                .store
                .get(&payment_id)
                .instrument(telemetry::step_span("read"))
                .await?
        }
        None => None,
    };
    let Some(current) = found else {
        return unknown_payment(d).await.map(Flow::Answered);
    };
    if let Some(answer) = other_psp(d, &current) {
        return Ok(Flow::Answered(answer));
    }
    Ok(Flow::Go(current))
}

/// An event from one PSP's endpoint about a payment of another PSP (invariant 13: a payment belongs to the
/// PSP recorded at its creation): acknowledged and left alone, before anything is decided or written.
fn other_psp(d: &mut Delivery<'_>, current: &Payment) -> Option<Answer> {
    let why = match d.provider.psp() {
        Ok(psp) if psp == current.provider => return None,
        Ok(psp) => format!("payment {} belongs to {}, not {psp}", current.id, current.provider),
        Err(e) => format!("the endpoint names no PSP: {e}"),
    };
    Some(not_ours(d, &why))
}

/// Step 3 of a redelivery: most are retries of events already applied, so such an event (or one the payment
/// has moved past) is answered from the read alone: one call, no lease. Otherwise the lease is taken at the
/// version read, as for a first delivery; the versioned write catches a change in between.
pub(crate) async fn read_first(
    d: &mut Delivery<'_>,
    observation: &Observation,
) -> Result<Flow<(HeldLease, Payment)>, ApiError> {
    let current = match read(d).await? {
        Flow::Go(current) => current,
        Flow::Answered(answer) => return Ok(Flow::Answered(answer)),
    };
    // The payment's record only moves forward: an event it holds, or has moved past, stays so.
    if let Decision::Ignore(reason) = decide(&current, observation, clock::now_ms()) {
        let result = FinalizeResult::Ignored(reason);
        info!(result = ?result, conflicts = 0, psp_event_id = %d.event.id, redelivery = true, "webhook finalized");
        return Answer::of(result).map(Flow::Answered);
    }
    take_lease(d, current).await.map(Flow::Go)
}

/// The lease of `current` (as just read), waited for a little, with the payment it was taken at; still held
/// by another worker after the wait: a 503 (see [`lease_held`]).
async fn take_lease(d: &mut Delivery<'_>, current: Payment) -> Result<(HeldLease, Payment), ApiError> {
    let settings = &d.app.settings;
    let wait = LeaseWait::attempts(settings.lease_attempts, settings.lease_max_wait);
    let held = d
        .app
        .leases
        .hold_waiting(&d.app.store, current, wait)
        .instrument(telemetry::step_span("lease"))
        .await?;
    held.ok_or_else(|| lease_held(d))
}

/// The lease another worker still holds after the wait: a 503 the PSP retries.
fn lease_held(d: &mut Delivery<'_>) -> ApiError {
    d.metrics.lease_deferrals = 1;
    // A 503 writes no item: this line is its only record (`paymentsctl timeline` reads it).
    info!(result = "Deferred(LeaseHeld)", psp_event_id = %d.event.id, "webhook deferred: the payment's lease is held");
    retry_later("another worker is processing this payment; retry")
}

/// Step 4: check the event against the endpoint, then the one finalize, which checks it against the payment
/// and frees the lease with its write; an event the payment refuses is recorded and quarantined.
pub(crate) async fn finalized(
    d: &mut Delivery<'_>,
    lease: HeldLease,
    current: Payment,
    observation: Observation,
) -> Result<Answer, ApiError> {
    let outcome = finalize(d.app, lease, current, observation).await?;
    d.metrics.version_conflicts = outcome.version_conflicts;
    if let Some(reason) = &outcome.refused {
        return quarantine(d, reason).await;
    }
    info!(result = ?outcome.result, conflicts = outcome.version_conflicts, psp_event_id = %d.event.id, "webhook finalized");
    if outcome.result == FinalizeResult::Applied(shared::EventKind::AnomalyRecorded) {
        d.metrics.anomalies = 1;
    }
    Answer::of(outcome.result)
}

/// The one finalize under the payment's lease (`shared::apply`'s: the write frees it, a failure releases it
/// before it is returned); a transient failure is a 503 the PSP retries.
async fn finalize(
    app: &App,
    lease: HeldLease,
    current: Payment,
    mut observation: Observation,
) -> Result<FinalizeOutcome, ApiError> {
    let finalize_span = telemetry::step_span("finalize");
    // The event item carries the finalize step's context: the relay and the consumer continue this trace.
    observation.trace_context = telemetry::traceparent_of(&finalize_span);
    finalize_leased(&app.store, lease, current, &observation)
        .instrument(finalize_span)
        .await
        .map_err(|e| match e {
            ApplyError::Store { source, release } => {
                if let Some(release) = release {
                    warn!(error = %ErrorChain(&release), "lease release after a failed finalize failed; it will expire");
                }
                if source.is_transient() {
                    retry_later("storage is temporarily unavailable; retry")
                } else {
                    source.into()
                }
            }
            held @ ApplyError::LeaseHeld { .. } => retry_later(&held.to_string()),
        })
}

/// The event is not about the payment (the finalize recorded an anomaly and applied nothing): its redacted
/// body is parked for an operator, and the PSP is answered `quarantined`.
async fn quarantine(d: &mut Delivery<'_>, reason: &str) -> Result<Answer, ApiError> {
    d.metrics.anomalies = 1;
    d.metrics.quarantines = 1;
    d.app
        .store
        .park(
            ParkedKind::Quarantined,
            &d.provider.name,
            d.event.id.as_str(),
            reason,
            &redact(d.body),
        )
        .await?;
    warn!(
        reason,
        "webhook inconsistent with the payment: anomaly recorded, not applied"
    );
    Ok(Answer::Quarantined)
}

/// The payment an event names: its payment id, else the payment its PSP reference is bound to.
pub(crate) async fn locate(app: &App, event: &PspEvent) -> Result<Option<PaymentId>, StoreError> {
    event.target.locate(&app.store).await
}

/// An event about another stage's object (its marker says so): acknowledged and ignored before any read or
/// lease, so it writes nothing; counted, never parked or alarmed.
fn other_stage(d: &mut Delivery<'_>) -> Option<Answer> {
    match d.event.target.ownership(shared::metrics::stage()) {
        Ownership::OtherStage(stage) => Some(not_ours(d, &format!("marked for stage {stage}"))),
        Ownership::Claimed | Ownership::Unmarked => None,
    }
}

/// The answer to an event that is not this deployment's: `ignored`, a `ForeignEvents` count and a line
/// saying why (the PSP stops retrying; nothing to park, no one to page).
fn not_ours(d: &mut Delivery<'_>, why: &str) -> Answer {
    d.metrics.foreign_events = 1;
    info!(result = "Ignored(NotOurs)", psp_event_id = %d.event.id, target = ?d.event.target, why, "webhook not ours; acknowledged");
    Answer::Ignored
}

/// No payment holds the event's object. Unmarked and unbound, it is not ours (another product's or
/// system's PaymentIntent in the same PSP account): ignored at once. Claimed by our marker or payment id,
/// the webhook outran the payment's creation: 503 while the event is young (the PSP retries), then parked
/// and acknowledged, because PSPs disable endpoints that keep failing.
async fn unknown_payment(d: &mut Delivery<'_>) -> Result<Answer, ApiError> {
    let (app, event) = (d.app, d.event);
    if event.target.ownership(shared::metrics::stage()) != Ownership::Claimed {
        return Ok(not_ours(
            d,
            "no marker, no payment id, and no payment holds its reference",
        ));
    }
    let age_secs = (clock::now_ms() / 1000).saturating_sub(event.created_secs);
    let age = Duration::from_secs(u64::try_from(age_secs).unwrap_or(0));
    if age < app.settings.unknown_payment_window {
        // No payment id on the request span yet: the line names what the event does (`paymentsctl timeline`).
        info!(result = "Deferred(UnknownPayment)", psp_event_id = %event.id, target = ?event.target, "webhook deferred: payment not known yet");
        return Err(retry_later("payment not known yet; retry"));
    }
    d.metrics.unknown_payments = 1;
    let reason = format!("no payment for {:?} after {} s", event.target, age.as_secs());
    app.store
        .park(
            ParkedKind::UnknownPayment,
            &d.provider.name,
            event.id.as_str(),
            &reason,
            &redact(d.body),
        )
        .await?;
    warn!(reason, "webhook for an unknown payment parked");
    Ok(Answer::UnknownPayment)
}

/// Steps 3 and 4 of every scheme's event, with its observation made (Adyen's carries no event time): read it
/// first (a redelivery) or take the lease, then the one finalize.
pub(crate) async fn on_payment_with(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    observation: shared::Observation,
    redelivery: bool,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let mut delivery = Delivery {
        app,
        provider,
        event,
        body,
        metrics,
    };
    let step = if redelivery {
        read_first(&mut delivery, &observation).await?
    } else {
        leased(&mut delivery).await?
    };
    let (lease, current) = match step {
        Flow::Go(held) => held,
        Flow::Answered(answer) => return Ok(answer),
    };
    finalized(&mut delivery, lease, current, observation).await
}
