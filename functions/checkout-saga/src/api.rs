//! The checkout API (IAM-authorized, called by the shop's backend):
//!
//! | route | does |
//! |---|---|
//! | `POST /checkouts` | starts the saga for an order and runs it until it waits for the payment (202, the saga) |
//! | `GET /checkouts/{order}` | the saga's state |
//! | `GET /checkouts/{order}/events` | the saga's log, oldest first (steps, failures, compensations) |
//! | `POST /checkouts/{order}/cancel` | the customer cancels a pending order (200; 409 once confirmed) |
//! | `POST /checkouts/{order}/details` | the shopper's return from Adyen's 3-D Secure redirect (`{"redirect_result": "..."}`): Adyen's `/payments/details`, an authorised payment captured (200, the saga) |
//! | `PUT /inventory/{sku}` | sets the available stock (`{"available": n}`, operations and seeding) |
//! | `GET /inventory/{sku}` | the available stock |
//!
//! A started saga is never lost: if running it fails after it was saved, the answer is still 202 with its
//! state, and the sweeper continues it. A start and a cancel run the saga only until the invocation's
//! deadline (less the answer's margin): a slow PSP gets the caller a 202 with the saved saga (or the 200 of
//! the recorded cancel), never a timeout's 5xx that a shop would take for "failed" while the sweeper later
//! charges.

use crate::inventory;
use crate::orders::{self, Cancel};
use crate::runner::{CheckoutPsp, RunError, Runner};
use crate::saga::{Checkout, InconsistentSaga, SagaEvent, SagaRecord, SagaStoreError};
use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use psp::set::PspRoute;
use psp::Psps;
use serde::{Deserialize, Serialize};
use shared::http::{self, ApiError};
use shared::router::{RouteTableError, Router};
use shared::telemetry::ErrorChain;
use shared::{text, Currency, Money, OrderId, Sku};
use std::sync::LazyLock;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{warn, Instrument};

/// `POST /checkouts`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartCheckout {
    pub order_id: String,
    pub sku: String,
    pub quantity: u32,
    pub amount_minor: u64,
    pub currency: String,
    pub payment_method: String,
    /// The PSP the checkout is charged through (`stripe` or `adyen`); without it the deployment's
    /// (`SAGA_PSP`).
    #[serde(default)]
    pub psp: Option<String>,
}

/// The longest Adyen `paymentMethod` a checkout takes: its client-side encrypted card fields are about a
/// kilobyte each (Stripe's `pm_...` ids: [`text::MAX_PAYMENT_METHOD_CHARS`]).
pub const MAX_ADYEN_PAYMENT_METHOD_CHARS: usize = 8192;

impl StartCheckout {
    /// The request for a checkout that goes to Stripe unless it names its PSP ([`StartCheckout::parse_for`]).
    pub fn parse(self) -> Result<(OrderId, Checkout), ApiError> {
        self.parse_for(CheckoutPsp::Stripe)
    }

    /// The order and checkout, charged through the request's PSP or else `default` (the deployment's), the
    /// payment method checked as that PSP takes it: a `pm_...` id for Stripe, Adyen's `paymentMethod` object
    /// (JSON with a `type`) for Adyen.
    pub fn parse_for(self, default: CheckoutPsp) -> Result<(OrderId, Checkout), ApiError> {
        let bad = |e: shared::DomainError| ApiError::bad_request(e.to_string());
        let psp = match self.psp.as_deref() {
            None => default,
            Some(name) => CheckoutPsp::parse(name).ok_or_else(|| ApiError::bad_request("psp: stripe or adyen"))?,
        };
        if self.quantity == 0 || self.quantity > 1000 {
            return Err(ApiError::bad_request("quantity must be between 1 and 1000"));
        }
        payment_method(&self.payment_method, psp)?;
        let money = Money::new(self.amount_minor, Currency::parse(&self.currency).map_err(bad)?).map_err(bad)?;
        Ok((
            OrderId::parse(self.order_id).map_err(bad)?,
            Checkout {
                sku: Sku::parse(self.sku).map_err(bad)?,
                quantity: self.quantity,
                money,
                payment_method: self.payment_method,
                psp: Some(psp),
            },
        ))
    }
}

