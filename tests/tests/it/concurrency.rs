//! Races on one payment against DynamoDB Local. Each test relies on the version condition of the store's
//! write: without it, the lost update or the stale secret shows up here.

use integration_tests::TestContext;
use payments_core::fixtures::{self, contains_fixture_secret};
use payments_core::{Channel, ClientView, IgnoreReason, Observation, Outcome, PaymentStatus};
use shared::{FinalizeOutcome, FinalizeResult};

#[tokio::test]
async fn the_seeds_race_sync_reads_v1_webhook_captures_sync_answers_captured_without_secret() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_seed", 1000))
        .await
        .unwrap()
        .id;

    // T=0: the sync path reads version 1.
    let stale = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(stale.version, 1);
    // T=1: the webhook commits `captured`.
    let webhook = ctx
        .store
        .finalize(&id, &fixtures::webhook("evt_cap", 1_000, Outcome::Succeeded), None)
        .await
        .unwrap();
    assert_eq!(webhook.payment.status, PaymentStatus::Captured);
    // T=2: the sync answer (redirect needed) is written against version 1: it conflicts, decides again
    // from the item that won, and answers `captured`.
    let sync = ctx
        .store
        .finalize_from(
            stale,
            &fixtures::observe(Channel::Sync, fixtures::requires_action()),
            None,
        )
        .await
        .unwrap();
    assert_eq!(sync.version_conflicts, 1);
    assert_eq!(sync.result, FinalizeResult::Ignored(IgnoreReason::Stale));
    let view = ClientView::from(&sync.payment);
    assert_eq!(view.status(), PaymentStatus::Captured);
    assert!(!view.carries_secret());
    assert!(!contains_fixture_secret(&serde_json::to_string(&view).unwrap()));
    // T=3: nothing for the customer to follow; the stored payment is captured at version 2.
    let stored = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.version), (PaymentStatus::Captured, 2));
}

fn writer(i: usize) -> Observation {
    let outcome = match i % 8 {
        0 | 1 => Outcome::Succeeded,
        2 => fixtures::failed(),
        3 => Outcome::Processing,
        4 => fixtures::requires_action(),
        5 => fixtures::attempt_failed(),
        6 => Outcome::Succeeded,
        _ => fixtures::failed(),
    };
    if i.is_multiple_of(2) {
        let path = if i.is_multiple_of(4) {
            Channel::Sync
        } else {
            Channel::Recovery
        };
        fixtures::observe(path, outcome)
    } else {
        // Webhooks: pairs share an event id (the same event delivered twice), others are distinct.
        fixtures::webhook(&format!("evt_{}", i / 4), 1_000 + i as i64, outcome)
    }
}

#[tokio::test]
async fn thirty_two_concurrent_writers_one_terminal_transition_no_lost_update_no_secret() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_32", 1000))
        .await
        .unwrap()
        .id;
    // The payment starts with a secret on it: the thing that must never leak once it is terminal.
    ctx.store
        .finalize(
            &id,
            &fixtures::observe(Channel::Sync, fixtures::requires_action()),
            None,
        )
        .await
        .unwrap();

    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let (store, id, barrier) = (ctx.store.clone(), id.clone(), barrier.clone());
            tokio::spawn(async move {
                let current = store.get(&id).await.unwrap().unwrap();
                barrier.wait().await;
                store.finalize_from(current, &writer(i), None).await.unwrap()
            })
        })
        .collect();
    let mut answers: Vec<FinalizeOutcome> = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }

    let events = ctx.events(&id).await.unwrap();
    let final_payment = ctx.store.get(&id).await.unwrap().unwrap();
    // Versions contiguous: 1..=n, and the payment is at n.
    let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
    assert_eq!(versions, (1..=final_payment.version).collect::<Vec<_>>());
    // Exactly one terminal transition.
    let terminal: Vec<_> = events
        .iter()
        .filter(|e| e.status.is_terminal() && !e.previous_status.is_some_and(PaymentStatus::is_terminal))
        .collect();
    assert_eq!(terminal.len(), 1, "{events:#?}");
    let terminal_version = terminal[0].version;
    assert!(final_payment.status.is_terminal());
    // No lost update: every write reported as applied is in the log, and nothing else is.
    let applied: Vec<&FinalizeOutcome> = answers
        .iter()
        .filter(|a| matches!(a.result, FinalizeResult::Applied(_)))
        .collect();
    assert_eq!(applied.len() as u64, final_payment.version - 2);
    for a in &applied {
        let e = &events[(a.payment.version - 1) as usize];
        assert_eq!(FinalizeResult::Applied(e.kind), a.result);
    }
    // Every answer built from a terminal item shows the winner's state and carries no secret.
    for a in &answers {
        let view = ClientView::from(&a.payment);
        if a.payment.version >= terminal_version {
            assert_eq!(a.payment.status, final_payment.status);
            assert!(
                !view.carries_secret(),
                "secret in an answer about a terminal payment: {a:?}"
            );
            assert!(!contains_fixture_secret(&serde_json::to_string(&view).unwrap()));
        }
    }
    // Most writers lost a race: the conflicts were decided again from the winner's item.
    assert!(answers.iter().any(|a| a.version_conflicts > 0));
}
