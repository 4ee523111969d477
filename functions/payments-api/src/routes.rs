//! Which route a request is for, on the shared router (the same table as `infra/template.yaml`'s events).

use lambda_http::http::Method;
use shared::http::ApiError;
use shared::router::{RouteTableError, Router};
use shared::PaymentId;
use std::sync::LazyLock;

/// The payments API's request, by route: what [`crate::handle`] serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentsApiRoute {
    /// `POST /payments`: create a payment (idempotent by its key).
    Create,
    /// `POST /payments/{id}/sync-result`: the checkout posts the PSP's synchronous answer.
    SyncResult(PaymentId),
    /// `GET /payments/{id}`: the client view.
    Get(PaymentId),
    /// `GET /payments/{id}/events`: the payment's history.
    Events(PaymentId),
}

/// The handlers, before the id is parsed.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Create,
    SyncResult,
    Get,
    Events,
}

fn table() -> Result<Router<Kind>, RouteTableError> {
    Router::builder()
        .route(Method::POST, "/payments", Kind::Create)
        .route(Method::POST, "/payments/{id}/sync-result", Kind::SyncResult)
        .route(Method::GET, "/payments/{id}", Kind::Get)
        .route(Method::GET, "/payments/{id}/events", Kind::Events)
        .build()
}

#[expect(clippy::expect_used, reason = "a constant table; the unit test `routes` builds it")]
static ROUTER: LazyLock<Router<Kind>> = LazyLock::new(|| table().expect("the payments route table is consistent"));

/// Every (method, path pattern) of this function's route table: what API Gateway must route to it
/// (`tests/tests/it/openapi.rs` compares them with `infra/openapi.yaml` and the template's HttpApi events).
pub fn route_table() -> &'static [(Option<Method>, String)] {
    ROUTER.routes()
}

impl PaymentsApiRoute {
    /// The route of `method` `path`; an unknown path is a 404, a known one with another method a 405 naming
    /// the allowed ones, a malformed id a 400.
    pub fn parse(method: &Method, path: &str) -> Result<PaymentsApiRoute, ApiError> {
        let found = ROUTER.at(method, path)?;
        let id = || {
            PaymentId::parse(found.param("id")).map_err(|e| ApiError::bad_request(format!("invalid payment id: {e}")))
        };
        Ok(match found.route {
            Kind::Create => PaymentsApiRoute::Create,
            Kind::SyncResult => PaymentsApiRoute::SyncResult(id()?),
            Kind::Get => PaymentsApiRoute::Get(id()?),
            Kind::Events => PaymentsApiRoute::Events(id()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert!(table().is_ok());
        let id = PaymentId::parse("pay_1").unwrap();
        assert_eq!(
            PaymentsApiRoute::parse(&Method::POST, "/payments").unwrap(),
            PaymentsApiRoute::Create
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::GET, "/payments/pay_1").unwrap(),
            PaymentsApiRoute::Get(id.clone())
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::GET, "/dev/payments/pay_1/events").unwrap(),
            PaymentsApiRoute::Events(id.clone())
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::POST, "/payments/pay_1/sync-result/").unwrap(),
            PaymentsApiRoute::SyncResult(id)
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::GET, "/payments")
                .unwrap_err()
                .allow
                .as_deref(),
            Some("POST")
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::DELETE, "/payments/pay_1")
                .unwrap_err()
                .status,
            405
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::GET, "/orders").unwrap_err().status,
            404
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::GET, "/payments/pay_1/x")
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            PaymentsApiRoute::parse(&Method::GET, "/payments/pay%231")
                .unwrap_err()
                .status,
            400
        );
    }
}
