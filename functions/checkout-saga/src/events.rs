//! The saga's inbox: payment events from the queue, applied by the consumer library to the order projection
//! (exactly once, in version order), then the saga of the event's order is resumed. A resume that fails does
//! not fail the message (its effect is applied); the sweeper finds the saga again. So does one the
//! invocation's deadline leaves unfinished: resumes run only until `deadline`, and never past it.

use crate::runner::Runner;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use order_projection::OrderProjection;
use psp::Psps;
use shared::consumer::{self, Consumer};
use shared::telemetry::ErrorChain;
use shared::{clock, outbox, PaymentStatus};
use std::collections::HashSet;
use tokio::time::Instant;
use tracing::warn;

/// Statuses that can move a waiting saga. `processing` too: an Adyen payment authorised by notification after
/// the customer's 3-D Secure challenge is captured by its waiting saga (a Stripe one's resume just waits on);
/// and `authorized`: a Stripe authorization (manual capture) is captured by its waiting saga.
fn may_move_a_saga(status: PaymentStatus) -> bool {
    matches!(
        status,
        PaymentStatus::Processing
            | PaymentStatus::Authorized
            | PaymentStatus::Captured
            | PaymentStatus::Failed
            | PaymentStatus::Refunded
    )
}

/// The function's name in its metrics (`payments-<stage>-checkout-events` in the template).
pub const FUNCTION: &str = "checkout-events";

/// Applies the batch, then resumes the sagas its events may move, until `deadline`.
pub async fn handle<P: Psps>(
    consumer: &Consumer<OrderProjection>,
    runner: &Runner<P>,
    batch: SqsEvent,
    deadline: Instant,
) -> SqsBatchResponse {
    let (response, report) = consumer.process(&batch.records).await;
    shared::metrics::emit(&consumer::emf(order_projection::NAME, &report, clock::now_ms()));
    // Per version, what the inbox could not apply (not what it holds back for order): its canary's alarm.
    shared::metrics::emit(&shared::metrics::failed_items(
        FUNCTION,
        report.failed.into(),
        clock::now_ms(),
    ));
    let failed: HashSet<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    let mut resumed = HashSet::new();
    for message in &batch.records {
        if failed.contains(message.message_id.as_deref().unwrap_or_default()) {
            continue;
        }
        let Some(Ok(event)) = message.body.as_deref().map(outbox::parse_body) else {
            continue;
        };
        if may_move_a_saga(event.status) && resumed.insert(event.order_id.clone()) {
            if let Err(e) = runner.resume_within(&event.order_id, deadline).await {
                warn!(order_id = %event.order_id, error = %ErrorChain(&e), "saga resume did not finish; the sweeper resumes it");
            }
        }
    }
    response
}
