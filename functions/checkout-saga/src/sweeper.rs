//! The sweeper (scheduled): finds checkout sagas open for longer than a threshold (a crashed invocation, a
//! lost trigger, a payment past its deadline) through the sparse `open-items` index and resumes them. A
//! resume of a saga that is simply waiting costs two reads and one small write: the saga is deferred in the
//! index (due again after 2, 4, 8, ... times `stuck_after` from its start, at most [`MAX_SAGA_RECHECK`]
//! apart, so a deadline is acted on at most that late), so sagas that wait long cost fewer reads and never
//! crowd out the others. A saga escalated once is set aside (`payments_core::saga::deadline`): looked at on a
//! doubling schedule from its escalation (5, 10, 20 minutes, ... at most a day apart), never escalated again
//! until it moves, so it calls the PSP a bounded number of times a day and never sits first in its shard
//! (12 such sagas would otherwise take a shard's whole share of every run).
//!
//! A saga past its state's deadline is acted on before it is deferred (`Runner::act_on_deadline`:
//! compensated, or escalated once and set aside), also when its resume could not act (cut at the
//! invocation's deadline by a PSP call that hangs, or a PSP call deferred by the breaker or a refused key):
//! deferring it would retry the same call on every look, past the deadline, without end.

use crate::runner::{RunError, Runner};
use crate::saga::{after_resume, saga_key, Loaded, SagaRecord, Sweep};
use psp::Psps;
use shared::store::open_index::{age_seconds, defer as defer_item, due_items, next_due, OpenKind};
use shared::store::StoreError;
use shared::telemetry::ErrorChain;
use shared::OrderId;
use std::time::Duration;
use tokio::time::Instant;
use tracing::warn;

/// The longest wait between two looks at a waiting saga: the abandonment and payment deadlines it must act
/// on are minutes apart, so a waiting saga is never left for longer than this.
pub const MAX_SAGA_RECHECK: Duration = Duration::from_secs(5 * 60);

/// How long a saga that could not be processed (escalated) is left alone before the sweeper looks at it
/// again: long enough that it is escalated about once a day, not retried into the same failure every run.
/// `paymentsctl escalations retry <order>` resumes it at once after a fix.
pub const UNPROCESSABLE_RECHECK: Duration = Duration::from_secs(24 * 3600);

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub found: u32,
    pub resumed: u32,
    pub errors: u32,
    /// Not resumed: the invocation's deadline came first.
    pub left: u32,
    /// Could not be processed at all: escalated and set aside (see [`UNPROCESSABLE_RECHECK`]).
    pub escalated: u32,
    /// `SweeperLagSeconds`: how long the oldest due saga the sweep found has been due, in seconds (0 when
    /// none is due), from the index query the sweep makes anyway. Due is `stuck_after` after its start or
    /// after its last deferral, so it grows only when sweeps stop getting through; it says nothing of how
    /// long a saga is open (a saga deferred every sweep is never due for long). Alarmed.
    pub lag_seconds: u64,
    /// `OldestOpenSagaAgeSeconds`: the largest `now - started_at` over the sagas the sweep resumed and that
    /// are still open, in seconds (0 when none). A waiting saga is resumed at least every
    /// [`MAX_SAGA_RECHECK`] plus one sweep while sweeps get through (else the lag alarms), so the maximum over
    /// a window longer than that covers every open saga, except one whose resume fails (counted in `errors`,
    /// escalated) or that is set aside as unprocessable (escalated). Alarmed.
    pub oldest_open_age_seconds: u64,
}

impl SweepReport {
    /// The sweep's record: `SweeperLagSeconds` and `OldestOpenSagaAgeSeconds` (each 0 when no saga is due),
    /// and its counts as properties for Logs Insights.
    pub fn to_emf(&self) -> serde_json::Value {
        crate::metrics::record(
            &[&[]],
            &[
                ("SweeperLagSeconds", "Seconds"),
                ("OldestOpenSagaAgeSeconds", "Seconds"),
            ],
            serde_json::json!({
                "SweeperLagSeconds": self.lag_seconds,
                "OldestOpenSagaAgeSeconds": self.oldest_open_age_seconds,
                "found": self.found, "resumed": self.resumed, "errors": self.errors,
                "left": self.left, "escalated": self.escalated,
            }),
        )
    }
}

