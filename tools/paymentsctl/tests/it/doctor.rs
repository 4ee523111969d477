//! `paymentsctl doctor` as operators run it (the built binary) on the local world: DynamoDB Local, moto's SQS
//! and the PSP simulator's Stripe side (`GET /v1/webhook_endpoints`). What a test put there is reported and
//! exits 3; a clean world exits 0; a table that is not there exits 1 (a failure is not a finding). The
//! runtime has worker threads: the simulator serves while the test waits for the binary.

use crate::cli::{open_breaker, paymentsctl_with, text};
use crate::paymentsctl::{park, stripe_body};
use integration_tests::{fresh_queues, sqs_client, TestContext};
use payments_core::fixtures;
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use shared::store::ParkedKind;
use std::process::Output;
use std::sync::Arc;

const KEY: &str = "sk_test_doctor";

/// A Stripe simulator with one webhook endpoint; its base URL and the endpoint's id.
async fn stripe() -> (Arc<Simulator>, String, String) {
    let sim = Arc::new(Simulator {
        ledger: Ledger::new(KEY, Timings::default(), None),
        webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
        secret: shared::SigningSecret::parse("whsec_test").unwrap(),
        delivery: DeliveryOptions::default(),
        client: HttpClient::default(),
        storm_rate: 0.0,
    });
    let endpoint = sim
        .ledger
        .add_webhook_endpoint(&sim.webhook_url, Some("2025-03-31.basil"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sim.clone().serve(listener));
    (sim, url, endpoint)
}

/// `paymentsctl [--json] doctor` on `table`, the test's queues and the simulator at `psp`.
fn doctor(table: &str, queues: &local_dev::queues::Queues, psp: &str, json: bool) -> Output {
    let env = [
        ("QUEUE_URL", queues.queue_url.as_str()),
        ("DLQ_URL", queues.dlq_url.as_str()),
        ("ESCALATION_QUEUE_URL", queues.escalation_url.as_str()),
        ("PSP_BASE_URL", psp),
        ("PSP_API_KEY", KEY),
    ];
    let args: &[&str] = if json { &["--json", "doctor"] } else { &["doctor"] };
    paymentsctl_with(Some(table), &env, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_a_parked_item_an_open_breaker_and_an_old_open_payment_and_exits_3() {
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    let (sim, psp, endpoint) = stripe().await;
    park(
        &ctx,
        ParkedKind::Quarantined,
        &stripe_body("payment_intent.succeeded", "pay_doc", 1000),
    )
    .await;
    open_breaker(&ctx, shared::psp::BREAKER_NAME).await;
    let hour_ago = shared::clock::now_ms() - 3_600_000;
    ctx.store
        .create(shared::NewPayment {
            now_ms: hour_ago,
            ..fixtures::new_payment("pay_doc_old", 1000)
        })
        .await
        .unwrap();
    sim.ledger.set_webhook_endpoint_status(&endpoint, false);

    let out = doctor(&ctx.table, &queues, &psp, false);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", text(&out.stderr));
    for expected in [
        "NEEDS A PERSON: 1 parked webhook(s) not replayed",
        "NEEDS A PERSON: breaker stripe is open",
        "NEEDS A PERSON: payment pay_doc_old open (pending) for 360",
        &format!("NEEDS A PERSON: Stripe webhook endpoint {endpoint}"),
        "not checked: alarms: not available locally",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in\n{stdout}");
    }

    let out = doctor(&ctx.table, &queues, &psp, true);
    assert_eq!(out.status.code(), Some(3));
    let report = &serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["result"];
    assert_eq!(report["parked_not_replayed"], 1);
    assert_eq!(report["breakers"][0]["state"], "open");
    assert_eq!(report["oldest_open_payment"]["id"], "pay_doc_old");
    assert_eq!(report["webhook_endpoints"][0]["status"], "disabled");
    assert_eq!(report["webhook_endpoints"][0]["api_version"], "2025-03-31.basil");
    assert_eq!(report["dlq_messages"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_on_a_healthy_world_exits_0_and_on_a_missing_table_exits_1() {
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    let (_sim, psp, _) = stripe().await;
    let out = doctor(&ctx.table, &queues, &psp, false);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("nothing needs a person") && stdout.contains("enabled (API 2025-03-31.basil)"),
        "{stdout}"
    );

    let missing = doctor("no-such-table", &queues, &psp, false);
    assert_eq!(
        missing.status.code(),
        Some(1),
        "a failure, not a finding: {}",
        text(&missing.stderr)
    );
    assert!(
        text(&missing.stderr).contains("ResourceNotFoundException"),
        "{}",
        text(&missing.stderr)
    );
}
