//! The PSP's API as the checkout saga and recovery call it: charge, status, refund. Every call that moves
//! money carries an idempotency key chosen by the caller (the saga derives it from (saga, step)), so a retry
//! after a timeout never charges or refunds twice.
//!
//! [`HttpPsp`] speaks the Stripe-like API of `local/psp-simulator` (`PSP_BASE_URL`), over HTTPS or, for
//! 127.0.0.1, plain HTTP. Errors say whether a retry can help ([`PspError::is_transient`]).

use crate::{Money, Outcome, PspReference};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde_json::{json, Value};
use std::future::Future;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum PspError {
    /// Timeout, connection failure, 429 or 5xx: the same call (same key) may be retried.
    #[error("PSP unavailable: {0}")]
    Unavailable(String),
    /// The PSP refused the request (4xx): retrying the same call will not help.
    #[error("PSP refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("PSP answer unreadable: {0}")]
    BadAnswer(String),
}

impl PspError {
    pub fn is_transient(&self) -> bool {
        matches!(self, PspError::Unavailable(_))
    }
}

/// The PSP's view of one payment, as a status query returns it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PspStatus {
    pub id: String,
    /// `succeeded`, `canceled`, `processing`, `requires_action`, ...
    pub status: String,
    pub amount_minor: u64,
    pub currency: String,
    #[serde(default)]
    pub amount_refunded: u64,
}

impl PspStatus {
    /// What recovery observes. Refunds are reported as the cumulative amount; a refund proves the capture.
    pub fn outcome(&self) -> Outcome {
        match self.status.as_str() {
            "succeeded" if self.amount_refunded > 0 => Outcome::Refunded {
                refunded_total_minor: self.amount_refunded,
                capture_proven: true,
            },
            "succeeded" => Outcome::Succeeded,
            "canceled" | "failed" => Outcome::Failed {
                reason: format!("{} at the PSP (recovery)", self.status),
            },
            _ => Outcome::Processing,
        }
    }
}

/// The PSP operations the saga and recovery need.
pub trait Psp: Send + Sync {
    /// Charges `money` for our payment; the answer is the PSP's synchronous answer in our `sync-result`
    /// shape (`{"outcome": ..., "psp_reference": ...}`).
    fn charge(
        &self,
        key: &str,
        payment_id: &str,
        money: &Money,
        payment_method: &str,
    ) -> impl Future<Output = Result<Value, PspError>> + Send;

    fn status(&self, reference: &PspReference) -> impl Future<Output = Result<PspStatus, PspError>> + Send;

    /// Refunds `amount_minor`; answers the cumulative refunded amount.
    fn refund(
        &self,
        key: &str,
        reference: &PspReference,
        amount_minor: u64,
    ) -> impl Future<Output = Result<u64, PspError>> + Send;
}

/// The PSP over HTTP(S).
#[derive(Clone)]
pub struct HttpPsp {
    base_url: String,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl HttpPsp {
    pub fn new(base_url: impl Into<String>, timeout: Duration) -> Result<Self, PspError> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| PspError::Unavailable(format!("TLS roots: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
        })
    }

    /// `PSP_BASE_URL`, with a 5 s timeout per call.
    pub fn from_env() -> Result<Self, PspError> {
        let url = std::env::var("PSP_BASE_URL").map_err(|_| PspError::Unavailable("PSP_BASE_URL is not set".into()))?;
        Self::new(url, Duration::from_secs(5))
    }

    async fn call(&self, method: &str, path: &str, key: Option<&str>, body: Option<Value>) -> Result<Value, PspError> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base_url))
            .header("content-type", "application/json");
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| PspError::BadAnswer(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(req)
                .await
                .map_err(|e| PspError::Unavailable(e.to_string()))?;
            let status = response.status().as_u16();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| PspError::Unavailable(e.to_string()))?
                .to_bytes();
            Ok::<_, PspError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| PspError::Unavailable(format!("no answer within {:?}", self.timeout)))??;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match status {
            200..=299 => Ok(value),
            429 | 500..=599 => Err(PspError::Unavailable(format!("HTTP {status}"))),
            _ => Err(PspError::Refused {
                status,
                message: value["error"].as_str().unwrap_or("no message").to_owned(),
            }),
        }
    }
}

impl Psp for HttpPsp {
    async fn charge(
        &self,
        key: &str,
        payment_id: &str,
        money: &Money,
        payment_method: &str,
    ) -> Result<Value, PspError> {
        let body = json!({ "payment_id": payment_id, "amount_minor": money.amount_minor(),
                           "currency": money.currency().as_str(), "payment_method": payment_method });
        self.call("POST", "/v1/payment_intents", Some(key), Some(body)).await
    }

    async fn status(&self, reference: &PspReference) -> Result<PspStatus, PspError> {
        let value = self
            .call("GET", &format!("/v1/payment_intents/{reference}"), None, None)
            .await?;
        serde_json::from_value(value).map_err(|e| PspError::BadAnswer(e.to_string()))
    }

    async fn refund(&self, key: &str, reference: &PspReference, amount_minor: u64) -> Result<u64, PspError> {
        let body = json!({ "payment_intent": reference.as_str(), "amount_minor": amount_minor });
        let value = self.call("POST", "/v1/refunds", Some(key), Some(body)).await?;
        value["amount_refunded"]
            .as_u64()
            .ok_or_else(|| PspError::BadAnswer("no amount_refunded".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: &str, refunded: u64) -> PspStatus {
        PspStatus {
            id: "pi_1".into(),
            status: s.into(),
            amount_minor: 1000,
            currency: "EUR".into(),
            amount_refunded: refunded,
        }
    }

    #[test]
    fn psp_statuses_map_to_outcomes() {
        assert_eq!(status("succeeded", 0).outcome(), Outcome::Succeeded);
        assert!(matches!(status("canceled", 0).outcome(), Outcome::Failed { .. }));
        assert_eq!(status("processing", 0).outcome(), Outcome::Processing);
        assert_eq!(
            status("succeeded", 400).outcome(),
            Outcome::Refunded {
                refunded_total_minor: 400,
                capture_proven: true
            }
        );
    }
}
