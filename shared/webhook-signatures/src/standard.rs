//! Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> [v1,<base64> ...]`,
//! HMAC-SHA256 over `"{id}.{timestamp}." + body`, keyed with the base64-decoded part of `whsec_<base64>`.
//! Signatures of another version are skipped.

use crate::{any_matches, within_tolerance, SignatureError, SignedRequest};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use payments_core::SigningSecret;

/// The HMAC key of a Standard Webhooks secret (`whsec_` + base64).
pub fn standard_key(secret: &SigningSecret) -> Result<Vec<u8>, SignatureError> {
    let encoded = secret.expose().strip_prefix("whsec_").unwrap_or(secret.expose());
    BASE64
        .decode(encoded)
        .map_err(|_| SignatureError::BadSecret("a Standard Webhooks secret is whsec_ + base64"))
}

/// Verifies a Standard Webhooks signature with any of `secrets`, the timestamp within `tolerance` seconds
/// of `now_secs`. Returns the signed timestamp.
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
    let signed: [&[u8]; 5] = [id.as_bytes(), b".", ts_text.as_bytes(), b".", req.body];
    if any_matches(secrets, standard_key, &signed, &candidates)? {
        return Ok(ts);
    }
    Err(SignatureError::NoMatch)
}

/// Signs like Standard Webhooks does (`v1,<base64>`): for the simulator, sample events and tests.
#[cfg(any(test, feature = "signing"))]
pub fn sign_standard(secret: &SigningSecret, id: &str, timestamp: i64, body: &[u8]) -> Result<String, SignatureError> {
    use hmac::Mac;
    let key = standard_key(secret)?;
    let ts = timestamp.to_string();
    let sig = crate::mac(&key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body])
        .finalize()
        .into_bytes();
    Ok(format!("v1,{}", BASE64.encode(sig)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::secret;

    /// A case: its name, the id, the timestamp, the body, our clock, the secret, and what verifying gives.
    type Case<'a> = (
        &'a str,
        &'a str,
        String,
        &'a [u8],
        i64,
        &'a str,
        Result<i64, SignatureError>,
    );

    fn req<'a>(id: &'a str, ts: &'a str, sig: &'a str, body: &'a [u8]) -> SignedRequest<'a> {
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
        let signed = req(id, "1614265330", expected, body);
        assert_eq!(verify_standard(&signed, std::slice::from_ref(&s), ts, 300), Ok(ts));
        // Several signatures, one of them valid, pass; an unknown version is skipped.
        let multi = format!("v2,abc v1,AAAA {expected}");
        assert_eq!(
            verify_standard(&req(id, "1614265330", &multi, body), &[s], ts, 300),
            Ok(ts)
        );
    }

    /// Each change of a signed request (id, body, timestamp, clock, secret) and what it is refused as.
    #[test]
    fn standard_tampering_is_refused() {
        const KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body: &[u8] = br#"{"type":"payment.succeeded"}"#;
        let now = 1_700_000_000;
        let sig = sign_standard(&secret(KEY), "msg_1", now, body).unwrap();
        let outside = Err(SignatureError::OutsideTolerance(300));
        let ts = now.to_string();
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            ("as signed", "msg_1", ts.clone(), body, now, KEY, Ok(now)),
            ("another id", "msg_2", ts.clone(), body, now, KEY, Err(SignatureError::NoMatch)),
            ("body changed", "msg_1", ts.clone(), b"{}", now, KEY, Err(SignatureError::NoMatch)),
            ("timestamp changed", "msg_1", (now + 1).to_string(), body, now + 1, KEY, Err(SignatureError::NoMatch)),
            ("replayed after the tolerance", "msg_1", ts.clone(), body, now + 301, KEY, outside.clone()),
            ("signed after our clock beyond it", "msg_1", ts.clone(), body, now - 301, KEY, outside.clone()),
            ("another secret", "msg_1", ts, body, now, "whsec_dGhpcyBpcyBhbm90aGVyIGtleQ==", Err(SignatureError::NoMatch)),
            // Timestamps at the edges of i64: out of tolerance, no overflow.
            ("i64::MIN", "msg_1", i64::MIN.to_string(), body, now, KEY, outside.clone()),
            ("-1", "msg_1", "-1".into(), body, now, KEY, outside.clone()),
            ("i64::MAX", "msg_1", i64::MAX.to_string(), body, now, KEY, outside),
        ];
        for (name, id, ts, body, now, key, expected) in cases {
            let got = verify_standard(&req(id, &ts, &sig, body), &[secret(key)], now, 300);
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn missing_and_malformed_headers_are_refused() {
        let s = [secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")];
        let body = b"{}";
        let none = SignedRequest {
            webhook_id: None,
            ..req("msg_1", "1", "v1,AAAA", body)
        };
        assert_eq!(
            verify_standard(&none, &s, 1, 300),
            Err(SignatureError::Missing("webhook-id"))
        );
        let cases = [
            ("1", "v2,AAAA", SignatureError::Malformed("webhook-signature")),
            ("1", "v1", SignatureError::Malformed("webhook-signature")),
            ("soon", "v1,AAAA", SignatureError::Malformed("webhook-timestamp")),
        ];
        for (ts, sig, expected) in cases {
            assert_eq!(
                verify_standard(&req("msg_1", ts, sig, body), &s, 1, 300),
                Err(expected),
                "{sig}"
            );
        }
        let not_base64 = [secret("whsec_not base64!")];
        assert!(matches!(
            verify_standard(&req("msg_1", "1", "v1,AAAA", body), &not_base64, 1, 300),
            Err(SignatureError::BadSecret(_))
        ));
    }
}
