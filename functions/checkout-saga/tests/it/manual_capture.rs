//! Authorize at the charge, capture at the order's confirmation (`STRIPE_CAPTURE_METHOD=manual`, issue 34),
//! against the simulator's Stripe, which authorizes, captures, cancels and lets an authorization lapse as
//! Stripe does: the payment is `authorized` (not paid) until the saga captures it; a compensation before
//! the capture cancels the authorization and refunds nothing.

use crate::support::*;
use checkout_saga::orders;
use checkout_saga::runner::{Runner, Settings};
use checkout_saga::saga::{SagaRecord, SagaStatus};
use lambda_http::http::{Method, StatusCode};
use psp::StripeClient;
use psp_simulator::ledger::AUTHORIZATION_VALIDITY;
use shared::clock::WallClock;
use shared::{ClientView, OrderId, PaymentStatus};
use std::time::Duration;

/// The log of a checkout whose authorization was released before any capture: the cancel, then the stock.
const RELEASED: [(K, S); 7] = PAYMENT_FAILED;

fn manual(w: &World) -> Runner<StripeClient> {
    w.runner_over(w.manual_capture_psp())
}

/// The saga's PaymentIntent as the simulator holds it now (charge expanded).
fn intent(w: &World, record: &SagaRecord) -> serde_json::Value {
    let payment = record.payment_id.as_ref().expect("charged");
    let mut intents = w.sim.ledger.intents_for(payment.as_str());
    assert_eq!(intents.len(), 1, "one PaymentIntent");
    intents.remove(0)
}

/// Captures the simulator saw, by their idempotency key's path.
fn captures(w: &World) -> usize {
    w.sim
        .ledger
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/capture"))
        .count()
}

/// Starts a manual-capture checkout: it waits, its payment authorized (not captured) with the charge's
/// `capture_before` recorded.
async fn authorized(w: &World, runner: &Runner<StripeClient>, id: &OrderId) -> SagaRecord {
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 2))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    let pi = intent(w, &waiting);
    assert_eq!(
        (
            pi["status"].as_str(),
            pi["capture_method"].as_str(),
            pi["amount_capturable"].as_u64()
        ),
        (Some("requires_capture"), Some("manual"), Some(2500))
    );
    let payment = w
        .ctx
        .store
        .get(waiting.payment_id.as_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.status, PaymentStatus::Authorized, "authorized, not paid");
    let before = pi["latest_charge"]["payment_method_details"]["card"]["capture_before"]
        .as_i64()
        .unwrap();
    assert_eq!(
        payment.capture_before_ms,
        Some(before * 1000),
        "the charge's capture_before, recorded"
    );
    let view = serde_json::to_value(ClientView::from(&payment)).unwrap();
    assert_eq!(
        view["status"], "authorized",
        "the client view tells it from captured: {view}"
    );
    assert_eq!(captures(w), 0, "nothing captured at the charge");
    waiting
}

