//! The age of the oldest open payment and saga, which the reconciler and the sweeper publish on every run
//! (`OldestOpenPaymentAgeSeconds`, `OldestOpenSagaAgeSeconds`, alarmed): read from the `open-items` query
//! each run makes anyway, 0 when nothing is due.

use crate::support::*;
use aws_sdk_dynamodb::types::AttributeValue;
use checkout_saga::{metrics, sweeper};
use shared::saga::SagaStatus;
use shared::{CorrelationId, NewPayment, OrderId, PaymentId};
use std::time::Duration;

const HOUR_MS: i64 = 3_600_000;

/// Within a minute of an hour: the run's own time, not another clock's.
fn about_an_hour(seconds: u64) -> bool {
    (3600..3660).contains(&seconds)
}

#[tokio::test]
async fn the_reconciler_reports_how_long_the_oldest_open_payment_has_waited_and_zero_with_none() {
    let w = world().await;
    let mut recovery = w.runner().recovery;
    recovery.settings.stale_after = Duration::from_secs(60);

    let empty = recovery.run(later()).await.expect("run");
    assert_eq!((empty.found, empty.oldest_open_age_seconds), (0, 0), "{empty:?}");
    let record = shared::recovery::emf(&empty, shared::clock::now_ms());
    assert_eq!(record["OldestOpenPaymentAgeSeconds"].as_u64(), Some(0), "{record}");

    // One payment opened an hour ago (no PSP reference: recovery cannot resolve it) and one just now.
    for (name, age_ms) in [("old", HOUR_MS), ("young", 0)] {
        let id = PaymentId::parse(format!("pay_{name}_{}", uuid::Uuid::new_v4().simple())).unwrap();
        let new = NewPayment {
            order_id: OrderId::parse(format!("order-{id}")).unwrap(),
            id,
            money: fixture_money(),
            psp_reference: None,
            metadata: Default::default(),
            correlation_id: CorrelationId::parse("corr-setup").unwrap(),
            trace_context: None,
            now_ms: shared::clock::now_ms() - age_ms,
        };
        w.ctx.store.create(new).await.expect("create");
    }
    let report = recovery.run(later()).await.expect("run");
    assert_eq!(
        (report.found, report.no_reference),
        (1, 1),
        "only the old one is due: {report:?}"
    );
    assert!(about_an_hour(report.oldest_open_age_seconds), "{report:?}");
    let record = shared::recovery::emf(&report, shared::clock::now_ms());
    assert_eq!(
        record["OldestOpenPaymentAgeSeconds"].as_u64(),
        Some(report.oldest_open_age_seconds)
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
}

#[tokio::test]
async fn the_sweeper_reports_how_long_the_oldest_open_saga_has_waited_and_zero_with_none() {
    let w = world().await;
    let runner = w.runner();
    let stuck_after = Duration::from_secs(60);

    let empty = sweeper::sweep(&runner, stuck_after, 100, later()).await.expect("sweep");
    assert_eq!((empty.found, empty.oldest_open_age_seconds), (0, 0), "{empty:?}");
    assert_eq!(metrics::swept(&empty)["OldestOpenSagaAgeSeconds"].as_u64(), Some(0));

    // A saga waiting for its payment's event (which never comes here), opened an hour ago.
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    let an_hour_ago = shared::clock::now_ms() - HOUR_MS;
    w.ctx
        .client
        .update_item()
        .table_name(&w.ctx.table)
        .set_key(Some(shared::saga::saga_key(&id)))
        .update_expression("SET opened_at_ms = :t")
        .expression_attribute_values(":t", AttributeValue::N(an_hour_ago.to_string()))
        .send()
        .await
        .expect("open it an hour ago");

    let report = sweeper::sweep(&runner, stuck_after, 100, later()).await.expect("sweep");
    assert_eq!(report.found, 1, "{report:?}");
    assert!(about_an_hour(report.oldest_open_age_seconds), "{report:?}");
    let record = metrics::swept(&report);
    assert_eq!(
        record["OldestOpenSagaAgeSeconds"].as_u64(),
        Some(report.oldest_open_age_seconds)
    );
    let metrics = &record["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(metrics["Namespace"], "Payments/Checkout");
    assert_eq!(metrics["Dimensions"], serde_json::json!([["Stage"]]));
    assert_eq!(record["Stage"].as_str(), Some(shared::metrics::stage()));
}
