//! Webhook signature schemes, verified on the exact raw bytes before anything is parsed.
//!
//! - Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 over `"{t}." + body`, keyed with
//!   the secret string as given (`whsec_...`).
//! - Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> [v1,<base64> ...]`,
//!   HMAC-SHA256 over `"{id}.{timestamp}." + body`, keyed with the base64-decoded part of `whsec_<base64>`.
//!
//! Any listed signature matching any active secret passes (that is how secret rotation works). Comparisons
//! are constant-time (`Mac::verify_slice`).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use shared::SigningSecret;
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

/// Default tolerance between the signed timestamp and our clock, both directions.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SignatureError {
    #[error("missing signature header {0}")]
    Missing(&'static str),
    #[error("malformed signature header {0}")]
    Malformed(&'static str),
    #[error("timestamp outside the tolerance of {0} s")]
    OutsideTolerance(i64),
    #[error("no signature matches")]
    NoMatch,
    #[error("a configured secret is not usable: {0}")]
    BadSecret(&'static str),
}

/// The signature headers of one request, as the scheme needs them.
#[derive(Clone, Copy)]
pub struct SignedRequest<'a> {
    pub stripe_signature: Option<&'a str>,
    pub webhook_id: Option<&'a str>,
    pub webhook_timestamp: Option<&'a str>,
    pub webhook_signature: Option<&'a str>,
    pub body: &'a [u8],
}

/// The body (it may carry client secrets) and the signatures are withheld; their sizes are shown.
impl std::fmt::Debug for SignedRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedRequest")
            .field("stripe_signature", &self.stripe_signature.map(str::len))
            .field("webhook_id", &self.webhook_id)
            .field("webhook_timestamp", &self.webhook_timestamp)
            .field("webhook_signature", &self.webhook_signature.map(str::len))
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length: `new_from_slice` cannot fail (`KeyInit` for HMAC is infallible).
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    for part in parts {
        mac.update(part);
    }
    mac
}

fn within_tolerance(timestamp: i64, now_secs: i64, tolerance: i64) -> Result<(), SignatureError> {
    // `abs_diff` cannot overflow, whatever the timestamp (`i64::MIN` included).
    if now_secs.abs_diff(timestamp) > tolerance.unsigned_abs() {
        return Err(SignatureError::OutsideTolerance(tolerance));
    }
    Ok(())
}

/// Verifies a Stripe signature. Returns the signed timestamp.
pub fn verify_stripe(
    req: &SignedRequest<'_>,
    secrets: &[SigningSecret],
    now_secs: i64,
    tolerance: i64,
) -> Result<i64, SignatureError> {
    const HEADER: &str = "Stripe-Signature";
    let header = req.stripe_signature.ok_or(SignatureError::Missing(HEADER))?;
    let mut timestamp: Option<&str> = None;
    let mut candidates: Vec<Vec<u8>> = Vec::new();
    for item in header.split(',') {
        let (key, value) = item.trim().split_once('=').ok_or(SignatureError::Malformed(HEADER))?;
        match key {
            // Two timestamps make the header ambiguous (which one was signed?): refused, not last-wins.
            "t" if timestamp.is_some() => return Err(SignatureError::Malformed(HEADER)),
            "t" => timestamp = Some(value),
            "v1" => candidates.push(hex::decode(value).map_err(|_| SignatureError::Malformed(HEADER))?),
            _ => {} // other schemes (v0) are ignored, as Stripe's libraries do
        }
    }
    let t_text = timestamp.ok_or(SignatureError::Malformed(HEADER))?;
    let t: i64 = t_text.parse().map_err(|_| SignatureError::Malformed(HEADER))?;
    if candidates.is_empty() {
        return Err(SignatureError::Missing(HEADER));
    }
    within_tolerance(t, now_secs, tolerance)?;
    for secret in secrets {
        let expected = mac(secret.expose().as_bytes(), &[t_text.as_bytes(), b".", req.body]);
        if candidates.iter().any(|c| expected.clone().verify_slice(c).is_ok()) {
            return Ok(t);
        }
    }
    Err(SignatureError::NoMatch)
}

/// The HMAC key of a Standard Webhooks secret (`whsec_` + base64).
pub fn standard_key(secret: &SigningSecret) -> Result<Vec<u8>, SignatureError> {
    let encoded = secret.expose().strip_prefix("whsec_").unwrap_or(secret.expose());
    BASE64
        .decode(encoded)
        .map_err(|_| SignatureError::BadSecret("a Standard Webhooks secret is whsec_ + base64"))
}

