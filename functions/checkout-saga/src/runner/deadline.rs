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

use super::{action_name, Advanced, RunError, Runner};
use crate::metrics;
use crate::saga::{passed, Charging, Loaded, Next, OnDeadline, Saga, SagaRecord, SagaStoreError, StockReserved};
use psp::{PspError, PspRoute, Psps, StripeApi};
use shared::telemetry::ErrorChain;
use shared::PaymentId;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{error, info, warn};

/// How long the look at the PSP of a charge given up waits (the PSP's own timeouts are longer): it only
/// names the cause, the cancel asks again.
const CAUSE_LOOK: Duration = Duration::from_secs(5);

/// The action recorded on a charge given up for a fault of ours.
const CHARGE: &str = "charge";

impl<P: Psps> Runner<P> {
    /// No payment created before the step's deadline (`Next::PaymentNotCreated`): nothing was charged, the
    /// stock goes back.
    pub(super) async fn payment_not_created(&self, saga: Saga<StockReserved>, now: i64) -> Result<Advanced, RunError> {
        let reason = format!(
            "no payment created within {} s",
            self.settings.deadlines().step_ms / 1000
        );
        let (next, event) = saga.payment_not_created(reason, now);
        self.moved(next, event, vec![]).await
    }

    /// The charge unanswered past its deadline: compensated, with the reason. A fault of ours that kept the
    /// PSP from answering is named as such and escalated once (unless the saga was escalated already: it stays
    /// set aside, `Saga::charge_given_up`, so the cancel's failures escalate no more).
    pub(super) async fn charge_given_up(&self, saga: Saga<Charging>, now: i64) -> Result<Advanced, RunError> {
        let charge_ms = self.settings.deadlines().charge_ms;
        let unanswered = format!("no answer to the charge within {} s", charge_ms / 1000);
        let fault = self.fault_of_ours(saga.payment_id()).await;
        let escalated_before = saga.record().set_aside.is_some();
        warn!(order_id = %saga.order_id(), fault = fault.as_deref().unwrap_or("none"),
              "no answer to the charge before its deadline; compensating");
        let reason = match &fault {
            Some(fault) => format!("{unanswered}: {fault}, not the customer's decline"),
            None => unanswered,
        };
        let (next, event) = saga.charge_given_up(reason.clone(), now);
        let moved = self.moved(next, event, vec![]).await?;
        let Advanced::Moved(next) = moved else {
            return Ok(moved);
        };
        if fault.is_none() || escalated_before {
            return Ok(Advanced::Moved(next));
        }
        error!(order_id = %next.record().order_id, reason, "checkout given up for a fault of ours; escalated");
        metrics::escalated(next.record(), CHARGE);
        let aside = self.set_aside_and_tell(*next, CHARGE, 1, reason).await;
        let aside = Loaded::from_record(aside).map_err(|e| RunError::Invalid(e.to_string()))?;
        Ok(Advanced::Moved(Box::new(aside)))
    }

