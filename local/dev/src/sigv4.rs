//! SigV4 for the HTTP API's `AWS_IAM` routes, as the checkout orchestrator signs its calls in AWS
//! (`execute-api`): the local world's callers (the demos, the bench) sign with this process's credentials
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`; the scripts' `local_env` sets
//! them), with the AWS SDK's own signer.

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use std::time::SystemTime;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The service name API Gateway's IAM authorization signs for.
pub const SERVICE: &str = "execute-api";

/// The headers (`authorization`, `x-amz-date`, `x-amz-content-sha256` when asked, `x-amz-security-token` with a
/// session) that sign a request of `method` to `url` with `headers` and `body`, now.
pub fn signed_headers(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<(String, String)>, BoxError> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let key = var("AWS_ACCESS_KEY_ID").ok_or("AWS_ACCESS_KEY_ID is not set: nothing to sign the API call with")?;
    let secret = var("AWS_SECRET_ACCESS_KEY").ok_or("AWS_SECRET_ACCESS_KEY is not set")?;
    let region = var("AWS_REGION").unwrap_or_else(|| "us-east-1".into());
    let identity = Credentials::new(key, secret, var("AWS_SESSION_TOKEN"), None, "environment").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name(SERVICE)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()?
        .into();
    let request = SignableRequest::new(method, url, headers.iter().copied(), SignableBody::Bytes(body))?;
    let (instructions, _) = sign(request, &params)?.into_parts();
    Ok(instructions
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_covers_the_method_path_and_body() {
        // nextest runs each test in its own process.
        std::env::set_var("AWS_ACCESS_KEY_ID", "local");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "local");
        let auth = |method: &str, path: &str, body: &[u8]| {
            let url = format!("http://127.0.0.1:3000{path}");
            let headers = signed_headers(method, &url, &[("content-type", "application/json")], body).unwrap();
            let auth = headers.iter().find(|(n, _)| n == "authorization").unwrap().1.clone();
            assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=local/"), "{auth}");
            assert!(auth.contains("/execute-api/aws4_request"), "{auth}");
            auth.rsplit("Signature=").next().unwrap().to_owned()
        };
        let base = auth("POST", "/payments", b"{}");
        assert_ne!(base, auth("GET", "/payments", b"{}"));
        assert_ne!(base, auth("POST", "/checkouts", b"{}"));
        assert_ne!(base, auth("POST", "/payments", b"{\"a\":1}"));
    }
}
