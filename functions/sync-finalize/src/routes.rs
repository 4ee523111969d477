//! Which route a request is for. API Gateway passes the raw path; a stage prefix before `/payments` is
//! ignored so the same handler serves `$default` and named stages.

use lambda_http::http::Method;
use shared::http::ApiError;
use shared::PaymentId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Create,
    SyncResult(PaymentId),
    Get(PaymentId),
    Events(PaymentId),
}

impl Route {
    pub fn parse(method: &Method, path: &str) -> Result<Route, ApiError> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let start = segments
            .iter()
            .position(|s| *s == "payments")
            .ok_or_else(|| unknown(path))?;
        let id =
            |raw: &str| PaymentId::parse(raw).map_err(|e| ApiError::bad_request(format!("invalid payment id: {e}")));
        let (route, allowed) = match segments.get(start..).unwrap_or_default() {
            ["payments"] => (Some(Route::Create).filter(|_| method == Method::POST), "POST"),
            ["payments", raw] => (Some(Route::Get(id(raw)?)).filter(|_| method == Method::GET), "GET"),
            ["payments", raw, "sync-result"] => (
                Some(Route::SyncResult(id(raw)?)).filter(|_| method == Method::POST),
                "POST",
            ),
            ["payments", raw, "events"] => (Some(Route::Events(id(raw)?)).filter(|_| method == Method::GET), "GET"),
            _ => return Err(unknown(path)),
        };
        route.ok_or_else(|| ApiError::method_not_allowed(format!("{method} is not allowed here; use {allowed}")))
    }
}

fn unknown(path: &str) -> ApiError {
    ApiError::not_found(format!("no route for {path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let id = PaymentId::parse("pay_1").unwrap();
        assert_eq!(Route::parse(&Method::POST, "/payments").unwrap(), Route::Create);
        assert_eq!(
            Route::parse(&Method::GET, "/payments/pay_1").unwrap(),
            Route::Get(id.clone())
        );
        assert_eq!(
            Route::parse(&Method::GET, "/dev/payments/pay_1/events").unwrap(),
            Route::Events(id.clone())
        );
        assert_eq!(
            Route::parse(&Method::POST, "/payments/pay_1/sync-result/").unwrap(),
            Route::SyncResult(id)
        );
        assert_eq!(Route::parse(&Method::GET, "/payments").unwrap_err().status, 405);
        assert_eq!(
            Route::parse(&Method::DELETE, "/payments/pay_1").unwrap_err().status,
            405
        );
        assert_eq!(Route::parse(&Method::GET, "/orders").unwrap_err().status, 404);
        assert_eq!(Route::parse(&Method::GET, "/payments/pay_1/x").unwrap_err().status, 404);
        assert_eq!(Route::parse(&Method::GET, "/payments/pay%231").unwrap_err().status, 400);
    }
}
