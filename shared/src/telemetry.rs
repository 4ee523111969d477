//! One tracing setup for every function: JSON lines in Lambda (CloudWatch parses them), readable lines
//! locally, and a request span that puts the payment id and correlation id on every line of a request.
//!
//! Secrets never reach a log: the secret types print `[redacted]` and have no `Display`, and nothing here
//! logs request bodies.
//!
//! **Distributed tracing** (OpenTelemetry through `tracing-opentelemetry`): every `tracing` span is also an
//! OpenTelemetry span with an X-Ray-compatible trace id (its first 8 hex digits are the start time, as X-Ray
//! requires), so one trace id works in X-Ray and in any OTLP backend. With `OTEL_EXPORTER_OTLP_ENDPOINT`
//! set (in AWS: the ADOT collector layer, `http://localhost:4318`, which forwards to X-Ray) spans are
//! exported over OTLP/HTTP, flushed at the end of each invocation ([`flush`]) because Lambda freezes the
//! process between invocations. Without it, and with DEBUG let through, they go to the logs: each span's
//! close is a line ([`SpanCloses`]); request and step spans carry `trace_id` and `span_id` either way. The trace context travels as a W3C `traceparent` or an
//! X-Ray header (`Root=1-...;Parent=...;Sampled=1`): [`span_with_parent`] continues either, and
//! [`current_traceparent`] / [`current_xray_header`] hand the current span on (the event item, the SQS
//! message's `traceparent` attribute and `AWSTraceHeader` system attribute).
//!
//! **In Lambda the invocation's segment is the parent of a request's span** (`_X_AMZN_TRACE_ID`, which the
//! runtime sets per invocation): Lambda has continued the caller's trace there (API Gateway's
//! `X-Amzn-Trace-Id` names only the trace, `Root=...`, so it cannot be a parent itself) and decided its
//! sampling, which our spans follow ([`sampling`]). The runtime's own per-invocation span is no
//! OpenTelemetry span: it would start a separate trace for every invocation.

mod sampling;

pub use sampling::{parse_ratio, ratio_from_env, sampler, DEFAULT_RATIO};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_aws::trace::xray_propagator::{span_context_from_str, span_context_to_string};
use opentelemetry_aws::trace::XrayIdGenerator;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, TracerProviderBuilder};
use opentelemetry_sdk::Resource;
use std::collections::HashMap;
use std::sync::OnceLock;
use tracing::{Level, Metadata, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Log format: JSON in Lambda (`AWS_LAMBDA_FUNCTION_NAME` is set), text elsewhere; `LOG_FORMAT=json|text`
/// overrides.
pub fn json_wanted() -> bool {
    match std::env::var("LOG_FORMAT").as_deref() {
        Ok("json") => true,
        Ok("text") => false,
        _ => std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some(),
    }
}

/// Crates whose TRACE output contains request and response bodies (the AWS SDK logs whole DynamoDB items,
/// secrets included; the Lambda runtime and HTTP stack can log payloads). Their TRACE level is cut off
/// whatever `RUST_LOG` says.
const BODY_LOGGING_CRATES: [&str; 8] = [
    "aws_",
    "hyper",
    "reqwest",
    "h2",
    "rustls",
    "lambda_runtime",
    "lambda_http",
    "tower",
];

fn may_log_bodies(meta: &Metadata<'_>) -> bool {
    *meta.level() == Level::TRACE && BODY_LOGGING_CRATES.iter().any(|c| meta.target().starts_with(c))
}

/// Whether the logs get a line when each span closes (its time, and under "span" its own fields).
///
/// At INFO they do not: a webhook then writes one line, its summary, with the request span's ids on it (a
/// span line each for verify, read, lease and finalize was 2.7 KB of a webhook's 4.7 KB, billed by CloudWatch
/// Logs at more than the webhook's Lambda time; issue 43). A filter that lets DEBUG through gets them, and
/// so does every span exported over OTLP, whatever the level: the trace keeps what the log leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanCloses {
    /// A line when each span closes (DEBUG, or a test that reads them).
    Logged,
    /// No span line: the spans are in the trace only.
    Omitted,
}

impl SpanCloses {
    /// Logged when `filter` lets DEBUG through and no OTLP endpoint takes the spans.
    pub fn for_filter(filter: &EnvFilter) -> Self {
        let debug = filter
            .max_level_hint()
            .is_none_or(|max| max >= tracing::level_filters::LevelFilter::DEBUG);
        if debug && otlp_endpoint().is_none() {
            Self::Logged
        } else {
            Self::Omitted
        }
    }
}

