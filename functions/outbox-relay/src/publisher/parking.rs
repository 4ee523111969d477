//! Events SQS would refuse (a character it does not take, over its size): sent made sendable, counted as
//! `UnsendableEvents` and parked as a notice in the relay-failures queue, so they never hold the shard.

use super::Publisher;
use crate::METRICS_NAMESPACE;
use serde_json::json;
use shared::telemetry::ErrorChain;
use shared::{metrics, outbox, PaymentEvent};
use tracing::error;

impl Publisher {
    /// `events` as they can be sent: each that SQS would refuse is made sendable, counted and parked (see the
    /// module doc). Never fails: a notice that cannot be parked is logged, and the event is sent anyway.
    pub(super) async fn sendable(&self, events: &[PaymentEvent]) -> Vec<PaymentEvent> {
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            match outbox::check_sendable(event) {
                Ok(()) => out.push(event.clone()),
                Err(problem) => {
                    self.park(event, problem).await;
                    out.push(outbox::made_sendable(event));
                }
            }
        }
        out
    }

    async fn park(&self, event: &PaymentEvent, problem: outbox::Unsendable) {
        let event_id = event.event_id();
        error!(event_id, payment_id = %event.payment_id, problem = problem.as_str(),
               "event SQS would refuse: sent made sendable, parked for an operator");
        metrics::emit(&metrics::counts(
            METRICS_NAMESPACE,
            &[&[]],
            &["UnsendableEvents"],
            json!({ "UnsendableEvents": 1, "event_id": event_id, "problem": problem.as_str() }),
            shared::clock::now_ms(),
        ));
        let Some(url) = &self.parking_url else {
            return;
        };
        let notice = json!({
            "kind": "unsendable_event",
            "event_id": event_id,
            "payment_id": event.payment_id.as_str(),
            "version": event.version,
            "problem": problem.as_str(),
            "sent": "made_sendable",
            "parked_at_ms": shared::clock::now_ms(),
        });
        if let Err(e) = self
            .sqs
            .send_message()
            .queue_url(url)
            .message_body(notice.to_string())
            .send()
            .await
        {
            error!(event_id, error = %ErrorChain(&e), "the unsendable event's notice could not be parked");
        }
    }
}