/// The payment method as `psp` takes it.
fn payment_method(value: &str, psp: CheckoutPsp) -> Result<(), ApiError> {
    let bad = |e: shared::DomainError| ApiError::bad_request(e.to_string());
    match psp {
        CheckoutPsp::Stripe => text::check("payment_method", value, text::MAX_PAYMENT_METHOD_CHARS).map_err(bad),
        CheckoutPsp::Adyen => {
            text::check("payment_method", value, MAX_ADYEN_PAYMENT_METHOD_CHARS).map_err(bad)?;
            let typed = serde_json::from_str::<serde_json::Value>(value)
                .ok()
                .is_some_and(|m| m.get("type").is_some_and(serde_json::Value::is_string));
            if !typed {
                return Err(ApiError::bad_request(
                    "payment_method: Adyen's paymentMethod object (JSON with a type)",
                ));
            }
            Ok(())
        }
    }
}

/// The saga as the API shows it.
#[derive(Debug, Serialize)]
pub struct SagaView<'a> {
    pub order_id: &'a str,
    pub status: &'a str,
    pub version: u64,
    pub sku: &'a str,
    pub quantity: u32,
    pub amount_minor: u64,
    pub currency: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<&'a str>,
    pub customer_action: bool,
    pub captured: bool,
    /// The payment's status as the payment item holds it at the request (`GET` only): `authorized` (manual
    /// capture: the money held, not taken) apart from `captured`, and a lapsed or released authorization's end
    /// (`failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_status: Option<&'static str>,
    /// Why the payment's capture failed at the card scheme (Adyen's `CAPTURE_FAILED`), while no new capture
    /// came (`GET` only): a confirmed order whose money will not arrive (docs/WEBHOOKS.md says what to do).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_failed: Option<String>,
    pub refunded_minor: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<&'a str>,
    /// Why the captured money was not refunded (`refund impossible: disputed`), when the refund was refused
    /// for good.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refund_impossible: Option<&'a str>,
    pub started_at_ms: i64,
    pub updated_at_ms: i64,
}

impl<'a> From<&'a SagaRecord> for SagaView<'a> {
    fn from(r: &'a SagaRecord) -> Self {
        Self {
            order_id: r.order_id.as_str(),
            status: r.status.as_str(),
            version: r.version,
            sku: r.checkout.sku.as_str(),
            quantity: r.checkout.quantity,
            amount_minor: r.checkout.money.amount_minor(),
            currency: r.checkout.money.currency().to_string(),
            payment_id: r.payment_id.as_ref().map(|p| p.as_str()),
            customer_action: r.customer_action,
            captured: r.captured,
            payment_status: None,
            capture_failed: None,
            refunded_minor: r.refunded_minor,
            failed_step: r.failure.as_ref().map(|f| f.step.as_str()),
            failure: r.failure.as_ref().map(|f| f.reason.as_str()),
            refund_impossible: r.refund_impossible.as_deref(),
            started_at_ms: r.started_at_ms,
            updated_at_ms: r.updated_at_ms,
        }
    }
}

/// One step of the saga's history as the checkout API shows it.
#[derive(Debug, Serialize)]
struct SagaEventView<'a> {
    version: u64,
    #[serde(rename = "type")]
    kind: &'a str,
    step: &'a str,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
    at_ms: i64,
}

impl<'a> From<&'a SagaEvent> for SagaEventView<'a> {
    fn from(e: &'a SagaEvent) -> Self {
        Self {
            version: e.version,
            kind: e.kind.as_str(),
            step: e.step.as_str(),
            status: e.status.as_str(),
            detail: e.detail.as_deref(),
            at_ms: e.at_ms,
        }
    }
}

enum CheckoutApiRoute {
    Start,
    Get(OrderId),
    Events(OrderId),
    Cancel(OrderId),
    Details(OrderId),
    PutStock(Sku),
    GetStock(Sku),
}

/// The handlers, before the order id or sku is parsed.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Start,
    Get,
    Events,
    Cancel,
    Details,
    PutStock,
    GetStock,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetStock {
    available: u64,
}

/// The same table as the API's routes in `infra/template.yaml`.
fn table() -> Result<Router<Kind>, RouteTableError> {
    Router::builder()
        .route(Method::POST, "/checkouts", Kind::Start)
        .route(Method::GET, "/checkouts/{id}", Kind::Get)
        .route(Method::GET, "/checkouts/{id}/events", Kind::Events)
        .route(Method::POST, "/checkouts/{id}/cancel", Kind::Cancel)
        .route(Method::POST, "/checkouts/{id}/details", Kind::Details)
        .route(Method::PUT, "/inventory/{sku}", Kind::PutStock)
        .route(Method::GET, "/inventory/{sku}", Kind::GetStock)
        .build()
}

