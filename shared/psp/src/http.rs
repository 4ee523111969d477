//! The HTTP pieces every PSP client shares (Stripe's [`super::StripeClient`], Adyen's
//! [`super::adyen::AdyenClient`]): one reqwest client per PSP with a connect and a request timeout, one
//! attempt (send, read, log, a 2xx read as the path's JSON), the retry loop with backoff and full jitter, the
//! transport causes errors keep, the one refusal reporter and the stage marker both clients write. What differs per PSP (how it authenticates, its bodies, its error object,
//! which answers to retry) stays in its client: an attempt hands a non-2xx answer back untouched.
//!
//! Each attempt that gets no answer, or an answer cut off, is reported to the circuit breaker the call runs in
//! ([`super::breaker::attempt_failed`]) as it happens; a 5xx is reported by the client, which knows
//! whether its PSP replayed it for the key.

use super::error::PspError;
use payments_core::breaker::Attempt;
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;
use shared::clock;
use shared::retry::Backoff;
use shared::telemetry::ErrorChain;
use std::time::Duration;
use tracing::{debug, error, warn, Instrument};

/// The metadata key that marks every PaymentIntent this system creates with its stage (`STAGE`, as
/// `shared::metrics::stage` holds it): the webhook intake acknowledges and ignores events of objects that
/// carry another stage's marker, or none and no payment of ours (one PSP account holds other stages' and
/// other products' PaymentIntents). Defined beside the lookup that reads it (`shared::payment_ref`).
pub use shared::payment_ref::STAGE_MARKER;

/// Namespace of the client's metrics (`PspRefusals`, `PspAuthFailed`, `PspRateLimited`; the breaker's
/// `BreakerOpened`).
pub const NAMESPACE: &str = "Payments/Psp";

/// Why one attempt failed, and whether another may succeed.
pub(super) struct AttemptFailure {
    pub(super) error: PspError,
    pub(super) retry: bool,
}

/// One attempt's transport failure: what was cut (`no answer`, `answer cut off`) and how (timeout,
/// connection), with reqwest's error, its URL removed (no secret in it today, but a query string could hold
/// one), as the source.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {kind}")]
pub(super) struct Transport {
    what: &'static str,
    kind: &'static str,
    #[source]
    source: reqwest::Error,
}

impl Transport {
    pub(super) fn new(what: &'static str, e: reqwest::Error) -> Self {
        let kind = if e.is_timeout() {
            "timeout"
        } else if e.is_connect() {
            "connection failed"
        } else {
            "request failed"
        };
        Self {
            what,
            kind,
            source: e.without_url(),
        }
    }
}

/// An answer whose JSON does not read as what the path returns; serde's error is the source.
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status} {path}: not the expected JSON")]
pub(super) struct Unreadable {
    pub(super) status: u16,
    pub(super) path: String,
    #[source]
    pub(super) source: serde_json::Error,
}

