//! `POST /webhooks/{provider}`: verify, parse, map to an observation, take the payment's lease (overlapped
//! with the read), check the event against the payment, finalize through the shared decision and write,
//! release the lease (inside the write's transaction), answer.
//!
//! Overlapping the lease acquire with the read is safe: a read taken before the lease was ours may be stale,
//! and then the versioned write conflicts and the decision is taken again from the item that won.

use crate::metrics::RequestMetrics;
use crate::providers::{Provider, ProviderSource, Providers, Scheme};
use crate::psp_event::{Parsed, PspEvent};
use crate::signature::{verify_standard, verify_stripe, SignatureError, SignedRequest};
use crate::{redact::redact, standard, stripe};
use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use serde_json::json;
use shared::http::{self, ApiError};
use shared::lease::HeldLease;
use shared::router::{RouteTableError, Router};
use shared::store::ParkedKind;
use shared::telemetry::ErrorChain;
use shared::{
    clock, decide, telemetry, Decision, Env, FinalizeResult, IgnoreReason, Leases, Observation, Payment, PaymentId,
    PaymentStore, StoreError,
};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tracing::{info, warn, Instrument};

/// Limits and waits, from the environment (see README).
#[derive(Debug, Clone)]
pub struct IntakeSettings {
    pub max_body_bytes: usize,
    /// A webhook for a payment we do not know yet gets 503 while younger than this, then is parked.
    pub unknown_payment_window: Duration,
    pub lease_attempts: u32,
    pub lease_max_wait: Duration,
    /// A delivery signed this long after its event was created is a redelivery (the PSP's retry, or a
    /// resend): the payment is read first, and an event it already holds is answered from that one read.
    pub redelivery_after: Duration,
}

impl Default for IntakeSettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 256 * 1024,
            unknown_payment_window: Duration::from_secs(15 * 60),
            lease_attempts: 4,
            lease_max_wait: Duration::from_millis(100),
            redelivery_after: Duration::from_secs(60),
        }
    }
}

impl IntakeSettings {
    /// `WEBHOOK_MAX_BODY_BYTES`, `UNKNOWN_PAYMENT_WINDOW_SECONDS`, `LEASE_WAIT_ATTEMPTS`, `LEASE_WAIT_MAX_MS`,
    /// `WEBHOOK_REDELIVERY_AFTER_SECONDS`.
    pub fn from(env: &Env) -> Result<Self, shared::ConfigError> {
        let d = Self::default();
        Ok(Self {
            max_body_bytes: env.number("WEBHOOK_MAX_BODY_BYTES", d.max_body_bytes)?,
            unknown_payment_window: env.seconds("UNKNOWN_PAYMENT_WINDOW_SECONDS", d.unknown_payment_window)?,
            lease_attempts: env.number("LEASE_WAIT_ATTEMPTS", d.lease_attempts)?,
            lease_max_wait: env.millis("LEASE_WAIT_MAX_MS", d.lease_max_wait)?,
            redelivery_after: env.seconds("WEBHOOK_REDELIVERY_AFTER_SECONDS", d.redelivery_after)?,
        })
    }
}

/// Everything the handler needs, built once per cold start.
#[derive(Debug, Clone)]
pub struct App {
    pub store: PaymentStore,
    pub leases: Leases,
    /// The providers and their secrets, re-read after a TTL or a failed signature (see `providers`).
    pub providers: ProviderSource,
    pub settings: IntakeSettings,
}

impl App {
    /// Builds the app from the environment once per cold start: the providers' secrets are read here
    /// (Secrets Manager or `WEBHOOK_SECRETS`), and from Secrets Manager again only when the cached copy is
    /// 5 minutes old or a signature fails (at most every 30 s), never per request.
    pub async fn from_env(
        sdk: &aws_config::SdkConfig,
        client: shared::aws::DynamoDbClient,
        config: &shared::Config,
        env: &Env,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self {
            store: PaymentStore::new(client.clone(), &config.table_name),
            leases: Leases::new(client, &config.table_name, config.lease),
            providers: ProviderSource::from_env(sdk, env).await?,
            settings: IntakeSettings::from(env)?,
        })
    }
}

/// Handles one webhook and emits its metrics record.
pub async fn handle(app: &App, req: Request) -> Result<Response<Body>, lambda_http::Error> {
    let (response, metrics) = process(app, req).await;
    metrics.emit();
    telemetry::flush();
    Ok(response)
}

