//! The request flows. Each reads like the steps it takes; errors become JSON answers in one place.

use crate::requests::{CreatePayment, SyncResult};
use crate::routes::PaymentsApiRoute;
use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::{Body, Request, Response};
use serde::Serialize;
use shared::http::{self, ApiError, CallerGuard};
use shared::lambda::{BuildError, Clients};
use shared::store::Created;
use shared::{
    clock, telemetry, ClientView, Config, ConfigError, CorrelationId, Env, IdempotencyKey, KnownPsps, PaymentEvent,
    PaymentId, PaymentStore,
};
use tracing::Instrument;

/// The payments API's settings, read once per cold start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `TABLE_NAME` and the lease settings.
    pub config: Config,
    /// The PSPs a payment may be created for: Stripe and the PSPs of `WEBHOOK_PROVIDERS` (the intake's
    /// endpoints; unset: the intake's default, Stripe and `standard`).
    pub providers: KnownPsps,
    /// `ORCHESTRATOR_ROLE_ARN`: the only caller allowed (unset: every caller the API let through).
    pub guard: CallerGuard,
}

impl Settings {
    /// Reads the settings from `env` (see the type); a missing or malformed one fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let providers = match env.optional("WEBHOOK_PROVIDERS") {
            Some(json) => KnownPsps::from_webhook_providers(&json).map_err(|why| ConfigError::Invalid {
                name: "WEBHOOK_PROVIDERS",
                expected: "a JSON list of {\"name\", \"scheme\"} naming valid providers",
                value: why,
            })?,
            None => KnownPsps::default(),
        };
        let guard = CallerGuard::from_env(env)?;
        Ok(Self {
            config: Config::from_env(env)?,
            providers,
            guard,
        })
    }
}

/// What the handler needs, built once per cold start ([`App::build`]).
#[derive(Debug, Clone)]
pub struct App {
    pub store: PaymentStore,
    /// The PSPs a payment may be created for ([`Settings::providers`]).
    pub providers: KnownPsps,
    /// Who may call ([`Settings::guard`]); `serve_guarded` answers everyone else.
    pub guard: CallerGuard,
}

impl App {
    /// The app from its settings, on `clients`' DynamoDB client.
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        Ok(Self {
            store: PaymentStore::new(
                clients.dynamodb,
                &settings.config.table_name,
                settings.config.open_shards,
            ),
            providers: settings.providers.clone(),
            guard: settings.guard.clone(),
        })
    }
}

/// Handles one API request. Never fails: every error is an answer with a JSON body.
pub async fn handle(app: &App, req: Request) -> Result<Response<Body>, lambda_http::Error> {
    let correlation_id = http::correlation_id(&req);
    // In Lambda the invocation's segment (which continues the caller's trace), else the caller's trace.
    let caller = http::trace_context(&req);
    let span = telemetry::span_with_parent("sync", correlation_id.as_str(), caller.as_deref());
    let mut response = async {
        http::check_body_size(&req)?;
        let route = PaymentsApiRoute::parse(req.method(), req.uri().path())?;
        match &route {
            PaymentsApiRoute::SyncResult(id) | PaymentsApiRoute::Get(id) | PaymentsApiRoute::Events(id) => {
                telemetry::record_payment(&tracing::Span::current(), id.as_str())
            }
            PaymentsApiRoute::Create => {}
        }
        match route {
            PaymentsApiRoute::Create => create(app, &req, correlation_id.clone()).await,
            PaymentsApiRoute::SyncResult(id) => sync_result(app, &req, &id, correlation_id.clone()).await,
            PaymentsApiRoute::Get(id) => get(app, &id).await,
            PaymentsApiRoute::Events(id) => events(app, &id).await,
        }
    }
    .instrument(span)
    .await
    .unwrap_or_else(ApiError::into_response);
    if let Ok(value) = HeaderValue::from_str(correlation_id.as_str()) {
        response.headers_mut().insert("x-correlation-id", value);
    }
    Ok(response)
}

