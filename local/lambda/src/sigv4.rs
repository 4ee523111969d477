//! SigV4 verification as API Gateway does it for an `AWS_IAM` route: the request's `Authorization` header
//! (`AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, SignedHeaders=..., Signature=...`)
//! names the key, the scope and the headers it signed; the signature is computed again with the secret of that
//! key (the local world's credentials) over the same request, signed headers and `X-Amz-Date`, and must be the
//! same. A key the world does not have, a date more than 15 minutes off, or another signature is refused.
//! The signing itself is the SDK's own (`aws-sigv4`), so this checks what AWS checks, no copy of it.
//!
//! The local world's callers (the demos, the bench) sign with the same signer and this process's credentials
//! ([`signed_headers`]), as the checkout orchestrator signs its calls in AWS.

use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4::SigningParams;
use aws_smithy_runtime_api::client::identity::Identity;
use std::time::{Duration, SystemTime};
use subtle::ConstantTimeEq;

/// The service name API Gateway's IAM authorization signs for.
pub const SERVICE: &str = "execute-api";

/// How far a request's `X-Amz-Date` may be from now (AWS: 15 minutes).
const SKEW: Duration = Duration::from_secs(15 * 60);

/// The parts of an `Authorization` header.
#[derive(Debug, PartialEq, Eq)]
pub struct Authorization<'a> {
    pub access_key: &'a str,
    pub date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    pub signed_headers: Vec<&'a str>,
    pub signature: &'a str,
}

/// Reads an `Authorization` header of SigV4 (`None`: not one).
#[must_use]
pub fn authorization(header: &str) -> Option<Authorization<'_>> {
    let rest = header.strip_prefix("AWS4-HMAC-SHA256 ")?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (name, value) = part.trim().split_once('=')?;
        match name {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed = Some(value),
            "Signature" => signature = Some(value),
            _ => return None,
        }
    }
    let mut scope = credential?.split('/');
    let parsed = Authorization {
        access_key: scope.next()?,
        date: scope.next()?,
        region: scope.next()?,
        service: scope.next()?,
        signed_headers: signed?.split(';').collect(),
        signature: signature?,
    };
    (scope.next() == Some("aws4_request") && scope.next().is_none()).then_some(parsed)
}

/// `X-Amz-Date`'s basic ISO 8601 (`20261204T214500Z`) as a time.
fn amz_date(text: &str) -> Option<SystemTime> {
    let digits = |range: std::ops::Range<usize>| text.get(range);
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        digits(0..4)?,
        digits(4..6)?,
        digits(6..8)?,
        digits(9..11)?,
        digits(11..13)?,
        digits(13..15)?
    );
    (text.len() == 16 && text.ends_with('Z'))
        .then(|| humantime::parse_rfc3339(&rfc3339).ok())
        .flatten()
}

/// Checks the SigV4 signature of a request (`method`, `path_and_query` as sent, its `headers` with lower-case
/// names, its `body`) against the secret of `credentials`, at `now`. The error says what did not match (for
/// the local world's log: API Gateway's answer is a plain 403).
pub fn verify(
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    body: &[u8],
    credentials: &aws_sdk_sqs::config::Credentials,
    now: SystemTime,
) -> Result<(), String> {
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let auth = authorization(header("authorization").ok_or("no Authorization header")?)
        .ok_or("the Authorization header is no SigV4")?;
    if auth.access_key != credentials.access_key_id() {
        return Err(format!("the key {} is not the local world's", auth.access_key));
    }
    let date = header("x-amz-date").ok_or("no X-Amz-Date header")?;
    let time = amz_date(date).ok_or_else(|| format!("X-Amz-Date {date} is no date"))?;
    let skew = now.duration_since(time).or_else(|e| Ok::<_, String>(e.duration()))?;
    if skew > SKEW || !date.starts_with(auth.date) {
        return Err(format!(
            "X-Amz-Date {date} is not now or not the scope's date {}",
            auth.date
        ));
    }
    let signed: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(name, _)| auth.signed_headers.contains(&name.as_str()))
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let identity: Identity = credentials.clone().into();
    let params = SigningParams::builder()
        .identity(&identity)
        .region(auth.region)
        .name(auth.service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let request = SignableRequest::new(method, path_and_query, signed.into_iter(), SignableBody::Bytes(body))
        .map_err(|e| e.to_string())?;
    let expected = sign(request, &params).map_err(|e| e.to_string())?;
    // Constant time, as every signature check of the project: how far a guess matches is not timed.
    if bool::from(expected.signature().as_bytes().ct_eq(auth.signature.as_bytes())) {
        Ok(())
    } else {
        Err("the signature does not match".into())
    }
}

