//! Which traces are recorded and exported. A trace's sampling decision is taken once, where the trace starts,
//! and travels with it (`Sampled=` in an X-Ray header, the flags of a `traceparent`): a span whose caller
//! decided follows that decision (`Sampled=1`: recorded; `Sampled=0`: neither recorded nor exported), so a
//! trace is whole or absent, never cut in pieces. Only a trace that starts here, or arrives without a
//! decision (`Sampled=?` or no `Sampled`), is decided here: a share of trace ids, the configured ratio. The
//! decision is a function of the trace id, so a trace decided again downstream gets the same answer.
//!
//! In Lambda under active tracing the invocation's segment always carries Lambda's decision (its sampling
//! rules), so the ratio decides only traces started outside Lambda or handed on without a decision.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceFlags, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{ParentBasedSampler, Sampler, SamplingResult, ShouldSample};

/// The flag the X-Ray propagator gives a context that carries no decision (`Sampled=?` or none). Its sampled
/// bit is unset, which alone would read as "not sampled".
pub(super) const DEFERRED: TraceFlags = TraceFlags::new(0x02);

/// The share of new or undecided traces recorded when `OTEL_TRACES_SAMPLER_ARG` does not say: X-Ray's own
/// default rate (5 %).
pub const DEFAULT_RATIO: f64 = 0.05;

/// The ratio `OTEL_TRACES_SAMPLER_ARG` sets (a number from 0 to 1), else [`DEFAULT_RATIO`].
pub fn ratio_from_env() -> f64 {
    match std::env::var("OTEL_TRACES_SAMPLER_ARG") {
        Ok(text) => parse_ratio(&text).unwrap_or_else(|| {
            // Read before the subscriber exists: stderr is the only place to say it.
            eprintln!("OTEL_TRACES_SAMPLER_ARG={text:?} is not a ratio from 0 to 1; sampling {DEFAULT_RATIO}");
            DEFAULT_RATIO
        }),
        Err(_) => DEFAULT_RATIO,
    }
}

/// A ratio from 0 to 1, else `None`.
pub fn parse_ratio(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r))
}

/// The sampler: a parent's decision is followed; no parent, or a remote parent without a decision, is
/// decided on its trace id at `ratio`.
pub fn sampler(ratio: f64) -> ParentBasedSampler {
    Sampler::parent_based(Sampler::TraceIdRatioBased(ratio)).with_remote_parent_not_sampled(Undecided(ratio))
}

/// A remote parent whose sampled bit is unset: `Sampled=0` (dropped) or no decision (decided at the ratio).
#[derive(Clone, Debug)]
struct Undecided(f64);

impl ShouldSample for Undecided {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let deferred = parent_context.is_some_and(|cx| cx.span().span_context().trace_flags() & DEFERRED == DEFERRED);
        let decide = if deferred {
            Sampler::TraceIdRatioBased(self.0)
        } else {
            Sampler::AlwaysOff
        };
        decide.should_sample(parent_context, trace_id, name, span_kind, attributes, links)
    }
}

/// The decision a context hands on: sampled or not, never "undecided" (a span that continued an undecided
/// trace keeps the X-Ray propagator's deferred flag, but its own decision is taken).
pub(super) fn decided(flags: TraceFlags) -> TraceFlags {
    flags & TraceFlags::SAMPLED
}
