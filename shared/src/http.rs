//! JSON answers and errors for the HTTP functions (API Gateway HTTP API, payload format 2.0).
//!
//! Every error answer is `{"error": "<code>", "message": "<what is wrong>"}` with the matching status.

use crate::store::StoreError;
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
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
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
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::NotFound(id) => ApiError::not_found(format!("payment {id} not found")),
            StoreError::AlreadyExists(id) => ApiError::conflict(format!("payment {id} already exists")),
            StoreError::Unavailable { .. } | StoreError::ConflictsExhausted(..) => {
                tracing::warn!(error = %e, "storage unavailable");
                ApiError::unavailable("storage is temporarily unavailable; retry", 1)
            }
            StoreError::Request { .. } | StoreError::Corrupt { .. } => {
                tracing::error!(error = %e, "storage error");
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

/// Parses a JSON body. Unknown fields are refused by the request types (`deny_unknown_fields`), and serde's
/// message names the field.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("request body is empty; expected a JSON object"));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
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
        .unwrap_or_else(|| crate::CorrelationId::parse(uuid::Uuid::new_v4().to_string()).expect("a uuid is a valid id"))
}

/// The caller's trace context: W3C `traceparent`, else the X-Ray header API Gateway adds.
pub fn trace_context(req: &Request) -> Option<String> {
    header(req, "traceparent")
        .or_else(|| header(req, "x-amzn-trace-id"))
        .map(|v| v.chars().take(256).collect())
}