#[expect(
    clippy::expect_used,
    reason = "a constant table; the unit test `the_route_table_builds` builds it"
)]
static ROUTER: LazyLock<Router<Kind>> = LazyLock::new(|| table().expect("the checkout route table is consistent"));

/// Every (method, path pattern) of this function's route table: what API Gateway must route to it
/// (`tests/tests/it/openapi.rs` compares them with `infra/openapi.yaml` and the template's HttpApi events).
pub fn route_table() -> &'static [(Option<Method>, String)] {
    ROUTER.routes()
}

fn route(method: &Method, path: &str) -> Result<CheckoutApiRoute, ApiError> {
    let found = ROUTER.at(method, path)?;
    let id = || OrderId::parse(found.param("id")).map_err(|e| ApiError::bad_request(format!("invalid order id: {e}")));
    let sku = || Sku::parse(found.param("sku")).map_err(|e| ApiError::bad_request(format!("invalid sku: {e}")));
    Ok(match found.route {
        Kind::Start => CheckoutApiRoute::Start,
        Kind::Get => CheckoutApiRoute::Get(id()?),
        Kind::Events => CheckoutApiRoute::Events(id()?),
        Kind::Cancel => CheckoutApiRoute::Cancel(id()?),
        Kind::Details => CheckoutApiRoute::Details(id()?),
        Kind::PutStock => CheckoutApiRoute::PutStock(sku()?),
        Kind::GetStock => CheckoutApiRoute::GetStock(sku()?),
    })
}

/// Handles one API request. Never fails: every error is an answer with a JSON body.
pub async fn handle<P: Psps>(runner: &Runner<P>, req: Request) -> Result<Response<Body>, lambda_http::Error> {
    let correlation_id = http::correlation_id(&req);
    // The request span carries the order (the saga's id) on every line, as payment requests carry the payment;
    // in Lambda it starts under the invocation's segment (which continues the caller's trace).
    let span = tracing::info_span!(
        "request",
        path = "checkout",
        correlation_id = correlation_id.as_str(),
        order_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty
    );
    let span = shared::telemetry::in_request_trace(span, http::trace_context(&req).as_deref());
    Ok(async {
        http::check_body_size(&req)?;
        match route(req.method(), req.uri().path())? {
            CheckoutApiRoute::Start => start(runner, &req).await,
            CheckoutApiRoute::Get(id) => get(runner, &id).await,
            CheckoutApiRoute::Events(id) => events(runner, &id).await,
            CheckoutApiRoute::Cancel(id) => cancel(runner, &id, run_deadline(&req)).await,
            CheckoutApiRoute::Details(id) => details(runner, &req, &id).await,
            CheckoutApiRoute::PutStock(sku) => put_stock(runner, &req, &sku).await,
            CheckoutApiRoute::GetStock(sku) => get_stock(runner, &sku).await,
        }
    }
    .instrument(span)
    .await
    .unwrap_or_else(ApiError::into_response))
}

async fn get<P: Psps>(runner: &Runner<P>, id: &OrderId) -> Result<Response<Body>, ApiError> {
    let saga = match runner.sagas.load(id).await {
        Err(SagaStoreError::Inconsistent(e)) => return Err(needs_operator(runner, id, e).await),
        loaded => loaded.map_err(internal)?,
    };
    let saga = saga.ok_or_else(|| ApiError::not_found(format!("no checkout for order {id}")))?;
    let mut view = SagaView::from(saga.record());
    if let Some(payment) = &saga.record().payment_id {
        if let Some(payment) = runner.payment_now(payment).await.map_err(run_failed)? {
            view.payment_status = Some(payment.status.as_str());
            view.capture_failed = payment.capture_failed;
        }
    }
    Ok(http::json(StatusCode::OK, &view))
}

async fn events<P: Psps>(runner: &Runner<P>, id: &OrderId) -> Result<Response<Body>, ApiError> {
    let events = runner.sagas.events(id).await?;
    if events.is_empty() {
        return Err(ApiError::not_found(format!("no checkout for order {id}")));
    }
    let views: Vec<SagaEventView> = events.iter().map(SagaEventView::from).collect();
    Ok(http::json(StatusCode::OK, &views))
}

