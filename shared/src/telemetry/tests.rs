use super::*;
use std::sync::{Arc, Mutex};

const TRACE: &str = "5759e988bd862e3fe1be46a994272793";

/// Runs `f` under a subscriber with the OpenTelemetry layer (and JSON logs into the returned buffer).
fn traced<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let provider = SdkTracerProvider::builder()
        .with_id_generator(XrayIdGenerator::default())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(layer(true, SpanCloses::Logged, move || writer.clone()))
        .with(otel_layer(&provider));
    let out = tracing::subscriber::with_default(subscriber, f);
    let logs = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (out, logs)
}

#[test]
fn new_traces_have_x_ray_compatible_ids_and_the_logs_carry_them() {
    let ((traceparent, xray), logs) = traced(|| {
        let span = request_span("webhook", "corr-1");
        let _in = span.enter();
        tracing::info!("inside");
        (current_traceparent().unwrap(), current_xray_header().unwrap())
    });
    let trace_id = &traceparent[3..35];
    // X-Ray: the first 32 bits are the trace's start, in epoch seconds.
    let started = u64::from_str_radix(&trace_id[..8], 16).unwrap() as i64;
    assert!(started.abs_diff(crate::clock::now_ms() / 1000) < 60, "{traceparent}");
    assert_eq!(
        xray,
        format!(
            "Root=1-{}-{};Parent={};Sampled=1",
            &trace_id[..8],
            &trace_id[8..],
            &traceparent[36..52]
        )
    );
    assert!(logs.contains(&format!("\"trace_id\":\"{trace_id}\"")), "{logs}");
    assert!(
        logs.contains(&format!("\"span_id\":\"{}\"", &traceparent[36..52])),
        "{logs}"
    );
    // Without an OTLP endpoint the span itself is a log line when it closes, with its ids.
    let close: serde_json::Value = logs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["message"] == "close")
        .unwrap_or_else(|| panic!("no close line in {logs}"));
    assert_eq!(close["span"]["trace_id"], trace_id, "{close}");
    assert_eq!(close["span"]["name"], "request", "{close}");
}

#[test]
fn a_w3c_traceparent_is_continued() {
    let parent = format!("00-{TRACE}-53995c3f42cd8ad8-01");
    let (child, _) = traced(|| traceparent_of(&span_with_parent("api", "c", Some(&parent))).unwrap());
    assert_eq!(&child[3..35], TRACE);
    assert_ne!(&child[36..52], "53995c3f42cd8ad8", "a new span in the same trace");
    assert!(child.ends_with("-01"));
}

#[test]
fn an_x_ray_header_is_continued_and_handed_on_as_one() {
    let parent = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let ((w3c, xray), _) = traced(|| {
        let span = span_with_parent("relay", "c", Some(parent));
        let step = span.in_scope(|| step_span("publish"));
        (traceparent_of(&step).unwrap(), xray_header_of(&step).unwrap())
    });
    assert_eq!(&w3c[3..35], TRACE);
    assert!(
        xray.starts_with("Root=1-5759e988-bd862e3fe1be46a994272793;Parent="),
        "{xray}"
    );
    assert!(xray.ends_with(";Sampled=1"), "{xray}");
    // The header names the step's own span, which a consumer continues.
    let (consumer, _) = traced(|| traceparent_of(&span_with_parent("consume", "c", Some(&xray))).unwrap());
    assert_eq!(&consumer[3..35], TRACE);
}

#[test]
fn an_unreadable_carrier_starts_a_new_trace() {
    for carrier in ["", "garbage", "00-zz-yy-01", "Root=1-nope"] {
        assert!(remote_context(carrier).is_none(), "{carrier}");
        let (child, _) = traced(|| traceparent_of(&span_with_parent("x", "c", Some(carrier))).unwrap());
        assert_ne!(&child[3..35], TRACE);
    }
}

