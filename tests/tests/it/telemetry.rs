//! Logs of a request that carries a client secret and a signing secret contain neither, and every line of
//! the request carries the payment id and correlation id. Traces connect: one webhook is one trace from
//! the intake's invocation through the relay to the consumer.

use integration_tests::{LogCapture, TestContext};
use payments_core::fixtures::{self, contains_fixture_secret};
use payments_core::{Channel, ClientView, Outcome, SigningSecret};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// Stand-in for a webhook provider's configuration, the way handlers log their config at cold start.
#[derive(Debug)]
#[allow(dead_code)]
struct ProviderConfig {
    name: &'static str,
    secrets: Vec<SigningSecret>,
}

const SIGNING: &str = "whsec_FIXTUREsigningSECRET";

#[tokio::test]
async fn request_logs_carry_ids_and_never_secrets() {
    let ctx = TestContext::new().await;
    let capture = LogCapture::default();
    for json in [true, false] {
        let id = fixtures::new_payment(&format!("pay_log_{json}"), 1000);
        let id = ctx.store.create(id).await.unwrap().id;
        let sink = capture.clone();
        let subscriber = tracing_subscriber::registry()
            .with(shared::telemetry::layer(
                json,
                shared::telemetry::SpanCloses::Logged,
                move || sink.clone(),
            ))
            .with(tracing_subscriber::EnvFilter::new("trace"));
        let _guard = tracing::subscriber::set_default(subscriber);
        // From here on, every line but the first is written inside the request.

        let config = ProviderConfig {
            name: "stripe",
            secrets: vec![SigningSecret::parse(SIGNING).unwrap()],
        };
        tracing::info!(?config, "provider configured");
        let span = shared::telemetry::request_span("webhook", "corr-log-123");
        shared::telemetry::record_payment(&span, id.as_str());
        async {
            let obs = fixtures::webhook(&format!("evt_{json}"), 1, fixtures::requires_action());
            let out = ctx.store.finalize(&id, &obs, None).await.unwrap();
            let view = ClientView::from(&out.payment);
            assert!(
                view.carries_secret(),
                "the view itself does carry the secret to the customer"
            );
            tracing::debug!(?obs, ?view, "answering");
            let done = ctx
                .store
                .finalize(&id, &fixtures::observe(Channel::Sync, Outcome::Processing), None)
                .await
                .unwrap();
            tracing::info!(status = %done.payment.status, "done");
        }
        .instrument(span)
        .await;
    }
    let logs = capture.text();
    assert!(logs.contains("payment transition written"), "{logs}");
    assert!(
        !contains_fixture_secret(&logs),
        "a customer secret reached the log:\n{logs}"
    );
    assert!(
        !logs.contains(SIGNING) && !logs.contains("FIXTUREsigning"),
        "the signing secret reached the log"
    );
    // Every JSON line written inside the request span names the payment and the correlation id.
    let json_lines: Vec<serde_json::Value> = logs
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(json_lines[0]["message"], "provider configured");
    let request_lines = &json_lines[1..];
    assert!(request_lines.len() >= 3, "{logs}");
    for line in request_lines {
        // Inside the request, or the request span's own close line (spans go to the logs without OTLP).
        let request = line["spans"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "request"))
            .or_else(|| Some(&line["span"]).filter(|s| s["name"] == "request"));
        let request = request.unwrap_or_else(|| panic!("no request span in {line}"));
        assert_eq!(request["payment_id"], "pay_log_true", "{line}");
        assert_eq!(request["correlation_id"], "corr-log-123", "{line}");
    }
    // Lines from inside the SDK's spans belong to the request too.
    assert!(request_lines
        .iter()
        .any(|l| l["spans"].as_array().is_some_and(|s| s.len() > 1)));
}

/// The trace of this test's webhook. API Gateway's header names it alone (`Root=...`, an HTTP API records no
/// segment); Lambda's `_X_AMZN_TRACE_ID` names it with the invocation's segment as the parent.
const TRACE: &str = "5759e988bd862e3fe1be46a994272793";
const API_GATEWAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793";
const LAMBDA_SEGMENT: &str = "53995c3f42cd8ad8";
const STRIPE_SECRET: &str = "whsec_test_one_trace_secret_0000000001";