/// Handles one webhook; returns the answer and the metrics record (tests read both).
pub async fn process(app: &App, req: Request) -> (Response<Body>, RequestMetrics) {
    let correlation_id = http::correlation_id(&req);
    // The caller's trace (a PSP rarely sends one), else the invocation's X-Ray trace.
    let parent = http::trace_context(&req).or_else(telemetry::invocation_trace_header);
    let span = telemetry::span_with_parent("webhook", correlation_id.as_str(), parent.as_deref());
    let mut metrics = RequestMetrics::default();
    let result = intake(app, &req, correlation_id, &mut metrics).instrument(span).await;
    let response = match result {
        Ok(answer) => {
            metrics.result = answer.to_owned();
            http::json(StatusCode::OK, &json!({ "result": answer }))
        }
        Err(error) => {
            metrics.result = error.code.to_owned();
            error.into_response()
        }
    };
    metrics.status = response.status().as_u16();
    (response, metrics)
}

/// The intake's one route (as in `infra/template.yaml`); the provider is a path parameter.
fn table() -> Result<Router<()>, RouteTableError> {
    Router::builder()
        .route(Method::POST, "/webhooks/{provider}", ())
        .build()
}

#[expect(
    clippy::expect_used,
    reason = "a constant table; the unit test `provider_from_path` builds it"
)]
static ROUTER: LazyLock<Router<()>> = LazyLock::new(|| table().expect("the webhook route table is consistent"));

/// The `{provider}` of `POST /webhooks/{provider}`; a 404 or 405 for any other request.
fn provider_name(method: &Method, path: &str) -> Result<String, ApiError> {
    Ok(ROUTER.at(method, path)?.param("provider").to_owned())
}

fn retry_later(message: &str) -> ApiError {
    ApiError::unavailable(message, 5)
}

/// The four steps of a webhook: verify the signature, parse the event, take the payment's lease with a read
/// of the payment (a redelivery reads first, and may end there), and apply the event through the one
/// finalize. A step that ends the request early (an acknowledged type, a quarantine, an unknown payment, an
/// event already applied) answers from inside it.
async fn intake(
    app: &App,
    req: &Request,
    correlation_id: shared::CorrelationId,
    metrics: &mut RequestMetrics,
) -> Result<&'static str, ApiError> {
    let name = &provider_name(req.method(), req.uri().path())?;
    let body = http::body_bytes(req);
    let (providers, signed_at) = verified(app, req, name, body, metrics).await?;
    let provider = providers.get(name).ok_or_else(|| unknown_provider(name))?;
    let event = match parsed(app, req, provider, body, signed_at, metrics).await? {
        Next::Go(event) => event,
        Next::Answer(answer) => return Ok(answer),
    };
    let observation = event.observation(event.check(&provider.expect).err(), correlation_id);
    let step = if is_redelivery(&app.settings, &event, signed_at) {
        read_first(app, provider, &event, &observation, body, metrics).await?
    } else {
        leased(app, provider, &event, body, metrics).await?
    };
    let (lease, current) = match step {
        Next::Go(held) => held,
        Next::Answer(answer) => return Ok(answer),
    };
    applied(app, provider, &event, lease, current, observation, body, metrics).await
}

/// Signed well after the event was created: the PSP's retry of an earlier delivery, or a resend.
fn is_redelivery(settings: &IntakeSettings, event: &PspEvent, signed_at: i64) -> bool {
    let late_by = signed_at.saturating_sub(event.created_secs);
    u64::try_from(late_by).is_ok_and(|secs| secs >= settings.redelivery_after.as_secs())
}

