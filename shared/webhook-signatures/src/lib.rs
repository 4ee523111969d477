//! The signatures of PSP webhooks: one implementation of each scheme, verified by the intake and signed by
//! the simulator, the bench and the tests with the same code, so signer and verifier cannot drift apart.
//!
//! | Module / item | What it owns | What it must never do |
//! |---|---|---|
//! | [`verify_stripe`] | `Stripe-Signature: t=<unix>,v1=<hex>[,v1=...]`, HMAC-SHA256 over `"{t}." + body`, keyed with the secret string as given (`whsec_...`) | accept two timestamps (which one was signed?) |
//! | [`verify_standard`], [`standard_key`] | Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> ...`, HMAC-SHA256 over `"{id}.{timestamp}." + body`, keyed with the base64 part of `whsec_<base64>` | |
//! | [`adyen`] | Adyen's HMAC per notification item (`additionalData.hmacSignature` over eight fields), the item's signed fields, test or live by the key that verified | decide anything on an unsigned field |
//! | [`Scheme`], [`SignatureError`], [`SignedRequest`], [`DEFAULT_TOLERANCE_SECS`], [`MIN_SECRET_BYTES`] | the schemes by name, why a signature is refused, the signed timestamp's tolerance (both directions, no overflow) | |
//! | `samples` (feature `signing`) | signed sample events in API Gateway's shape, for `cargo lambda invoke`, the bench and tests; the `sign-events` binary re-signs `events/` | be linked into a Lambda |
//!
//! Verification runs on the exact raw bytes, before anything is parsed; any listed signature matching any
//! active secret passes (that is how a rotation works); every comparison is constant-time
//! (`Mac::verify_slice`). Signing (`sign_stripe`, `sign_standard`, `adyen::HmacKey::sign`) and the samples
//! are behind the `signing` feature: the intake's Lambda verifies only, and does not carry code it never
//! runs.
//!
//! This crate never sees a payment: it checks bytes against keys and says which key (or none) signed them;
//! what a verified webhook does is the intake's. It never logs, and never shows a secret: keys live in
//! [`SigningSecret`] and [`adyen::HmacKey`], whose `Debug` withholds the value, and no error names one;
//! [`SignedRequest`]'s `Debug` withholds the body and the signatures.

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]
// `samples::stripe_event` is one large `json!` literal.
#![recursion_limit = "256"]

pub mod adyen;
#[cfg(feature = "signing")]
pub mod samples;
mod standard;
mod stripe;

#[cfg(any(test, feature = "signing"))]
pub use standard::sign_standard;
pub use standard::{standard_key, verify_standard};
#[cfg(any(test, feature = "signing"))]
pub use stripe::sign_stripe;
pub use stripe::verify_stripe;

use hmac::{Hmac, KeyInit, Mac};
use payments_core::SigningSecret;
use serde::Deserialize;
use sha2::Sha256;
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

/// Default tolerance between the signed timestamp and our clock, both directions.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

/// Key bytes a signing secret has at least (after `whsec_`; an Adyen HMAC key once decoded from hex).
pub const MIN_SECRET_BYTES: usize = 24;

/// A webhook endpoint's signature scheme (`"scheme"` in `WEBHOOK_PROVIDERS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// Stripe's `Stripe-Signature` header ([`verify_stripe`]).
    Stripe,
    /// Standard Webhooks' three headers ([`verify_standard`]).
    Standard,
    /// Adyen's standard notifications: HMAC per item ([`adyen`]) and Basic auth (the intake's).
    Adyen,
}

/// Why a signature is refused (never naming a secret or a signature).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SignatureError {
    /// A header the scheme needs is absent (or names no signature of a version we know).
    #[error("missing signature header {0}")]
    Missing(&'static str),
    /// A header is present but cannot be read.
    #[error("malformed signature header {0}")]
    Malformed(&'static str),
    /// The signed timestamp is further from our clock than the tolerance (a replay, or a skewed clock).
    #[error("timestamp outside the tolerance of {0} s")]
    OutsideTolerance(i64),
    /// Well-formed, but no listed signature matches any active secret.
    #[error("no signature matches")]
    NoMatch,
    /// A configured secret cannot be a key of its scheme.
    #[error("a configured secret is not usable: {0}")]
    BadSecret(&'static str),
}

/// The signature headers of one request, as the scheme needs them.
#[derive(Clone, Copy)]
pub struct SignedRequest<'a> {
    /// `Stripe-Signature`.
    pub stripe_signature: Option<&'a str>,
    /// `webhook-id` (Standard Webhooks).
    pub webhook_id: Option<&'a str>,
    /// `webhook-timestamp` (Standard Webhooks).
    pub webhook_timestamp: Option<&'a str>,
    /// `webhook-signature` (Standard Webhooks).
    pub webhook_signature: Option<&'a str>,
    /// The raw body, byte for byte as received.
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

/// HMAC-SHA256 of the concatenated `parts` under `key`.
fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length: `new_from_slice` cannot fail (`KeyInit` for HMAC is infallible).
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    for part in parts {
        mac.update(part);
    }
    mac
}

/// The first of `secrets` whose HMAC of `parts` (keyed by `key_of`) is one of `candidates`, compared in
/// constant time; `Ok(false)` when none is.
fn any_matches(
    secrets: &[SigningSecret],
    key_of: impl Fn(&SigningSecret) -> Result<Vec<u8>, SignatureError>,
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> Result<bool, SignatureError> {
    for secret in secrets {
        let expected = mac(&key_of(secret)?, parts);
        if candidates.iter().any(|c| expected.clone().verify_slice(c).is_ok()) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn within_tolerance(timestamp: i64, now_secs: i64, tolerance: i64) -> Result<(), SignatureError> {
    // `abs_diff` cannot overflow, whatever the timestamp (`i64::MIN` included).
    if now_secs.abs_diff(timestamp) > tolerance.unsigned_abs() {
        return Err(SignatureError::OutsideTolerance(tolerance));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret for the tests.
    pub(crate) fn secret(s: &str) -> SigningSecret {
        SigningSecret::parse(s).unwrap()
    }

    #[test]
    fn debug_withholds_the_body_and_the_signatures() {
        let body = br#"{"client_secret":"pi_1_secret_x"}"#;
        let header = sign_stripe(&secret("whsec_test_secret"), 1, body);
        let req = SignedRequest {
            stripe_signature: Some(&header),
            webhook_id: None,
            webhook_timestamp: None,
            webhook_signature: None,
            body,
        };
        let shown = format!("{req:?}");
        assert!(!shown.contains("secret_x") && !shown.contains(&header), "{shown}");
    }

    #[test]
    fn the_tolerance_holds_both_ways_and_never_overflows() {
        assert_eq!(within_tolerance(1_000, 1_300, 300), Ok(()));
        assert_eq!(within_tolerance(1_300, 1_000, 300), Ok(()));
        for (timestamp, now) in [
            (1_000, 1_301),
            (1_301, 1_000),
            (i64::MIN, i64::MAX),
            (i64::MAX, i64::MIN),
        ] {
            assert_eq!(
                within_tolerance(timestamp, now, 300),
                Err(SignatureError::OutsideTolerance(300))
            );
        }
    }

    #[test]
    fn schemes_read_as_configured() {
        let read = |s: &str| serde_json::from_str::<Scheme>(s).ok();
        assert_eq!(read(r#""stripe""#), Some(Scheme::Stripe));
        assert_eq!(read(r#""standard""#), Some(Scheme::Standard));
        assert_eq!(read(r#""adyen""#), Some(Scheme::Adyen));
        assert_eq!(read(r#""Stripe""#), None);
    }
}
