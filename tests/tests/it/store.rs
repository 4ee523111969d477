//! The payment store against DynamoDB Local: create, read, events, the versioned write and PSP event dedup.

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::TestContext;
use payments_core::fixtures::{self, contains_fixture_secret};
use payments_core::{Channel, EventKind, IgnoreReason, Outcome, PaymentId, PaymentStatus};
use shared::store::item::item_size_bytes;
use shared::{FinalizeResult, StoreError};

#[tokio::test]
async fn a_payment_is_created_once_and_reads_back_with_its_first_event_and_a_missing_one_is_not_found() {
    let ctx = TestContext::new().await;
    let created = ctx.store.create(fixtures::new_payment("pay_crud", 1999)).await.unwrap();
    assert_eq!((created.version, created.status), (1, PaymentStatus::Pending));
    assert_eq!(ctx.store.get(&created.id).await.unwrap(), Some(created.clone()));
    let events = ctx.events(&created.id).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].version, events[0].kind), (1, EventKind::PaymentCreated));

    let again = ctx.store.create(fixtures::new_payment("pay_crud", 1999)).await;
    assert!(matches!(again, Err(StoreError::AlreadyExists(_))), "{again:?}");
    assert!(ctx
        .store
        .get(&PaymentId::parse("pay_none").unwrap())
        .await
        .unwrap()
        .is_none());
    let missing = ctx
        .store
        .finalize(
            &PaymentId::parse("pay_none").unwrap(),
            &fixtures::observe(Channel::Sync, Outcome::Processing),
            None,
        )
        .await;
    assert!(matches!(missing, Err(StoreError::NotFound(_))));
}

/// A payment deleted between finalize's read and its write is reported as that payment not found, in the same
/// words as one that never existed.
#[tokio::test]
async fn a_payment_that_vanishes_during_finalize_is_reported_not_found_by_its_id() {
    let ctx = TestContext::new().await;
    let created = ctx.store.create(fixtures::new_payment("pay_gone", 1999)).await.unwrap();
    let hook = integration_tests::hook::BeforeCall::new();
    let (client, table) = (ctx.client.clone(), ctx.table.clone());
    hook.before_next("PutItem", move || async move {
        client
            .delete_item()
            .table_name(table)
            .key("pk", AttributeValue::S("PAYMENT#pay_gone".into()))
            .key("sk", AttributeValue::S("PAYMENT".into()))
            .send()
            .await
            .unwrap();
    });
    let result = ctx
        .store_with_hook(hook.clone())
        .finalize(
            &created.id,
            &fixtures::observe(Channel::Sync, Outcome::Processing),
            None,
        )
        .await;
    assert!(hook.done(), "the payment was deleted between the read and the write");
    let err = result.unwrap_err();
    assert!(matches!(&err, StoreError::NotFound(id) if id == "pay_gone"), "{err:?}");
    assert_eq!(err.to_string(), "payment pay_gone not found");
}

#[tokio::test]
async fn transitions_are_versioned_logged_in_order_and_terminal_items_hold_no_secret() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_flow", 1000))
        .await
        .unwrap()
        .id;
    let steps = [
        fixtures::observe(Channel::Sync, fixtures::requires_action()),
        fixtures::webhook("evt_a", 1_000, Outcome::Processing),
        fixtures::webhook("evt_b", 2_000, Outcome::Succeeded),
        fixtures::webhook("evt_c", 3_000, fixtures::refunded(400, false)),
        fixtures::webhook("evt_d", 4_000, fixtures::refunded(1000, false)),
    ];
    for (i, obs) in steps.iter().enumerate() {
        let out = ctx.store.finalize(&id, obs, None).await.unwrap();
        assert!(
            matches!(out.result, FinalizeResult::Applied(_)),
            "step {i}: {:?}",
            out.result
        );
        assert_eq!(out.payment.version, i as u64 + 2);
    }
    let events = ctx.events(&id).await.unwrap();
    let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6]);
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        vec![
            PaymentCreated,
            ActionRequired,
            ProcessingStarted,
            PaymentCaptured,
            RefundRecorded,
            PaymentRefunded
        ]
    );
    assert_eq!(events[2].path, Channel::Webhook);

    // The raw stored items: the payment holds no secret once terminal, no event ever does.
    let raw = ctx.client.scan().table_name(&ctx.table).send().await.unwrap();
    for item in raw.items() {
        let text = format!("{item:?}");
        assert!(!contains_fixture_secret(&text), "secret stored in {text}");
        assert!(item_size_bytes(item) < 1024, "item over 1 KB: {text}");
    }
    let p = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Refunded, 1000));
}

#[tokio::test]
async fn the_same_psp_event_id_changes_the_payment_once() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_dup", 1000))
        .await
        .unwrap()
        .id;
    let event = fixtures::webhook("evt_same", 1_000, fixtures::attempt_failed());
    let first = ctx.store.finalize(&id, &event, None).await.unwrap();
    assert_eq!(first.result, FinalizeResult::Applied(EventKind::AttemptFailed));
    // A different event moves the payment on; the old one redelivered must not move it back.
    ctx.store
        .finalize(
            &id,
            &fixtures::webhook("evt_next", 2_000, fixtures::requires_action()),
            None,
        )
        .await
        .unwrap();
    let second = ctx.store.finalize(&id, &event, None).await.unwrap();
    assert_eq!(second.result, FinalizeResult::Ignored(IgnoreReason::Duplicate));
    assert_eq!(second.payment.status, PaymentStatus::RequiresAction);

    // Sixteen concurrent deliveries of one new event id: exactly one applies.
    let event = fixtures::webhook("evt_burst", 3_000, Outcome::Processing);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, id, event) = (ctx.store.clone(), id.clone(), event.clone());
            tokio::spawn(async move { store.finalize(&id, &event, None).await.unwrap() })
        })
        .collect();
    let mut applied = 0;
    for t in tasks {
        if matches!(t.await.unwrap().result, FinalizeResult::Applied(_)) {
            applied += 1;
        }
    }
    assert_eq!(applied, 1);
    let events = ctx.events(&id).await.unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.psp_event_id.as_ref().map(|i| i.as_str()) == Some("evt_burst"))
            .count(),
        1
    );
    assert_eq!(events.len(), 4);
}

/// The cost target: an uncontended finalize is one read and one conditional `PutItem` (no transaction); a
/// conflict adds no read.
#[tokio::test]
async fn finalize_costs_one_read_and_one_put_and_a_conflict_no_extra_read() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_cost", 1000))
        .await
        .unwrap()
        .id;
    let stale = ctx.store.get(&id).await.unwrap().unwrap();

    ctx.calls.reset();
    ctx.store
        .finalize(&id, &fixtures::webhook("evt_1", 1, Outcome::Processing), None)
        .await
        .unwrap();
    assert_eq!(ctx.calls.calls(), vec!["GetItem", "PutItem"]);

    ctx.calls.reset();
    let out = ctx
        .store
        .finalize_from(stale, &fixtures::webhook("evt_2", 2, Outcome::Succeeded), None)
        .await
        .unwrap();
    assert_eq!(out.version_conflicts, 1);
    assert_eq!(out.result, FinalizeResult::Applied(EventKind::PaymentCaptured));
    assert_eq!(ctx.calls.calls(), vec!["PutItem", "PutItem"], "no read on a conflict");
}
