//! Issue 44: a checkout function keeps to its Stripe budget (`PSP_CALL_BUDGET_PER_SECOND`, split among
//! `PSP_CALL_BUDGET_INSTANCES`), read through the function's own settings and counted at the simulator.

use crate::support::*;
use std::time::{Duration, Instant};

/// The checkout-api's variables with a budget of 20 requests a second over 2 instances: 10 each.
fn budgeted(w: &World) -> shared::Env {
    let url = w.psp_url.clone();
    shared::Env::from_lookup(move |name| {
        let value = match name {
            "TABLE_NAME" => "payments",
            "PSP_BASE_URL" => url.as_str(),
            "PSP_API_KEY" => TEST_KEY,
            "PSP_REDIRECTS" => "never",
            "ESCALATION_QUEUE_URL" => "http://127.0.0.1:9/escalations",
            "PSP_CALL_BUDGET_PER_SECOND" => "20",
            "PSP_CALL_BUDGET_INSTANCES" => "2",
            _ => return None,
        };
        Some(value.to_owned())
    })
}

#[tokio::test]
async fn the_instances_of_a_checkout_function_keep_to_its_stripe_budget_at_the_psp() {
    let w = world().await;
    let settings = checkout_saga::Settings::from_env(&budgeted(&w)).expect("settings");
    let stripe = settings.psps.stripe.expect("stripe");
    assert!(stripe.budget.is_some(), "the budget is read with the PSP's settings");
    let (before, _) = w.sim.ledger.auth_counts();
    let started = Instant::now();
    // Two instances (two clients built from the same settings), each asked 15 times at once.
    let mut calls = Vec::new();
    for _ in 0..2 {
        let client = psp::StripeClient::new(&stripe, psp::ApiKey::parse(TEST_KEY).unwrap()).unwrap();
        for i in 0..15 {
            let client = client.clone();
            calls.push(tokio::spawn(async move {
                let reference = shared::PspReference::parse(format!("pi_budget_{i}")).unwrap();
                let _ = psp::StripeApi::retrieve(&client, &reference).await;
                Instant::now()
            }));
        }
    }
    let mut done = Vec::new();
    for call in calls {
        done.push(call.await.unwrap().duration_since(started));
    }
    let (after, _) = w.sim.ledger.auth_counts();
    assert_eq!(
        after - before,
        30,
        "every call reached the PSP once (a 404 is not retried)"
    );
    // 30 calls at 20 a second: the first of each instance at once, the last after 14 periods of 100 ms.
    done.sort();
    assert!(done[29] >= Duration::from_millis(1_350), "{:?}", done[29]);
    for (i, at) in done.iter().enumerate() {
        let within = done[i..]
            .iter()
            .take_while(|d| **d < *at + Duration::from_secs(1))
            .count();
        assert!(within <= 22, "{within} calls answered within a second of {at:?}");
    }
}
