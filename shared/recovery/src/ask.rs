//! Stripe's status read: the PaymentIntent read (or, past the age, canceled first: the core's [`after_read`])
//! and recorded through the finalize.

use crate::{back_off, unasked, Reconciled, Recovery, RecoveryError};
use payments_core::recovery::{after_read, canceled_expiry, unanswered, AfterRead, Held, NothingToAsk};
use psp::{IntentStatus, PspError, Psps, StripeApi};
use shared::clock;
use shared::lease::Lease;
use shared::store::FinalizeResult;
use shared::telemetry::ErrorChain;
use shared::{Channel, CorrelationId, Payment, PspReference};
use tracing::{info, warn};

/// Reads the payment's PaymentIntent and records what it says; past the age, one still open at the PSP is
/// canceled there first ([`after_read`]).
pub(crate) async fn ask<P: Psps>(
    r: &Recovery<P>,
    asked: Asked<'_, P::Stripe>,
    open_since: &mut Option<i64>,
) -> Result<(Reconciled, bool), RecoveryError> {
    let Asked {
        psp,
        current,
        reference,
        lease,
        correlation,
    } = asked;
    let intent = match psp.retrieve(&reference).await {
        Ok(intent) => intent,
        Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
        // Its PSP does not know the reference (another account's, a caller's typo): asking again tells
        // nothing, so it waits and expires like a payment with nothing to ask.
        Err(e @ PspError::Refused { .. }) => {
            warn!(payment_id = %current.id, error = %ErrorChain(&e), "the PSP does not know the payment's reference");
            let step = unanswered(
                &current,
                NothingToAsk::UnknownToPsp,
                clock::now_ms(),
                r.settings.expire_after_ms(),
            );
            return unasked::unasked(r, current, step, lease, correlation, open_since).await;
        }
        Err(e) => return Err(e.into()),
    };
    // An authorization is released for its lapse, never for its age (`capture_before`, the core's `Held`).
    let held = (intent.status == IntentStatus::RequiresCapture).then(|| Held {
        until_ms: intent.capture_before_ms(),
    });
    match after_read(
        &current,
        intent.status.state(),
        held,
        clock::now_ms(),
        r.settings.expire_after_ms(),
    ) {
        AfterRead::Apply => record(r, current, &intent, Read::Asked, lease, correlation, open_since).await,
        AfterRead::CancelExpired => {
            let Some(canceled) = cancel_expired(psp, &current, &reference).await? else {
                return Ok((Reconciled::Deferred, false));
            };
            record(r, current, &canceled, Read::Canceled, lease, correlation, open_since).await
        }
    }
}

/// Records `intent` (as read, or as the expiring cancel left it) through the finalize: nothing new is
/// backed off, an answer about another PaymentIntent is an anomaly, a cancel that failed the payment is
/// counted as expired.
async fn record<P: Psps>(
    r: &Recovery<P>,
    current: Payment,
    intent: &psp::PaymentIntent,
    read: Read,
    lease: &Lease,
    correlation: CorrelationId,
    open_since: &mut Option<i64>,
) -> Result<(Reconciled, bool), RecoveryError> {
    let id = current.id.clone();
    let Some(mut observation) = intent
        .observation(Channel::Recovery, correlation)
        .map_err(|e| PspError::BadAnswer(e.into()))?
    else {
        info!(payment_id = %id, psp_status = intent.status.as_str(), "PSP status changes nothing");
        back_off::back_off(r, &current.id, current.created_at_ms).await;
        return Ok((Reconciled::Unchanged, false));
    };
    let now_ms = clock::now_ms();
    if read == Read::Canceled {
        observation = canceled_expiry(&current, observation, now_ms);
    }
    observation.occurred_at_ms = Some(now_ms.div_euclid(1000).saturating_mul(1000));
    let outcome = r.store.finalize_from(current, &observation, Some(lease)).await?;
    if !outcome.payment.is_open() {
        *open_since = None;
    }
    if let Some(reason) = &outcome.refused {
        warn!(payment_id = %id, reason, "PSP answer is not about this payment: anomaly recorded, not applied");
        back_off::back_off(r, &outcome.payment.id, outcome.payment.created_at_ms).await;
        return Ok((Reconciled::Refused, outcome.lease_released));
    }
    if matches!(outcome.result, FinalizeResult::Ignored(_)) && outcome.payment.is_open() {
        back_off::back_off(r, &outcome.payment.id, outcome.payment.created_at_ms).await;
    }
    info!(payment_id = %id, result = ?outcome.result, psp_status = intent.status.as_str(), "payment reconciled");
    let reconciled = match (read, outcome.result) {
        (Read::Canceled, FinalizeResult::Applied(shared::EventKind::PaymentFailed)) => Reconciled::Expired,
        (_, FinalizeResult::Applied(kind)) => Reconciled::Applied(kind),
        (_, FinalizeResult::Ignored(_) | FinalizeResult::Deferred(_)) => Reconciled::Unchanged,
    };
    Ok((reconciled, outcome.lease_released))
}

/// Cancels at the PSP a PaymentIntent still open past the age (key `<payment>:expire`), and answers it as
/// it then stands: canceled, or as the refusal carries it when it moved meanwhile (a success is then
/// recorded, not an expiry). `None` when the call was deferred (breaker open, key refused).
async fn cancel_expired(
    psp: &impl StripeApi,
    current: &Payment,
    reference: &PspReference,
) -> Result<Option<psp::PaymentIntent>, RecoveryError> {
    let key = format!("{}:expire", current.id);
    match psp.cancel(&key, reference).await {
        Ok(intent) => Ok(Some(intent)),
        Err(e) if e.is_deferred() => Ok(None),
        Err(refused) => match refused.payment_intent().cloned() {
            Some(intent) => {
                info!(payment_id = %current.id, psp_status = intent.status.as_str(),
                      "expiring cancel refused: the PaymentIntent moved meanwhile");
                Ok(Some(intent))
            }
            None => Err(refused.into()),
        },
    }
}

/// Where the PaymentIntent recorded came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Read as it stands.
    Asked,
    /// Answered by recovery's cancel of an expired payment.
    Canceled,
}

/// A payment recovery asks its PSP about, with what the look needs.
pub(crate) struct Asked<'a, S> {
    /// The payment's PSP's client (Stripe's).
    pub(crate) psp: &'a S,
    pub(crate) current: Payment,
    pub(crate) reference: PspReference,
    pub(crate) lease: &'a Lease,
    pub(crate) correlation: CorrelationId,
}