#[test]
fn an_error_chain_names_every_cause_once() {
    let store = crate::StoreError::unavailable("finalize", "ThrottlingError: slow down");
    assert_eq!(
        ErrorChain(&store).to_string(),
        "DynamoDB unavailable during finalize: ThrottlingError: slow down"
    );
    #[derive(Debug, thiserror::Error)]
    #[error("DynamoDB: {0}")]
    struct Prints(#[source] crate::StoreError);
    let wrapped = Prints(store);
    assert_eq!(
        ErrorChain(&wrapped).to_string(),
        "DynamoDB: DynamoDB unavailable during finalize: ThrottlingError: slow down"
    );
}

/// The value Lambda sets in `_X_AMZN_TRACE_ID` for an invocation under active tracing.
const LAMBDA: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:0";
/// API Gateway's `X-Amzn-Trace-Id` for an HTTP API: the trace alone, no parent span.
const API_GATEWAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793";

#[test]
fn the_lambda_invocations_trace_header_is_read() {
    let cx = remote_context(LAMBDA).expect("a parent");
    let sc = cx.span().span_context().clone();
    assert_eq!(sc.trace_id().to_string(), TRACE);
    assert_eq!(sc.span_id().to_string(), "53995c3f42cd8ad8");
    assert!(sc.is_sampled() && sc.is_remote());
    let unsampled = LAMBDA.replace("Sampled=1", "Sampled=0");
    let sc = remote_context(&unsampled).unwrap().span().span_context().clone();
    assert!(!sc.is_sampled());
    // API Gateway's header names no parent span: on its own it cannot be continued.
    assert!(remote_context(API_GATEWAY).is_none());
}

#[test]
fn a_request_starts_under_the_invocations_segment() {
    let segment = |(cx, link): (Context, Option<SpanContext>)| {
        let sc = cx.span().span_context().clone();
        (sc.is_valid().then(|| sc.span_id().to_string()), link)
    };
    // In Lambda: the segment, whatever API Gateway's header says.
    let (parent, link) = segment(request_parent(Some(LAMBDA), Some(API_GATEWAY)));
    assert_eq!(parent.as_deref(), Some("53995c3f42cd8ad8"));
    assert!(link.is_none());
    // A caller's traceparent in another trace is kept as a link; one in the same trace is the segment's parent.
    let other = "00-6759e988bd862e3fe1be46a994272793-1111111111111111-01";
    let (_, link) = segment(request_parent(Some(LAMBDA), Some(other)));
    assert_eq!(link.unwrap().span_id().to_string(), "1111111111111111");
    let same = format!("00-{TRACE}-2222222222222222-01");
    assert!(segment(request_parent(Some(LAMBDA), Some(&same))).1.is_none());
    // Outside Lambda: the caller's parent span, else a new trace.
    let (parent, _) = segment(request_parent(None, Some(&same)));
    assert_eq!(parent.as_deref(), Some("2222222222222222"));
    assert_eq!(segment(request_parent(None, Some(API_GATEWAY))).0, None);
    assert_eq!(segment(request_parent(None, None)).0, None);
}

/// Runs a request under `carrier` (and a step inside it) with the sampler at `ratio`; the spans exported and
/// the X-Ray header the step hands on.
fn sampled(carrier: Option<&str>, ratio: f64) -> (Vec<String>, String) {
    use opentelemetry_sdk::trace::InMemorySpanExporter;
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_id_generator(XrayIdGenerator::default())
        .with_sampler(sampler(ratio))
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(otel_layer(&provider));
    let header = tracing::subscriber::with_default(subscriber, || {
        let request = span_with_parent("api", "c", carrier);
        let step = request.in_scope(|| step_span("read"));
        xray_header_of(&step).unwrap()
    });
    provider.force_flush().unwrap();
    let names = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .map(|s| s.name.into_owned())
        .collect();
    (names, header)
}

#[test]
fn sampling_follows_the_incoming_decision() {
    let parent = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8";
    let recorded = vec!["read".to_owned(), "request".to_owned()];
    // Sampled=1: recorded whatever the ratio; Sampled=0: neither recorded nor exported, and handed on so.
    let (spans, header) = sampled(Some(&format!("{parent};Sampled=1")), 0.0);
    assert_eq!(spans, recorded);
    assert!(
        header.starts_with("Root=1-5759e988-") && header.ends_with(";Sampled=1"),
        "{header}"
    );
    let (spans, header) = sampled(Some(&format!("{parent};Sampled=0")), 1.0);
    assert_eq!(spans, Vec::<String>::new());
    assert!(
        header.starts_with("Root=1-5759e988-") && header.ends_with(";Sampled=0"),
        "{header}"
    );
    // No decision (`Sampled=?`, none, or a new trace): the ratio decides, and the decision is handed on.
    for carrier in [Some(format!("{parent};Sampled=?")), Some(parent.to_owned()), None] {
        let (spans, header) = sampled(carrier.as_deref(), 1.0);
        assert_eq!(spans, recorded, "{carrier:?}");
        assert!(header.ends_with(";Sampled=1"), "{carrier:?}: {header}");
        let (spans, header) = sampled(carrier.as_deref(), 0.0);
        assert_eq!(spans, Vec::<String>::new(), "{carrier:?}");
        assert!(header.ends_with(";Sampled=0"), "{carrier:?}: {header}");
    }
}

#[test]
fn the_sampling_ratio_is_a_number_from_0_to_1() {
    assert_eq!(parse_ratio("0.25"), Some(0.25));
    assert_eq!(parse_ratio(" 1 "), Some(1.0));
    for bad in ["", "x", "-0.1", "1.5", "NaN"] {
        assert_eq!(parse_ratio(bad), None, "{bad}");
    }
}
