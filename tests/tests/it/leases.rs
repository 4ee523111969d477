//! Leases against DynamoDB Local: exclusion, freed by the payment's version moving past the lease's, expiry,
//! fencing by the version token, owner-only release.

use integration_tests::TestContext;
use payments_core::fixtures;
use payments_core::{IgnoreReason, Outcome, PaymentId, PaymentStatus};
use shared::apply::LeaseWait;
use shared::FinalizeResult;
use std::time::Duration;

#[tokio::test]
async fn two_takers_at_one_version_one_wins_and_the_write_frees_the_lease_without_deleting_it() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_l1", 1000))
        .await
        .unwrap()
        .id;
    let read = ctx.read(&id).await;
    let (a, b) = tokio::join!(ctx.leases.acquire(&read), ctx.leases.acquire(&read));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.is_some() ^ b.is_some(), "exactly one taker wins: {a:?} {b:?}");
    let held = a.or(b).unwrap();
    assert_eq!(held.at_version, 1);
    assert!(
        ctx.leases.acquire(&read).await.unwrap().is_none(),
        "a taker on an equal version waits: the holder may be at work"
    );

    let out = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_1", 1, Outcome::Processing), Some(&held))
        .await
        .unwrap();
    assert!(out.lease_released);
    assert!(
        lease_item(&ctx, &id).await,
        "the write left the lease item (no delete in its transaction)"
    );
    assert!(
        ctx.leases.acquire(&read).await.unwrap().is_none(),
        "a taker on the read before the write does not take over"
    );
    let next = ctx.leases.acquire(&ctx.read(&id).await).await.unwrap();
    assert_eq!(
        next.map(|l| l.at_version),
        Some(2),
        "freed by the version the write moved to"
    );
}

#[tokio::test]
async fn a_holder_that_writes_nothing_deletes_its_lease() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_l6", 1000))
        .await
        .unwrap()
        .id;
    ctx.store
        .finalize(&id, &fixtures::webhook("evt_1", 1, Outcome::Processing), None)
        .await
        .unwrap();
    let held = ctx.leases.acquire(&ctx.read(&id).await).await.unwrap().unwrap();
    let out = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_1", 1, Outcome::Processing), Some(&held))
        .await
        .unwrap();
    assert_eq!(out.result, FinalizeResult::Ignored(IgnoreReason::Duplicate));
    assert!(out.lease_released);
    assert!(
        !lease_item(&ctx, &id).await,
        "no write moved the version: the lease was deleted"
    );
    assert!(ctx.leases.acquire(&ctx.read(&id).await).await.unwrap().is_some());
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

    // A reads and takes the lease, then stalls past its lease.
    let read_a = ctx.read(&id).await;
    let lease_a = short.acquire(&read_a).await.unwrap().expect("A acquires");
    assert!(short.acquire(&read_a).await.unwrap().is_none(), "live lease excludes B");
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // B finds the lease expired (TTL has not deleted it: the condition treats it as free) and captures.
    let lease_b = short
        .acquire(&ctx.read(&id).await)
        .await
        .unwrap()
        .expect("B acquires the expired lease");
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

/// A's lease expired and B took it over at the same version; A's write then moves the version past B's
/// lease, which frees it (a lease cannot tell its holder's write from another's), so the next taker works
/// beside B: B's write from its read before A's is fenced by the version and decided again.
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
    let lease_a = short.acquire(&ctx.read(&id).await).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // B's lease is long, so only a write frees it however slow this machine is.
    let long = ctx.leases_with_ttl(Duration::from_secs(30));
    let read_b = ctx.read(&id).await;
    let lease_b = long.acquire(&read_b).await.unwrap().unwrap();
    assert!(
        long.acquire(&read_b).await.unwrap().is_none(),
        "B holds it at its version"
    );
    let a = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_a", 1, Outcome::Processing), Some(&lease_a))
        .await
        .unwrap();
    assert!(matches!(a.result, FinalizeResult::Applied(_)));
    let b = ctx
        .store
        .finalize_from(
            read_b,
            &fixtures::webhook("evt_b", 2, Outcome::Succeeded),
            Some(&lease_b),
        )
        .await
        .unwrap();
    assert_eq!(
        (b.version_conflicts, b.payment.version),
        (1, 3),
        "B decided again on A's write"
    );
    assert_eq!(b.payment.status, PaymentStatus::Captured);
}

