//! What the runner does at a saga's deadline and at its escalation (the decisions are the core's
//! `payments_core::saga::deadline`): a charge or a payment creation past its deadline is given up and
//! compensated (the core's `Loaded::next_at` gives that step, `Next::GiveUpCharge` or
//! `Next::PaymentNotCreated`, and `Runner::advance` dispatches on it like on any other); a wait past its
//! deadline, or a step that kept failing, is escalated once and the saga set aside, so no step is retried
//! into the same failure (and no PSP call repeated) every sweep. The sweeper acts on a deadline that passed
//! also when the resume could not (it was cut, or the PSP call deferred): a saga past its deadline is never
//! simply deferred again.
//!
//! A charge given up while the PSP cannot be called for a fault of ours (it refuses our API key, or its
//! breaker is open) is recorded as that fault, never as the customer's decline (invariant 12), and escalated
//! once: the customer was told "failed" because of us. Nothing is charged by giving it up: its cancel still
//! searches the PSP for what the charge made before the payment is failed.

use super::error::RunError;
use super::escalate;
use super::settings::Settings;
use super::transition::{moved, Advanced, StepCtx};
use crate::metrics;
use crate::saga::{Charging, Loaded, Saga, StockReserved};
use psp::{PspError, PspRoute, Psps, StripeApi};
use shared::store::PaymentStore;
use shared::PaymentId;
use std::time::Duration;
use tracing::{error, warn};

/// How long the look at the PSP of a charge given up waits (the PSP's own timeouts are longer): it only
/// names the cause, the cancel asks again.
const CAUSE_LOOK: Duration = Duration::from_secs(5);

/// The action recorded on a charge given up for a fault of ours.
const CHARGE: &str = "charge";

/// No payment created before the step's deadline (`Next::PaymentNotCreated`): nothing was charged, the
/// stock goes back.
pub(super) async fn payment_not_created(
    step: StepCtx<'_>,
    settings: &Settings,
    saga: Saga<StockReserved>,
) -> Result<Advanced, RunError> {
    let reason = format!("no payment created within {} s", settings.deadlines().step_ms / 1000);
    let (next, event) = saga.payment_not_created(reason, step.now);
    moved(step.sagas, next, event, vec![]).await
}

/// The charge unanswered past its deadline: compensated, with the reason. A fault of ours that kept the
/// PSP from answering is named as such and escalated once (unless the saga was escalated already: it stays
/// set aside, `Saga::charge_given_up`, so the cancel's failures escalate no more).
pub(super) async fn charge_given_up<P: Psps>(
    psps: &P,
    step: StepCtx<'_>,
    settings: &Settings,
    saga: Saga<Charging>,
) -> Result<Advanced, RunError> {
    let charge_ms = settings.deadlines().charge_ms;
    let unanswered = format!("no answer to the charge within {} s", charge_ms / 1000);
    let fault = fault_of_ours(psps, step.payments, saga.payment_id()).await;
    let escalated_before = saga.record().set_aside.is_some();
    warn!(order_id = %saga.order_id(), fault = fault.as_deref().unwrap_or("none"),
          "no answer to the charge before its deadline; compensating");
    let reason = match &fault {
        Some(fault) => format!("{unanswered}: {fault}, not the customer's decline"),
        None => unanswered,
    };
    let (next, event) = saga.charge_given_up(reason.clone(), step.now);
    let advanced = moved(step.sagas, next, event, vec![]).await?;
    let Advanced::Moved(next) = advanced else {
        return Ok(advanced);
    };
    if fault.is_none() || escalated_before {
        return Ok(Advanced::Moved(next));
    }
    error!(order_id = %next.record().order_id, reason, "checkout given up for a fault of ours; escalated");
    metrics::escalated(next.record(), CHARGE);
    // Set aside at the clock's time now: the look at the PSP above may have taken seconds.
    let later = StepCtx {
        now: settings.clock.now_ms(),
        ..step
    };
    let aside = escalate::set_aside_and_tell(later, *next, CHARGE, 1, reason).await;
    let aside = Loaded::from_record(aside).map_err(|e| RunError::Invalid(e.to_string()))?;
    Ok(Advanced::Moved(Box::new(aside)))
}

/// Why the PSP did not answer, when the fault is ours: a deployment fault (the PSP refuses our API key, or
/// this deployment holds no client of the payment's PSP) or the PSP's circuit breaker open. Asked with the
/// search the cancel makes next (by the payment's id, of the payment's own PSP), whose answer only names
/// the cause here; anything else, or no answer soon, names none (Adyen has no read to ask with). No key
/// or message of the PSP's is kept: the text is stored and escalated.
async fn fault_of_ours<P: Psps>(psps: &P, payments: &PaymentStore, payment: &PaymentId) -> Option<String> {
    let provider = payments.get(payment).await.ok().flatten()?.provider;
    let answer = match psps.route(&provider) {
        PspRoute::Stripe(psp) => tokio::time::timeout(CAUSE_LOOK, psp.find_for_payment(payment))
            .await
            .ok()?,
        PspRoute::Missing(provider) => Err(PspError::NotConfigured(provider)),
        PspRoute::Adyen(_) => return None,
    };
    match answer.err()? {
        PspError::AuthFailed { status, .. } => {
            Some(format!("deployment fault: the PSP refused our API key (HTTP {status})"))
        }
        PspError::NotConfigured(provider) => Some(format!(
            "deployment fault: no client of PSP {provider} in this deployment"
        )),
        PspError::CircuitOpen { .. } => {
            Some("PSP calls paused by its circuit breaker (the PSP failing, or a deployment fault)".into())
        }
        _ => None,
    }
}
