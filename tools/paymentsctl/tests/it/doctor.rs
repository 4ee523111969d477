//! `paymentsctl doctor` as operators run it (the built binary) on the local world: DynamoDB Local, moto's SQS
//! and the PSP simulator's Stripe side (`GET /v1/webhook_endpoints`). What a test put there is reported and
//! exits 3; a clean world exits 0; a table that is not there exits 1 (a failure is not a finding). The
//! runtime has worker threads: the simulator serves while the test waits for the binary.
//!
//! Alarms: moto does not serve CloudWatch's Smithy RPC v2 CBOR protocol, so a small local server speaks it for
//! `DescribeAlarms` (`AWS_ENDPOINT_URL_CLOUDWATCH`): `POST
//! /service/GraniteServiceVersion20100801/operation/DescribeAlarms` with `smithy-protocol: rpc-v2-cbor`, a CBOR
//! map as the body and a CBOR map as the answer (`MetricAlarms`, timestamps as tag 1 epoch seconds).

use crate::cli::{open_breaker, paymentsctl_with, stack, text};
use crate::paymentsctl::{park, stripe_body};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use integration_tests::{fresh_queues, sqs_client, TestContext};
use payments_core::fixtures;
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use shared::store::ParkedKind;
use std::collections::BTreeMap;
use std::process::Output;
use std::sync::{Arc, Mutex};

const KEY: &str = "sk_test_doctor";

/// A Stripe simulator with one webhook endpoint; its base URL and the endpoint's id.
async fn stripe() -> (Arc<Simulator>, String, String) {
    let (sim, url) = simulator(KEY).await;
    let endpoint = sim
        .ledger
        .add_webhook_endpoint(&sim.webhook_url, Some("2025-03-31.basil"));
    (sim, url, endpoint)
}