#[tokio::test]
async fn a_release_by_a_non_owner_does_nothing() {
    let ctx = TestContext::new().await;
    // Long enough that a loaded machine's calls stay well within the current owner's lease.
    let short = ctx.leases_with_ttl(Duration::from_millis(1500));
    let payment = ctx.store.create(fixtures::new_payment("pay_l4", 1000)).await.unwrap();
    let old = short.acquire(&payment).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let current = short.acquire(&payment).await.unwrap().unwrap();
    assert!(!short.release(&old).await.unwrap(), "not the owner any more");
    assert!(
        short.acquire(&payment).await.unwrap().is_none(),
        "the owner's lease is intact"
    );
    assert!(short.release(&current).await.unwrap());
    assert!(short.acquire(&payment).await.unwrap().is_some());
}

#[tokio::test]
async fn waiting_for_a_lease_is_bounded() {
    let ctx = TestContext::new().await;
    let payment = ctx.store.create(fixtures::new_payment("pay_l5", 1000)).await.unwrap();
    let _held = ctx.leases.acquire(&payment).await.unwrap().unwrap();
    let started = std::time::Instant::now();
    let wait = LeaseWait::attempts(3, Duration::from_millis(50));
    let got = ctx.leases.hold_waiting(&ctx.store, payment, wait).await.unwrap();
    assert!(got.is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A taker refused while the holder works reads again before its next try: the holder's write moved the
/// version, so the next try takes the lease, with the payment as written.
#[tokio::test]
async fn a_waiting_taker_reads_again_and_takes_the_lease_the_holder_s_write_freed() {
    let ctx = TestContext::new().await;
    let payment = ctx.store.create(fixtures::new_payment("pay_l7", 1000)).await.unwrap();
    let holder = ctx.leases.acquire(&payment).await.unwrap().unwrap();
    let (store, observation) = (ctx.store.clone(), fixtures::webhook("evt_h", 1, Outcome::Processing));
    let writes = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        store
            .finalize(&holder.payment_id, &observation, Some(&holder))
            .await
            .unwrap()
    });
    let wait = LeaseWait::attempts(40, Duration::from_millis(25));
    let (lease, read) = ctx
        .leases
        .hold_waiting(&ctx.store, payment, wait)
        .await
        .unwrap()
        .expect("taken once the holder wrote");
    assert!(writes.await.unwrap().lease_released);
    assert_eq!((lease.lease().at_version, read.version), (2, 2));
    assert!(lease.release().await.unwrap());
}

/// The lease put commits but its answer is lost (a 500 after commit): the SDK's retry finds the lease with
/// our own owner token and takes it, so the payment is not blocked until the lease expires.
#[tokio::test]
async fn a_lease_put_whose_answer_was_lost_after_commit_is_still_ours() {
    use integration_tests::{Fault, FaultInjector};
    let faults = FaultInjector::new();
    let ctx = TestContext::with_faults(faults.clone()).await;
    let payment = ctx
        .store
        .create(fixtures::new_payment("pay_lost_lease", 1000))
        .await
        .unwrap();
    faults.fail_next("PutItem", Fault::ResponseLostAfterCommit, 1);
    let lease = ctx.leases.acquire(&payment).await.unwrap();
    assert_eq!(faults.injected(), 1, "the answer was lost once");
    let lease = lease.expect("the retry of our own committed put takes the lease");
    // It is a real lease: others are kept out, and it releases.
    assert!(ctx.leases.acquire(&payment).await.unwrap().is_none());
    assert!(ctx.leases.release(&lease).await.unwrap());
    assert!(ctx.leases.acquire(&payment).await.unwrap().is_some());
}

/// A request path that leaves early (an error after the lease was taken) still frees the payment: the
/// held lease is released when dropped.
#[tokio::test]
async fn a_held_lease_is_released_on_every_way_out() {
    let ctx = TestContext::new().await;
    let payment = ctx.store.create(fixtures::new_payment("pay_held", 1000)).await.unwrap();
    let id = payment.id.clone();
    async fn fails_after_taking(leases: &shared::Leases, payment: &shared::Payment) -> Result<(), &'static str> {
        let _held = leases.hold(leases.acquire(payment).await.unwrap().expect("free"));
        Err("the step after the lease failed")
    }
    assert!(fails_after_taking(&ctx.leases, &payment).await.is_err());
    let mut free = None;
    for _ in 0..50 {
        free = ctx.leases.acquire(&payment).await.unwrap();
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
    let written = ctx.read(&id).await;
    let next = ctx
        .leases
        .acquire(&written)
        .await
        .unwrap()
        .expect("free after the write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        ctx.leases.acquire(&written).await.unwrap().is_none(),
        "the next holder keeps it"
    );
    assert!(ctx.leases.release(&next).await.unwrap());
}

/// Whether payment `id`'s lease item is in the table (a consistent read of its key).
async fn lease_item(ctx: &TestContext, id: &PaymentId) -> bool {
    ctx.client
        .get_item()
        .table_name(&ctx.table)
        .set_key(Some(shared::keys::lease(id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .is_some()
}