#[tokio::test]
async fn a_manual_capture_checkout_captures_when_the_order_is_confirmed() {
    let w = world().await;
    let runner = manual(&w);
    let id = order();
    let waiting = authorized(&w, &runner, &id).await;
    // The order projection and `GET /checkouts/{order}` tell the authorization from a capture.
    w.project(&waiting).await;
    let path = format!("/checkouts/{id}");
    let (_, view) = crate::api::call(&runner, Method::GET, &path, None).await;
    assert_eq!(
        (view["payment_status"].as_str(), view["captured"].as_bool()),
        (Some("authorized"), Some(false))
    );
    // The authorization's event reaches the saga through its inbox: it captures, then confirms.
    w.deliver(&runner, &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(w.log(&id).await, HAPPY);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Captured);
    let pi = intent(&w, &done);
    assert_eq!(
        (
            pi["status"].as_str(),
            pi["amount_received"].as_u64(),
            pi["latest_charge"]["captured"].as_bool()
        ),
        (Some("succeeded"), Some(2500), Some(true))
    );
    assert_eq!(captures(&w), 1, "captured once");
    let order_state = orders::status(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    assert_eq!(order_state, Some(("confirmed".into(), Some("completed".into()))));
    // Once the capture's own event reached the projection (the outbox's delivery), the view says captured.
    w.project(&done).await;
    let (_, view) = crate::api::call(&runner, Method::GET, &path, None).await;
    assert_eq!(
        (view["payment_status"].as_str(), view["captured"].as_bool()),
        (Some("captured"), Some(true))
    );
    assert_eq!(w.stock().await, STOCK - 2);
    // Delivered again (the capture's event too): nothing more is captured or logged.
    w.deliver(&runner, &done).await;
    assert_eq!((captures(&w), w.log(&id).await.len()), (1, HAPPY.len()));
}

#[tokio::test]
async fn a_compensated_manual_capture_checkout_cancels_the_authorization_and_refunds_nothing() {
    let w = world().await;
    let runner = manual(&w);
    // Cancelled through the checkout API while authorized: the saga cancels the PaymentIntent at once.
    let by_api = order();
    authorized(&w, &runner, &by_api).await;
    assert_eq!(
        orders::cancel(&w.ctx.client, &w.ctx.table, &by_api).await.unwrap(),
        orders::Cancel::Cancelled
    );
    runner.cancel_by_customer(&by_api).await.expect("cancel");
    // Cancelled while the authorization's event is on its way: the saga finds the order cancelled before it
    // captures, and releases the authorization instead of taking the money.
    let raced = order();
    let waiting = authorized(&w, &runner, &raced).await;
    assert_eq!(
        orders::cancel(&w.ctx.client, &w.ctx.table, &raced).await.unwrap(),
        orders::Cancel::Cancelled
    );
    w.deliver(&runner, &waiting).await;
    for id in [&by_api, &raced] {
        let done = w.saga(id).await;
        assert_eq!(done.status, SagaStatus::Compensated, "{id}");
        assert_eq!(w.log(id).await, RELEASED, "{id}: cancel, then the stock");
        assert_eq!((done.captured, done.refunded_minor), (false, 0));
        assert_eq!(w.payment_status(&done).await, PaymentStatus::Failed);
        let pi = intent(&w, &done);
        assert_eq!(
            (
                pi["status"].as_str(),
                pi["amount_capturable"].as_u64(),
                pi["amount_received"].as_u64()
            ),
            (Some("canceled"), Some(0), Some(0)),
            "{id}: the authorization released"
        );
        assert!(
            w.sim.ledger.refunds_of(pi["id"].as_str().unwrap()).is_empty(),
            "{id}: no refund at the PSP"
        );
    }
    assert_eq!(captures(&w), 0, "never captured");
    assert_eq!(w.stock().await, STOCK, "stock back");
}

#[tokio::test]
async fn an_authorization_past_capture_before_ends_the_saga_compensated() {
    let w = world().await;
    let id = order();
    let waiting = authorized(&w, &manual(&w), &id).await;
    w.project(&waiting).await;
    // No resume came in time (the events lost, the functions down): a week later the authorization lapsed
    // at Stripe, and the sweeper resumes the saga.
    let week = AUTHORIZATION_VALIDITY + Duration::from_secs(60);
    w.sim.ledger.age_authorizations(week);
    let late = w.runner_with(
        w.ctx.client.clone(),
        w.manual_capture_psp(),
        Settings {
            clock: WallClock::ahead(week),
            ..settings()
        },
    );
    late.resume(&id).await.expect("resume");
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    let failure = done.failure.as_ref().expect("why");
    assert!(
        failure.reason.starts_with("authorization expired: not captured before"),
        "a clear reason: {failure:?}"
    );
    assert_eq!(w.log(&id).await, RELEASED);
    let pi = intent(&w, &waiting);
    assert_eq!(
        (pi["status"].as_str(), pi["cancellation_reason"].as_str()),
        (Some("canceled"), Some("automatic")),
        "Stripe released it"
    );
    assert!(w.sim.ledger.refunds_of(pi["id"].as_str().unwrap()).is_empty());
    assert_eq!(captures(&w), 0, "no capture of a lapsed authorization");
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Failed);
    assert_eq!(w.stock().await, STOCK);
    // The checkout tells the payment's end, not the authorization the order projection last heard of (the
    // failure's event may still be on its way through the outbox).
    let (status, view) = crate::api::call(&late, Method::GET, &format!("/checkouts/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (view["status"].as_str(), view["payment_status"].as_str()),
        (Some("compensated"), Some("failed")),
        "{view}"
    );
}
