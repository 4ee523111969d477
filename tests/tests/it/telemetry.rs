//! Logs of a request that carries a client secret and a signing secret contain neither, and every line of
//! the request carries the payment id and correlation id.

use integration_tests::{LogCapture, TestContext};
use payments_core::fixtures::{self, contains_fixture_secret};
use payments_core::{ClientView, Outcome, Path, SigningSecret};
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
            .with(shared::telemetry::layer(json, move || sink.clone()))
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
                .finalize(&id, &fixtures::observe(Path::Sync, Outcome::Processing), None)
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