async fn cancel<P: Psps>(runner: &Runner<P>, id: &OrderId, deadline: Instant) -> Result<Response<Body>, ApiError> {
    match orders::cancel(runner.sagas.client(), runner.sagas.table(), id).await? {
        Cancel::Cancelled => {
            // Before the capture the PaymentIntent is canceled; after it, the payment is refunded. The order is
            // cancelled either way: a failure here, or the deadline, leaves the rest to the sweeper.
            let run = tokio::time::timeout_at(deadline, runner.cancel_by_customer(id))
                .await
                .unwrap_or(Err(RunError::OutOfTime));
            if let Err(e) = run {
                tracing::warn!(order_id = %id, error = %ErrorChain(&e), "cancel recorded; the saga finishes it later");
            }
            Ok(http::json(
                StatusCode::OK,
                &serde_json::json!({ "status": "cancelled" }),
            ))
        }
        Cancel::TooLate => Err(ApiError::conflict("the order is no longer pending")),
        Cancel::NotFound => Err(ApiError::not_found(format!("no order {id}"))),
    }
}

/// `POST /checkouts/{order}/details`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChallengeDetails {
    /// What Adyen's redirect brought back to the shop's return page (`redirectResult`).
    redirect_result: String,
}

/// The longest `redirectResult` taken (Adyen's are a few hundred characters).
const MAX_REDIRECT_RESULT_CHARS: usize = 4096;

/// The shopper is back from the 3-D Secure challenge: the saga finishes it at Adyen, until the invocation's
/// deadline (past it the saga is as the last completed step left it; Adyen's notification finishes it too).
async fn details<P: Psps>(runner: &Runner<P>, req: &Request, id: &OrderId) -> Result<Response<Body>, ApiError> {
    let body: ChallengeDetails = http::parse_json(http::body_bytes(req))?;
    text::check("redirect_result", &body.redirect_result, MAX_REDIRECT_RESULT_CHARS)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let run = tokio::time::timeout_at(run_deadline(req), runner.complete_challenge(id, &body.redirect_result))
        .await
        .unwrap_or(Err(RunError::OutOfTime));
    match run {
        Ok(Some(record)) => Ok(http::json(StatusCode::OK, &SagaView::from(&record))),
        Ok(None) => Err(ApiError::not_found(format!("no checkout for order {id}"))),
        Err(RunError::Saga(SagaStoreError::Inconsistent(e))) => Err(needs_operator(runner, id, e).await),
        Err(e) => {
            warn!(order_id = %id, error = %ErrorChain(&e), "challenge details not applied now");
            Err(run_failed(e))
        }
    }
}

async fn put_stock<P: Psps>(runner: &Runner<P>, req: &Request, sku: &Sku) -> Result<Response<Body>, ApiError> {
    let body: SetStock = http::parse_json(http::body_bytes(req))?;
    inventory::put_stock(runner.sagas.client(), runner.sagas.table(), sku, body.available).await?;
    Ok(http::json(
        StatusCode::OK,
        &serde_json::json!({ "sku": sku.as_str(), "available": body.available }),
    ))
}

async fn get_stock<P: Psps>(runner: &Runner<P>, sku: &Sku) -> Result<Response<Body>, ApiError> {
    let available = inventory::available(runner.sagas.client(), runner.sagas.table(), sku)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no stock item for {sku}")))?;
    Ok(http::json(
        StatusCode::OK,
        &serde_json::json!({ "sku": sku.as_str(), "available": available }),
    ))
}

async fn start<P: Psps>(runner: &Runner<P>, req: &Request) -> Result<Response<Body>, ApiError> {
    let request: StartCheckout = http::parse_json(http::body_bytes(req))?;
    let (order_id, checkout) = request.parse_for(runner.settings.new_checkouts)?;
    let psp = checkout.psp.unwrap_or(runner.settings.new_checkouts);
    if let PspRoute::Missing(_) = runner.psps.route(&psp.name()) {
        return Err(ApiError::bad_request(format!(
            "psp: this deployment does not charge through {}",
            psp.name()
        )));
    }
    tracing::Span::current().record("order_id", order_id.as_str());
    let run = tokio::time::timeout_at(run_deadline(req), runner.start(order_id.clone(), checkout))
        .await
        .unwrap_or(Err(RunError::OutOfTime));
    match run {
        Ok(record) => Ok(http::json(StatusCode::ACCEPTED, &SagaView::from(&record))),
        Err(RunError::Saga(SagaStoreError::Inconsistent(e))) => Err(needs_operator(runner, &order_id, e).await),
        Err(e) => {
            // Accepted sagas are never lost: answer their state; the sweeper continues them.
            if let Ok(Some(saga)) = runner.sagas.load(&order_id).await {
                warn!(order_id = %order_id, error = %ErrorChain(&e), "saga saved but not run to its wait; the sweeper continues it");
                return Ok(http::json(StatusCode::ACCEPTED, &SagaView::from(saga.record())));
            }
            warn!(order_id = %order_id, error = %ErrorChain(&e), "checkout not started");
            Err(run_failed(e))
        }
    }
}

