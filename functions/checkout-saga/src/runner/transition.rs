//! What every step ends with: its transition saved with the step's own writes ([`moved`]), and the answer
//! the runner's loop goes on from ([`Advanced`]).

use super::error::RunError;
use crate::metrics;
use crate::saga::{Loaded, Saga, SagaEvent, SagaStore};
use shared::{CorrelationId, OrderId};
use tracing::info;

/// What one step did.
pub enum Advanced {
    /// The saga moved and was saved in this state; run its next step (no re-read needed).
    Moved(Box<Loaded>),
    /// Waiting for the payment's outcome (or already ended): the saga is as it was loaded.
    Stopped,
}

/// Saves a transition with `writes` in one transaction, emits its metrics, and reports the move.
pub async fn moved<S>(
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
pub fn correlation(order: &OrderId) -> CorrelationId {
    CorrelationId::derived("checkout", order.as_str())
}
