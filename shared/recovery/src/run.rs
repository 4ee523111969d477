//! One scheduled run: the payments due in the sparse `open-items` index (no Scan), after the objects of
//! events Stripe never made (`recheck`), each reconciled in turn until the invocation's deadline; a PSP a
//! deferral stopped is not asked again in the run.

use crate::reconcile::{reconcile_seen, Seen};
use crate::{back_off, recheck, Reconciled, Recovery, RecoveryReport};
use psp::Psps;
use shared::clock;
use shared::store::open_index::{due_items, OpenKind};
use shared::store::StoreError;
use shared::{CorrelationId, PaymentId};

/// One scheduled run: every payment open for longer than `stale_after`, reconciled one by one until
/// `deadline` (the invocation's): a reconciliation is cut there wherever it is (safe as after a crash: the
/// lease expires, nothing half-written stays), and the payments not reached are the next run's.
pub(crate) async fn run<P: Psps>(
    r: &Recovery<P>,
    deadline: tokio::time::Instant,
) -> Result<RecoveryReport, StoreError> {
    let due_before = clock::now_ms().saturating_sub(r.settings.stale_after_ms());
    let due = due_items(
        r.store.client(),
        r.store.table(),
        r.store.open_shards(),
        OpenKind::Payment,
        due_before,
        r.settings.batch_limit,
    )
    .await?;
    let mut report = RecoveryReport {
        lag_seconds: due.lag_seconds(due_before),
        ..RecoveryReport::default()
    };
    let ids = due.keys.iter().filter_map(|key| {
        key.strip_prefix(shared::keys::PAYMENT_PK_PREFIX)
            .and_then(|id| PaymentId::parse(id).ok())
    });
    // Objects Stripe never told us about first: they are due at once, open payment or not.
    recheck::recheck_all(r, deadline, &mut report).await?;
    let mut seen = Seen::default();
    for id in ids {
        report.found = report.found.saturating_add(1);
        match reconcile_due(r, &id, deadline, &mut report, &mut seen).await {
            Turn::Next => {}
            Turn::Stop => break,
        }
    }
    Ok(report)
}

/// One due payment of [`Recovery::run`], counted in `report`: whether the run goes on. `seen` carries
/// the PSPs a deferral stopped in this run across payments.
async fn reconcile_due<P: Psps>(
    r: &Recovery<P>,
    id: &PaymentId,
    deadline: tokio::time::Instant,
    report: &mut RecoveryReport,
    seen: &mut Seen,
) -> Turn {
    let correlation = CorrelationId::derived("recovery", &uuid::Uuid::new_v4().to_string());
    seen.open_since = None;
    seen.provider = None;
    let reconciled = tokio::time::timeout_at(deadline, reconcile_seen(r, id, correlation, seen)).await;
    report.saw_open(seen.open_since, clock::now_ms());
    let Ok(reconciled) = reconciled else {
        report.left = report.left.saturating_add(1);
        return Turn::Stop;
    };
    // Its PSP is down (breaker open, key refused): that PSP is not called again in this run, and the
    // payment backs off so it does not sit first in its shard; the other PSPs' payments go on.
    if let (Ok(Reconciled::Deferred), Some(provider)) = (&reconciled, &seen.provider) {
        seen.deferred.insert(provider.clone());
    }
    // A failure (the PSP's, the store's) or a deferral is not retried every run: due again after its
    // back-off, also when it failed before the payment was read (an item no release can read would else
    // be the first of its shard on every run).
    if matches!(reconciled, Ok(Reconciled::ForOperator | Reconciled::CaptureLost)) {
        back_off::recheck_for_operator(r, id).await;
    } else if matches!(reconciled, Err(_) | Ok(Reconciled::Deferred)) {
        match seen.open_since {
            Some(created_at_ms) => back_off::back_off(r, id, created_at_ms).await,
            None => back_off::back_off_unread(r, id).await,
        }
    }
    report.count(id, reconciled);
    Turn::Next
}

/// Whether a run goes on after a payment.
enum Turn {
    Next,
    Stop,
}