/// A Stripe simulator of the account with secret key `key`, serving on a free port; its base URL.
pub(crate) async fn simulator(key: &str) -> (Arc<Simulator>, String) {
    let sim = Arc::new(Simulator {
        ledger: Ledger::new(key, Timings::default(), None),
        webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
        secret: shared::SigningSecret::parse("whsec_test").unwrap(),
        delivery: DeliveryOptions::default(),
        client: HttpClient::default(),
        storm_rate: 0.0,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sim.clone().serve(listener));
    (sim, url)
}

/// `paymentsctl [--json] doctor` on `table`, the test's queues and the simulator at `psp`.
fn doctor(table: &str, queues: &local_testkit::queues::Queues, psp: &str, json: bool) -> Output {
    doctor_with(table, queues, psp, json, &[])
}

/// `doctor` as [`doctor`] does, with `more` variables (a CloudWatch endpoint).
fn doctor_with(
    table: &str,
    queues: &local_testkit::queues::Queues,
    psp: &str,
    json: bool,
    more: &[(&str, &str)],
) -> Output {
    let mut env = vec![
        ("QUEUE_URL", queues.queue_url.as_str()),
        ("DLQ_URL", queues.dlq_url.as_str()),
        ("ESCALATION_QUEUE_URL", queues.escalation_url.as_str()),
        ("PSP_BASE_URL", psp),
        ("PSP_API_KEY", KEY),
    ];
    env.extend_from_slice(more);
    let args: &[&str] = if json { &["--json", "doctor"] } else { &["doctor"] };
    paymentsctl_with(Some(table), &env, args)
}

/// One request as the CloudWatch endpoint saw it: its path, `smithy-protocol` and `content-type` headers and
/// the body's members (text members as themselves, others as `<other>`).
#[derive(Debug, Clone)]
struct Asked {
    path: String,
    protocol: Option<String>,
    content_type: Option<String>,
    members: BTreeMap<String, String>,
}

/// The members of a CBOR map body (the SDK writes an indefinite-length map).
fn members(body: &[u8]) -> Result<BTreeMap<String, String>, minicbor::decode::Error> {
    use minicbor::data::Type;
    let mut decoder = minicbor::Decoder::new(body);
    let length = decoder.map()?;
    let mut out = BTreeMap::new();
    loop {
        let done = match length {
            Some(n) => out.len() as u64 == n,
            None => decoder.datatype()? == Type::Break,
        };
        if done {
            return Ok(out);
        }
        let key = decoder.str()?.to_owned();
        let value = if decoder.datatype()? == Type::String {
            decoder.str()?.to_owned()
        } else {
            decoder.skip()?;
            "<other>".to_owned()
        };
        out.insert(key, value);
    }
}

/// A `DescribeAlarms` answer: each (name, reason) a metric alarm in ALARM.
fn describe_alarms_output(alarms: &[(&str, &str)]) -> Vec<u8> {
    let mut encoder = minicbor::Encoder::new(Vec::new());
    encoder.map(1).unwrap().str("MetricAlarms").unwrap();
    encoder.array(alarms.len() as u64).unwrap();
    for (name, reason) in alarms {
        encoder
            .map(4)
            .unwrap()
            .str("AlarmName")
            .unwrap()
            .str(name)
            .unwrap()
            .str("StateValue")
            .unwrap()
            .str("ALARM")
            .unwrap()
            .str("StateReason")
            .unwrap()
            .str(reason)
            .unwrap()
            .str("StateUpdatedTimestamp")
            .unwrap()
            .tag(minicbor::data::IanaTag::Timestamp)
            .unwrap()
            .f64(1_764_840_000.25)
            .unwrap();
    }
    encoder.into_writer()
}

/// A CloudWatch endpoint answering every `DescribeAlarms` with `alarms`; its URL and what it was asked.
async fn cloudwatch(alarms: &'static [(&'static str, &'static str)]) -> (String, Arc<Mutex<Vec<Asked>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(psp_simulator::server::accept(
        listener,
        move |req: hyper::Request<hyper::body::Incoming>| {
            let log = log.clone();
            async move {
                let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
                let (path, protocol, content_type) = (
                    req.uri().path().to_owned(),
                    header("smithy-protocol"),
                    header("content-type"),
                );
                let body = req.into_body().collect().await?.to_bytes();
                let members = members(&body)?;
                log.lock().unwrap().push(Asked {
                    path,
                    protocol,
                    content_type,
                    members,
                });
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                    hyper::Response::builder()
                        .header("smithy-protocol", "rpc-v2-cbor")
                        .header("content-type", "application/cbor")
                        .body(Full::new(Bytes::from(describe_alarms_output(alarms))))?,
                )
            }
        },
    ));
    (url, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_an_alarm_in_alarm_with_its_reason_asked_in_cloudwatchs_protocol_and_exits_3() {
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    let (_sim, psp, _) = stripe().await;
    let (endpoint, asked) = cloudwatch(&[(
        "payments-test-events-dlq-not-empty",
        "Threshold Crossed: 1 datapoint [3.0] was greater than the threshold (0.0).",
    )])
    .await;
    let more = [("AWS_ENDPOINT_URL_CLOUDWATCH", endpoint.as_str())];

    let out = doctor_with(&ctx.table, &queues, &psp, false, &more);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "NEEDS A PERSON: alarm payments-test-events-dlq-not-empty in ALARM: Threshold Crossed: 1 datapoint [3.0]"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("not checked: alarms"), "{stdout}");
    let request = asked.lock().unwrap()[0].clone();
    assert_eq!(
        request.path,
        "/service/GraniteServiceVersion20100801/operation/DescribeAlarms"
    );
    assert_eq!(request.protocol.as_deref(), Some("rpc-v2-cbor"));
    assert_eq!(request.content_type.as_deref(), Some("application/cbor"));
    assert_eq!(request.members.get("StateValue").map(String::as_str), Some("ALARM"));
    assert_eq!(
        request.members.get("AlarmNamePrefix"),
        None,
        "every alarm without --stack"
    );

    let out = doctor_with(&ctx.table, &queues, &psp, true, &more);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = &serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["result"];
    assert_eq!(report["alarms"][0]["name"], "payments-test-events-dlq-not-empty");
    assert!(report["alarms"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("Threshold Crossed"));
    assert_eq!(report["alarms"][0]["since_ms"], 1_764_840_000_250_i64);
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        1,
        "the alarm only: {report}"
    );

    let name = stack(&ctx.table, &queues).await;
    let staged = paymentsctl_with(
        None,
        &[("AWS_ENDPOINT_URL_CLOUDWATCH", endpoint.as_str())],
        &["--stack", &name, "--json", "doctor"],
    );
    assert_eq!(staged.status.code(), Some(3), "{}", text(&staged.stderr));
    let request = asked.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        request.members.get("AlarmNamePrefix"),
        Some(&format!("{name}-")),
        "the stack's alarms only"
    );
    assert_eq!(request.members.get("StateValue").map(String::as_str), Some("ALARM"));
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
    open_breaker(&ctx, psp::BREAKER_NAME).await;
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
    let (endpoint, asked) = cloudwatch(&[]).await;
    let out = doctor_with(
        &ctx.table,
        &queues,
        &psp,
        true,
        &[("AWS_ENDPOINT_URL_CLOUDWATCH", endpoint.as_str())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = &serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["result"];
    assert_eq!(
        report["alarms"],
        serde_json::json!([]),
        "asked, none in ALARM: {report}"
    );
    assert_eq!(asked.lock().unwrap().len(), 1);

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

/// A payment whose refunds failed past the give-back bound (the saga's, then one give-back per failure, each
/// answered pending and then failed) stays open with the money ours: `doctor` lists it as a finding naming
/// its timeline, exit 3, until a person's refund is reported succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_lists_a_payment_whose_refunds_failed_past_the_bound_until_it_is_refunded() {
    use payments_core::refund::{RefundStatus, MAX_GIVE_BACKS};
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    let (_sim, psp, _) = stripe().await;
    let id = shared::PaymentId::parse("pay_doc_refunds").unwrap();
    ctx.store
        .create(fixtures::new_payment(id.as_str(), 1000))
        .await
        .unwrap();
    let apply = |outcome: shared::Outcome| {
        let (store, id) = (&ctx.store, &id);
        async move {
            store
                .finalize(id, &fixtures::observe(shared::Channel::Webhook, outcome), None)
                .await
                .expect("finalize")
                .payment
        }
    };
    apply(shared::Outcome::Succeeded).await;
    apply(fixtures::refund("re_saga", 1000, RefundStatus::Failed)).await;
    for n in 1..=MAX_GIVE_BACKS {
        let give_back = format!("re_give_back_{n}");
        let mut answer = fixtures::refund(&give_back, 1000, RefundStatus::Pending);
        if let shared::Outcome::Refund(r) = &mut answer {
            r.answers_give_back = Some(n);
        }
        apply(answer).await;
        apply(fixtures::refund(&give_back, 1000, RefundStatus::Failed)).await;
    }
    let p = ctx.store.get(&id).await.unwrap().unwrap();
    assert!(p.refund_for_operator(), "{p:?}");

    let out = doctor(&ctx.table, &queues, &psp, true);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = &serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["result"];
    assert_eq!(
        report["refunds_for_operator"],
        serde_json::json!(["pay_doc_refunds"]),
        "{report}"
    );
    assert!(
        report["findings"]
            .to_string()
            .contains("paymentsctl timeline pay_doc_refunds"),
        "{report}"
    );

    apply(fixtures::refund("re_by_hand", 1000, RefundStatus::Succeeded)).await;
    let out = doctor(&ctx.table, &queues, &psp, true);
    assert_eq!(out.status.code(), Some(0), "refunded by hand: {}", text(&out.stdout));
}

/// A captured payment whose capture the card scheme rejected (Adyen's `CAPTURE_FAILED`) stays open: `doctor`
/// lists it as a finding naming its timeline, exit 3, until a re-capture is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_lists_a_captured_payment_whose_capture_failed_until_it_is_captured_again() {
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    let (_sim, psp, _) = stripe().await;
    let id = shared::PaymentId::parse("pay_doc_capture").unwrap();
    ctx.store
        .create(fixtures::new_payment(id.as_str(), 1000))
        .await
        .unwrap();
    let apply = |event: &'static str, outcome: shared::Outcome| {
        let (store, id) = (&ctx.store, &id);
        async move {
            let mut observation = fixtures::observe(shared::Channel::Webhook, outcome);
            observation.psp_event_id = Some(shared::PspEventId::parse(event).unwrap());
            store.finalize(id, &observation, None).await.expect("finalize").payment
        }
    };
    let capture = "CAPTURE-true-8835511210681017-7914073381342284";
    apply(capture, shared::Outcome::Succeeded).await;
    let failed = shared::Outcome::CaptureFailed {
        reason: "the capture failed at the card scheme".into(),
        capture_event: Some(shared::PspEventId::parse("CAPTURE-true-8835511210681017").unwrap()),
    };
    let p = apply("CAPTURE_FAILED-true-8835511210681017-7914073381342284", failed).await;
    assert!(p.capture_lost(), "{p:?}");

    let out = doctor(&ctx.table, &queues, &psp, true);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let report = &serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["result"];
    assert_eq!(
        report["captures_failed"],
        serde_json::json!(["pay_doc_capture"]),
        "{report}"
    );
    assert!(
        report["findings"]
            .to_string()
            .contains("paymentsctl timeline pay_doc_capture"),
        "{report}"
    );

    // Adyen's re-capture, under the capture's own reference.
    let p = apply(capture, shared::Outcome::Succeeded).await;
    assert!(!p.capture_lost() && !p.is_open(), "{p:?}");
    let out = doctor(&ctx.table, &queues, &psp, true);
    assert_eq!(out.status.code(), Some(0), "captured again: {}", text(&out.stdout));
}