async fn create(app: &App, req: &Request, correlation_id: CorrelationId) -> Result<Response<Body>, ApiError> {
    let key = http::header(req, "idempotency-key")
        .ok_or_else(|| ApiError::bad_request("the Idempotency-Key header is required"))?;
    let key = IdempotencyKey::parse(key).map_err(|e| ApiError::bad_request(format!("Idempotency-Key: {e}")))?;
    let request: CreatePayment = http::parse_json(http::body_bytes(req))?;
    let fingerprint = request.fingerprint();
    let new = request.into_new_payment(
        &app.providers,
        correlation_id,
        http::trace_context(req),
        clock::now_ms(),
    )?;
    let (status, payment) = match app.store.create_idempotent(new, &key, &fingerprint).await? {
        Created::New(payment) => (StatusCode::CREATED, payment),
        Created::Replay(payment) => (StatusCode::OK, payment),
        Created::KeyReused => {
            return Err(ApiError::unprocessable(
                "this Idempotency-Key was used with a different request body; use a new key for a new payment",
            ))
        }
    };
    telemetry::record_payment(&tracing::Span::current(), payment.id.as_str());
    tracing::info!(status = status.as_u16(), "payment created or replayed");
    let mut response = http::json(status, &ClientView::from(&payment));
    if let Ok(location) = HeaderValue::from_str(&format!("/payments/{}", payment.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

async fn sync_result(
    app: &App,
    req: &Request,
    id: &PaymentId,
    correlation_id: CorrelationId,
) -> Result<Response<Body>, ApiError> {
    let result: SyncResult = http::parse_json(http::body_bytes(req))?;
    let observation = result.into_observation(correlation_id, http::trace_context(req))?;
    let current = app
        .store
        .get(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("payment {id} not found")))?;
    if let Some(named) = &observation.psp_reference {
        // Another PSP's reference would have recovery ask the wrong PSP (invariant 13).
        current
            .provider
            .check_reference(named)
            .map_err(|e| ApiError::conflict(format!("payment {id} belongs to {}: {e}", current.provider)))?;
    }
    if let (Some(bound), Some(named)) = (&current.psp_reference, &observation.psp_reference) {
        if bound != named {
            return Err(ApiError::conflict(format!(
                "the sync result names PSP payment {named}, but payment {id} is bound to {bound}"
            )));
        }
    }
    let outcome = app.store.finalize_from(current, &observation, None).await?;
    tracing::info!(result = ?outcome.result, conflicts = outcome.version_conflicts, "sync result finalized");
    // Built from the latest item: the one we wrote, or the winner's after a conflict.
    Ok(http::json(StatusCode::OK, &ClientView::from(&outcome.payment)))
}

async fn get(app: &App, id: &PaymentId) -> Result<Response<Body>, ApiError> {
    let payment = app
        .store
        .get(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("payment {id} not found")))?;
    Ok(http::json(StatusCode::OK, &ClientView::from(&payment)))
}

/// One step of the payment's history as the API shows it.
#[derive(Serialize)]
struct PaymentEventView<'a> {
    version: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    status: shared::PaymentStatus,
    previous_status: Option<shared::PaymentStatus>,
    path: shared::Channel,
    recorded_at: String,
    correlation_id: &'a str,
    psp_event_id: Option<&'a str>,
    reason: Option<&'a str>,
    refunded_minor: u64,
}

impl<'a> From<&'a PaymentEvent> for PaymentEventView<'a> {
    fn from(e: &'a PaymentEvent) -> Self {
        let since_epoch = std::time::Duration::from_millis(u64::try_from(e.recorded_at_ms).unwrap_or(0));
        let at = std::time::UNIX_EPOCH
            .checked_add(since_epoch)
            .unwrap_or(std::time::UNIX_EPOCH);
        PaymentEventView {
            version: e.version,
            kind: e.kind.as_str(),
            status: e.status,
            previous_status: e.previous_status,
            path: e.path,
            recorded_at: humantime::format_rfc3339_millis(at).to_string(),
            correlation_id: e.correlation_id.as_str(),
            psp_event_id: e.psp_event_id.as_ref().map(|id| id.as_str()),
            reason: e.reason.as_deref(),
            refunded_minor: e.refunded_minor,
        }
    }
}

async fn events(app: &App, id: &PaymentId) -> Result<Response<Body>, ApiError> {
    let events = app.store.events(id).await?;
    if events.is_empty() {
        return Err(ApiError::not_found(format!("payment {id} not found")));
    }
    let views: Vec<PaymentEventView> = events.iter().map(PaymentEventView::from).collect();
    Ok(http::json(
        StatusCode::OK,
        &serde_json::json!({ "payment_id": id, "events": views }),
    ))
}