/// The formatting layer, writing to `writer`; used by [`init`] and by tests that capture logs.
pub fn layer<W>(json: bool, closes: SpanCloses, writer: W) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let closes = closes == SpanCloses::Logged;
    let span_lines = if closes { FmtSpan::CLOSE } else { FmtSpan::NONE };
    let base = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false)
        .with_span_events(span_lines);
    let no_bodies = filter_fn(|meta| !may_log_bodies(meta));
    if json {
        base.json()
            .flatten_event(true)
            // The span a close line is about; on other lines it repeats the list's last entry.
            .with_current_span(closes)
            // The whole span list, so the request span's payment and correlation ids are on every line,
            // also on lines from inside the SDK's own spans.
            .with_span_list(true)
            .with_filter(no_bodies)
            .boxed()
    } else {
        base.compact().without_time().with_filter(no_bodies).boxed()
    }
}

fn otlp_endpoint() -> Option<String> {
    std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty())
}

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The tracer provider: [`provider_builder`]'s, with an OTLP/HTTP batch exporter when an endpoint is
/// configured.
pub fn tracer_provider() -> SdkTracerProvider {
    let builder = provider_builder();
    let builder = match otlp_endpoint() {
        Some(_) => match opentelemetry_otlp::SpanExporter::builder().with_http().build() {
            Ok(exporter) => builder.with_batch_exporter(exporter),
            Err(e) => {
                // Before the subscriber exists: stderr is the only place to say it. Spans stay in the logs.
                eprintln!("OTLP exporter not built, spans are not exported: {e}");
                builder
            }
        },
        None => builder,
    };
    builder.build()
}

/// A tracer provider's builder with everything but the exporter: X-Ray-compatible ids, the sampler that
/// follows the incoming decision (undecided traces at `OTEL_TRACES_SAMPLER_ARG`'s ratio), the service's
/// name. Tests add an in-memory exporter.
pub fn provider_builder() -> TracerProviderBuilder {
    let mut builder = SdkTracerProvider::builder()
        .with_id_generator(XrayIdGenerator::default())
        .with_sampler(sampler(ratio_from_env()));
    // X-Ray and OTLP backends group spans by service: the function's name unless OTEL_SERVICE_NAME says.
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        if let Ok(function) = std::env::var("AWS_LAMBDA_FUNCTION_NAME") {
            builder = builder.with_resource(Resource::builder().with_service_name(function).build());
        }
    }
    builder
}

/// The layer that turns `tracing` spans into OpenTelemetry spans of `provider`.
pub fn otel_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + Send + Sync
where
    S: tracing::Subscriber + for<'s> tracing_subscriber::registry::LookupSpan<'s> + Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("payments"))
        .with_filter(filter_fn(|meta| !may_log_bodies(meta) && !is_runtime_span(meta)))
}

/// The Lambda runtime's span around each invocation ("Lambda runtime invoke"). As an OpenTelemetry span it
/// would be a new root every invocation, and the parent of spans that belong under the invocation's segment.
fn is_runtime_span(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.target().starts_with("lambda_runtime")
}

/// Installs the global subscriber once per process; the level comes from `RUST_LOG` (default `info`).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let closes = SpanCloses::for_filter(&filter);
    let provider = PROVIDER.get_or_init(tracer_provider);
    // A second call (tests, a host process serving several handlers) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(layer(json_wanted(), closes, std::io::stdout))
        .with(otel_layer(provider))
        .with(filter)
        .try_init();
}

/// Exports the spans ended so far (a no-op without an OTLP endpoint). Called at the end of each
/// invocation: Lambda freezes the process after it, so a batch waiting for its timer would be late or lost.
pub fn flush() {
    if let Some(provider) = PROVIDER.get() {
        if otlp_endpoint().is_some() {
            if let Err(e) = provider.force_flush() {
                tracing::warn!(error = %e, "exporting spans failed");
            }
        }
    }
}

/// The span of one request, in the invocation's trace ([`request_parent`]). `payment_id` may be unknown
/// when it starts (a webhook names it in its body): fill it in with [`record_payment`].
pub fn request_span(path: &'static str, correlation_id: &str) -> Span {
    span_with_parent(path, correlation_id, None)
}

/// A request span continuing the trace it belongs to: in Lambda the invocation's segment, elsewhere the
/// caller's `carrier` (a W3C `traceparent` or an X-Ray trace header), else a new trace ([`request_parent`]).
pub fn span_with_parent(path: &'static str, correlation_id: &str, carrier: Option<&str>) -> Span {
    let span = tracing::info_span!(
        "request",
        path,
        correlation_id,
        payment_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty
    );
    in_request_trace(span, carrier)
}

/// Makes `span`, a request's span the caller declared (with empty `trace_id` and `span_id` fields, which
/// this fills in), start where [`request_parent`] says; call it before the span is first entered.
pub fn in_request_trace(span: Span, carrier: Option<&str>) -> Span {
    let (parent, caller) = request_parent(invocation_trace_header().as_deref(), carrier);
    let _ = span.set_parent(parent);
    if let Some(caller) = caller {
        span.add_link(caller);
    }
    record_ids(&span);
    span
}