/// Without a Lambda context (the local stack's server, a request built by hand), how long a run may take:
/// under API Gateway's 30 s integration timeout and the function's own.
const UNBOUNDED_RUN: Duration = Duration::from_secs(20);

/// When the saga's run for this request must stop: the invocation's deadline less the answer's margin.
fn run_deadline(req: &Request) -> Instant {
    match req.lambda_context_ref().filter(|c| c.deadline > 0) {
        Some(context) => shared::clock::invocation_deadline(context.deadline, shared::clock::ANSWER_MARGIN),
        None => {
            let now = Instant::now();
            now.checked_add(UNBOUNDED_RUN).unwrap_or(now)
        }
    }
}

/// The answer to a run of the saga that failed or ran out of time: a storage error as storage errors are
/// answered everywhere, anything else a 503 to retry in a second (the request's and the challenge's alike).
fn run_failed(e: RunError) -> ApiError {
    match e {
        RunError::Store(s) | RunError::Saga(SagaStoreError::Store(s)) => s.into(),
        e => ApiError::unavailable(e.to_string(), 1),
    }
}

/// A stored saga that fails its consistency check: no retry can help, so it is reported for an operator
/// (logged, counted and sent to the escalation queue, as the sweeper reports one it cannot process;
/// `paymentsctl timeline` shows why it does not load) and answered as what it is, not a bare 500 or a 503 to
/// retry.
async fn needs_operator<P: Psps>(runner: &Runner<P>, id: &OrderId, e: InconsistentSaga) -> ApiError {
    let reason = e.reason;
    runner
        .escalate_unprocessable(id, &RunError::Saga(SagaStoreError::Inconsistent(e)))
        .await;
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "checkout_needs_operator",
        format!("checkout {id} cannot be run as stored ({reason}); an operator was told (paymentsctl timeline {id})"),
    )
}

fn internal(e: SagaStoreError) -> ApiError {
    match e {
        SagaStoreError::Store(s) => s.into(),
        other => ApiError::internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_method_is_checked_as_the_checkouts_psp_takes_it() {
        let request = |method: &str| StartCheckout {
            order_id: "order-1".into(),
            sku: "sku-1".into(),
            quantity: 1,
            amount_minor: 2500,
            currency: "EUR".into(),
            payment_method: method.into(),
            psp: None,
        };
        let adyen = r#"{"type":"scheme","encryptedCardNumber":"adyenjs_0_1_25$ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"}"#;
        assert!(request(adyen).parse_for(CheckoutPsp::Adyen).is_ok());
        assert!(
            request(adyen).parse_for(CheckoutPsp::Stripe).is_err(),
            "longer than a pm_ id"
        );
        assert!(request("pm_card_visa").parse_for(CheckoutPsp::Stripe).is_ok());
        for refused in ["pm_card_visa", r#"{"encryptedCardNumber":"x"}"#, "[]"] {
            assert!(request(refused).parse_for(CheckoutPsp::Adyen).is_err(), "{refused}");
        }
        let huge = format!(
            r#"{{"type":"scheme","x":"{}"}}"#,
            "a".repeat(MAX_ADYEN_PAYMENT_METHOD_CHARS)
        );
        assert!(request(&huge).parse_for(CheckoutPsp::Adyen).is_err());
    }

    #[test]
    fn a_failed_run_is_answered_as_storage_answers_or_as_a_503_to_retry() {
        let missing = || shared::store::StoreError::NotFound("pay-1".into());
        let answers = [
            run_failed(RunError::OutOfTime),
            run_failed(RunError::Invalid("saga order-1 vanished".into())),
            run_failed(RunError::Store(missing())),
            run_failed(RunError::Saga(SagaStoreError::Store(missing()))),
        ]
        .map(|e| e.status);
        assert_eq!(
            answers,
            [
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::NOT_FOUND,
                StatusCode::NOT_FOUND
            ]
        );
    }

    #[test]
    fn the_route_table_builds() {
        assert!(table().is_ok());
        assert!(matches!(
            route(&Method::PUT, "/prod/inventory/sku-1"),
            Ok(CheckoutApiRoute::PutStock(_))
        ));
        let refused = route(&Method::DELETE, "/inventory/sku-1").err().unwrap();
        assert_eq!(refused.allow.as_deref(), Some("GET, PUT"));
    }
}
