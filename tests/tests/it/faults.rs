//! Failures DynamoDB Local never produces, injected in front of it by an SDK interceptor: each is retried or
//! surfaced as designed, and nothing accepted is lost or applied twice.

use integration_tests::{Fault, FaultInjector, TestContext};
use payments_core::fixtures;
use payments_core::{EventKind, Outcome, PaymentId, PaymentStatus};
use shared::{FinalizeResult, StoreError};

/// The finalize write: one conditional PutItem of the payment (no lease in these tests).
const PUT: &str = "PutItem";

async fn setup(name: &str) -> (TestContext, FaultInjector, PaymentId) {
    let faults = FaultInjector::new();
    let ctx = TestContext::with_faults(faults.clone()).await;
    let id = ctx.store.create(fixtures::new_payment(name, 1000)).await.unwrap().id;
    (ctx, faults, id)
}

async fn assert_written_once(ctx: &TestContext, id: &PaymentId, status: PaymentStatus) {
    let p = ctx.store.get(id).await.unwrap().unwrap();
    assert_eq!((p.status, p.version), (status, 2));
    assert_eq!(ctx.events(id).await.unwrap().len(), 2);
}

#[tokio::test]
async fn throttling_500s_and_provisioned_throughput_are_retried_by_the_sdk() {
    for (i, fault) in [
        Fault::Throttling,
        Fault::ProvisionedThroughputExceeded,
        Fault::InternalServerError,
    ]
    .into_iter()
    .enumerate()
    {
        let (ctx, faults, id) = setup(&format!("pay_retry{i}")).await;
        faults.fail_next("GetItem", fault, 2).fail_next(PUT, fault, 2);
        let out = ctx
            .store
            .finalize(&id, &fixtures::webhook("evt_1", 1, Outcome::Succeeded), None)
            .await
            .unwrap();
        assert_eq!(
            out.result,
            FinalizeResult::Applied(EventKind::PaymentCaptured),
            "{fault:?}"
        );
        assert_eq!((faults.injected(), faults.pending()), (4, 0), "{fault:?}");
        assert_written_once(&ctx, &id, PaymentStatus::Captured).await;
    }
}

#[tokio::test]
async fn throttling_that_outlasts_the_retries_is_surfaced_and_writes_nothing() {
    let (ctx, faults, id) = setup("pay_throttled").await;
    faults.fail_next(PUT, Fault::Throttling, shared::aws::MAX_ATTEMPTS as usize);
    let obs = fixtures::webhook("evt_1", 1, Outcome::Succeeded);
    let err = ctx.store.finalize(&id, &obs, None).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Unavailable { .. }) && err.is_transient(),
        "{err:?}"
    );
    let p = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.version), (PaymentStatus::Pending, 1), "nothing written");
    // The PSP retries the webhook later: nothing was lost.
    ctx.store.finalize(&id, &obs, None).await.unwrap();
    assert_written_once(&ctx, &id, PaymentStatus::Captured).await;
}

#[tokio::test]
async fn a_transaction_conflict_is_retried_with_a_fresh_read() {
    let (ctx, faults, id) = setup("pay_tc").await;
    faults.fail_next(PUT, Fault::ItemTransactionConflict, 2);
    let out = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_1", 1, fixtures::failed()), None)
        .await
        .unwrap();
    assert_eq!(out.result, FinalizeResult::Applied(EventKind::PaymentFailed));
    assert!(faults.injected() >= 2);
    assert_written_once(&ctx, &id, PaymentStatus::Failed).await;
}

#[tokio::test]
async fn transaction_conflicts_that_persist_are_surfaced_and_write_nothing() {
    let (ctx, faults, id) = setup("pay_tc_many").await;
    faults.fail_next(PUT, Fault::ItemTransactionConflict, 1000);
    let err = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_1", 1, fixtures::failed()), None)
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let p = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(p.version, 1);
    assert_eq!(ctx.events(&id).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_response_lost_after_commit_is_not_applied_twice() {
    let (ctx, faults, id) = setup("pay_lost").await;
    faults.fail_next(PUT, Fault::ResponseLostAfterCommit, 1);
    let out = ctx
        .store
        .finalize(
            &id,
            &fixtures::observe(payments_core::Channel::Sync, Outcome::Succeeded),
            None,
        )
        .await
        .unwrap();
    assert_eq!(faults.injected(), 1);
    assert_eq!(out.payment.status, PaymentStatus::Captured);
    assert_eq!(out.payment.version, 2);
    assert_written_once(&ctx, &id, PaymentStatus::Captured).await;
}