/// Where a request's span starts. In Lambda under the invocation's segment (`invocation`, the
/// `_X_AMZN_TRACE_ID` header): Lambda has continued the caller's trace there and decided its sampling.
/// Elsewhere (locally, in tests) under the caller's `carrier` when it names a parent span; else a new trace.
/// The second value is a caller's context in another trace than the invocation's (a client's W3C
/// `traceparent` outside X-Ray), for a link, so that trace is not lost either.
pub fn request_parent(invocation: Option<&str>, carrier: Option<&str>) -> (Context, Option<SpanContext>) {
    let caller = carrier.and_then(remote_context);
    match invocation.and_then(remote_context) {
        Some(segment) => {
            let trace = segment.span().span_context().trace_id();
            let other = caller
                .map(|c| c.span().span_context().clone())
                .filter(|c| c.trace_id() != trace);
            (segment, other)
        }
        // No parent: a new trace, even inside an enclosing span.
        None => (caller.unwrap_or_default(), None),
    }
}

/// A span for one step of a flow (verify, lease, read, finalize, ...), named after it, a child of the
/// current span.
pub fn step_span(step: &'static str) -> Span {
    let span = new_step_span(step);
    record_ids(&span);
    span
}

/// A step span continuing the trace `carrier` names (the relay's `publish` of an event item, the
/// consumer's `consume` of a message); none or unreadable: the invocation's segment in Lambda, else the
/// current span.
pub fn step_span_with_parent(step: &'static str, carrier: Option<&str>) -> Span {
    let span = new_step_span(step);
    let parent = carrier
        .and_then(remote_context)
        .or_else(|| invocation_trace_header().as_deref().and_then(remote_context));
    if let Some(parent) = parent {
        // Before the span is first entered, so the OpenTelemetry span starts in the caller's trace.
        let _ = span.set_parent(parent);
    }
    record_ids(&span);
    span
}

fn new_step_span(step: &'static str) -> Span {
    tracing::info_span!(
        "step",
        otel.name = step,
        step,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty
    )
}

fn record_ids(span: &Span) {
    let context = span.context();
    let sc = context.span().span_context().clone();
    if sc.is_valid() {
        span.record("trace_id", sc.trace_id().to_string());
        span.record("span_id", sc.span_id().to_string());
    }
}

/// The context a W3C `traceparent` or an X-Ray header (`Root=...;Parent=...;Sampled=...`) names; `None`
/// for one that names no parent span (API Gateway's `Root=...` alone) or cannot be read.
pub fn remote_context(carrier: &str) -> Option<Context> {
    let carrier = carrier.trim();
    let sc = if carrier.contains("Root=") {
        span_context_from_str(carrier)?
    } else {
        let headers = HashMap::from([("traceparent".to_owned(), carrier.to_owned())]);
        let cx = TraceContextPropagator::new().extract(&headers);
        let sc = cx.span().span_context().clone();
        sc
    };
    sc.is_valid().then(|| Context::new().with_remote_span_context(sc))
}

fn span_context_of(span: &Span) -> Option<SpanContext> {
    let sc = span.context().span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The W3C `traceparent` of `span`, with the span's sampling decision.
pub fn traceparent_of(span: &Span) -> Option<String> {
    let sc = span_context_of(span)?;
    Some(format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sampling::decided(sc.trace_flags()).to_u8()
    ))
}

/// The X-Ray trace header of `span` (for SQS's `AWSTraceHeader`), with the span's sampling decision.
pub fn xray_header_of(span: &Span) -> Option<String> {
    let sc = span_context_of(span)?;
    let decided = SpanContext::new(
        sc.trace_id(),
        sc.span_id(),
        sampling::decided(sc.trace_flags()),
        sc.is_remote(),
        sc.trace_state().clone(),
    );
    span_context_to_string(&decided)
}

/// The X-Ray trace header of this Lambda invocation (`_X_AMZN_TRACE_ID`, which the runtime sets per
/// invocation, e.g. `Root=1-...;Parent=...;Sampled=1;Lineage=...`): the parent of the invocation's work.
pub fn invocation_trace_header() -> Option<String> {
    std::env::var("_X_AMZN_TRACE_ID").ok().filter(|h| !h.is_empty())
}

/// The current span's W3C `traceparent` (stored on event items).
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&Span::current())
}

/// The current span's X-Ray trace header.
pub fn current_xray_header() -> Option<String> {
    xray_header_of(&Span::current())
}

pub fn record_payment(span: &Span, payment_id: &str) {
    span.record("payment_id", payment_id);
}

/// An error with its causes on one line, `outer: cause: root cause`, for a log field
/// (`error = %ErrorChain(&e)`): the JSON log keeps only `Display`, which for an error that keeps its cause as
/// a `source()` says only the outer part. A cause whose text the line already ends with (a wrapper that
/// prints its source itself) is not repeated.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + Send + Sync + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut line = self.0.to_string();
        // Bounded: a cycle of sources would otherwise never end.
        for cause in std::iter::successors(self.0.source(), |e| e.source()).take(16) {
            let text = cause.to_string();
            if !line.ends_with(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
        }
        f.write_str(&line)
    }
}

#[cfg(test)]
mod tests;