    /// Why the PSP did not answer, when the fault is ours: a deployment fault (the PSP refuses our API key, or
    /// this deployment holds no client of the payment's PSP) or the PSP's circuit breaker open. Asked with the
    /// search the cancel makes next (by the payment's id, of the payment's own PSP), whose answer only names
    /// the cause here; anything else, or no answer soon, names none (Adyen has no read to ask with). No key
    /// or message of the PSP's is kept: the text is stored and escalated.
    async fn fault_of_ours(&self, payment: &PaymentId) -> Option<String> {
        let provider = self.payments().get(payment).await.ok().flatten()?.provider;
        let answer = match self.psps().route(&provider) {
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

    /// For the sweeper, a saga its resume left open (or that a cut or failed resume left as it was): past
    /// its state's deadline it is acted on now, never only deferred to its next look: compensated (while
    /// time is left before `deadline`; else the next resume does it first) or escalated once and set aside.
    /// The saga as it then stands.
    pub async fn act_on_deadline(&self, loaded: Loaded, deadline: Instant) -> Result<SagaRecord, RunError> {
        let before = loaded.record().clone();
        let (limits, now) = (self.settings.deadlines(), self.settings.clock.now_ms());
        match loaded.clone().next_at(&limits, now) {
            given_up @ (Next::PaymentNotCreated(_) | Next::GiveUpCharge(_)) if Instant::now() < deadline => {
                // Boxed: every step's future is in `advance`'s, too large to inline into the sweeper's.
                let acted = tokio::time::timeout_at(deadline, Box::pin(self.advance(given_up, now))).await;
                Ok(match acted.map_err(|_| RunError::OutOfTime)?? {
                    Advanced::Moved(next) => next.record().clone(),
                    Advanced::Stopped => before,
                })
            }
            _ if passed(&before, &limits, now) == Some(OnDeadline::Escalate) && before.set_aside.is_none() => {
                let action = action_name(&self.settings, &loaded);
                Ok(self.escalate_past_deadline(loaded, action).await)
            }
            _ => Ok(before),
        }
    }

    /// A saga that waits (for the PSP's or the customer's outcome): past its state's deadline a person is told
    /// once and the saga set aside; it keeps waiting (news still resumes it).
    pub(super) async fn waiting(&self, loaded: Loaded, action: &'static str) -> Result<Option<SagaRecord>, RunError> {
        let now = self.settings.clock.now_ms();
        let record = loaded.record();
        if record.set_aside.is_some() || passed(record, &self.settings.deadlines(), now) != Some(OnDeadline::Escalate) {
            return Ok(Some(loaded.record().clone()));
        }
        Ok(Some(self.escalate_past_deadline(loaded, action).await))
    }

    /// A saga still in its state past the state's deadline, not escalated yet: escalated once and set aside.
    async fn escalate_past_deadline(&self, loaded: Loaded, action: &'static str) -> SagaRecord {
        let record = loaded.record();
        let reason = format!("still {} past its deadline", record.status);
        error!(order_id = %record.order_id, status = %record.status, action, "saga past its deadline; escalated");
        metrics::escalated(record, action);
        self.set_aside_and_tell(loaded, action, 1, reason).await
    }

    /// The first escalation of a saga: recorded on it (set aside, see `sweeper`), then sent to the escalation
    /// queue. A saga that moved meanwhile is not escalated (another worker got further, or escalated it). If
    /// the record cannot be saved, the message is sent all the same: an escalation is never lost, at the cost
    /// of a second one later. The saga as it now stands.
    pub(super) async fn set_aside_and_tell(
        &self,
        loaded: Loaded,
        action: &'static str,
        attempts: u32,
        reason: String,
    ) -> SagaRecord {
        let order = loaded.record().order_id.clone();
        let kept = shared::text::sanitized(&reason, shared::text::MAX_REASON_CHARS);
        let (aside, event) = loaded.clone().set_aside(action, kept, self.settings.clock.now_ms());
        let current = match self.sagas.save_loaded(&aside, &event).await {
            Ok(()) => {
                info!(order_id = %order, action, "saga set aside after its escalation");
                aside.record().clone()
            }
            Err(SagaStoreError::Conflict(_)) => {
                warn!(order_id = %order, action, "saga moved before it was set aside; not escalated");
                return loaded.record().clone();
            }
            Err(e) => {
                warn!(order_id = %order, error = %ErrorChain(&e), "could not set the saga aside; escalating anyway");
                loaded.record().clone()
            }
        };
        if let Err(send) = self.escalation.escalate(&order, action, attempts, &reason).await {
            // The saga is set aside: the sweeper still looks at it on its schedule; the alarm on failed sends
            // (and this log) tell a person.
            error!(order_id = %order, error = %ErrorChain(&send), "escalation could not be sent");
        }
        current
    }
}
