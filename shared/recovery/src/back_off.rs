//! When a payment recovery left open is due again: later and later while asking tells nothing new
//! (`open_index::next_due`), every half hour while it waits for a person. Best effort: a write that fails
//! leaves the payment due on the next run.

use crate::settings::millis;
use crate::Recovery;
use shared::clock;
use shared::store::open_index::{defer, next_due, MAX_RECHECK_INTERVAL};
use shared::store::StoreError;
use shared::telemetry::ErrorChain;
use shared::PaymentId;
use std::time::Duration;
use tracing::warn;

/// How often recovery counts a payment that waits for a person ([`Reconciled::ForOperator`](crate::Reconciled::ForOperator)): every half
/// hour, so each hour of `RefundsForOperator` (its alarm's period) has a datapoint while the payment waits,
/// and the alarm does not go quiet before someone acts.
pub const OPERATOR_RECHECK: Duration = Duration::from_secs(30 * 60);

/// The payment stays open and asking again soon would tell nothing new: it is due again later and later
/// (see `open_index::next_due`), so it costs fewer reads and never crowds out the others. Best effort: if
/// the write fails, the payment is simply looked at on the next run.
pub(crate) async fn back_off<P>(r: &Recovery<P>, id: &PaymentId, created_at_ms: i64) {
    let due = next_due(
        created_at_ms,
        clock::now_ms(),
        r.settings.stale_after_ms(),
        millis(MAX_RECHECK_INTERVAL),
    );
    let key = shared::keys::payment(id);
    if let Err(e) = defer(r.store.client(), r.store.table(), key, due).await {
        warn!(payment_id = %id, error = %ErrorChain(&e), "could not defer the payment's next check");
    }
}

/// Makes a payment that waits for a person due again after [`OPERATOR_RECHECK`] (not on the doubling
/// schedule, whose 6-hour steps would leave hours of its alarm without a datapoint).
pub(crate) async fn recheck_for_operator<P>(r: &Recovery<P>, id: &PaymentId) {
    let due = clock::now_ms()
        .saturating_add(millis(OPERATOR_RECHECK))
        .saturating_sub(r.settings.stale_after_ms());
    if let Err(e) = defer(r.store.client(), r.store.table(), shared::keys::payment(id), due).await {
        warn!(payment_id = %id, error = %ErrorChain(&e), "could not defer the payment's next check");
    }
}

/// [`back_off`] for a payment whose reconcile failed before it was read: the schedule is counted
/// from the item's `created_at_ms` as stored (read alone, so a payment that cannot be read whole is still
/// backed off); if even that cannot be read, it is due again after the longest interval.
pub(crate) async fn back_off_unread<P>(r: &Recovery<P>, id: &PaymentId) {
    match created_at(r.store.client(), r.store.table(), id).await {
        Ok(Some(created_at_ms)) => back_off(r, id, created_at_ms).await,
        unread => {
            if let Err(e) = &unread {
                warn!(payment_id = %id, error = %ErrorChain(e), "could not read the payment's creation time");
            }
            let due = clock::now_ms()
                .saturating_add(millis(MAX_RECHECK_INTERVAL))
                .saturating_sub(r.settings.stale_after_ms());
            if let Err(e) = defer(r.store.client(), r.store.table(), shared::keys::payment(id), due).await {
                warn!(payment_id = %id, error = %ErrorChain(&e), "could not defer the payment's next check");
            }
        }
    }
}

/// The payment item's `created_at_ms` alone (`None` when it has none or it is not a number).
async fn created_at(client: &aws_sdk_dynamodb::Client, table: &str, id: &PaymentId) -> Result<Option<i64>, StoreError> {
    let item = client
        .get_item()
        .table_name(table)
        .set_key(Some(shared::keys::payment(id)))
        .projection_expression("created_at_ms")
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("read payment creation time", e))?;
    Ok(item.item.and_then(|i| {
        i.get("created_at_ms")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
    }))
}
