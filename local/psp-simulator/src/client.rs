//! A small JSON-over-HTTP client (hyper) for webhook delivery and the demo. Local addresses only. Calls to the
//! payments and checkout API go through [`HttpClient::signed`], SigV4-signed as the HTTP API's `AWS_IAM`
//! routes require (`local_lambda::sigv4`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
    /// Every request SigV4-signed (`local_lambda::sigv4`): [`HttpClient::signed`].
    signed: bool,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self {
            inner: Client::builder(TokioExecutor::new()).build_http(),
            signed: false,
        }
    }
}

impl HttpClient {
    /// This client for an `AWS_IAM` route of the HTTP API: each request signed with this process's AWS
    /// credentials, as the checkout orchestrator signs in AWS.
    #[must_use]
    pub fn signed(&self) -> Self {
        Self {
            signed: true,
            ..self.clone()
        }
    }

    /// Sends `body` (raw bytes) with `headers`; returns the status and the JSON answer (Null if none).
    pub async fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<(u16, Value), BoxError> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        if self.signed {
            let plain: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            for (name, value) in local_lambda::sigv4::signed_headers(method, url, &plain, &body)? {
                req = req.header(name, value);
            }
        }
        let response = self.inner.request(req.body(Full::new(Bytes::from(body)))?).await?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// Sends `body` as JSON (none when it is `Null`).
    pub async fn json(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<(u16, Value), BoxError> {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(body)?
        };
        self.send(method, url, headers, bytes).await
    }
}
