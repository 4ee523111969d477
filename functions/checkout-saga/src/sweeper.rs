//! The sweeper (scheduled): finds checkout sagas open for longer than a threshold (a crashed invocation, a
//! lost trigger, a payment past its deadline) through the sparse `open-items` index and resumes them. A
//! resume of a saga that is simply waiting costs two reads and one small write: the saga is deferred in the
//! index (due again after 2, 4, 8, ... times `stuck_after` from its start, at most [`MAX_SAGA_RECHECK`]
//! apart, so a deadline is acted on at most that late), so sagas that wait long cost fewer reads and never
//! crowd out the others.

use crate::runner::Runner;
use shared::psp::Psp;
use shared::saga::{saga_key, SagaRecord};
use shared::store::open_index::{defer as defer_item, next_due, open_since, OpenKind};
use shared::store::StoreError;
use shared::{clock, OrderId};
use std::time::Duration;
use tokio::time::Instant;
use tracing::warn;

/// The longest wait between two looks at a waiting saga: the abandonment and payment deadlines it must act
/// on are minutes apart, so a waiting saga is never left for longer than this.
pub const MAX_SAGA_RECHECK: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub found: u32,
    pub resumed: u32,
    pub errors: u32,
    /// Not resumed: the invocation's deadline came first.
    pub left: u32,
}

/// Resumes every saga open for longer than `stuck_after` (at most `limit`), until `deadline`: what is left
/// is found by the next run.
pub async fn sweep<P: Psp>(
    runner: &Runner<P>,
    stuck_after: Duration,
    limit: usize,
    deadline: Instant,
) -> Result<SweepReport, StoreError> {
    let stuck_ms = i64::try_from(stuck_after.as_millis()).unwrap_or(i64::MAX);
    let keys = open_since(
        runner.sagas.client(),
        runner.sagas.table(),
        OpenKind::Saga,
        clock::now_ms() - stuck_ms,
        limit,
    )
    .await?;
    let mut report = SweepReport::default();
    for key in keys {
        let Some(order) = key.strip_prefix("SAGA#").and_then(|id| OrderId::parse(id).ok()) else {
            continue;
        };
        report.found += 1;
        if Instant::now() >= deadline {
            report.left += 1;
            continue;
        }
        match runner.resume_within(&order, deadline).await {
            Ok(Some(record)) if !record.status.is_terminal() => {
                report.resumed += 1;
                defer(runner, &record, stuck_ms).await;
            }
            Ok(_) => report.resumed += 1,
            Err(e) => {
                report.errors += 1;
                warn!(order_id = %order, error = %e, "sweeper could not resume the saga");
            }
        }
    }
    Ok(report)
}

/// Moves a saga that is still waiting to its next look (best effort: on failure it is looked at next run).
async fn defer<P: Psp>(runner: &Runner<P>, record: &SagaRecord, stuck_ms: i64) {
    let max = i64::try_from(MAX_SAGA_RECHECK.as_millis()).unwrap_or(i64::MAX);
    let due = next_due(record.started_at_ms, clock::now_ms(), stuck_ms, max);
    let key = saga_key(&record.order_id);
    if let Err(e) = defer_item(runner.sagas.client(), runner.sagas.table(), key, due).await {
        warn!(order_id = %record.order_id, error = %e, "could not defer the saga's next look");
    }
}
