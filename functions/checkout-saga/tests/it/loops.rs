//! Every loop has an end (issue 25 item 1): an escalated saga is set aside after its one escalation and never
//! blinds the sweeper to the rest of its shard; every state has a deadline someone acts on; the API answers
//! before its invocation ends; a refund refused for good, a refused redirect URL and a capture that came by
//! another path end the saga instead of looping.

mod deadlines;

use crate::support::*;
use checkout_saga::api::handle;
use checkout_saga::runner::{RunError, Runner, Settings};
use checkout_saga::saga::{SagaRecord, SagaStatus};
use checkout_saga::{orders, sweeper};
use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, RequestExt};
use psp::StripeApi;
use serde_json::{json, Value};
use shared::clock::WallClock;
use shared::store::open_index::{shard_of, OpenKind};
use shared::{Channel, CorrelationId, OrderId, PaymentStatus, PspEventId};
use std::sync::Arc;
use std::time::Duration;

/// A new order id whose saga lands in `shard` of the open-items index.
fn order_in(shard: &str) -> OrderId {
    loop {
        let id = order();
        if shard_of(
            OpenKind::Saga,
            id.as_str(),
            shared::store::open_index::OpenShards::DEFAULT,
        ) == shard
        {
            return id;
        }
    }
}

/// `runner`'s settings with the clock moved `ahead`.
fn ahead<P: StripeApi + Clone>(w: &World, psp: P, ahead: Duration) -> Runner<P> {
    w.runner_with(
        w.ctx.client.clone(),
        psp,
        Settings {
            clock: WallClock::ahead(ahead),
            ..settings()
        },
    )
}

/// The orders of every escalation message sent so far (each is received once: call this once per check).
async fn escalated_orders(w: &World) -> Vec<String> {
    let mut all = Vec::new();
    loop {
        let batch = w.escalations().await;
        if batch.is_empty() {
            return all;
        }
        all.extend(batch.iter().filter_map(|m| m["order_id"].as_str().map(str::to_owned)));
    }
}

/// How many escalation messages were sent for `order` (receives them all: once per test).
async fn escalations_of(w: &World, order: &OrderId) -> usize {
    escalated_orders(w)
        .await
        .iter()
        .filter(|o| *o == order.as_str())
        .count()
}

/// Two sagas whose charges keep failing sit first in their shard; a third, started later in the same shard,
/// was cut mid-charge. The sweeper's share of the shard is two. Today the escalated two are resumed (and
/// escalated again) on every run and the third is never reached; they must be set aside after their one
/// escalation so the third is charged.
#[tokio::test]
async fn escalated_sagas_are_set_aside_after_one_escalation_and_do_not_blind_their_shard() {
    let w = world().await;
    let shard = shard_of(
        OpenKind::Saga,
        order().as_str(),
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let failing: Vec<OrderId> = (0..2).map(|_| order_in(&shard)).collect();
    let down = w.runner_over(Quirky(w.psp(), Quirk::ChargesDownFor(failing.clone())));
    for id in &failing {
        let escalated = down.start(id.clone(), w.checkout("pm_succeeded", 1)).await;
        assert!(matches!(escalated, Err(RunError::Escalated { .. })), "{escalated:?}");
    }
    let cut = order_in(&shard);
    let slow = w.runner_over(Quirky(w.psp(), Quirk::SlowCharges(Duration::from_secs(30))));
    let started = tokio::time::timeout(
        Duration::from_millis(700),
        slow.start(cut.clone(), w.checkout("pm_succeeded", 1)),
    )
    .await;
    assert!(started.is_err(), "cut while the PSP is slow");
    assert_eq!(w.saga(&cut).await.status, SagaStatus::Charging);

    // Sixteen a run: two per shard.
    for _ in 0..2 {
        sweeper::sweep(&down, Duration::ZERO, 16, later()).await.expect("sweep");
    }
    assert_eq!(
        w.saga(&cut).await.status,
        SagaStatus::PaymentPending,
        "the saga behind the escalated ones was charged"
    );
    let escalated = escalated_orders(&w).await;
    for id in &failing {
        let times = escalated.iter().filter(|o| *o == id.as_str()).count();
        assert_eq!(times, 1, "escalated once: {id}");
        let stuck = w.saga(id).await;
        assert_eq!(stuck.status, SagaStatus::Charging);
        assert!(stuck.set_aside.is_some(), "{stuck:?}");
        assert!(w.log(id).await.contains(&(K::SagaSetAside, S::Charge)));
    }
    // An operator's retry (`paymentsctl escalations retry`: the runner's resume) with the PSP back moves it on,
    // and the move ends the set-aside.
    let resumed = w.runner().resume(&failing[0]).await.expect("retry").expect("saga");
    assert_eq!(resumed.status, SagaStatus::PaymentPending);
    assert!(resumed.set_aside.is_none(), "{resumed:?}");
}

/// A charge the PSP never answers: past the charging deadline the saga stops asking and compensates (the
/// PSP is searched for what the charge may have made; nothing, so the payment is failed and the stock is
/// back). Today it stays `charging` and is escalated on every resume.
#[tokio::test]
async fn a_charge_never_answered_is_compensated_past_its_deadline() {
    let w = world().await;
    let id = order();
    let down = || Quirky(w.psp(), Quirk::ChargesDownFor(vec![id.clone()]));
    let escalated = w
        .runner_over(down())
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await;
    assert!(matches!(escalated, Err(RunError::Escalated { .. })), "{escalated:?}");
    let later = ahead(&w, down(), Duration::from_secs(3600));
    let done = later.resume(&id).await.expect("resume").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Failed);
    assert_eq!(w.stock().await, STOCK);
    let payment = done.payment_id.as_ref().expect("payment");
    assert!(w.sim.ledger.intents_for(payment.as_str()).is_empty(), "never charged");
    assert_eq!(
        escalations_of(&w, &id).await,
        1,
        "the one escalation of the failing charge"
    );
}

