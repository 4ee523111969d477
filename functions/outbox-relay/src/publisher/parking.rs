//! Events SQS would refuse (a character it does not take, over its size): sent made sendable, counted as
//! `UnsendableEvents` and parked as a notice in the relay-failures queue, so they never hold the shard.
//! Noticed once per event: only after it was sent and will not be sent again (see `Publisher::publish`).

use super::Publisher;
use crate::METRICS_NAMESPACE;
use serde_json::json;
use shared::telemetry::ErrorChain;
use shared::{metrics, outbox, PaymentEvent};
use tracing::error;

/// `events` as they can be sent, each that SQS would refuse made sendable, and those (their index in
/// `events`, the problem).
pub(super) fn sendable(events: &[PaymentEvent]) -> (Vec<PaymentEvent>, Vec<(usize, outbox::Unsendable)>) {
    let mut out = Vec::with_capacity(events.len());
    let mut problems = Vec::new();
    for (i, event) in events.iter().enumerate() {
        match outbox::check_sendable(event) {
            Ok(()) => out.push(event.clone()),
            Err(problem) => {
                problems.push((i, problem));
                out.push(outbox::made_sendable(event));
            }
        }
    }
    (out, problems)
}

impl Publisher {
    /// Notices (logs, counts and parks, see the module doc) each unsendable event among the first `done`
    /// of `events`, the ones sent and never sent again (see [`Publisher::publish`]). Never fails: a notice
    /// that cannot be parked is logged.
    pub(super) async fn notice(
        &self,
        events: &[PaymentEvent],
        unsendable: &[(usize, outbox::Unsendable)],
        done: usize,
    ) {
        for (i, problem) in unsendable.iter().filter(|(i, _)| *i < done) {
            if let Some(event) = events.get(*i) {
                self.park(event, *problem).await;
            }
        }
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
