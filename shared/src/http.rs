//! JSON answers and errors for the HTTP functions (API Gateway HTTP API, payload format 2.0).
//!
//! Every error answer is `{"error": "<code>", "message": "<what is wrong>"}` with the matching status.

use crate::store::StoreError;
use crate::telemetry::ErrorChain;
use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::{Body, Request, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A JSON response.
pub fn json<T: Serialize>(status: StatusCode, body: &T) -> Response<Body> {
    let bytes = serde_json::to_vec(body)
        .unwrap_or_else(|_| br#"{"error":"internal","message":"unserializable answer"}"#.to_vec());
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header (503 answers).
    pub retry_after: Option<u32>,
    /// The `Allow` header of a 405: every method the route serves.
    pub allow: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
            allow: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
    }
    /// With the `Allow` header a 405 must carry (e.g. `GET, PUT`).
    pub fn with_allow(self, methods: &str) -> Self {
        Self {
            allow: Some(methods.to_owned()),
            ..self
        }
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", message)
    }
    pub fn unavailable(message: impl Into<String>, retry_after: u32) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
        }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn into_response(self) -> Response<Body> {
        let mut response = json(
            self.status,
            &serde_json::json!({ "error": self.code, "message": self.message }),
        );
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(methods) = self.allow.as_deref().and_then(|m| HeaderValue::from_str(m).ok()) {
            response.headers_mut().insert(header::ALLOW, methods);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound(id) => ApiError::not_found(format!("payment {id} not found")),
            StoreError::AlreadyExists(id) => ApiError::conflict(format!("payment {id} already exists")),
            StoreError::Unavailable { .. } | StoreError::ConflictsExhausted(..) => {
                tracing::warn!(error = %ErrorChain(&e), "storage unavailable");
                ApiError::unavailable("storage is temporarily unavailable; retry", 1)
            }
            StoreError::Request { .. } | StoreError::Corrupt { .. } => {
                tracing::error!(error = %ErrorChain(&e), "storage error");
                ApiError::internal("internal error")
            }
        }
    }
}

/// The raw body bytes (lambda_http has already decoded an `isBase64Encoded` body).
pub fn body_bytes(req: &Request) -> &[u8] {
    match req.body() {
        Body::Empty => &[],
        Body::Text(text) => text.as_bytes(),
        Body::Binary(bytes) => bytes,
        _ => &[],
    }
}

/// The largest body the payments and checkout APIs take: their requests are a few hundred bytes, and the
/// largest allowed one (a sync result with a client secret and a redirect URL at their limits, or ten
/// metadata values) stays under 8 KB.
pub const MAX_API_BODY_BYTES: usize = 16 * 1024;

/// 413 with a JSON error for a body over [`MAX_API_BODY_BYTES`], on every route of the APIs (checked before
/// routing, so a GET with a large body is refused too).
pub fn check_body_size(req: &Request) -> Result<(), ApiError> {
    if body_bytes(req).len() > MAX_API_BODY_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body over {MAX_API_BODY_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// Parses a JSON body. Unknown fields are refused by the request types (`deny_unknown_fields`), and serde's
/// message names the field.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("request body is empty; expected a JSON object"));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid request body: {}", json_error(&e))))
}

/// A JSON error as it may be shown or logged: serde's message (which names the field, the expected type and
/// where) with every quoted value withheld, since the value may be a secret (a client secret in a request
/// body, a signing secret in a configuration).
pub fn json_error(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    for c in message.chars() {
        match (c, quoted) {
            ('"', false) => {
                quoted = true;
                out.push_str("\"…");
            }
            ('"', true) => {
                quoted = false;
                out.push('"');
            }
            (_, false) => out.push(c),
            (_, true) => {}
        }
    }
    out
}

/// A header's value as text, if present and readable.
pub fn header<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The caller's correlation id (`x-correlation-id`), or a fresh one when absent or malformed.
pub fn correlation_id(req: &Request) -> crate::CorrelationId {
    header(req, "x-correlation-id")
        .and_then(|v| crate::CorrelationId::parse(v).ok())
        .unwrap_or_else(|| crate::CorrelationId::derived("req", &uuid::Uuid::new_v4().to_string()))
}

/// The caller's trace context: W3C `traceparent`, else the X-Ray header API Gateway adds.
pub fn trace_context(req: &Request) -> Option<String> {
    header(req, "traceparent")
        .or_else(|| header(req, "x-amzn-trace-id"))
        .map(|v| v.chars().take(256).collect())
}

/// Who may call the IAM-authorized routes: the checkout orchestrator's role (`ORCHESTRATOR_ROLE_ARN`).
///
/// IAM authorization alone lets any principal of the account with `execute-api:Invoke` capture a payment,
/// and an HTTP API has no resource policy to narrow that, so the function compares the SigV4 caller that
/// API Gateway puts in the request context with the configured role. A role's callers are its sessions
/// (`arn:aws:sts::<account>:assumed-role/<name>/<session>`), matched on account and role name (STS ARNs
/// carry no role path). Unset (local stack, tests): every caller the API let through is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerGuard {
    /// `arn:<partition>:sts::<account>:assumed-role/<name>/`: what the caller's session ARN must start with,
    /// built once from the configured role.
    session_prefix: Option<String>,
}

impl CallerGuard {
    /// Allows every caller (no role configured).
    pub fn open() -> Self {
        Self { session_prefix: None }
    }

