//! A small JSON-over-HTTP client (hyper) for webhook delivery and the demo. Local addresses only. Calls to the
//! payments and checkout API go through [`HttpClient::api_json`], SigV4-signed as the HTTP API's `AWS_IAM`
//! routes require (`local_dev::sigv4`).

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
}

impl Default for HttpClient {
    fn default() -> Self {
        Self {
            inner: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

impl HttpClient {
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
        let response = self.inner.request(req.body(Full::new(Bytes::from(body)))?).await?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// [`Self::json`] to an `AWS_IAM` route of the HTTP API: signed with this process's AWS credentials.
    pub async fn api_json(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<(u16, Value), BoxError> {
        let bytes = json_bytes(body)?;
        let plain: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let signed = local_dev::sigv4::signed_headers(method, url, &plain, &bytes)?;
        let mut all: Vec<(&str, String)> = headers.to_vec();
        all.extend(signed.iter().map(|(n, v)| (n.as_str(), v.clone())));
        self.send(method, url, &all, bytes).await
    }

    /// Sends `body` as JSON (none when it is `Null`).
    pub async fn json(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: &Value,
    ) -> Result<(u16, Value), BoxError> {
        let bytes = json_bytes(body)?;
        self.send(method, url, headers, bytes).await
    }
}

/// `body` as JSON bytes; none for `Null`.
fn json_bytes(body: &Value) -> Result<Vec<u8>, BoxError> {
    Ok(if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body)?
    })
}
