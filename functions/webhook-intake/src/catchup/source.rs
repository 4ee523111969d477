//! Whether Stripe's partner event source is active, reported by each catch-up run (when the EventBridge way
//! in is configured: `STRIPE_EVENT_SOURCE`). EventBridge publishes no metric of a source's state, and a
//! source that is `PENDING` (never associated), `DELETED` (its destination removed in Stripe) or gone
//! delivers nothing, silently: the webhook and the catch-up still bring the events, but the way in is down.
//! So the run asks EventBridge (`DescribeEventSource`, the consumer's side) and publishes `EventSourceActive`
//! (1 or 0, the state in the record); the template's alarm fires on 0 and on missing data (no run reports).
//! A failed call is logged and reported as 0: it never stops the run.

use aws_sdk_eventbridge::types::EventSourceState;
use serde_json::json;
use shared::telemetry::ErrorChain;
use tracing::{info, warn};

/// The metric the alarm watches.
pub const METRIC: &str = "EventSourceActive";

/// The partner event source a run describes, on the function's EventBridge client.
#[derive(Debug, Clone)]
pub struct SourceWatch {
    pub client: aws_sdk_eventbridge::Client,
    /// `STRIPE_EVENT_SOURCE`: `aws.partner/stripe.com/...`.
    pub name: String,
}

/// What a run found: the source's state as EventBridge names it, or `UNKNOWN` when the call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReport {
    pub state: String,
    /// The metric's value: 1 only for `ACTIVE`.
    pub active: u8,
}

/// 1 for a source that delivers (`ACTIVE`), 0 for any other state and for no answer.
pub fn active(state: Option<&EventSourceState>) -> u8 {
    u8::from(matches!(state, Some(EventSourceState::Active)))
}

impl SourceWatch {
    /// Asks EventBridge for the source's state; a failure is logged and reported as not active.
    pub async fn check(&self) -> SourceReport {
        match self.client.describe_event_source().name(&self.name).send().await {
            Ok(out) => {
                let state = out.state().map_or("NONE", EventSourceState::as_str).to_owned();
                let report = SourceReport {
                    active: active(out.state()),
                    state,
                };
                if report.active == 1 {
                    info!(source = %self.name, state = %report.state, "Stripe partner event source");
                } else {
                    warn!(source = %self.name, state = %report.state, "Stripe partner event source is not active: no event comes through EventBridge");
                }
                report
            }
            Err(e) => {
                warn!(source = %self.name, error = %ErrorChain(&e), "DescribeEventSource failed: reported as not active");
                SourceReport {
                    state: "UNKNOWN".to_owned(),
                    active: 0,
                }
            }
        }
    }
}

impl SourceReport {
    /// The EMF record: `EventSourceActive` by stage, the state beside it.
    pub fn to_emf(&self, now_ms: i64) -> serde_json::Value {
        // A state, not a count: the alarm reads its minimum.
        shared::metrics::emf(
            crate::metrics::NAMESPACE,
            &[&[]],
            &[(METRIC, "None")],
            json!({ "EventSourceActive": self.active, "EventSourceState": self.state }),
            now_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_active_source_counts_as_active() {
        assert_eq!(active(Some(&EventSourceState::Active)), 1);
        assert_eq!(active(Some(&EventSourceState::Pending)), 0);
        assert_eq!(active(Some(&EventSourceState::Deleted)), 0);
        assert_eq!(active(None), 0);
    }

    #[test]
    fn the_record_publishes_the_value_with_the_state() {
        let r = SourceReport {
            state: "PENDING".to_owned(),
            active: 0,
        }
        .to_emf(1);
        assert_eq!(r[METRIC], 0);
        assert_eq!(r["EventSourceState"], "PENDING");
        let metrics = &r["_aws"]["CloudWatchMetrics"][0]["Metrics"];
        assert_eq!(metrics[0]["Name"], METRIC);
    }
}
