//! The checkout API over its HTTP handler: sample events, bad requests, and a checkout with its log and a late
//! cancel.

use crate::support::*;
use checkout_saga::api::handle;
use checkout_saga::runner::Runner;
use checkout_saga::{inventory, orders};
use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request};
use psp::Psps;
use serde_json::{json, Value};
use shared::{OrderId, Sku};

/// One request through the API's handler: the answer's status and JSON body.
pub(super) async fn call<P: Psps>(
    runner: &Runner<P>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let body = body.map(|b| Body::from(b.to_string())).unwrap_or(Body::Empty);
    let req: Request = lambda_http::http::Request::builder()
        .method(method)
        .uri(path)
        .body(body)
        .expect("request");
    let response = handle(runner, req).await.expect("answer");
    let bytes = match response.body() {
        Body::Text(t) => t.as_bytes().to_vec(),
        Body::Binary(b) => b.clone(),
        _ => Vec::new(),
    };
    (response.status(), serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn start_body(order: &str, quantity: u32) -> Value {
    json!({ "order_id": order, "sku": "sku-1", "quantity": quantity, "amount_minor": 2500, "currency": "EUR",
            "payment_method": "pm_succeeded" })
}

#[tokio::test]
async fn sample_api_events_run_through_the_handler() {
    let w = world().await;
    let runner = w.runner_for("checkout-api");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events");
    for (file, status) in [
        ("api-put-stock.json", StatusCode::OK),
        ("api-start-checkout.json", StatusCode::ACCEPTED),
        ("api-get-checkout.json", StatusCode::OK),
        ("api-get-checkout-events.json", StatusCode::OK),
        ("api-cancel-checkout.json", StatusCode::OK),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("sample");
        let req = lambda_http::request::from_str(&text).expect("API Gateway event");
        let response = handle(&runner, req).await.expect("answer");
        assert_eq!(response.status(), status, "{file}");
    }
    let sku = Sku::parse("sku-sample").unwrap();
    let left = inventory::available(&w.ctx.client, &w.ctx.table, &sku).await.unwrap();
    // The cancel ran the compensations at once: the captured payment refunded, the stock back.
    assert_eq!(left, Some(10));
}

#[tokio::test]
async fn bad_requests_get_a_json_error_and_write_nothing() {
    let w = world().await;
    let runner = w.runner_for("checkout-api");
    let mut unknown_field = start_body("order-bad-1", 1);
    unknown_field["coupon"] = json!("FREE");
    let mut bad_currency = start_body("order-bad-2", 1);
    bad_currency["currency"] = json!("euro");
    let mut unknown_psp = start_body("order-bad-4", 1);
    unknown_psp["psp"] = json!("paypal");
    // A PSP this deployment holds no client of (this runner has Stripe's only).
    let mut psp_not_here = start_body("order-bad-5", 1);
    psp_not_here["psp"] = json!("adyen");
    psp_not_here["payment_method"] = json!(r#"{"type":"scheme","encryptedCardNumber":"test_4111111111111111"}"#);
    for (body, field) in [
        (start_body("order-bad-0", 0), "quantity"),
        (unknown_field, "coupon"),
        (bad_currency, "currency"),
        (start_body("order bad", 1), "order_id"),
        (json!({ "order_id": "order-bad-3" }), "sku"),
        (unknown_psp, "psp"),
        (psp_not_here, "psp: this deployment does not charge through adyen"),
    ] {
        let (status, answer) = call(&runner, Method::POST, "/checkouts", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"], "bad_request");
        assert!(
            answer["message"].as_str().unwrap_or_default().contains(field),
            "{answer}"
        );
    }
    assert_eq!(w.stock().await, STOCK, "nothing reserved");
    for order in [
        "order-bad-0",
        "order-bad-1",
        "order-bad-2",
        "order-bad-3",
        "order-bad-4",
        "order-bad-5",
    ] {
        let id = OrderId::parse(order).unwrap();
        assert!(runner.sagas.load(&id).await.unwrap().is_none(), "no saga for {order}");
        assert!(orders::status(&w.ctx.client, &w.ctx.table, &id)
            .await
            .unwrap()
            .is_none());
    }
    let (status, _) = call(&runner, Method::GET, "/checkouts", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = call(&runner, Method::GET, "/checkouts/order-missing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&runner, Method::POST, "/checkouts/order-missing/cancel", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &runner,
        Method::PUT,
        "/inventory/sku-1",
        Some(json!({ "available": -1 })),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(w.stock().await, STOCK);
}

#[tokio::test]
async fn a_checkout_through_the_api_with_its_log_and_a_late_cancel() {
    let w = world().await;
    let runner = w.runner();
    let (status, saga) = call(&runner, Method::POST, "/checkouts", Some(start_body("order-api-1", 2))).await;
    assert_eq!(
        (status, saga["status"].as_str()),
        (StatusCode::ACCEPTED, Some("payment_pending"))
    );
    // Starting the same order again answers the same saga, reserves nothing more.
    let (status, again) = call(&runner, Method::POST, "/checkouts", Some(start_body("order-api-1", 2))).await;
    assert_eq!(
        (status, &again["payment_id"]),
        (StatusCode::ACCEPTED, &saga["payment_id"])
    );
    assert_eq!(w.stock().await, STOCK - 2);
    let record = w.saga(&OrderId::parse("order-api-1").unwrap()).await;
    w.deliver(&runner, &record).await;
    let (_, done) = call(&runner, Method::GET, "/checkouts/order-api-1", None).await;
    assert_eq!(done["status"], "completed");
    let (_, log) = call(&runner, Method::GET, "/checkouts/order-api-1/events", None).await;
    let kinds: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "SagaStarted",
            "StockReserved",
            "PaymentCreated",
            "PaymentRequested",
            "PaymentCaptured",
            "OrderConfirmed"
        ]
    );
    let (status, answer) = call(&runner, Method::POST, "/checkouts/order-api-1/cancel", None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let (_, stock) = call(&runner, Method::GET, "/inventory/sku-1", None).await;
    assert_eq!(stock["available"], STOCK - 2);
}

/// A stored saga that fails its consistency check (here: money captured without the PSP reference its refund
/// needs, as the saga of an Adyen 3-D Secure checkout was stored before its reference was recorded) is
/// answered as needing an operator, and reported to one (the escalation queue), not a bare 500; a repeated
/// start of the order is answered the same way, not a 503 to retry.
#[tokio::test]
async fn a_stored_saga_that_does_not_load_is_reported_for_an_operator() {
    let w = world().await;
    let runner = w.runner();
    let order = format!("order-{}", uuid::Uuid::new_v4().simple());
    call(&runner, Method::POST, "/checkouts", Some(start_body(&order, 1))).await;
    let id = OrderId::parse(&order).unwrap();
    w.deliver(&runner, &w.saga(&id).await).await;
    w.ctx
        .client
        .update_item()
        .table_name(&w.ctx.table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(shared::keys::saga_pk(&id)),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S(shared::keys::SAGA_SK.into()),
        )
        .update_expression("REMOVE payment_psp_reference")
        .send()
        .await
        .expect("the reference removed");
    for (method, body) in [(Method::GET, None), (Method::POST, Some(start_body(&order, 1)))] {
        let path = if body.is_some() {
            "/checkouts".to_owned()
        } else {
            format!("/checkouts/{order}")
        };
        let (status, answer) = call(&runner, method, &path, body).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, Some("checkout_needs_operator")),
            "{answer}"
        );
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("captured without a PSP reference") && message.contains("paymentsctl timeline"),
            "{message}"
        );
    }
    let told = w.escalations().await;
    assert!(told.iter().any(|e| e["order_id"] == order.as_str()), "{told:?}");
}