/// Where a step leaves the request: on to the next step with `T`, or answered with this result.
enum Next<T> {
    Go(T),
    Answer(&'static str),
}

fn unknown_provider(name: &str) -> ApiError {
    ApiError::not_found(format!("unknown provider {name}"))
}

/// Step 1: the body's size, then the signature over the exact raw bytes (lambda_http decoded a base64 body
/// already); the providers the signature was checked with, and the signing time.
async fn verified(
    app: &App,
    req: &Request,
    name: &str,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<(Arc<Providers>, i64), ApiError> {
    let mut providers = app.providers.current().await;
    metrics.provider = providers.get(name).ok_or_else(|| unknown_provider(name))?.name.clone();
    if body.len() > app.settings.max_body_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("body over {} bytes", app.settings.max_body_bytes),
        ));
    }
    if body.is_empty() {
        return Err(ApiError::bad_request("empty body: not a webhook"));
    }
    let verify_span = telemetry::step_span("verify");
    let loaded = providers.get(name).ok_or_else(|| unknown_provider(name))?;
    let verified = match verify_span.in_scope(|| verify(loaded, req, body)) {
        // No loaded secret matches: the PSP may have rotated. Read the secrets again (rate-limited) and
        // retry once with them, so a rotation does not wait for the next cold start.
        Err(SignatureError::NoMatch) => match app.providers.refresh_after_failed_signature().await {
            Some(fresh) => {
                providers = fresh;
                let reloaded = providers.get(name).ok_or_else(|| unknown_provider(name))?;
                verify_span.in_scope(|| verify(reloaded, req, body))
            }
            None => Err(SignatureError::NoMatch),
        },
        other => other,
    };
    match verified {
        Ok(signed_at) => Ok((providers, signed_at)),
        Err(e) => {
            metrics.unauthorized = 1;
            warn!(provider = %name, error = %ErrorChain(&e), "webhook signature refused");
            Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string()))
        }
    }
}

/// Step 2: the event in our terms; what we cannot read is quarantined, what we do not handle acknowledged.
async fn parsed(
    app: &App,
    req: &Request,
    provider: &Provider,
    body: &[u8],
    signed_at: i64,
    metrics: &mut RequestMetrics,
) -> Result<Next<Box<PspEvent>>, ApiError> {
    let parsed = match provider.scheme {
        Scheme::Stripe => stripe::parse(body),
        Scheme::Standard => standard::parse(body, http::header(req, "webhook-id").unwrap_or_default(), signed_at),
    };
    match parsed {
        Ok(Parsed::Event(event)) => Ok(Next::Go(event)),
        Ok(Parsed::Ignored { event_type }) => {
            info!(event_type, "event type not handled; acknowledged");
            Ok(Next::Answer("ignored"))
        }
        Err(unparseable) => {
            metrics.quarantines = 1;
            let key = quarantine_key(http::header(req, "webhook-id"), body);
            app.store
                .park(
                    ParkedKind::Quarantined,
                    &provider.name,
                    &key,
                    &unparseable.0,
                    &redact(body),
                )
                .await?;
            warn!(reason = %unparseable.0, "signed but unparseable webhook quarantined");
            Ok(Next::Answer("quarantined"))
        }
    }
}

