//! One order's saga resumed on an operator's request (`paymentsctl escalations retry`): the sweeper function
//! is invoked (Lambda `Invoke`, `RequestResponse`) with `{"resume": {"order_id": "<order>"}}` instead of its
//! schedule's event, and answers what the saga is now and what it runs next. So a retry runs where the PSP
//! key is (the function's role reads it), with the function's own settings and runner, and the key never
//! reaches an operator's laptop. The same [`CheckoutSweeper::resume_one`](crate::CheckoutSweeper::resume_one) runs in-process for a local stack.
//!
//! Any other event is the schedule's (a sweep): EventBridge's scheduled event carries no `resume` key.

use crate::runner::RunError;
use serde::{Deserialize, Serialize};
use shared::{DomainError, OrderId};

/// What the sweeper function is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweeperRequest {
    /// The schedule's event: sweep the sagas open too long.
    Sweep,
    /// An operator's request: resume this order's saga now.
    Resume(OrderId),
}

impl SweeperRequest {
    /// The request an invocation's event carries; a `resume` that does not name a valid order is refused.
    pub fn of(event: &serde_json::Value) -> Result<Self, ResumeError> {
        let Some(resume) = event.get("resume") else {
            return Ok(Self::Sweep);
        };
        let order = resume
            .get("order_id")
            .and_then(serde_json::Value::as_str)
            .ok_or(ResumeError::Malformed)?;
        Ok(Self::Resume(OrderId::parse(order).map_err(ResumeError::OrderId)?))
    }

    /// The invocation's payload for a resume of `order` (what `paymentsctl` sends).
    pub fn resume_payload(order: &OrderId) -> serde_json::Value {
        serde_json::json!({ "resume": { "order_id": order.as_str() } })
    }
}

/// A resume's answer: the saga after the resume, and what it runs next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumed {
    pub order_id: String,
    pub status: String,
    pub version: u64,
    /// The step the runner takes next and what it does (`done: ...` when it ended).
    pub next: String,
}

/// Why a resume did not run or did not get through; the function answers it as its error.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error(r#"a resume names its order: {{"resume": {{"order_id": "<order>"}}}}"#)]
    Malformed,
    #[error("the order id")]
    OrderId(#[source] DomainError),
    #[error("no saga for order {0}")]
    Unknown(OrderId),
    #[error("the resume failed again (a new escalation was sent)")]
    FailedAgain(#[source] RunError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_event_is_a_sweep_and_a_resume_names_a_valid_order() {
        let scheduled = serde_json::json!({ "source": "aws.events", "detail-type": "Scheduled Event" });
        assert_eq!(SweeperRequest::of(&scheduled).unwrap(), SweeperRequest::Sweep);
        let order = OrderId::parse("order-1").unwrap();
        assert_eq!(
            SweeperRequest::of(&SweeperRequest::resume_payload(&order)).unwrap(),
            SweeperRequest::Resume(order)
        );
        for bad in [
            serde_json::json!({ "resume": {} }),
            serde_json::json!({ "resume": { "order_id": 7 } }),
            serde_json::json!({ "resume": { "order_id": "a b" } }),
        ] {
            assert!(SweeperRequest::of(&bad).is_err(), "{bad}");
        }
    }
}