/// Verifies a Standard Webhooks signature. Returns the signed timestamp.
pub fn verify_standard(
    req: &SignedRequest<'_>,
    secrets: &[SigningSecret],
    now_secs: i64,
    tolerance: i64,
) -> Result<i64, SignatureError> {
    let id = req.webhook_id.ok_or(SignatureError::Missing("webhook-id"))?;
    let ts_text = req
        .webhook_timestamp
        .ok_or(SignatureError::Missing("webhook-timestamp"))?;
    let header = req
        .webhook_signature
        .ok_or(SignatureError::Missing("webhook-signature"))?;
    let ts: i64 = ts_text
        .parse()
        .map_err(|_| SignatureError::Malformed("webhook-timestamp"))?;
    within_tolerance(ts, now_secs, tolerance)?;
    let candidates: Vec<Vec<u8>> = header
        .split_whitespace()
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .filter_map(|(_, sig)| BASE64.decode(sig).ok())
        .collect();
    if candidates.is_empty() {
        return Err(SignatureError::Malformed("webhook-signature"));
    }
    for secret in secrets {
        let key = standard_key(secret)?;
        let expected = mac(&key, &[id.as_bytes(), b".", ts_text.as_bytes(), b".", req.body]);
        if candidates.iter().any(|c| expected.clone().verify_slice(c).is_ok()) {
            return Ok(ts);
        }
    }
    Err(SignatureError::NoMatch)
}

/// Signs like Stripe does (`t=...,v1=...`): for the simulator, sample events and tests.
pub fn sign_stripe(secret: &SigningSecret, timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let sig = mac(secret.expose().as_bytes(), &[t.as_bytes(), b".", body])
        .finalize()
        .into_bytes();
    format!("t={t},v1={}", hex::encode(sig))
}

