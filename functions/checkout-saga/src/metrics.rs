//! The saga's metrics in CloudWatch Embedded Metric Format (namespace `Payments/Checkout`), one record per
//! transition that matters:
//! - a step failed: `StepFailed` with the dimension `Step` (failure rate per step, against `SagasStarted`);
//! - a saga ended: `SagaDurationMs` (first to last step), `SagasCompleted` / `SagasCompensated`, and the two
//!   SLO pairs the template's burn-rate alarms divide: `NoActionSagas` / `NoActionSagasSlow` (over 30 s) and
//!   `CapturedSagas` / `PostCaptureCompensations` (refunds of money taken; declined payments are not
//!   compensations of a capture and are not counted there);
//! - escalations: `Escalations` with the dimension `Action`;
//! - every sweep: `SweeperLagSeconds`, how long the oldest due saga has been due (the sweeper's lag), and
//!   `OldestOpenSagaAgeSeconds`, how long the oldest saga it resumed has been open (both alarmed).
//!
//! Every record also carries the stage, which `shared::metrics` puts first in each dimension set.

use crate::saga::{SagaEvent, SagaEventKind, SagaRecord, SagaStatus};
use serde_json::{json, Value};
use shared::clock;

pub const NAMESPACE: &str = "Payments/Checkout";
/// The latency objective for sagas that need no customer action.
pub const NO_ACTION_OBJECTIVE_MS: i64 = 30_000;

/// One record of this namespace (the stage added by `shared::metrics`).
pub(crate) fn record(dimensions: &[&[&str]], metrics: &[(&str, &str)], values: Value) -> Value {
    shared::metrics::emf(NAMESPACE, dimensions, metrics, values, clock::now_ms())
}

/// The EMF records a transition produces (none for most).
pub fn for_transition(saga: &SagaRecord, event: &SagaEvent) -> Vec<Value> {
    let mut out = Vec::new();
    match event.kind {
        SagaEventKind::SagaStarted => out.push(record(
            &[&[]],
            &[("SagasStarted", "Count")],
            json!({ "SagasStarted": 1 }),
        )),
        SagaEventKind::StepFailed => out.push(record(
            &[&["Step"]],
            &[("StepFailed", "Count")],
            json!({ "Step": event.step.as_str(), "StepFailed": 1, "order_id": saga.order_id.as_str() }),
        )),
        _ => {}
    }
    if saga.status.is_terminal() {
        let duration = saga.updated_at_ms.saturating_sub(saga.started_at_ms);
        let completed = saga.status == SagaStatus::Completed;
        let no_action = completed && !saga.customer_action;
        out.push(record(
            &[&[]],
            &[
                ("SagaDurationMs", "Milliseconds"),
                ("SagasCompleted", "Count"),
                ("SagasCompensated", "Count"),
                ("NoActionSagas", "Count"),
                ("NoActionSagasSlow", "Count"),
                ("CapturedSagas", "Count"),
                ("PostCaptureCompensations", "Count"),
            ],
            json!({
                "SagaDurationMs": duration,
                "SagasCompleted": u8::from(completed),
                "SagasCompensated": u8::from(!completed),
                "NoActionSagas": u8::from(no_action),
                "NoActionSagasSlow": u8::from(no_action && duration > NO_ACTION_OBJECTIVE_MS),
                "CapturedSagas": u8::from(saga.captured),
                "PostCaptureCompensations": u8::from(saga.captured && !completed),
                "order_id": saga.order_id.as_str(),
            }),
        ));
    }
    out
}

pub fn after_transition(saga: &SagaRecord, event: &SagaEvent) {
    for line in for_transition(saga, event) {
        shared::metrics::emit(&line);
    }
}

/// One escalation of `saga`'s `action`.
pub fn escalated(saga: &SagaRecord, action: &str) {
    escalated_order(&saga.order_id, action);
}

