//! Stripe's scheme: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 over `"{t}." + body`,
//! keyed with the secret string as given (`whsec_...`). Other schemes in the header (`v0`) are ignored, as
//! Stripe's libraries do.

use crate::{any_matches, within_tolerance, SignatureError, SignedRequest};
use payments_core::SigningSecret;

const HEADER: &str = "Stripe-Signature";

/// Verifies a Stripe signature with any of `secrets`, the timestamp within `tolerance` seconds of
/// `now_secs`. Returns the signed timestamp.
pub fn verify_stripe(
    req: &SignedRequest<'_>,
    secrets: &[SigningSecret],
    now_secs: i64,
    tolerance: i64,
) -> Result<i64, SignatureError> {
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
    let key_of = |secret: &SigningSecret| Ok(secret.expose().as_bytes().to_vec());
    if any_matches(secrets, key_of, &[t_text.as_bytes(), b".", req.body], &candidates)? {
        return Ok(t);
    }
    Err(SignatureError::NoMatch)
}

/// Signs like Stripe does (`t=...,v1=...`): for the simulator, sample events and tests.
#[cfg(any(test, feature = "signing"))]
pub fn sign_stripe(secret: &SigningSecret, timestamp: i64, body: &[u8]) -> String {
    use hmac::Mac;
    let t = timestamp.to_string();
    let sig = crate::mac(secret.expose().as_bytes(), &[t.as_bytes(), b".", body])
        .finalize()
        .into_bytes();
    format!("t={t},v1={}", hex::encode(sig))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::secret;

    /// A case: its name, the header, the body, our clock, the secret, and what verifying gives.
    type Case<'a> = (&'a str, String, &'a [u8], i64, &'a str, Result<i64, SignatureError>);

    fn req<'a>(header: &'a str, body: &'a [u8]) -> SignedRequest<'a> {
        SignedRequest {
            stripe_signature: Some(header),
            webhook_id: None,
            webhook_timestamp: None,
            webhook_signature: None,
            body,
        }
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
            verify_stripe(&req(header, body), &[s], 1_614_265_400, 300),
            Ok(1_614_265_330)
        );
    }

    /// Each change of a signed request (body, timestamp, clock, secret, header) and what it is refused as.
    #[test]
    fn tampering_is_refused() {
        let s = secret("whsec_test_secret");
        let body: &[u8] = br#"{"id":"evt_test","amount":1000}"#;
        let now = 1_700_000_000;
        let good = sign_stripe(&s, now, body);
        let moved = good.replacen(&format!("t={now}"), &format!("t={}", now + 1), 1);
        let edge = |t: i64| format!("t={t},v1={}", "00".repeat(32));
        let malformed = Err(SignatureError::Malformed(HEADER));
        let outside = Err(SignatureError::OutsideTolerance(300));
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            ("as signed", good.clone(), body, now, "whsec_test_secret", Ok(now)),
            ("body changed", good.clone(), br#"{"id":"evt_test","amount":9000}"#, now, "whsec_test_secret", Err(SignatureError::NoMatch)),
            ("timestamp changed, signature kept", moved, body, now, "whsec_test_secret", Err(SignatureError::NoMatch)),
            ("replayed after the tolerance", good.clone(), body, now + 301, "whsec_test_secret", outside.clone()),
            ("signed after our clock beyond it", good.clone(), body, now - 301, "whsec_test_secret", outside.clone()),
            ("another secret", good.clone(), body, now, "whsec_other", Err(SignatureError::NoMatch)),
            // A second timestamp, before or after the signed one: ambiguous, refused (not last-wins).
            ("a timestamp before", format!("t={},{good}", now + 1), body, now, "whsec_test_secret", malformed.clone()),
            ("a timestamp after", format!("{good},t={}", now + 1), body, now, "whsec_test_secret", malformed.clone()),
            // Timestamps at the edges of i64: out of tolerance, no overflow.
            ("i64::MIN", edge(i64::MIN), body, now, "whsec_test_secret", outside.clone()),
            ("i64::MIN + 1", edge(i64::MIN + 1), body, now, "whsec_test_secret", outside.clone()),
            ("-1", edge(-1), body, now, "whsec_test_secret", outside.clone()),
            ("i64::MAX", edge(i64::MAX), body, now, "whsec_test_secret", outside),
            ("garbage", "garbage".into(), body, now, "whsec_test_secret", malformed.clone()),
            ("no v1", format!("t={now}"), body, now, "whsec_test_secret", Err(SignatureError::Missing(HEADER))),
            ("v1 not hex", format!("t={now},v1=zz"), body, now, "whsec_test_secret", malformed),
        ];
        for (name, header, body, now, key, expected) in cases {
            assert_eq!(
                verify_stripe(&req(&header, body), &[secret(key)], now, 300),
                expected,
                "{name}"
            );
        }
        let none = SignedRequest {
            stripe_signature: None,
            ..req("", body)
        };
        assert_eq!(
            verify_stripe(&none, &[s], now, 300),
            Err(SignatureError::Missing(HEADER))
        );
    }

    #[test]
    fn rotation_any_active_secret_matches_any_signature() {
        let (old, new) = (secret("whsec_old"), secret("whsec_new"));
        let body = b"{}";
        let now = 1_700_000_000;
        // The PSP signs with the new secret only while we still list the old one first.
        let header = sign_stripe(&new, now, body);
        assert!(verify_stripe(&req(&header, body), &[old.clone(), new.clone()], now, 300).is_ok());
        // The PSP sends both signatures during its own rotation.
        let new_sig = sign_stripe(&new, now, body);
        let (_, new_v1) = new_sig.split_once(",v1=").unwrap();
        let both = format!("{},v1={new_v1}", sign_stripe(&old, now, body));
        assert!(verify_stripe(&req(&both, body), std::slice::from_ref(&new), now, 300).is_ok());
        assert!(verify_stripe(&req(&both, body), &[old], now, 300).is_ok());
    }
}