/// Step 3: find the payment, then take its lease and read it at once (two calls side by side); the lease
/// is held from here, released on every way out, the failed read's included.
async fn leased(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Next<(HeldLease, Payment)>, ApiError> {
    let Some(payment_id) = locate(app, event).await? else {
        return unknown_payment(app, provider, event, body, metrics)
            .await
            .map(Next::Answer);
    };
    telemetry::record_payment(&tracing::Span::current(), payment_id.as_str());
    let (lease, current) = tokio::join!(
        take_lease(app, event, &payment_id, metrics),
        app.store.get(&payment_id).instrument(telemetry::step_span("read")),
    );
    // A lease taken while the read failed is released as it drops.
    let (lease, current) = (lease?, current?);
    let Some(current) = current else {
        if let Err(e) = lease.release().await {
            warn!(error = %ErrorChain(&e), "lease release failed; it will expire");
        }
        return unknown_payment(app, provider, event, body, metrics)
            .await
            .map(Next::Answer);
    };
    Ok(Next::Go((lease, current)))
}

/// Step 3 of a redelivery: most are retries of events already applied, so the payment is read first and
/// such an event (or one the payment has moved past) is answered from that read alone: one call, no lease.
/// Otherwise the lease is taken and the read reused; the versioned write catches a change in between.
async fn read_first(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    observation: &Observation,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Next<(HeldLease, Payment)>, ApiError> {
    let found = match locate(app, event).await? {
        Some(payment_id) => {
            telemetry::record_payment(&tracing::Span::current(), payment_id.as_str());
            app.store
                .get(&payment_id)
                .instrument(telemetry::step_span("read"))
                .await?
        }
        None => None,
    };
    let Some(current) = found else {
        return unknown_payment(app, provider, event, body, metrics)
            .await
            .map(Next::Answer);
    };
    // The payment's record only moves forward: an event it holds, or has moved past, stays so.
    if let Decision::Ignore(reason) = decide(&current, observation, clock::now_ms()) {
        let result = FinalizeResult::Ignored(reason);
        info!(result = ?result, conflicts = 0, psp_event_id = %event.id, redelivery = true, "webhook finalized");
        return answer(result).map(Next::Answer);
    }
    let lease = take_lease(app, event, &current.id, metrics).await?;
    Ok(Next::Go((lease, current)))
}

/// The payment's lease, waited for a little; still held by another worker, a 503 the PSP retries.
async fn take_lease(
    app: &App,
    event: &PspEvent,
    payment_id: &PaymentId,
    metrics: &mut RequestMetrics,
) -> Result<HeldLease, ApiError> {
    let acquired = app
        .leases
        .acquire_waiting(payment_id, app.settings.lease_attempts, app.settings.lease_max_wait)
        .instrument(telemetry::step_span("lease"))
        .await?;
    match acquired {
        Some(lease) => Ok(app.leases.hold(lease)),
        None => {
            metrics.lease_deferrals = 1;
            // A 503 writes no item: this line is its only record (`paymentsctl timeline` reads it).
            info!(result = "Deferred(LeaseHeld)", psp_event_id = %event.id, "webhook deferred: the payment's lease is held");
            Err(retry_later("another worker is processing this payment; retry"))
        }
    }
}

/// Step 4: check the event against the endpoint, then the one finalize, which checks it against the payment
/// and releases the lease in its transaction; an event the payment refuses is recorded and quarantined.
#[allow(clippy::too_many_arguments)] // the request's parts, each step's result: one call site, above
async fn applied(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    lease: HeldLease,
    current: Payment,
    mut observation: Observation,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<&'static str, ApiError> {
    let finalize_span = telemetry::step_span("finalize");
    // The event item carries the finalize step's context: the relay and the consumer continue this trace.
    observation.trace_context = telemetry::traceparent_of(&finalize_span);
    let outcome = match app
        .store
        .finalize_from(current, &observation, Some(lease.lease()))
        .instrument(finalize_span)
        .await
    {
        Ok(outcome) => {
            if outcome.lease_released {
                lease.released_by_write();
            }
            // Otherwise (the lease was taken over meanwhile) `lease` tries once more when dropped.
            outcome
        }
        Err(e) => {
            // Free the payment for the PSP's retry now rather than when the lease expires (best effort:
            // if DynamoDB is down, the lease expires by itself).
            if let Err(release) = lease.release().await {
                warn!(error = %ErrorChain(&release), "lease release after a failed finalize failed; it will expire");
            }
            return Err(if e.is_transient() {
                retry_later("storage is temporarily unavailable; retry")
            } else {
                e.into()
            });
        }
    };
    metrics.version_conflicts = outcome.version_conflicts;
    if let Some(reason) = &outcome.refused {
        metrics.anomalies = 1;
        metrics.quarantines = 1;
        app.store
            .park(
                ParkedKind::Quarantined,
                &provider.name,
                event.id.as_str(),
                reason,
                &redact(body),
            )
            .await?;
        warn!(
            reason,
            "webhook inconsistent with the payment: anomaly recorded, not applied"
        );
        return Ok("quarantined");
    }
    info!(result = ?outcome.result, conflicts = outcome.version_conflicts, psp_event_id = %event.id, "webhook finalized");
    if outcome.result == FinalizeResult::Applied(shared::EventKind::AnomalyRecorded) {
        metrics.anomalies = 1;
    }
    answer(outcome.result)
}

/// What the PSP is told of a finalize's result.
fn answer(result: FinalizeResult) -> Result<&'static str, ApiError> {
    match result {
        FinalizeResult::Applied(_) => Ok("applied"),
        FinalizeResult::Ignored(IgnoreReason::Duplicate | IgnoreReason::NoOp) => Ok("duplicate"),
        FinalizeResult::Ignored(IgnoreReason::Stale) => Ok("stale"),
        FinalizeResult::Deferred(reason) => Err(retry_later(&format!("cannot apply yet ({reason:?}); retry later"))),
    }
}

fn verify(provider: &Provider, req: &Request, body: &[u8]) -> Result<i64, crate::signature::SignatureError> {
    let signed = SignedRequest {
        stripe_signature: http::header(req, "stripe-signature"),
        webhook_id: http::header(req, "webhook-id"),
        webhook_timestamp: http::header(req, "webhook-timestamp"),
        webhook_signature: http::header(req, "webhook-signature"),
        body,
    };
    let now = clock::now_ms() / 1000;
    match provider.scheme {
        Scheme::Stripe => verify_stripe(&signed, &provider.secrets, now, provider.tolerance_secs),
        Scheme::Standard => verify_standard(&signed, &provider.secrets, now, provider.tolerance_secs),
    }
}

async fn locate(app: &App, event: &PspEvent) -> Result<Option<PaymentId>, StoreError> {
    if let Some(id) = &event.target.payment_id {
        return Ok(Some(id.clone()));
    }
    match &event.target.psp_reference {
        Some(reference) => app.store.find_by_psp_reference(reference).await,
        None => Ok(None),
    }
}

/// The webhook outran the payment's creation: 503 while the event is young (the PSP retries), then parked
/// and acknowledged, because PSPs disable endpoints that keep failing.
async fn unknown_payment(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<&'static str, ApiError> {
    let age_secs = (clock::now_ms() / 1000).saturating_sub(event.created_secs);
    let age = Duration::from_secs(u64::try_from(age_secs).unwrap_or(0));
    if age < app.settings.unknown_payment_window {
        // No payment id on the request span yet: the line names what the event does (`paymentsctl timeline`).
        info!(result = "Deferred(UnknownPayment)", psp_event_id = %event.id, target = ?event.target, "webhook deferred: payment not known yet");
        return Err(retry_later("payment not known yet; retry"));
    }
    metrics.unknown_payments = 1;
    let reason = format!("no payment for {:?} after {} s", event.target, age.as_secs());
    app.store
        .park(
            ParkedKind::UnknownPayment,
            &provider.name,
            event.id.as_str(),
            &reason,
            &redact(body),
        )
        .await?;
    warn!(reason, "webhook for an unknown payment parked");
    Ok("unknown_payment")
}

/// The key a quarantined delivery is parked under: its `webhook-id` when that is a valid event id (bounded,
/// plain characters), else a hash of the body. So two deliveries never overwrite each other unless they are
/// the same (a PSP's retry), and no header can make the sort key too long.
fn quarantine_key(webhook_id: Option<&str>, body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    match webhook_id.and_then(|id| shared::PspEventId::parse(id).ok()) {
        Some(id) => id.to_string(),
        None => format!("sha256-{}", hex::encode(Sha256::digest(body))),
    }
}

#[cfg(test)]
mod tests {
    use super::{provider_name, quarantine_key, table};
    use lambda_http::http::Method;

    #[test]
    fn quarantine_keys_are_per_delivery_and_bounded() {
        assert_eq!(quarantine_key(Some("msg_1"), b"{}"), "msg_1");
        let (a, b) = (quarantine_key(None, b"{\"a\":1}"), quarantine_key(None, b"{\"a\":2}"));
        assert_ne!(a, b, "two bodies signed in the same second are two keys");
        assert_eq!(
            a,
            quarantine_key(None, b"{\"a\":1}"),
            "a retry of the same body is the same key"
        );
        let huge = "x".repeat(4096);
        let key = quarantine_key(Some(&huge), b"{}");
        assert!(key.starts_with("sha256-") && key.len() == 71, "{key}");
    }

    #[test]
    fn provider_from_path() {
        assert!(table().is_ok());
        let post = |path| provider_name(&Method::POST, path);
        assert_eq!(post("/webhooks/stripe").unwrap(), "stripe");
        assert_eq!(post("/prod/webhooks/standard/").unwrap(), "standard");
        assert_eq!(post("/webhooks").unwrap_err().status, 404);
        assert_eq!(post("/webhooks/stripe/extra").unwrap_err().status, 404);
        assert_eq!(post("/payments").unwrap_err().status, 404);
        let get = provider_name(&Method::GET, "/webhooks/stripe").unwrap_err();
        assert_eq!((get.status.as_u16(), get.allow.as_deref()), (405, Some("POST")));
    }
}