/// The headers (`authorization`, `x-amz-date`, `x-amz-security-token` with a session) that sign a request of
/// `method` to `url` with `headers` and `body` now, for an `AWS_IAM` route, with this process's credentials
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`: the scripts' `local_env`).
pub fn signed_headers(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<(String, String)>, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let key = var("AWS_ACCESS_KEY_ID").ok_or("AWS_ACCESS_KEY_ID is not set: nothing to sign the API call with")?;
    let secret = var("AWS_SECRET_ACCESS_KEY").ok_or("AWS_SECRET_ACCESS_KEY is not set")?;
    let region = var("AWS_REGION").unwrap_or_else(|| "us-east-1".into());
    let credentials = aws_sdk_sqs::config::Credentials::new(key, secret, var("AWS_SESSION_TOKEN"), None, "environment");
    let identity: Identity = credentials.into();
    let params = SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name(SERVICE)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let request = SignableRequest::new(method, url, headers.iter().copied(), SignableBody::Bytes(body))
        .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(request, &params).map_err(|e| e.to_string())?.into_parts();
    Ok(instructions
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's SigV4 test suite, `get-vanilla`: its request, key and signature (computed by AWS, not by us).
    fn vanilla(signature: &str) -> Vec<(String, String)> {
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature={signature}"
        );
        [
            ("host", "example.amazonaws.com"),
            ("x-amz-date", "20150830T123600Z"),
            ("authorization", authorization.as_str()),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
    }

    const VANILLA: &str = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";

    fn example_key(secret: &str) -> aws_sdk_sqs::config::Credentials {
        aws_sdk_sqs::config::Credentials::new("AKIDEXAMPLE", secret, None, None, "test")
    }

    fn at_signing() -> SystemTime {
        humantime::parse_rfc3339("2015-08-30T12:40:00Z").expect("a time")
    }

    #[test]
    fn aws_test_suite_get_vanilla_verifies_and_a_changed_signature_or_secret_does_not() {
        let key = example_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        assert_eq!(verify("GET", "/", &vanilla(VANILLA), b"", &key, at_signing()), Ok(()));
        let other = VANILLA.replace("5fa0", "5fa1");
        assert!(verify("GET", "/", &vanilla(&other), b"", &key, at_signing()).is_err());
        let wrong_secret = example_key("not the secret");
        assert!(verify("GET", "/", &vanilla(VANILLA), b"", &wrong_secret, at_signing()).is_err());
        assert!(
            verify("POST", "/", &vanilla(VANILLA), b"", &key, at_signing()).is_err(),
            "another method"
        );
        assert!(
            verify("GET", "/", &vanilla(VANILLA), b"x", &key, at_signing()).is_err(),
            "another body"
        );
    }

    #[test]
    fn a_date_more_than_15_minutes_off_or_another_key_is_refused() {
        let key = example_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        let late = at_signing() + Duration::from_secs(20 * 60);
        let refused = verify("GET", "/", &vanilla(VANILLA), b"", &key, late);
        assert!(refused.is_err_and(|e| e.contains("not now")));
        let other_key = aws_sdk_sqs::config::Credentials::new("AKIDOTHER", "x", None, None, "test");
        assert!(verify("GET", "/", &vanilla(VANILLA), b"", &other_key, at_signing()).is_err());
    }

    #[test]
    fn the_authorization_header_is_read_in_its_parts() {
        let header = "AWS4-HMAC-SHA256 Credential=AK/20261204/us-east-1/execute-api/aws4_request, \
                      SignedHeaders=host;x-amz-date, Signature=ab";
        let parsed = authorization(header).expect("SigV4");
        assert_eq!(
            (
                parsed.access_key,
                parsed.region,
                parsed.service,
                parsed.signed_headers,
                parsed.signature
            ),
            ("AK", "us-east-1", "execute-api", vec!["host", "x-amz-date"], "ab")
        );
        assert_eq!(authorization("Bearer x"), None);
        assert_eq!(
            authorization("AWS4-HMAC-SHA256 Credential=AK/20261204/us-east-1/execute-api, Signature=ab"),
            None
        );
    }

    #[test]
    fn what_the_demos_sign_the_local_api_verifies_and_nothing_else() {
        // nextest runs each test in its own process.
        std::env::set_var("AWS_ACCESS_KEY_ID", "local");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "local");
        let url = "http://127.0.0.1:3000/payments/pay_1/sync-result";
        let signed = signed_headers("POST", url, &[("idempotency-key", "k1")], b"{}").expect("signed");
        let mut headers: Vec<(String, String)> = signed;
        headers.push(("host".into(), "127.0.0.1:3000".into()));
        headers.push(("idempotency-key".into(), "k1".into()));
        let local = aws_sdk_sqs::config::Credentials::new("local", "local", None, None, "test");
        let path = "/payments/pay_1/sync-result";
        assert_eq!(verify("POST", path, &headers, b"{}", &local, SystemTime::now()), Ok(()));
        assert!(verify("POST", path, &headers, b"{\"a\":1}", &local, SystemTime::now()).is_err());
        assert!(verify(
            "POST",
            "/payments/pay_2/sync-result",
            &headers,
            b"{}",
            &local,
            SystemTime::now()
        )
        .is_err());
    }
}