/// One escalation of the order's saga, also when its record could not be read.
pub fn escalated_order(order_id: &shared::OrderId, action: &str) {
    let line = record(
        &[&["Action"]],
        &[("Escalations", "Count")],
        json!({ "Action": action, "Escalations": 1, "order_id": order_id.as_str() }),
    );
    shared::metrics::emit(&line);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::saga::{Saga, Started};
    use payments_core::fixtures;
    use shared::{OrderId, PaymentId};

    fn captured_then(fail: bool, duration_ms: i64) -> Vec<Value> {
        let (s, _) = Saga::<Started>::begin(OrderId::parse("o-1").unwrap(), fixtures::checkout(), 0, 60_000);
        let (s, _) = s.stock_reserved(1);
        let (s, _) = s
            .payment_created(PaymentId::parse("pay_1").unwrap(), 2)
            .0
            .payment_requested(None, false, 2);
        let (s, _) = s.payment_captured(shared::PspReference::parse("pi_1").unwrap(), 3);
        if fail {
            let (s, _) = s.confirmation_failed("cancelled".into(), 4);
            let (s, _) = s.refunded(2500, 5);
            let (s, e) = s.stock_released(duration_ms);
            for_transition(s.record(), &e)
        } else {
            let (s, e) = s.order_confirmed(duration_ms);
            for_transition(s.record(), &e)
        }
    }

    /// Each dimension set of `r` starts with `Stage`, and `r` holds the stage.
    fn assert_staged(r: &Value) {
        let sets = r["_aws"]["CloudWatchMetrics"][0]["Dimensions"].as_array().unwrap();
        assert!(!sets.is_empty());
        for set in sets {
            assert_eq!(set[0], "Stage", "{r}");
        }
        assert_eq!(r["Stage"].as_str(), Some(shared::metrics::stage()), "{r}");
    }

    #[test]
    fn every_record_of_the_saga_carries_the_stage() {
        let mut records = captured_then(true, 10);
        records.extend(captured_then(false, 10));
        records.push(record(
            &[&["Action"]],
            &[("Escalations", "Count")],
            json!({ "Action": "a" }),
        ));
        for r in &records {
            assert_staged(r);
        }
    }

    #[test]
    fn a_slow_no_action_saga_counts_against_the_latency_objective() {
        let fast = captured_then(false, 29_000);
        let slow = captured_then(false, 31_000);
        assert_eq!(
            (fast[0]["NoActionSagas"].as_u64(), fast[0]["NoActionSagasSlow"].as_u64()),
            (Some(1), Some(0))
        );
        assert_eq!(slow[0]["NoActionSagasSlow"].as_u64(), Some(1));
        assert_eq!(slow[0]["SagaDurationMs"].as_i64(), Some(31_000));
    }

    #[test]
    fn a_refund_after_capture_is_a_post_capture_compensation_and_a_decline_is_not() {
        let refunded = captured_then(true, 10);
        assert_eq!(refunded[0]["PostCaptureCompensations"].as_u64(), Some(1));
        assert_eq!(refunded[0]["NoActionSagas"].as_u64(), Some(0));
        let (s, _) = Saga::<Started>::begin(OrderId::parse("o-2").unwrap(), fixtures::checkout(), 0, 60_000);
        let (s, _) = s.stock_reserved(1);
        let (s, _) = s
            .payment_created(PaymentId::parse("pay_2").unwrap(), 2)
            .0
            .payment_requested(None, false, 2);
        let (s, failed) = s.payment_failed("declined".into(), 3);
        assert_eq!(for_transition(s.record(), &failed)[0]["Step"], "await_payment");
        let (s, _) = s.payment_cancelled(4);
        let (s, e) = s.stock_released(5);
        let declined = for_transition(s.record(), &e);
        assert_eq!(declined[0]["PostCaptureCompensations"].as_u64(), Some(0));
        assert_eq!(declined[0]["SagasCompensated"].as_u64(), Some(1));
    }
}