/// Signs like Standard Webhooks does (`v1,<base64>`).
pub fn sign_standard(secret: &SigningSecret, id: &str, timestamp: i64, body: &[u8]) -> Result<String, SignatureError> {
    let key = standard_key(secret)?;
    let ts = timestamp.to_string();
    let sig = mac(&key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body])
        .finalize()
        .into_bytes();
    Ok(format!("v1,{}", BASE64.encode(sig)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> SigningSecret {
        SigningSecret::parse(s).unwrap()
    }

    fn stripe_req<'a>(header: &'a str, body: &'a [u8]) -> SignedRequest<'a> {
        SignedRequest {
            stripe_signature: Some(header),
            webhook_id: None,
            webhook_timestamp: None,
            webhook_signature: None,
            body,
        }
    }

    fn standard_req<'a>(id: &'a str, ts: &'a str, sig: &'a str, body: &'a [u8]) -> SignedRequest<'a> {
        SignedRequest {
            stripe_signature: None,
            webhook_id: Some(id),
            webhook_timestamp: Some(ts),
            webhook_signature: Some(sig),
            body,
        }
    }

    /// The example published in the Standard Webhooks specification (also what its official libraries produce).
    #[test]
    fn standard_webhooks_spec_example() {
        let s = secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let (id, ts, body) = (
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        let expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        assert_eq!(sign_standard(&s, id, ts, body).unwrap(), expected);
        let req = standard_req(id, "1614265330", expected, body);
        assert_eq!(verify_standard(&req, std::slice::from_ref(&s), ts, 300), Ok(ts));
        // Several signatures, one of them valid, pass; an unknown version is skipped.
        let multi = format!("v2,abc v1,AAAA {expected}");
        assert_eq!(
            verify_standard(&standard_req(id, "1614265330", &multi, body), &[s], ts, 300),
            Ok(ts)
        );
    }

    /// Stripe's scheme; the expected value was computed with the official stripe-python library
    /// (`stripe.WebhookSignature._compute_signature("1614265330.{\"id\":\"evt_test\"}", "whsec_test_secret")`).
    #[test]
    fn stripe_documented_scheme() {
        let s = secret("whsec_test_secret");
        let body = br#"{"id":"evt_test"}"#;
        let header = "t=1614265330,v1=00cd8805b6dfb4317048892c492f8ff769e2075ec20013c6ed546e639a4e20ba";
        assert_eq!(sign_stripe(&s, 1_614_265_330, body), header);
        assert_eq!(
            verify_stripe(&stripe_req(header, body), &[s], 1_614_265_400, 300),
            Ok(1_614_265_330)
        );
    }

    #[test]
    fn debug_withholds_the_body_and_the_signatures() {
        let body = br#"{"client_secret":"pi_1_secret_x"}"#;
        let header = sign_stripe(&secret("whsec_test_secret"), 1, body);
        let shown = format!("{:?}", stripe_req(&header, body));
        assert!(!shown.contains("secret_x") && !shown.contains(&header), "{shown}");
    }

    #[test]
    fn tampering_is_refused() {
        let s = secret("whsec_test_secret");
        let body = br#"{"id":"evt_test","amount":1000}"#;
        let now = 1_700_000_000;
        let good = sign_stripe(&s, now, body);
        assert!(verify_stripe(&stripe_req(&good, body), std::slice::from_ref(&s), now, 300).is_ok());
        // body
        let tampered = br#"{"id":"evt_test","amount":9000}"#;
        assert_eq!(
            verify_stripe(&stripe_req(&good, tampered), std::slice::from_ref(&s), now, 300),
            Err(SignatureError::NoMatch)
        );
        // header: timestamp changed, signature kept
        let moved = good.replacen(&format!("t={now}"), &format!("t={}", now + 1), 1);
        assert_eq!(
            verify_stripe(&stripe_req(&moved, body), std::slice::from_ref(&s), now, 300),
            Err(SignatureError::NoMatch)
        );
        // timestamp outside tolerance (replay), both directions
        assert_eq!(
            verify_stripe(&stripe_req(&good, body), std::slice::from_ref(&s), now + 301, 300),
            Err(SignatureError::OutsideTolerance(300))
        );
        assert_eq!(
            verify_stripe(&stripe_req(&good, body), std::slice::from_ref(&s), now - 301, 300),
            Err(SignatureError::OutsideTolerance(300))
        );
        // secret
        assert_eq!(
            verify_stripe(&stripe_req(&good, body), &[secret("whsec_other")], now, 300),
            Err(SignatureError::NoMatch)
        );
        // a second timestamp, before or after the signed one: ambiguous, refused (not last-wins)
        for doubled in [format!("t={},{good}", now + 1), format!("{good},t={}", now + 1)] {
            assert_eq!(
                verify_stripe(&stripe_req(&doubled, body), std::slice::from_ref(&s), now, 300),
                Err(SignatureError::Malformed("Stripe-Signature"))
            );
        }
        // timestamps at the edges of i64: out of tolerance, no overflow
        for edge in [i64::MIN, i64::MIN + 1, -1, i64::MAX] {
            let header = format!("t={edge},v1={}", "00".repeat(32));
            assert_eq!(
                verify_stripe(&stripe_req(&header, body), std::slice::from_ref(&s), now, 300),
                Err(SignatureError::OutsideTolerance(300))
            );
        }
        // missing and malformed headers
        let none = SignedRequest {
            stripe_signature: None,
            webhook_id: None,
            webhook_timestamp: None,
            webhook_signature: None,
            body,
        };
        assert_eq!(
            verify_stripe(&none, std::slice::from_ref(&s), now, 300),
            Err(SignatureError::Missing("Stripe-Signature"))
        );
        assert!(verify_stripe(&stripe_req("garbage", body), std::slice::from_ref(&s), now, 300).is_err());
        assert!(verify_stripe(
            &stripe_req(&format!("t={now}"), body),
            std::slice::from_ref(&s),
            now,
            300
        )
        .is_err());
        assert!(verify_stripe(&stripe_req(&format!("t={now},v1=zz"), body), &[s], now, 300).is_err());
    }

    #[test]
    fn standard_tampering_is_refused() {
        let s = secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let body = br#"{"type":"payment.succeeded"}"#;
        let now = 1_700_000_000;
        let sig = sign_standard(&s, "msg_1", now, body).unwrap();
        let ts = now.to_string();
        for edge in [i64::MIN, -1, i64::MAX] {
            assert_eq!(
                verify_standard(
                    &standard_req("msg_1", &edge.to_string(), &sig, body),
                    std::slice::from_ref(&s),
                    now,
                    300
                ),
                Err(SignatureError::OutsideTolerance(300))
            );
        }
        assert!(verify_standard(
            &standard_req("msg_1", &ts, &sig, body),
            std::slice::from_ref(&s),
            now,
            300
        )
        .is_ok());
        assert_eq!(
            verify_standard(
                &standard_req("msg_2", &ts, &sig, body),
                std::slice::from_ref(&s),
                now,
                300
            ),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            verify_standard(
                &standard_req("msg_1", &ts, &sig, b"{}"),
                std::slice::from_ref(&s),
                now,
                300
            ),
            Err(SignatureError::NoMatch)
        );
        let later = (now + 1).to_string();
        assert_eq!(
            verify_standard(
                &standard_req("msg_1", &later, &sig, body),
                std::slice::from_ref(&s),
                now + 1,
                300
            ),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            verify_standard(
                &standard_req("msg_1", &ts, &sig, body),
                std::slice::from_ref(&s),
                now + 301,
                300
            ),
            Err(SignatureError::OutsideTolerance(300))
        );
        assert_eq!(
            verify_standard(&standard_req("msg_1", &ts, &sig, body), &[s], now - 301, 300),
            Err(SignatureError::OutsideTolerance(300))
        );
        let other = secret("whsec_dGhpcyBpcyBhbm90aGVyIGtleQ==");
        assert_eq!(
            verify_standard(&standard_req("msg_1", &ts, &sig, body), &[other], now, 300),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn rotation_any_active_secret_matches_any_signature() {
        let (old, new) = (secret("whsec_old"), secret("whsec_new"));
        let body = b"{}";
        let now = 1_700_000_000;
        // The PSP signs with the new secret only while we still list the old one first.
        let header = sign_stripe(&new, now, body);
        assert!(verify_stripe(&stripe_req(&header, body), &[old.clone(), new.clone()], now, 300).is_ok());
        // The PSP sends both signatures during its own rotation.
        let new_sig = sign_stripe(&new, now, body);
        let (_, new_v1) = new_sig.split_once(",v1=").unwrap();
        let both = format!("{},v1={new_v1}", sign_stripe(&old, now, body));
        assert!(verify_stripe(&stripe_req(&both, body), std::slice::from_ref(&new), now, 300).is_ok());
        assert!(verify_stripe(&stripe_req(&both, body), &[old], now, 300).is_ok());
    }
}
