//! `escalations retry` runs where the PSP key is: the built binary, with no PSP setting in its environment,
//! asks the sweeper function to resume the order through Lambda's `Invoke` API (`AWS_ENDPOINT_URL_LAMBDA`).
//! The function here is a small local server speaking Invoke's shape (`POST
//! /2015-03-31/functions/{name}/invocations`, the payload as the body, `X-Amz-Function-Error` on a function
//! error) that runs the sweeper's own handler (`CheckoutSweeper::invoke`), built from the function's
//! variables on DynamoDB Local and moto.

use crate::cli::{paymentsctl_with, text};
use crate::paymentsctl::{escalated_before_stock_release, stock};
use bytes::Bytes;
use checkout_saga::saga::SagaStore;
use checkout_saga::{CheckoutSweeper, Settings};
use http_body_util::{BodyExt, Full};
use integration_tests::{fresh_queues, sqs_client, TestContext};
use shared::Env;
use std::sync::Arc;

const FUNCTION: &str = "payments-test-checkout-sweeper";

type Answer = Result<hyper::Response<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>>;

fn respond(status: u16, headers: &[(&str, &str)], body: &serde_json::Value) -> Answer {
    let mut builder = hyper::Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    Ok(builder.body(Full::new(Bytes::from(body.to_string())))?)
}

/// One Invoke: the sweeper's handler on the payload; an unknown function is Lambda's 404.
async fn invoke(sweeper: Arc<CheckoutSweeper>, req: hyper::Request<hyper::body::Incoming>) -> Answer {
    let path = req.uri().path().to_owned();
    let kind = req
        .headers()
        .get("x-amz-invocation-type")
        .map(|v| v.to_str().unwrap_or("").to_owned());
    let body = req.into_body().collect().await?.to_bytes();
    if path != format!("/2015-03-31/functions/{FUNCTION}/invocations") {
        let message = serde_json::json!({ "Type": "User", "message": format!("Function not found: {path}") });
        return respond(404, &[("x-amzn-errortype", "ResourceNotFoundException")], &message);
    }
    assert_eq!(
        kind.as_deref(),
        Some("RequestResponse"),
        "a retry waits for the function's answer"
    );
    let event: serde_json::Value = serde_json::from_slice(&body)?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(25);
    match sweeper.invoke(event, deadline).await {
        Ok(answer) => respond(200, &[], &answer),
        Err(e) => {
            let error = serde_json::json!({
                "errorType": "SweeperError",
                "errorMessage": shared::telemetry::ErrorChain(&e).to_string(),
            });
            respond(200, &[("x-amz-function-error", "Unhandled")], &error)
        }
    }
}

/// The sweeper function as Lambda runs it, from its own variables (its PSP key among them); its endpoint.
async fn lambda(ctx: &TestContext, escalation_url: &str) -> String {
    let env = Env::from_lookup(|_| None)
        .with("TABLE_NAME", ctx.table.clone())
        .with("PSP_BASE_URL", "http://127.0.0.1:9")
        .with("PSP_API_KEY", "sk_test_in_the_function")
        .with("PSP_REDIRECTS", "never")
        .with("ESCALATION_QUEUE_URL", escalation_url);
    let clients = shared::lambda::Clients {
        sdk: integration_tests::local_sdk_config(&local_testkit::service::SQS.endpoint()),
        dynamodb: ctx.client.clone(),
        sqs: sqs_client(None),
    };
    let sweeper = Arc::new(
        CheckoutSweeper::build(&Settings::from_env(&env).unwrap(), clients)
            .await
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(psp_simulator::server::accept(listener, move |req| {
        invoke(sweeper.clone(), req)
    }));
    endpoint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_invokes_the_sweeper_function_and_needs_no_psp_key_here() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let sagas = SagaStore::new(
        ctx.client.clone(),
        &ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let order = escalated_before_stock_release(&ctx, &queues.escalation_url, "order-invoke").await;
    let endpoint = lambda(&ctx, &queues.escalation_url).await;
    let retry = [
        "escalations",
        "retry",
        "order-invoke",
        "--queue",
        &queues.escalation_url,
        "--yes",
        "--json",
    ];

    let nowhere = paymentsctl_with(Some(&ctx.table), &[("AWS_ENDPOINT_URL_LAMBDA", &endpoint)], &retry);
    assert_eq!(nowhere.status.code(), Some(1), "{}", text(&nowhere.stderr));
    assert!(
        text(&nowhere.stderr).contains("no sweeper function to invoke"),
        "{}",
        text(&nowhere.stderr)
    );
    let wrong = paymentsctl_with(
        Some(&ctx.table),
        &[
            ("AWS_ENDPOINT_URL_LAMBDA", &endpoint),
            ("CHECKOUT_SWEEPER_FUNCTION", "payments-other"),
        ],
        &retry,
    );
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong.stderr));
    assert!(
        text(&wrong.stderr).contains("ResourceNotFoundException"),
        "{}",
        text(&wrong.stderr)
    );
    assert_eq!(
        sagas.load(&order).await.unwrap().unwrap().record().status.to_string(),
        "releasing_stock",
        "nothing ran"
    );

    let done = paymentsctl_with(
        Some(&ctx.table),
        &[
            ("AWS_ENDPOINT_URL_LAMBDA", &endpoint),
            ("CHECKOUT_SWEEPER_FUNCTION", FUNCTION),
        ],
        &retry,
    );
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    let report = &serde_json::from_slice::<serde_json::Value>(&done.stdout).unwrap()["result"];
    assert_eq!(report["runs"], format!("function {FUNCTION}"));
    assert_eq!(report["resumed"]["status"], "compensated", "{report}");
    assert_eq!(report["deleted"], 1);
    assert_eq!(stock(&ctx).await, "12", "released once, by the function");
}