/// Resumes every saga open for longer than `stuck_after` (at most `limit`), until `deadline`: what is left
/// is found by the next run.
pub async fn sweep<P: Psps>(
    runner: &Runner<P>,
    stuck_after: Duration,
    limit: usize,
    deadline: Instant,
) -> Result<SweepReport, StoreError> {
    let stuck_ms = i64::try_from(stuck_after.as_millis()).unwrap_or(i64::MAX);
    let due_before = runner.settings.clock.now_ms().saturating_sub(stuck_ms);
    let sagas = &runner.sagas;
    let due = due_items(
        sagas.client(),
        sagas.table(),
        sagas.open_shards(),
        OpenKind::Saga,
        due_before,
        limit,
    )
    .await?;
    let mut report = SweepReport {
        lag_seconds: due.lag_seconds(due_before),
        ..SweepReport::default()
    };
    for key in due.keys {
        let Some(order) = saga_order(&key) else {
            continue;
        };
        report.found = report.found.saturating_add(1);
        if Instant::now() >= deadline {
            report.left = report.left.saturating_add(1);
            continue;
        }
        match runner.resume_within(&order, deadline).await {
            Ok(Some(record)) if !record.status.is_terminal() => {
                report.resumed = report.resumed.saturating_add(1);
                let age = age_seconds(record.started_at_ms, runner.settings.clock.now_ms());
                report.oldest_open_age_seconds = report.oldest_open_age_seconds.max(age);
                match Loaded::from_record(record.clone()) {
                    Ok(loaded) => settle(runner, loaded, stuck_ms, deadline).await,
                    // It loaded a moment ago; deferred as it is, looked at again.
                    Err(_) => defer(runner, &record, stuck_ms).await,
                }
            }
            Ok(_) => report.resumed = report.resumed.saturating_add(1),
            // A moment's failure, the deadline, or a step that kept failing (escalated once and set aside):
            // due again on its back-off, never at once, so it does not sit first in its shard.
            Err(e) if e.is_transient() || matches!(e, RunError::OutOfTime | RunError::Escalated { .. }) => {
                report.errors = report.errors.saturating_add(1);
                warn!(order_id = %order, error = %ErrorChain(&e), "sweeper could not resume the saga");
                match runner.sagas.load(&order).await {
                    Ok(Some(loaded)) => settle(runner, loaded, stuck_ms, deadline).await,
                    Ok(None) => {}
                    Err(e) => warn!(order_id = %order, error = %ErrorChain(&e), "could not read the saga to defer it"),
                }
            }
            Err(e) => {
                report.errors = report.errors.saturating_add(1);
                report.escalated = report.escalated.saturating_add(1);
                set_aside(runner, &order, &e).await;
            }
        }
    }
    Ok(report)
}

/// The order of a saga's key in the open-items index; `None` for another item's.
fn saga_order(key: &str) -> Option<OrderId> {
    key.strip_prefix(shared::keys::SAGA_PK_PREFIX)
        .and_then(|id| OrderId::parse(id).ok())
}

/// A saga that cannot be processed (its record does not load, it never settles): retrying every run cannot
/// help. Escalated once, then left alone for [`UNPROCESSABLE_RECHECK`].
async fn set_aside<P: Psps>(runner: &Runner<P>, order: &OrderId, e: &RunError) {
    runner.escalate_unprocessable(order, e).await;
    let skip = i64::try_from(UNPROCESSABLE_RECHECK.as_millis()).unwrap_or(i64::MAX);
    let due = runner.settings.clock.now_ms().saturating_add(skip);
    if let Err(e) = defer_item(runner.sagas.client(), runner.sagas.table(), saga_key(order), due).await {
        warn!(order_id = %order, error = %ErrorChain(&e), "could not set the unprocessable saga aside");
    }
}

/// A saga still open after its resume: its deadline acted on if it passed ([`Runner::act_on_deadline`]),
/// then deferred to its next look as it then stands.
async fn settle<P: Psps>(runner: &Runner<P>, loaded: Loaded, stuck_ms: i64, deadline: Instant) {
    let order = loaded.record().order_id.clone();
    let fallback = loaded.record().clone();
    let record = match runner.act_on_deadline(loaded, deadline).await {
        Ok(record) => record,
        Err(e) => {
            warn!(order_id = %order, error = %ErrorChain(&e), "could not act on the saga's deadline; next look");
            fallback
        }
    };
    defer(runner, &record, stuck_ms).await;
}

/// Moves a saga that is still open to its next look (best effort: on failure it is looked at next run): the
/// core's decision ([`after_resume`]): a saga set aside after its escalation on its own schedule, any other
/// on the capped back-off.
async fn defer<P: Psps>(runner: &Runner<P>, record: &SagaRecord, stuck_ms: i64) {
    let max = i64::try_from(MAX_SAGA_RECHECK.as_millis()).unwrap_or(i64::MAX);
    let now = runner.settings.clock.now_ms();
    let due = match after_resume(record, now) {
        Sweep::Done => return,
        Sweep::Defer => next_due(record.started_at_ms, now, stuck_ms, max),
        // The index key reads "due minus the threshold" (`open_index`).
        Sweep::SetAside { due_ms } => due_ms.saturating_sub(stuck_ms),
    };
    let key = saga_key(&record.order_id);
    if let Err(e) = defer_item(runner.sagas.client(), runner.sagas.table(), key, due).await {
        warn!(order_id = %record.order_id, error = %ErrorChain(&e), "could not defer the saga's next look");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sweeps_record_publishes_its_lag_and_oldest_open_saga_by_stage() {
        let report = SweepReport {
            lag_seconds: 7,
            oldest_open_age_seconds: 42,
            ..SweepReport::default()
        };
        let record = report.to_emf();
        assert_eq!(record["SweeperLagSeconds"].as_u64(), Some(7));
        assert_eq!(record["OldestOpenSagaAgeSeconds"].as_u64(), Some(42));
        let emf = &record["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(
            emf["Metrics"],
            json!([
                { "Name": "SweeperLagSeconds", "Unit": "Seconds" },
                { "Name": "OldestOpenSagaAgeSeconds", "Unit": "Seconds" }
            ])
        );
        assert_eq!(
            (emf["Namespace"].clone(), emf["Dimensions"].clone()),
            (json!("Payments/Checkout"), json!([["Stage"]]))
        );
        assert_eq!(record["Stage"].as_str(), Some(shared::metrics::stage()));
    }
}