pub(super) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The HTTP client of one PSP: `connect` and `request` (one attempt, connect to last byte) timeouts.
pub(super) fn client(connect: Duration, request: Duration) -> Result<reqwest::Client, PspError> {
    reqwest::Client::builder()
        .connect_timeout(connect)
        .timeout(request)
        .user_agent(concat!("payments-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| PspError::Unavailable(Box::new(Transport::new("building the HTTP client", e))))
}

/// A non-2xx answer, for the client to read in its PSP's terms.
pub(super) struct Failed {
    pub(super) status: u16,
    pub(super) headers: HeaderMap,
    pub(super) body: Vec<u8>,
}

/// Sends `request` (attempt number `attempt` of `path`): a 2xx read as `T`, any other answer as [`Failed`].
/// `id_header` names the PSP's request id, logged with the answer.
pub(super) async fn attempt<T: DeserializeOwned>(
    request: reqwest::RequestBuilder,
    path: &str,
    attempt: u32,
    id_header: &str,
) -> Result<Result<T, Failed>, AttemptFailure> {
    let lost = |what: &'static str, e: reqwest::Error| {
        super::breaker::attempt_failed(Attempt::PspFailed);
        AttemptFailure {
            // A timeout or reset after sending: the call may have happened; the same key makes the retry safe.
            error: PspError::Unavailable(Box::new(Transport::new(what, e))),
            retry: true,
        }
    };
    let started = clock::now_ms();
    let response = request.send().await.map_err(|e| lost("no answer", e))?;
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let body = response.bytes().await.map_err(|e| lost("answer cut off", e))?;
    debug!(
        status,
        attempt,
        elapsed_ms = clock::now_ms().saturating_sub(started),
        request_id = header(&headers, id_header).unwrap_or("-"),
        "PSP answered"
    );
    if !(200..300).contains(&status) {
        return Ok(Err(Failed {
            status,
            headers,
            body: body.to_vec(),
        }));
    }
    serde_json::from_slice(&body).map(Ok).map_err(|source| AttemptFailure {
        error: PspError::BadAnswer(Box::new(Unreadable {
            status,
            path: path.to_owned(),
            source,
        })),
        retry: false,
    })
}

/// Runs `op` (one attempt each) with `retries`, in a span named `step`; the last failure's error, logged when
/// it was still retryable (the attempts ran out).
pub(super) async fn retried<T, F, Fut>(retries: &Backoff, step: &'static str, path: &str, op: F) -> Result<T, PspError>
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = Result<T, AttemptFailure>>,
{
    retries
        .retry(op, |failure: &AttemptFailure| failure.retry)
        .instrument(shared::telemetry::step_span(step))
        .await
        .map_err(|(failure, attempts)| {
            if failure.retry {
                warn!(path, attempts, error = %ErrorChain(&failure.error), "PSP call failed after retries");
            }
            failure.error
        })
}

/// The metric of a PSP's 429 past its rate limit: `PspRateLimited` (alarmed, by stage; by stage and
/// `Provider` for the dashboard).
pub const RATE_LIMITED: &str = "PspRateLimited";

/// Logs and counts one answer 429 of `provider` to the request on `path`, its rate limit reached (each
/// attempt: the client retries it with back-off, so a steady count means the budgets are above the PSP's
/// limit). A lock timeout (Stripe's 429 `lock_timeout`: another request holds the object) is not the limit
/// and is not counted here.
pub(super) fn count_rate_limited(provider: &'static str, path: &str) {
    warn!(
        provider,
        path, "PSP answered 429: over its rate limit, retried with back-off"
    );
    shared::metrics::emit(&rate_limited_record(provider, path, clock::now_ms()));
}

/// The EMF record [`count_rate_limited`] writes.
fn rate_limited_record(provider: &str, path: &str, now_ms: i64) -> serde_json::Value {
    shared::metrics::counts(
        NAMESPACE,
        &[&[], &["Provider"]],
        &[RATE_LIMITED],
        serde_json::json!({ "Provider": provider, "Path": path, RATE_LIMITED: 1 }),
        now_ms,
    )
}

/// `operation` of a step's span name: `psp.charge` is `charge`.
/// One API call of either client, in a span named `step`: its attempts with `retries`, each with the key
/// `key` holds now; a key the PSP refuses is read again and, if it changed, the call made once more with the
/// new one (the same idempotency key: a call refused for its key did nothing); a refusal logged and counted
/// ([`report_refusal`]).
pub(super) async fn call<T, F, Fut>(
    key: &crate::key::CurrentKey,
    retries: &Backoff,
    step: &'static str,
    path: &str,
    attempt: F,
) -> Result<T, PspError>
where
    F: Fn(crate::ApiKey, u32) -> Fut,
    Fut: std::future::Future<Output = Result<T, AttemptFailure>>,
{
    let attempt = &attempt;
    let result = key
        .with_refresh(operation(step), |api_key| async move {
            retried(retries, step, path, |n| attempt(api_key.clone(), n)).await
        })
        .await;
    if let Err(e) = &result {
        report_refusal(step, e);
    }
    result
}

pub(super) fn operation(step: &str) -> &str {
    step.strip_prefix("psp.").unwrap_or(step)
}

/// Logs and counts a refusal, of either PSP (Adyen's error comes in Stripe's shape): `PspAuthFailed` for our
/// key, `PspRefusals` for a request the PSP will never accept. Declines (the customer's card) and transient
/// failures are neither. The PSP's message has had its key-like words redacted by its client's `classify`; the
/// key and the request body are never logged.
pub(super) fn report_refusal(step: &'static str, e: &PspError) {
    let (metric, status, api) = match e {
        PspError::AuthFailed { status, error } => ("PspAuthFailed", *status, error),
        PspError::Refused { status, error } => ("PspRefusals", *status, error),
        _ => return,
    };
    let (kind, code, param) = (api.kind.as_str(), api.code.as_deref(), api.param.as_deref());
    let stripe_message = api.message.as_deref().unwrap_or("");
    let operation = operation(step);
    // One line, its level the refusal's (a tracing level is a constant of the call site).
    macro_rules! refusal {
        ($level:ident, $message:literal) => {
            $level!(
                operation,
                status,
                error_type = kind,
                code,
                param,
                stripe_message,
                $message
            )
        };
    }
    if metric == "PspAuthFailed" {
        refusal!(
            error,
            "PSP refused our API key: calls deferred until the key is fixed (check the PSP key secret)"
        );
    } else {
        refusal!(warn, "PSP refused the request");
    }
    shared::metrics::emit(&shared::metrics::counts(
        NAMESPACE,
        &[&[], &["Operation"]],
        &[metric],
        serde_json::json!({ "Operation": operation, metric: 1, "ErrorType": kind, "Code": code }),
        clock::now_ms(),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_is_counted_by_stage_as_the_alarm_reads_it_and_by_provider() {
        let record = rate_limited_record("stripe", "/v1/payment_intents", 1);
        let metrics = &record["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(metrics["Namespace"], NAMESPACE);
        assert_eq!(
            metrics["Dimensions"],
            serde_json::json!([["Stage"], ["Stage", "Provider"]])
        );
        assert_eq!(metrics["Metrics"][0]["Name"], RATE_LIMITED);
        assert_eq!(
            (record[RATE_LIMITED].as_u64(), record["Provider"].as_str()),
            (Some(1), Some("stripe"))
        );
    }
}
