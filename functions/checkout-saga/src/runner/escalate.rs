//! A saga escalated once: a step that kept failing ([`step_failed`]) or a wait past its deadline
//! ([`waiting`]) is recorded on the saga (set aside, see `sweeper`) and sent to the escalation queue; once set
//! aside, later failures are logged, not escalated again.

use super::error::RunError;
use super::settings::Settings;
use super::transition::StepCtx;
use crate::metrics;
use crate::saga::{passed, Loaded, OnDeadline, SagaRecord, SagaStoreError};
use shared::telemetry::ErrorChain;
use tracing::{error, info, warn};

/// A step that kept failing: escalated and set aside the first time; once set aside, later failures of
/// the saga (a sweep on its schedule, news, a repeated start) are logged but not escalated again. The error
/// the run ends with.
pub(super) async fn step_failed(
    step: StepCtx<'_>,
    loaded: Loaded,
    action: &'static str,
    attempts: u32,
    e: RunError,
) -> RunError {
    let record = loaded.record().clone();
    let error = ErrorChain(&e).to_string();
    if let Some(aside) = &record.set_aside {
        warn!(order_id = %record.order_id, status = %record.status, action, attempts, error,
              set_aside_at_ms = aside.at_ms, "saga step still failing; set aside, not escalated again");
    } else {
        error!(order_id = %record.order_id, status = %record.status, action, attempts, error,
               "saga step keeps failing; escalated");
        metrics::escalated(&record, action);
        set_aside_and_tell(step, loaded, action, attempts, error).await;
    }
    RunError::Escalated {
        order_id: record.order_id.to_string(),
        action,
        attempts,
        error: Box::new(e),
    }
}

/// A saga that waits (for the PSP's or the customer's outcome): past its state's deadline a person is told
/// once and the saga set aside; it keeps waiting (news still resumes it).
pub(super) async fn waiting(
    step: StepCtx<'_>,
    settings: &Settings,
    loaded: Loaded,
    action: &'static str,
) -> Result<Option<SagaRecord>, RunError> {
    let record = loaded.record();
    if record.set_aside.is_some() || passed(record, &settings.deadlines(), step.now) != Some(OnDeadline::Escalate) {
        return Ok(Some(loaded.record().clone()));
    }
    Ok(Some(escalate_past_deadline(step, loaded, action).await))
}

/// A saga still in its state past the state's deadline, not escalated yet: escalated once and set aside.
pub(super) async fn escalate_past_deadline(step: StepCtx<'_>, loaded: Loaded, action: &'static str) -> SagaRecord {
    let record = loaded.record();
    let reason = format!("still {} past its deadline", record.status);
    error!(order_id = %record.order_id, status = %record.status, action, "saga past its deadline; escalated");
    metrics::escalated(record, action);
    set_aside_and_tell(step, loaded, action, 1, reason).await
}

/// The first escalation of a saga: recorded on it (set aside, see `sweeper`), then sent to the escalation
/// queue. A saga that moved meanwhile is not escalated (another worker got further, or escalated it). If
/// the record cannot be saved, the message is sent all the same: an escalation is never lost, at the cost
/// of a second one later. The saga as it now stands.
pub(super) async fn set_aside_and_tell(
    step: StepCtx<'_>,
    loaded: Loaded,
    action: &'static str,
    attempts: u32,
    reason: String,
) -> SagaRecord {
    let order = loaded.record().order_id.clone();
    let kept = shared::text::sanitized(&reason, shared::text::MAX_REASON_CHARS);
    let (aside, event) = loaded.clone().set_aside(action, kept, step.now);
    let current = match step.sagas.save_loaded(&aside, &event).await {
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
    if let Err(send) = step.escalation.escalate(&order, action, attempts, &reason).await {
        // The saga is set aside: the sweeper still looks at it on its schedule; the alarm on failed sends
        // (and this log) tell a person.
        error!(order_id = %order, error = %ErrorChain(&send), "escalation could not be sent");
    }
    current
}