/// A captured checkout whose order the customer cancelled: the saga's next step is the refund.
async fn cancelled_after_capture(w: &World) -> OrderId {
    let id = order();
    let waiting = w
        .runner()
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.expect("cancel");
    id
}

/// A refund that stays `pending` for good: past the compensation deadline the saga is escalated once and
/// set aside (the stock stays reserved while the money is not back); later resumes escalate no more.
#[tokio::test]
async fn a_refund_pending_past_its_deadline_is_escalated_once() {
    let w = world().await;
    let id = cancelled_after_capture(&w).await;
    // Past the payment's deadline the saga reads the payment (captured) and refunds: `pending`.
    let pending = ahead(&w, Quirky(w.psp(), Quirk::RefundsPending), Duration::from_secs(600));
    let waiting = pending.resume(&id).await.expect("resume").expect("saga");
    assert_eq!(waiting.status, SagaStatus::RefundingPayment);
    assert_eq!(escalations_of(&w, &id).await, 0, "waiting is not failing");
    let days_later = ahead(
        &w,
        Quirky(w.psp(), Quirk::RefundsPending),
        Duration::from_secs(3 * 86_400),
    );
    for _ in 0..3 {
        let still = days_later.resume(&id).await;
        assert!(
            matches!(&still, Ok(Some(r)) if r.status == SagaStatus::RefundingPayment),
            "{still:?}"
        );
    }
    assert_eq!(escalations_of(&w, &id).await, 1, "escalated once past the deadline");
    let set_aside = w.saga(&id).await;
    assert!(set_aside.set_aside.is_some(), "{set_aside:?}");
    assert_eq!(w.stock().await, STOCK - 1, "the stock waits for the money");
}

/// Any refusal for good of the refund (not only a dispute) that the read-back does not show as refunded ends
/// the compensation as "refund impossible" with exactly one escalation.
#[tokio::test]
async fn a_refund_refused_for_good_ends_as_refund_impossible_with_one_escalation() {
    let w = world().await;
    let id = order();
    let refused = || Quirky(w.psp(), Quirk::RefundsRefused("charge_not_refundable"));
    let waiting = w
        .runner()
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.expect("cancel");
    let runner = ahead(&w, refused(), Duration::from_secs(600));
    let done = runner.resume(&id).await.expect("resume").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(
        done.refund_impossible.as_deref(),
        Some("refund impossible: refused by the PSP")
    );
    assert_eq!(w.stock().await, STOCK);
    let again = runner.resume(&id).await.expect("resume").expect("saga");
    assert_eq!(again.version, done.version, "ended: nothing more runs");
    assert_eq!(escalations_of(&w, &id).await, 1);
    w.assert_charged_once(&waiting, 0);
}

/// A 3-D Secure redirect URL our policy refuses (plain http to another host) drops the URL only: the saga
/// waits for the customer with the client secret kept, instead of taking the answer as unreadable.
#[tokio::test]
async fn a_refused_redirect_url_keeps_the_client_secret() {
    let w = world().await;
    let runner = w.runner_over(Quirky(w.psp(), Quirk::RedirectTo("http://evil.example/3ds")));
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_abandoned_action", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    assert!(waiting.customer_action);
    let payment = w
        .ctx
        .store
        .get(waiting.payment_id.as_ref().expect("payment"))
        .await
        .expect("read")
        .expect("payment");
    assert_eq!(payment.status, PaymentStatus::RequiresAction);
    let action = payment.action.expect("the customer's action");
    assert!(action.client_secret().is_some(), "the client secret is kept");
    assert!(action.redirect_url().is_none(), "the refused URL is not handed on");
}