/// One webhook through the intake, the relay and the consumer, on DynamoDB Local, its stream and the SQS
/// emulator, is one trace: the intake's request span under the invocation's segment, its `finalize` step,
/// the relay's `publish` of the event item and the consumer's `consume` of the message, each the parent of
/// the next, as an in-memory exporter sees them.
#[tokio::test]
async fn a_webhook_is_one_trace_through_intake_relay_and_consumer() {
    use integration_tests::{fresh_queues, sqs_client, streams_client};
    use opentelemetry_sdk::trace::InMemorySpanExporter;

    let exporter = InMemorySpanExporter::default();
    let provider = shared::telemetry::provider_builder()
        .with_simple_exporter(exporter.clone())
        .build();
    // One process per test (nextest): this test's provider is the process's.
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(shared::telemetry::otel_layer(&provider)),
    )
    .unwrap();

    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_one_trace", 1000))
        .await
        .unwrap()
        .id;

    // The intake's invocation: the runtime sets `_X_AMZN_TRACE_ID` for it (and clears it after).
    std::env::set_var(
        "_X_AMZN_TRACE_ID",
        format!("{API_GATEWAY};Parent={LAMBDA_SEGMENT};Sampled=1;Lineage=a87bd80c:0"),
    );
    let answer = webhook(&ctx, &id).await;
    std::env::remove_var("_X_AMZN_TRACE_ID");
    assert_eq!(answer, "applied");

    // The relay's invocation on the table's stream, then the consumer's on the queue.
    let publisher = outbox_relay::Publisher::new(sqs.clone(), &queues.queue_url);
    let mut pump = local_lambda::stream_pump::StreamPump::for_table(&ctx.client, streams_client(), &ctx.table)
        .await
        .unwrap();
    while pump
        .poll_once(|event| {
            let publisher = &publisher;
            async move { outbox_relay::relay(publisher, &event).await }
        })
        .await
        .unwrap()
        > 0
    {}
    // As checkout-events runs: the event source mapping (the poller) and the consumer on its role's clients.
    let consumer = shared::consumer::Consumer::new(
        ctx.client_for("checkout-events"),
        &ctx.table,
        order_projection::OrderProjection,
    );
    let events_sqs = integration_tests::function_sqs_client("checkout-events", None);
    let mut poller = local_lambda::sqs_poller::SqsPoller::new(events_sqs, &queues.queue_url);
    let mut applied = 0;
    for _ in 0..20 {
        if applied == 2 {
            break;
        }
        let (consumer, applied) = (&consumer, &mut applied);
        poller
            .poll_once(|event| async move {
                let (response, report) = consumer.process(&event.records).await;
                *applied += report.applied;
                response
            })
            .await
            .unwrap();
    }
    assert_eq!(applied, 2, "the payment's creation and the webhook's transition");

    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let in_trace: Vec<_> = spans
        .iter()
        .filter(|s| s.span_context.trace_id().to_string() == TRACE)
        .collect();
    let named = |name: &str| {
        in_trace.iter().find(|s| s.name == name).unwrap_or_else(|| {
            let all: Vec<_> = spans
                .iter()
                .map(|s| format!("{} {} <- {}", s.name, s.span_context.trace_id(), s.parent_span_id))
                .collect();
            panic!("no {name} span in trace {TRACE}: {all:#?}")
        })
    };
    let request = named("request");
    assert_eq!(
        request.parent_span_id.to_string(),
        LAMBDA_SEGMENT,
        "the intake continues the incoming trace under the invocation's segment"
    );
    let mut parent = request;
    for stage in ["finalize", "publish", "consume"] {
        let span = named(stage);
        assert_eq!(
            span.parent_span_id,
            parent.span_context.span_id(),
            "{stage}'s parent is {}",
            parent.name
        );
        parent = span;
    }
}

/// The payment's webhook (Stripe's `payment_intent.succeeded`), signed, as API Gateway delivers it with its
/// trace header; the intake's answer.
async fn webhook(ctx: &TestContext, id: &payments_core::PaymentId) -> String {
    use webhook_signatures::sign_stripe;
    let now = shared::clock::now_ms() / 1000;
    let body = serde_json::json!({
        "id": "evt_one_trace", "object": "event", "type": "payment_intent.succeeded", "created": now,
        "livemode": false,
        "data": { "object": {
            "id": "pi_one_trace", "object": "payment_intent", "amount": 1000, "currency": "eur",
            "status": "succeeded", "metadata": { "payment_id": id.as_str() }
        } }
    })
    .to_string()
    .into_bytes();
    let signature = sign_stripe(&SigningSecret::parse(STRIPE_SECRET).unwrap(), now, &body);
    let headers = serde_json::json!({ "stripe-signature": signature, "x-amzn-trace-id": API_GATEWAY });
    let headers = headers.as_object().cloned().unwrap_or_default();
    let event = webhook_signatures::samples::apigw_event("/webhooks/stripe", &headers, &body, false);
    let req = lambda_http::request::from_str(&event.to_string()).unwrap();
    let providers = webhook_intake::providers::Providers::from_json(
        r#"[{"name":"stripe","scheme":"stripe","livemode":false}]"#,
        &serde_json::json!({ "stripe": [STRIPE_SECRET] }).to_string(),
    )
    .unwrap();
    let settings = webhook_intake::IntakeSettings::default();
    let app = webhook_intake::App::new(ctx.client.clone(), &ctx.config(), providers.into(), settings);
    let (response, _) = webhook_intake::process(&app, req).await;
    let body: serde_json::Value = serde_json::from_slice(response.body().as_ref()).unwrap();
    body["result"].as_str().unwrap_or_default().to_owned()
}
