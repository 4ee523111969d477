//! What every step works with ([`StepCtx`]) and ends with: its transition saved with the step's own writes ([`moved`]), and the answer
//! the runner's loop goes on from ([`Advanced`]).

use super::error::RunError;
use crate::metrics;
use crate::saga::{Escalation, Loaded, Saga, SagaEvent, SagaStore};
use shared::store::PaymentStore;
use shared::{CorrelationId, OrderId};
use tracing::info;

/// What a step works with besides its saga and its PSP's client, borrowed from the runner for one step: the
/// stores it writes (each move saved with the step's writes, each PSP answer finalized on the payment), the
/// queue a person is told through, and the time the core decided the step at.
#[derive(Clone, Copy)]
pub(super) struct StepCtx<'a> {
    /// The sagas.
    pub(super) sagas: &'a SagaStore,
    /// The checkouts' payments.
    pub(super) payments: &'a PaymentStore,
    /// Where a saga's first escalation goes.
    pub(super) escalation: &'a Escalation,
    /// When the step runs (epoch ms, the runner's clock).
    pub(super) now: i64,
}

/// What one step did.
pub(super) enum Advanced {
    /// The saga moved and was saved in this state; run its next step (no re-read needed).
    Moved(Box<Loaded>),
    /// Waiting for the payment's outcome (or already ended): the saga is as it was loaded.
    Stopped,
}

/// Saves a transition with `writes` in one transaction, emits its metrics, and reports the move.
pub(super) async fn moved<S>(
    sagas: &SagaStore,
    saga: Saga<S>,
    event: SagaEvent,
    writes: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
) -> Result<Advanced, RunError>
where
    Loaded: From<Saga<S>>,
{
    sagas.save(&saga, &event, writes).await?;
    info!(order_id = %event.order_id, version = event.version, event = event.kind.as_str(),
          status = %event.status, "saga moved");
    metrics::after_transition(saga.record(), &event);
    Ok(Advanced::Moved(Box::new(saga.into())))
}

/// The saga's correlation id, `checkout-<order>` (hashed when that would be too long: every order id the
/// API takes yields a valid one).
pub(super) fn correlation(order: &OrderId) -> CorrelationId {
    CorrelationId::derived("checkout", order.as_str())
}
