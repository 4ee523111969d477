//! One tracing setup for every function: JSON lines in Lambda (CloudWatch parses them), readable lines
//! locally, and a request span that puts the payment id and correlation id on every line of a request.
//!
//! Secrets never reach a log: the secret types print `[redacted]` and have no `Display`, and nothing here
//! logs request bodies.

use tracing::{Level, Metadata, Span};
use tracing_subscriber::filter::filter_fn;
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

/// The formatting layer, writing to `writer`; used by [`init`] and by tests that capture logs.
pub fn layer<W>(json: bool, writer: W) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let base = tracing_subscriber::fmt::layer().with_writer(writer).with_target(false);
    let no_bodies = filter_fn(|meta| !may_log_bodies(meta));
    if json {
        base.json()
            .flatten_event(true)
            // The whole span list, so the request span's payment and correlation ids are on every line,
            // also on lines from inside the SDK's own spans.
            .with_current_span(false)
            .with_span_list(true)
            .with_filter(no_bodies)
            .boxed()
    } else {
        base.compact().without_time().with_filter(no_bodies).boxed()
    }
}

/// Installs the global subscriber once per process; the level comes from `RUST_LOG` (default `info`).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A second call (tests, a host process serving several handlers) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(layer(json_wanted(), std::io::stdout))
        .with(filter)
        .try_init();
}

/// The span of one request. `payment_id` may be unknown when it starts (a webhook names it in its body):
/// fill it in with [`record_payment`].
pub fn request_span(path: &'static str, correlation_id: &str) -> Span {
    tracing::info_span!("request", path, correlation_id, payment_id = tracing::field::Empty)
}

pub fn record_payment(span: &Span, payment_id: &str) {
    span.record("payment_id", payment_id);
}
