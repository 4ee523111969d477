//! `POST /webhooks/{provider}`: verify, parse, map to an observation, read the payment, take its lease at the
//! version read, check the event against the payment, finalize through the shared decision and write (which
//! frees the lease by moving the version past it), answer.
//!
//! The read comes first because the lease's condition needs the version (see `shared::lease`); a read
//! stale by the time the lease is ours (a holder wrote in between) makes the versioned write conflict, and
//! the decision is taken again from the item that won.
//!
//! This module holds the request's flow and its first two steps (verified, parsed); `crate::admission` the
//! admission every scheme shares, `crate::payment` the two steps on the payment (leased or read first,
//! finalized), `crate::answer` what the request is answered.

mod fetched;

pub use fetched::{apply_fetched, apply_unsigned, Unsigned};

use crate::admission::admitted;
use crate::answer::{unknown_provider, Answer, Flow};
use crate::app::{App, IntakeSettings};
use crate::metrics::RequestMetrics;
use crate::payment::on_payment_with;
use crate::providers::{Provider, Providers, Scheme};
use crate::psp_event::{Parsed, PspEvent};
use crate::{redact::redact, standard, stripe};
use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use shared::http::{self, ApiError};
use shared::router::{RouteTableError, Router};
use shared::store::{recheck, ParkedKind};
use shared::telemetry::ErrorChain;
use shared::{clock, telemetry};
use std::sync::{Arc, LazyLock};
use stripe::thin::Thin;
use tracing::{info, warn, Instrument};
use webhook_signatures::{verify_standard, verify_stripe, SignatureError, SignedRequest};

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
    // In Lambda the invocation's segment (which continues API Gateway's trace), else the caller's trace.
    let caller = http::trace_context(&req);
    let span = telemetry::span_with_parent("webhook", correlation_id.as_str(), caller.as_deref());
    let mut metrics = RequestMetrics::default();
    let result = intake(app, &req, correlation_id, &mut metrics).instrument(span).await;
    let response = match result {
        Ok(answer) => {
            metrics.result = answer.as_str().to_owned();
            answer.into_response()
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

/// Every (method, path pattern) of this function's route table: what API Gateway must route to it
/// (`tests/tests/it/openapi.rs` compares them with `infra/openapi.yaml` and the template's HttpApi events).
pub fn route_table() -> &'static [(Option<Method>, String)] {
    ROUTER.routes()
}

/// The `{provider}` of `POST /webhooks/{provider}`; a 404 or 405 for any other request.
fn provider_name(method: &Method, path: &str) -> Result<String, ApiError> {
    Ok(ROUTER.at(method, path)?.param("provider").to_owned())
}

/// The four steps of a webhook: verify the signature, parse the event, read the payment and take its lease
/// at the version read (a redelivery may end at the read), and apply the event through the one
/// finalize. A step that ends the request early (an acknowledged type, a quarantine, an unknown payment, an
/// event already applied) answers from inside it.
async fn intake(
    app: &App,
    req: &Request,
    correlation_id: shared::CorrelationId,
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let name = &provider_name(req.method(), req.uri().path())?;
    // Adyen signs each item of a batch, not the request: its own steps, the same ones on the payment.
    if (app.providers.current().await.get(name)).is_some_and(|p| p.scheme == Scheme::Adyen) {
        return crate::adyen::intake(app, req, name, correlation_id, metrics).await;
    }
    let body = http::body_bytes(req);
    let (providers, signed_at) = verified(app, req, name, body, metrics).await?;
    let provider = providers.get(name).ok_or_else(|| unknown_provider(name))?;
    if let Some(thin) = (provider.scheme == Scheme::Stripe)
        .then(|| stripe::thin::parse(body))
        .flatten()
    {
        return thin_event(app, provider, thin, body, metrics).await;
    }
    let event = match parsed(app, req, provider, body, signed_at, metrics).await? {
        Flow::Go(event) => event,
        Flow::Answered(answer) => return Ok(answer),
    };
    let redelivery = is_redelivery(&app.settings, &event, signed_at);
    on_payment(app, provider, &event, redelivery, correlation_id, body, metrics).await
}

/// Steps 3 and 4, shared with the catch-up's events ([`apply_fetched`]): check the event against the
/// endpoint, read the payment and take its lease (a redelivery may end at the read), apply.
async fn on_payment(
    app: &App,
    provider: &Provider,
    event: &PspEvent,
    redelivery: bool,
    correlation_id: shared::CorrelationId,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let observation = event.observation(event.check(&provider.expect).err(), correlation_id);
    on_payment_with(app, provider, event, observation, redelivery, body, metrics).await
}

/// Signed well after the event was created: the PSP's retry of an earlier delivery, or a resend.
fn is_redelivery(settings: &IntakeSettings, event: &PspEvent, signed_at: i64) -> bool {
    let late_by = signed_at.saturating_sub(event.created_secs);
    u64::try_from(late_by).is_ok_and(|secs| secs >= settings.redelivery_after.as_secs())
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
    let mut providers = admitted(app, name, body, metrics).await?;
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
) -> Result<Flow<Box<PspEvent>>, ApiError> {
    // The quarantine key comes only from what the signature covers: Stripe does not sign `webhook-id`.
    let webhook_id = http::header(req, "webhook-id");
    let (parsed, signed_id) = match provider.scheme {
        Scheme::Stripe => (stripe_parsed(body, metrics), body_event_id(body)),
        Scheme::Standard => {
            match standard::parse(body, webhook_id.unwrap_or_default(), signed_at, provider.tolerance_secs) {
                Ok(parsed) => (Ok(parsed), None),
                Err(standard::Refused::Created(why)) => {
                    // A 400 writes nothing: this line is its only record (the sender's integration must change).
                    warn!(provider = %provider.name, reason = %why, "Standard Webhooks event refused: no usable created");
                    return Err(ApiError::bad_request(why));
                }
                Err(standard::Refused::Unparseable(e)) => (Err(e), webhook_id.map(str::to_owned)),
            }
        }
        Scheme::Adyen => (
            Err(crate::psp_event::Unparseable(
                "an Adyen notification is read item by item".into(),
            )),
            None,
        ),
    };
    triaged(app, provider, parsed, signed_id.as_deref(), body, metrics).await
}

/// A Stripe body parsed, whichever way it came (webhook, Events API, EventBridge), with its API version
/// noted: counted and logged when it is not the pinned one (`stripe::version`).
pub(crate) fn stripe_parsed(
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Parsed, crate::psp_event::Unparseable> {
    metrics.version_mismatches = stripe::version::note(body);
    stripe::parse(body)
}

/// A Stripe body's own event `id` (signed with it), if it has one at its top level.
fn body_event_id(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct WithId {
        id: String,
    }
    serde_json::from_slice::<WithId>(body).ok().map(|e| e.id)
}

/// What a parse leaves: an event to go on with, a type acknowledged, or a body quarantined (under its signed
/// event id when it has one, see [`quarantine_key`]).
async fn triaged(
    app: &App,
    provider: &Provider,
    parsed: Result<Parsed, crate::psp_event::Unparseable>,
    signed_id: Option<&str>,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Flow<Box<PspEvent>>, ApiError> {
    match parsed {
        Ok(Parsed::Event(event)) => Ok(Flow::Go(event)),
        Ok(Parsed::Ignored { event_type }) => {
            info!(event_type, "event type not handled; acknowledged");
            Ok(Flow::Answered(Answer::Ignored))
        }
        Err(unparseable) => quarantine(app, provider, &unparseable.0, signed_id, body, metrics)
            .await
            .map(Flow::Answered),
    }
}

/// Parks a validly signed body we cannot use (redacted, under its signed event id when it has one) and counts
/// it: `quarantined`.
async fn quarantine(
    app: &App,
    provider: &Provider,
    reason: &str,
    signed_id: Option<&str>,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    metrics.quarantines = 1;
    let key = quarantine_key(signed_id, body);
    app.store
        .park(ParkedKind::Quarantined, &provider.name, &key, reason, &redact(body))
        .await?;
    warn!(reason, "signed but unusable webhook quarantined");
    Ok(Answer::Quarantined)
}

/// A thin event (Stripe's API v2, from an event destination): an event-generation failure is handed to
/// recovery ([`recheck::record`]) before the 2xx, so a failed write is a 503 that Stripe retries and nothing
/// accepted is lost; its redelivery is a `duplicate`. Another v2 type is acknowledged; a body that is not a
/// thin event we can read, or of the other mode than the endpoint's, is quarantined.
async fn thin_event(
    app: &App,
    provider: &Provider,
    thin: Result<Thin, crate::psp_event::Unparseable>,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let signed_id = body_event_id(body);
    let (id, livemode) = match thin {
        Ok(Thin::GenerationFailure { id, livemode }) => (id, livemode),
        Ok(Thin::Ignored { event_type }) => {
            info!(event_type, "thin event type not handled; acknowledged");
            return Ok(Answer::Ignored);
        }
        Err(e) => return quarantine(app, provider, &e.0, signed_id.as_deref(), body, metrics).await,
    };
    if let Some(want) = provider.expect.livemode.filter(|want| livemode != Some(*want)) {
        let reason = format!("livemode {livemode:?} but this endpoint expects livemode {want}");
        return quarantine(app, provider, &reason, signed_id.as_deref(), body, metrics).await;
    }
    let recorded = recheck::record(
        app.store.client(),
        app.store.table(),
        app.store.open_shards(),
        &id,
        clock::now_ms(),
    )
    .await?;
    info!(event_id = %id, recorded, "Stripe failed to generate an event: recovery reads the object it names");
    Ok(if recorded { Answer::Queued } else { Answer::Duplicate })
}

fn verify(provider: &Provider, req: &Request, body: &[u8]) -> Result<i64, SignatureError> {
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
        // Routed to `crate::adyen` before this step: its items carry their signatures.
        Scheme::Adyen => Err(SignatureError::Missing("webhook per item (Adyen)")),
    }
}

/// The key a quarantined delivery is parked under: its event id from what the signature covers (the Standard
/// Webhooks `webhook-id`, a Stripe body's `id`) when that is a valid event id (bounded, plain characters),
/// else a hash of the body. An unsigned header (Stripe's requests may carry any `webhook-id`) never names
/// it, so one signed body cannot take another's key; the park itself keeps the first body under a key.
fn quarantine_key(signed_id: Option<&str>, body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    match signed_id.and_then(|id| shared::PspEventId::parse(id).ok()) {
        Some(id) => id.to_string(),
        None => format!("sha256-{}", hex::encode(Sha256::digest(body))),
    }
}

#[cfg(test)]
mod tests {
    use super::{body_event_id, provider_name, quarantine_key, table};
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
        // A Stripe body names itself; the key never comes from an unsigned header.
        assert_eq!(body_event_id(br#"{"id":"evt_9","type":"x"}"#).as_deref(), Some("evt_9"));
        assert_eq!(body_event_id(br#"{"id":7}"#), None);
        assert_eq!(body_event_id(b"not json"), None);
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
