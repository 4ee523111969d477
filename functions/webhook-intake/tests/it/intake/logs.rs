//! Issue 43 item 5: at INFO a new webhook writes one log line, its summary, and that line with the request's
//! metrics record stays within 1 KB (CloudWatch Logs bills every byte ingested; the span lines are DEBUG).

use super::*;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// The Lambda runtime's own span around an invocation, as `lambda_runtime` names it: its `requestId` is on
/// every line in Lambda, so it is on these too.
fn invocation_span() -> tracing::Span {
    tracing::info_span!(
        "Lambda runtime invoke",
        requestId = "35b0314d-3c6f-4727-8b9f-9164b7d9d670"
    )
}

#[tokio::test]
async fn a_new_webhook_writes_one_line_at_info_within_a_kilobyte_with_its_metrics() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_log1").await;
    let capture = integration_tests::LogCapture::default();
    let sink = capture.clone();
    let filter = tracing_subscriber::EnvFilter::new("info");
    let closes = shared::telemetry::SpanCloses::for_filter(&filter);
    assert_eq!(closes, shared::telemetry::SpanCloses::Omitted, "INFO logs no span line");
    // As `shared::telemetry::init` sets it up in Lambda: the OpenTelemetry layer gives the trace's ids.
    let provider = shared::telemetry::provider_builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(shared::telemetry::layer(true, closes, move || sink.clone()))
        .with(shared::telemetry::otel_layer(&provider))
        .with(filter);
    let _guard = tracing::subscriber::set_default(subscriber);

    let event = intent_event("evt_log1", "payment_intent.succeeded", &id, now());
    let a = t.send(stripe(&event, STRIPE_NEW)).instrument(invocation_span()).await;
    assert_eq!(result(&a), "applied", "{}", a.body);

    let lines = capture.lines();
    assert_eq!(lines.len(), 1, "one line at INFO: {lines:#?}");
    let line: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(
        (&line["message"], &line["result"], &line["psp_event_id"]),
        (
            &json!("webhook finalized"),
            &json!("Applied(PaymentCaptured)"),
            &json!("evt_log1")
        )
    );
    let request = line["spans"]
        .as_array()
        .and_then(|spans| spans.iter().find(|s| s["name"] == "request"))
        .unwrap_or_else(|| panic!("the request span's ids on the line: {line}"));
    assert_eq!(request["payment_id"], id.as_str());
    for ids in ["correlation_id", "trace_id", "span_id"] {
        assert!(request[ids].is_string(), "{ids} missing: {line}");
    }
    let metrics = a.metrics.to_emf(clock::now_ms()).to_string();
    let bytes = lines[0].len() + 1 + metrics.len() + 1;
    assert!(bytes <= 1024, "{bytes} bytes: {}\n{metrics}", lines[0]);
}

#[tokio::test]
async fn debug_logs_each_step_s_span_when_it_closes() {
    let t = TestIntake::new().await;
    let id = t.payment("pay_log2").await;
    let capture = integration_tests::LogCapture::default();
    let sink = capture.clone();
    let filter = tracing_subscriber::EnvFilter::new("info,shared=debug");
    let closes = shared::telemetry::SpanCloses::for_filter(&filter);
    assert_eq!(closes, shared::telemetry::SpanCloses::Logged);
    let subscriber = tracing_subscriber::registry()
        .with(shared::telemetry::layer(true, closes, move || sink.clone()))
        .with(filter);
    let _guard = tracing::subscriber::set_default(subscriber);

    let event = intent_event("evt_log2", "payment_intent.succeeded", &id, now());
    let a = t.send(stripe(&event, STRIPE_NEW)).await;
    assert_eq!(result(&a), "applied", "{}", a.body);

    let logs = capture.text();
    assert!(logs.contains("payment transition written"), "{logs}");
    let closed: Vec<Value> = capture
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "close")
        .collect();
    for step in ["verify", "read", "lease", "finalize"] {
        assert!(
            closed.iter().any(|l| l["span"]["step"] == step),
            "no close line of {step}: {logs}"
        );
    }
    assert!(closed.iter().any(|l| l["span"]["name"] == "request"), "{logs}");
}