/// The charge's answer is a refusal, but the PaymentIntent was made and its capture webhook comes in, and the
/// customer cancels: the saga must keep the payment's PSP reference from the capture and refund it (today it
/// never copies it: the refund fails `Invalid`, escalates and loops while the money is kept).
#[tokio::test]
async fn a_capture_by_webhook_after_a_refused_charge_is_refunded_with_its_reference() {
    let w = world().await;
    let id = order();
    let (store, client, table, cancel) = (
        w.ctx.store.clone(),
        w.ctx.client.clone(),
        w.ctx.table.clone(),
        id.clone(),
    );
    let after: AfterCharge = Arc::new(move |payment, intent| {
        let (store, client, table, cancel) = (store.clone(), client.clone(), table.clone(), cancel.clone());
        Box::pin(async move {
            let correlation = CorrelationId::parse("corr-webhook").unwrap();
            let observation = intent
                .observation(Channel::Webhook, correlation)
                .unwrap()
                .unwrap()
                .with_event(PspEventId::parse("evt_capture_1").unwrap(), shared::clock::now_ms());
            store.finalize(&payment, &observation, None).await.expect("webhook");
            orders::cancel(&client, &table, &cancel)
                .await
                .expect("customer cancels");
        })
    });
    let runner = w.runner_over(Quirky(w.psp(), Quirk::ChargeRefusedAfter(after)));
    let done = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert!(done.captured && done.psp_reference.is_some(), "{done:?}");
    assert_eq!(done.refunded_minor, 2500);
    w.assert_charged_once(&done, 2500);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Refunded);
    assert_eq!(w.stock().await, STOCK);
    assert_eq!(escalations_of(&w, &id).await, 0);
}

/// An API request as Lambda hands it over, with the invocation's deadline `left` from now.
fn request_within(method: Method, path: &str, body: Option<Value>, left: Duration) -> Request {
    let body = body.map(|b| Body::from(b.to_string())).unwrap_or(Body::Empty);
    let deadline = shared::clock::now_ms() + i64::try_from(left.as_millis()).unwrap();
    let mut context = lambda_http::Context::default();
    context.deadline = u64::try_from(deadline).unwrap();
    lambda_http::http::Request::builder()
        .method(method)
        .uri(path)
        .body(body)
        .expect("request")
        .with_lambda_context(context)
}

async fn answer(response: lambda_http::Response<Body>) -> (StatusCode, Value) {
    let bytes = match response.body() {
        Body::Text(t) => t.as_bytes().to_vec(),
        Body::Binary(b) => b.clone(),
        _ => Vec::new(),
    };
    (response.status(), serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The PSP hangs: `POST /checkouts` answers 202 with the saved saga before the invocation's deadline (the
/// sweeper finishes it), instead of being killed at the function's timeout (a 5xx the shop takes for "failed").
#[tokio::test]
async fn the_api_answers_a_slow_checkout_with_the_saved_saga_before_its_deadline() {
    let w = world().await;
    let runner = w.runner_over(Quirky(w.psp(), Quirk::SlowCharges(Duration::from_secs(30))));
    let id = order();
    let body = json!({ "order_id": id.as_str(), "sku": "sku-1", "quantity": 1, "amount_minor": 2500,
                       "currency": "EUR", "payment_method": "pm_succeeded" });
    let req = request_within(Method::POST, "/checkouts", Some(body), Duration::from_secs(5));
    let response = tokio::time::timeout(Duration::from_secs(5), handle(&runner, req))
        .await
        .expect("answered within the invocation")
        .expect("answer");
    let (status, saga) = answer(response).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{saga}");
    assert_eq!(saga["status"], "charging");
    // The sweeper finishes it with a PSP that answers; charged once.
    sweeper::sweep(&w.runner(), Duration::ZERO, 100, later())
        .await
        .expect("sweep");
    let charged: SagaRecord = w.saga(&id).await;
    assert_eq!(charged.status, SagaStatus::PaymentPending);
    w.assert_charged_once(&charged, 0);
}

/// The customer cancels while the PSP hangs: the cancel is recorded and answered before the deadline; the
/// saga goes on later.
#[tokio::test]
async fn the_api_answers_a_slow_cancel_before_its_deadline() {
    let w = world().await;
    let id = order();
    w.runner()
        .start(id.clone(), w.checkout("pm_abandoned_action", 1))
        .await
        .expect("start");
    let hang = Quirk::DuringRetrieve(Arc::new(|| Box::pin(tokio::time::sleep(Duration::from_secs(30)))));
    let runner = w.runner_over(Quirky(w.psp(), hang));
    let path = format!("/checkouts/{id}/cancel");
    let req = request_within(Method::POST, &path, None, Duration::from_secs(5));
    let response = tokio::time::timeout(Duration::from_secs(5), handle(&runner, req))
        .await
        .expect("answered within the invocation")
        .expect("answer");
    let (status, body) = answer(response).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let saga = w.saga(&id).await;
    assert_eq!(saga.status, SagaStatus::CancellingPayment, "saved, finished later");
}
