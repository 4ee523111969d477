//! Leases against DynamoDB Local: exclusion, expiry, fencing by the version token, owner-only release.

use integration_tests::TestContext;
use payments_core::fixtures;
use payments_core::{IgnoreReason, Outcome, PaymentId, PaymentStatus};
use shared::FinalizeResult;
use std::time::Duration;

#[tokio::test]
async fn two_acquirers_one_wins_and_release_inside_the_finalize_transaction_frees_it() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_l1", 1000))
        .await
        .unwrap()
        .id;
    let (a, b) = tokio::join!(ctx.leases.acquire(&id), ctx.leases.acquire(&id));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.is_some() ^ b.is_some(), "exactly one acquirer wins: {a:?} {b:?}");
    let held = a.or(b).unwrap();
    assert!(ctx.leases.acquire(&id).await.unwrap().is_none());

    let out = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_1", 1, Outcome::Processing), Some(&held))
        .await
        .unwrap();
    assert!(out.lease_released);
    assert!(
        ctx.leases.acquire(&id).await.unwrap().is_some(),
        "released in the transaction"
    );
}

#[tokio::test]
async fn an_expired_lease_is_free_and_its_former_holder_is_fenced_by_the_version() {
    let ctx = TestContext::new().await;
    let short = ctx.leases_with_ttl(Duration::from_millis(1000));
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_l2", 1000))
        .await
        .unwrap()
        .id;

    // A takes the lease and reads, then stalls past its lease.
    let lease_a = short.acquire(&id).await.unwrap().expect("A acquires");
    let read_a = ctx.store.get(&id).await.unwrap().unwrap();
    assert!(short.acquire(&id).await.unwrap().is_none(), "live lease excludes B");
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // B finds the lease expired (TTL has not deleted it: the condition treats it as free) and captures.
    let lease_b = short.acquire(&id).await.unwrap().expect("B acquires the expired lease");
    let b = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_b", 2, Outcome::Succeeded), Some(&lease_b))
        .await
        .unwrap();
    assert_eq!(b.payment.status, PaymentStatus::Captured);

    // A wakes up and writes from its stale read: the version token fences it.
    let a = ctx
        .store
        .finalize_from(
            read_a,
            &fixtures::webhook("evt_a", 1, Outcome::Processing),
            Some(&lease_a),
        )
        .await
        .unwrap();
    assert_eq!(a.version_conflicts, 1);
    assert_eq!(a.result, FinalizeResult::Ignored(IgnoreReason::Stale));
    assert!(!a.lease_released, "A no longer owns a lease to release");
    let stored = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.version), (PaymentStatus::Captured, 2));
}

#[tokio::test]
async fn a_holder_whose_lease_was_taken_over_still_writes_only_on_the_current_version() {
    let ctx = TestContext::new().await;
    let short = ctx.leases_with_ttl(Duration::from_millis(300));
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_l3", 1000))
        .await
        .unwrap()
        .id;
    let lease_a = short.acquire(&id).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // B's lease is long, so it is still B's at the end however slow this machine is.
    let long = ctx.leases_with_ttl(Duration::from_secs(30));
    let lease_b = long.acquire(&id).await.unwrap().unwrap();
    // A writes on the current version while B holds the lease: the lease release fails, the version holds,
    // so the write goes through without the release, and B's lease stays B's.
    let a = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_a", 1, Outcome::Processing), Some(&lease_a))
        .await
        .unwrap();
    assert!(matches!(a.result, FinalizeResult::Applied(_)));
    assert!(!a.lease_released);
    assert!(
        short.acquire(&id).await.unwrap().is_none(),
        "B's lease survived A's write"
    );
    assert!(short.release(&lease_b).await.unwrap());
}

#[tokio::test]
async fn a_release_by_a_non_owner_does_nothing() {
    let ctx = TestContext::new().await;
    // Long enough that a loaded machine's calls stay well within the current owner's lease.
    let short = ctx.leases_with_ttl(Duration::from_millis(1500));
    let id = PaymentId::parse("pay_l4").unwrap();
    let old = short.acquire(&id).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let current = short.acquire(&id).await.unwrap().unwrap();
    assert!(!short.release(&old).await.unwrap(), "not the owner any more");
    assert!(
        short.acquire(&id).await.unwrap().is_none(),
        "the owner's lease is intact"
    );
    assert!(short.release(&current).await.unwrap());
    assert!(short.acquire(&id).await.unwrap().is_some());
}

#[tokio::test]
async fn waiting_for_a_lease_is_bounded() {
    let ctx = TestContext::new().await;
    let id = PaymentId::parse("pay_l5").unwrap();
    let _held = ctx.leases.acquire(&id).await.unwrap().unwrap();
    let started = std::time::Instant::now();
    let got = ctx
        .leases
        .acquire_waiting(&id, 3, Duration::from_millis(50))
        .await
        .unwrap();
    assert!(got.is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The lease put commits but its answer is lost (a 500 after commit): the SDK's retry finds the lease with
/// our own owner token and takes it, so the payment is not blocked until the lease expires.
#[tokio::test]
async fn a_lease_put_whose_answer_was_lost_after_commit_is_still_ours() {
    use integration_tests::{Fault, FaultInjector};
    let faults = FaultInjector::new();
    let ctx = TestContext::with_faults(faults.clone()).await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_lost_lease", 1000))
        .await
        .unwrap()
        .id;
    faults.fail_next("PutItem", Fault::ResponseLostAfterCommit, 1);
    let lease = ctx.leases.acquire(&id).await.unwrap();
    assert_eq!(faults.injected(), 1, "the answer was lost once");
    let lease = lease.expect("the retry of our own committed put takes the lease");
    // It is a real lease: others are kept out, and it releases.
    assert!(ctx.leases.acquire(&id).await.unwrap().is_none());
    assert!(ctx.leases.release(&lease).await.unwrap());
    assert!(ctx.leases.acquire(&id).await.unwrap().is_some());
}

/// A request path that leaves early (an error after the lease was taken) still frees the payment: the
/// held lease is released when dropped.
#[tokio::test]
async fn a_held_lease_is_released_on_every_way_out() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_held", 1000))
        .await
        .unwrap()
        .id;
    async fn fails_after_taking(leases: &shared::Leases, id: &PaymentId) -> Result<(), &'static str> {
        let _held = leases.hold(leases.acquire(id).await.unwrap().expect("free"));
        Err("the read after the lease failed")
    }
    assert!(fails_after_taking(&ctx.leases, &id).await.is_err());
    let mut free = None;
    for _ in 0..50 {
        free = ctx.leases.acquire(&id).await.unwrap();
        if free.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(free.is_some(), "the dropped lease was released (its TTL is 30 s)");
    // A lease a write released is not released again (the new holder keeps it).
    let held = ctx.leases.hold(free.unwrap());
    let out = ctx
        .store
        .finalize(
            &id,
            &fixtures::webhook("evt_h", 1, Outcome::Processing),
            Some(held.lease()),
        )
        .await
        .unwrap();
    assert!(out.lease_released);
    held.released_by_write();
    let next = ctx.leases.acquire(&id).await.unwrap().expect("free after the write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        ctx.leases.acquire(&id).await.unwrap().is_none(),
        "the next holder keeps it"
    );
    assert!(ctx.leases.release(&next).await.unwrap());
}
