//! The sweeper (scheduled): finds checkout sagas open for longer than a threshold (a crashed invocation, a
//! lost trigger, a payment past its deadline) through the sparse `open-items` index and resumes them. A
//! resume of a saga that is simply waiting costs two reads and writes nothing.

use crate::runner::Runner;
use shared::psp::Psp;
use shared::store::open_index::{open_since, OpenKind};
use shared::store::StoreError;
use shared::{clock, OrderId};
use std::time::Duration;
use tracing::warn;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub found: u32,
    pub resumed: u32,
    pub errors: u32,
}

/// Resumes every saga open for longer than `stuck_after` (at most `limit`).
pub async fn sweep<P: Psp>(runner: &Runner<P>, stuck_after: Duration, limit: usize) -> Result<SweepReport, StoreError> {
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
        match runner.resume(&order).await {
            Ok(_) => report.resumed += 1,
            Err(e) => {
                report.errors += 1;
                warn!(order_id = %order, error = %e, "sweeper could not resume the saga");
            }
        }
    }
    Ok(report)
}