    /// From a role ARN, `arn:<partition>:iam::<account>:role/[<path>/]<name>`; empty means [`CallerGuard::open`].
    pub fn for_role(arn: &str) -> Result<Self, String> {
        if arn.is_empty() {
            return Ok(Self::open());
        }
        let bad =
            || format!("ORCHESTRATOR_ROLE_ARN is not an IAM role ARN (arn:aws:iam::<account>:role/<name>): {arn}");
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        let [_arn @ "arn", partition, "iam", "", account, resource] = parts.as_slice() else {
            return Err(bad());
        };
        let name = resource
            .strip_prefix("role/")
            .and_then(|r| r.rsplit('/').next())
            .unwrap_or("");
        if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) || name.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            session_prefix: Some(format!("arn:{partition}:sts::{account}:assumed-role/{name}/")),
        })
    }

    /// From `ORCHESTRATOR_ROLE_ARN` (unset: every caller the API let through); not a role's ARN fails the
    /// start.
    pub fn from_env(env: &crate::Env) -> Result<Self, crate::ConfigError> {
        Self::for_role(&env.optional("ORCHESTRATOR_ROLE_ARN").unwrap_or_default()).map_err(|why| {
            crate::ConfigError::Invalid {
                name: "ORCHESTRATOR_ROLE_ARN",
                expected: "IAM role ARN",
                value: why,
            }
        })
    }

    /// Whether the caller ARN (the request context's `authorizer.iam.userArn`) is a session of the role.
    pub fn allows_arn(&self, caller: Option<&str>) -> bool {
        let Some(session_prefix) = &self.session_prefix else {
            return true;
        };
        let Some(caller) = caller else {
            return false;
        };
        caller.starts_with(session_prefix.as_str()) && caller.len() > session_prefix.len()
    }

    /// `Ok` for an allowed caller; a 403 answer otherwise (the caller's ARN is logged, it is no secret).
    pub fn check(&self, req: &Request) -> Result<(), ApiError> {
        use lambda_http::request::RequestContext;
        use lambda_http::RequestExt;
        if self.session_prefix.is_none() {
            return Ok(());
        }
        let caller = match req.request_context_ref() {
            Some(RequestContext::ApiGatewayV2(ctx)) => ctx
                .authorizer
                .as_ref()
                .and_then(|a| a.iam.as_ref())
                .and_then(|iam| iam.user_arn.clone()),
            _ => None,
        };
        if self.allows_arn(caller.as_deref()) {
            return Ok(());
        }
        tracing::warn!(
            caller = caller.as_deref().unwrap_or("-"),
            "caller is not the orchestrator role"
        );
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only the checkout orchestrator's role may call this API",
        ))
    }
}

#[cfg(test)]
mod caller_guard_tests {
    use super::*;
    use lambda_http::aws_lambda_events::apigw::{
        ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerIamDescription, ApiGatewayV2httpRequestContext,
    };
    use lambda_http::request::RequestContext;
    use lambda_http::RequestExt;

    const ROLE: &str = "arn:aws:iam::123456789012:role/service/checkout-orchestrator";

    fn request_from(user_arn: Option<&str>) -> Request {
        let mut ctx = ApiGatewayV2httpRequestContext::default();
        let mut authorizer = ApiGatewayRequestAuthorizer::default();
        let mut iam = ApiGatewayRequestAuthorizerIamDescription::default();
        iam.user_arn = user_arn.map(str::to_owned);
        authorizer.iam = Some(iam);
        ctx.authorizer = Some(authorizer);
        Request::new(Body::Empty).with_request_context(RequestContext::ApiGatewayV2(ctx))
    }

    #[test]
    fn only_sessions_of_the_orchestrator_role_pass() {
        let guard = CallerGuard::for_role(ROLE).unwrap();
        let own = "arn:aws:sts::123456789012:assumed-role/checkout-orchestrator/i-0abc";
        assert!(guard.check(&request_from(Some(own))).is_ok());
        for other in [
            "arn:aws:sts::123456789012:assumed-role/checkout-orchestrator-admin/s",
            "arn:aws:sts::123456789012:assumed-role/other-role/checkout-orchestrator",
            "arn:aws:sts::999999999999:assumed-role/checkout-orchestrator/s",
            "arn:aws:iam::123456789012:user/checkout-orchestrator",
            "arn:aws:sts::123456789012:assumed-role/checkout-orchestrator/",
        ] {
            let err = guard.check(&request_from(Some(other))).unwrap_err();
            assert_eq!(err.status, StatusCode::FORBIDDEN, "{other}");
        }
        assert_eq!(
            guard.check(&request_from(None)).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            guard.check(&Request::new(Body::Empty)).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn no_role_configured_lets_every_caller_through() {
        let guard = CallerGuard::for_role("").unwrap();
        assert_eq!(guard, CallerGuard::open());
        assert!(guard.check(&request_from(None)).is_ok());
    }

    #[test]
    fn a_malformed_role_arn_is_refused_at_start() {
        for bad in [
            "checkout-orchestrator",
            "arn:aws:iam::123456789012:user/x",
            "arn:aws:iam::1234:role/x",
            "arn:aws:sts::123456789012:role/x",
            "arn:aws:iam::123456789012:role/",
        ] {
            let err = CallerGuard::for_role(bad).unwrap_err();
            assert!(err.contains("ORCHESTRATOR_ROLE_ARN"), "{bad}: {err}");
        }
    }
}
