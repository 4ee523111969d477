//! What the reconciler and the sweeper publish on every run (alarmed): their lag (`RecoveryLagSeconds`,
//! `SweeperLagSeconds`: how long the oldest due item has been due, from the `open-items` query) and the true
//! age of the oldest open item they read (`OldestOpenPaymentAgeSeconds`, `OldestOpenSagaAgeSeconds`: from
//! its creation). An item backed off again and again has a recent sort key and a small lag, however long it
//! has been open: only its age shows that; each is 0 when nothing is due.

use crate::support::*;
use aws_sdk_dynamodb::types::AttributeValue;
use checkout_saga::saga::SagaStatus;
use checkout_saga::sweeper;
use shared::{CorrelationId, NewPayment, OrderId, PaymentId};
use std::time::Duration;

const DAY_MS: i64 = 24 * 3_600_000;

/// Within a minute of a day: the run's own time, not another clock's.
fn about_a_day(seconds: u64) -> bool {
    (86_400..86_460).contains(&seconds)
}

/// Due for a minute (two minutes past the opening with a one-minute threshold): not a day.
fn due_for_a_minute(seconds: u64) -> bool {
    (60..120).contains(&seconds)
}

/// Sets the `open-items` sort key of the item at `key` to `ms`, as a back-off (`open_index::defer`) does.
async fn index_at(w: &World, key: shared::store::item::Item, ms: i64) {
    w.ctx
        .client
        .update_item()
        .table_name(&w.ctx.table)
        .set_key(Some(key))
        .update_expression("SET opened_at_ms = :t")
        .expression_attribute_values(":t", AttributeValue::N(ms.to_string()))
        .send()
        .await
        .expect("move the index entry");
}

#[tokio::test]
async fn the_reconciler_reports_the_oldest_open_payment_s_age_apart_from_its_lag_and_zero_with_none() {
    let w = world().await;
    let mut recovery = w.runner().recovery;
    recovery.settings.stale_after = Duration::from_secs(60);

    let empty = recovery.run(later()).await.expect("run");
    assert_eq!(
        (empty.found, empty.lag_seconds, empty.oldest_open_age_seconds),
        (0, 0, 0),
        "{empty:?}"
    );
    let record = recovery::emf(&empty, shared::clock::now_ms());
    assert_eq!(record["OldestOpenPaymentAgeSeconds"].as_u64(), Some(0), "{record}");
    assert_eq!(record["RecoveryLagSeconds"].as_u64(), Some(0), "{record}");

    // One payment created a day ago (no PSP reference: recovery cannot resolve it) and backed off ever
    // since, due again two minutes ago; one created just now.
    let mut old = None;
    for (name, age_ms) in [("old", DAY_MS), ("young", 0)] {
        let id = PaymentId::parse(format!("pay_{name}_{}", uuid::Uuid::new_v4().simple())).unwrap();
        let new = NewPayment {
            order_id: OrderId::parse(format!("order-{id}")).unwrap(),
            id,
            money: fixture_money(),
            provider: shared::PspName::Stripe,
            psp_reference: None,
            metadata: Default::default(),
            correlation_id: CorrelationId::parse("corr-setup").unwrap(),
            trace_context: None,
            now_ms: shared::clock::now_ms() - age_ms,
        };
        old.get_or_insert(new.id.clone());
        w.ctx.store.create(new).await.expect("create");
    }
    let old = old.unwrap();
    index_at(&w, shared::keys::payment(&old), shared::clock::now_ms() - 120_000).await;
    let report = recovery.run(later()).await.expect("run");
    assert_eq!(
        (report.found, report.no_reference),
        (1, 1),
        "only the old one is due: {report:?}"
    );
    assert!(due_for_a_minute(report.lag_seconds), "a small lag: {report:?}");
    assert!(about_a_day(report.oldest_open_age_seconds), "its true age: {report:?}");
    let record = recovery::emf(&report, shared::clock::now_ms());
    assert_eq!(
        (
            record["OldestOpenPaymentAgeSeconds"].as_u64(),
            record["RecoveryLagSeconds"].as_u64()
        ),
        (Some(report.oldest_open_age_seconds), Some(report.lag_seconds))
    );
    assert_eq!(record["Stage"].as_str(), Some(shared::metrics::stage()));
    let metrics = record["_aws"]["CloudWatchMetrics"][0].clone();
    assert_eq!(metrics["Namespace"], "Payments/Recovery");
    assert_eq!(metrics["Dimensions"], serde_json::json!([["Stage"]]));
    assert!(
        metrics["Metrics"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({ "Name": "OldestOpenPaymentAgeSeconds", "Unit": "Seconds" })),
        "{metrics}"
    );

    // Backed off again: the next run reads nothing and reports 0, so the alarm takes the maximum over a
    // period longer than the longest back-off (MAX_RECHECK_INTERVAL).
    let next = recovery.run(later()).await.expect("run");
    assert_eq!((next.found, next.oldest_open_age_seconds), (0, 0), "{next:?}");
}

#[tokio::test]
async fn the_sweeper_reports_the_oldest_open_saga_s_age_apart_from_its_lag_and_zero_with_none() {
    let w = world().await;
    let runner = w.runner();
    let stuck_after = Duration::from_secs(60);

    let empty = sweeper::sweep(&runner, stuck_after, 100, later()).await.expect("sweep");
    assert_eq!(
        (empty.found, empty.lag_seconds, empty.oldest_open_age_seconds),
        (0, 0, 0),
        "{empty:?}"
    );
    assert_eq!(empty.to_emf()["OldestOpenSagaAgeSeconds"].as_u64(), Some(0));
    assert_eq!(empty.to_emf()["SweeperLagSeconds"].as_u64(), Some(0));

    // A saga whose payment the PSP is still processing, started a day ago and deferred ever since, due again
    // two minutes ago.
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_slow_processing", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    let a_day_ago = shared::clock::now_ms() - DAY_MS;
    w.ctx
        .client
        .update_item()
        .table_name(&w.ctx.table)
        .set_key(Some(checkout_saga::saga::saga_key(&id)))
        .update_expression("SET started_at_ms = :t")
        .expression_attribute_values(":t", AttributeValue::N(a_day_ago.to_string()))
        .send()
        .await
        .expect("start it a day ago");
    index_at(
        &w,
        checkout_saga::saga::saga_key(&id),
        shared::clock::now_ms() - 120_000,
    )
    .await;

    let report = sweeper::sweep(&runner, stuck_after, 100, later()).await.expect("sweep");
    assert_eq!((report.found, report.resumed), (1, 1), "{report:?}");
    assert!(due_for_a_minute(report.lag_seconds), "a small lag: {report:?}");
    assert!(about_a_day(report.oldest_open_age_seconds), "its true age: {report:?}");
    assert_eq!(w.saga(&id).await.status, SagaStatus::PaymentPending, "still open");
    let record = report.to_emf();
    assert_eq!(
        (
            record["OldestOpenSagaAgeSeconds"].as_u64(),
            record["SweeperLagSeconds"].as_u64()
        ),
        (Some(report.oldest_open_age_seconds), Some(report.lag_seconds))
    );
    let metrics = &record["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(metrics["Namespace"], "Payments/Checkout");
    assert_eq!(metrics["Dimensions"], serde_json::json!([["Stage"]]));
    assert_eq!(record["Stage"].as_str(), Some(shared::metrics::stage()));
}
