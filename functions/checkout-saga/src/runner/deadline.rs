//! What the runner does at a saga's deadline and at its escalation (the decisions are the core's
//! `payments_core::saga::deadline`): a charge or a payment creation past its deadline is given up and
//! compensated; a wait past its deadline, or a step that kept failing, is escalated once and the saga set
//! aside, so no step is retried into the same failure (and no PSP call repeated) every sweep.

use super::{Advanced, RunError, Runner};
use crate::metrics;
use shared::psp::Psps;
use shared::saga::{passed, Loaded, OnDeadline, SagaRecord, SagaStoreError};
use shared::telemetry::ErrorChain;
use tracing::{error, info, warn};

impl<P: Psps> Runner<P> {
    /// The saga's next step, unless its state's deadline passed and gives the step up: a payment not created
    /// (the stock goes back) or a charge not answered (what it made at the PSP is canceled) in time.
    pub(super) async fn step_or_deadline(&self, loaded: Loaded) -> Result<Advanced, RunError> {
        let now = self.settings.clock.now_ms();
        let limits = self.settings.deadlines();
        if passed(loaded.record(), &limits, now) != Some(OnDeadline::Compensate) {
            return self.advance(loaded).await;
        }
        match loaded {
            Loaded::StockReserved(saga) => {
                let reason = format!("no payment created within {} s", limits.step_ms / 1000);
                let (next, event) = saga.payment_not_created(reason, now);
                self.moved(next, event, vec![]).await
            }
            Loaded::Charging(saga) => {
                warn!(order_id = %saga.order_id(), "no answer to the charge before its deadline; compensating");
                let reason = format!("no answer to the charge within {} s", limits.charge_ms / 1000);
                let (next, event) = saga.charge_failed(reason, now);
                self.moved(next, event, vec![]).await
            }
            other => self.advance(other).await,
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
        let reason = format!("still {} past its deadline", record.status);
        error!(order_id = %record.order_id, status = %record.status, action, "saga waits past its deadline; escalated");
        metrics::escalated(record, action);
        Ok(Some(self.set_aside_and_tell(loaded, action, 1, reason).await))
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
