//! The Adyen endpoint's secrets, from the same source as every provider's (`WEBHOOK_SECRETS` or Secrets
//! Manager, see `crate::providers`), one string each in the provider's list:
//!
//! - `hmac:test:<hex>` / `hmac:live:<hex>`: an HMAC key as the Customer Area shows it, and the mode of the
//!   account it belongs to. Several during a rotation; the key that verifies an item says test or live.
//! - `basic:<username>:<password>`: the Basic auth the webhook is configured with (several during a
//!   rotation).
//!
//! At least one of each, or the cold start fails naming what is missing, never a value.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use shared::SigningSecret;
use webhook_signatures::adyen::{HmacKey, Mode};

/// Characters a Basic auth password has at least.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// The endpoint's keys and credentials.
#[derive(Debug, Clone)]
pub struct AdyenSecrets {
    pub keys: Vec<HmacKey>,
    credentials: Vec<Credential>,
}

/// One `username:password` (the password never shown).
#[derive(Clone)]
struct Credential {
    /// `username:password`, as the `Authorization` header carries it once decoded.
    joined: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(..)")
    }
}

/// Why one secret string cannot be an Adyen secret (never its value).
pub fn check(secret: &SigningSecret) -> Result<(), String> {
    Entry::parse(secret.expose()).map(|_| ())
}

enum Entry {
    Key(HmacKey),
    Basic(Credential),
}

impl Entry {
    fn parse(value: &str) -> Result<Self, String> {
        if let Some(rest) = value.strip_prefix("hmac:") {
            let (mode, hex) = match rest.split_once(':') {
                Some(("test", hex)) => (Mode::Test, hex),
                Some(("live", hex)) => (Mode::Live, hex),
                _ => return Err("is an hmac key without its mode (hmac:test:<hex> or hmac:live:<hex>)".to_owned()),
            };
            return HmacKey::from_hex(mode, hex)
                .map(Entry::Key)
                .map_err(|why| format!("hmac key {why}"));
        }
        if let Some(rest) = value.strip_prefix("basic:") {
            let (user, password) = rest
                .split_once(':')
                .ok_or("is a basic credential without a password (basic:<username>:<password>)")?;
            if user.is_empty() || password.chars().count() < MIN_PASSWORD_CHARS {
                return Err(format!(
                    "is a basic credential with an empty username or a password under {MIN_PASSWORD_CHARS} characters"
                ));
            }
            return Ok(Entry::Basic(Credential {
                joined: rest.to_owned(),
            }));
        }
        Err("is neither hmac:<mode>:<hex> nor basic:<username>:<password>".to_owned())
    }
}

impl AdyenSecrets {
    /// The provider's secrets, each checked; at least one key and one credential.
    pub fn parse(secrets: &[SigningSecret]) -> Result<Self, String> {
        let (mut keys, mut credentials) = (Vec::new(), Vec::new());
        for (i, secret) in secrets.iter().enumerate() {
            match Entry::parse(secret.expose()).map_err(|why| format!("secret {} {why}", i.saturating_add(1)))? {
                Entry::Key(k) => keys.push(k),
                Entry::Basic(c) => credentials.push(c),
            }
        }
        if keys.is_empty() {
            return Err("has no hmac key (hmac:test:<hex> or hmac:live:<hex>)".to_owned());
        }
        if credentials.is_empty() {
            return Err("has no Basic auth credential (basic:<username>:<password>)".to_owned());
        }
        Ok(Self { keys, credentials })
    }

    /// Does the `Authorization` header carry one of the credentials? Each is compared in constant time (an
    /// HMAC of both under a fixed key, compared by `Mac::verify_slice`), and every one is compared.
    pub fn authorizes(&self, authorization: Option<&str>) -> bool {
        use base64::Engine;
        let Some(decoded) = authorization
            .and_then(|h| h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic ")))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
        else {
            return false;
        };
        let presented = tag(&decoded);
        self.credentials.iter().fold(false, |ok, c| {
            tagger(c.joined.as_bytes()).verify_slice(&presented).is_ok() | ok
        })
    }
}

fn tagger(value: &[u8]) -> Hmac<Sha256> {
    // A fixed key: the MAC only makes the comparison constant-time, it proves nothing by itself.
    #[allow(clippy::expect_used)]
    let mut mac = Hmac::<Sha256>::new_from_slice(b"adyen-basic-auth").expect("HMAC accepts any key length");
    mac.update(value);
    mac
}

fn tag(value: &[u8]) -> Vec<u8> {
    tagger(value).finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const KEY: &str = "hmac:test:44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    const BASIC: &str = "basic:adyen:correct-horse-battery";

    fn secrets(values: &[&str]) -> Vec<SigningSecret> {
        values.iter().map(|v| SigningSecret::parse(*v).unwrap()).collect()
    }

    fn header(user_password: &str) -> String {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_password)
        )
    }

    #[test]
    fn basic_auth_takes_any_configured_credential_and_nothing_else() {
        let s = AdyenSecrets::parse(&secrets(&[KEY, BASIC, "basic:rotated:another-long-password"])).unwrap();
        assert!(s.authorizes(Some(&header("adyen:correct-horse-battery"))));
        assert!(s.authorizes(Some(&header("rotated:another-long-password"))));
        for bad in [
            None,
            Some(header("adyen:correct-horse-batter")),
            Some(header("adyen:correct-horse-battery ")),
            Some(header("Adyen:correct-horse-battery")),
            Some(header("")),
            Some("Bearer abc".to_owned()),
            Some("Basic not*base64".to_owned()),
        ] {
            assert!(!s.authorizes(bad.as_deref()), "{bad:?}");
        }
    }

    #[test]
    fn secrets_that_cannot_be_adyen_ones_are_refused_without_their_value() {
        assert_eq!(
            s_err(&[KEY]),
            "has no Basic auth credential (basic:<username>:<password>)"
        );
        assert_eq!(s_err(&[BASIC]), "has no hmac key (hmac:test:<hex> or hmac:live:<hex>)");
        for (bad, says) in [
            (
                "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
                "neither",
            ),
            (
                "hmac:44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
                "without its mode",
            ),
            (
                "hmac:test:not-hex-at-all-not-hex-at-all-not-hex-at-all-not-hex-at-a",
                "not hexadecimal",
            ),
            ("hmac:live:ABCD", "shorter than 24 bytes"),
            ("basic:adyen", "without a password"),
            ("basic:adyen:short", "under 12"),
            ("basic::long-enough-password", "empty username"),
        ] {
            let err = s_err(&[KEY, BASIC, bad]);
            assert!(err.starts_with("secret 3 ") && err.contains(says), "{bad}: {err}");
            let value = bad.rsplit(':').next().unwrap();
            assert!(!err.contains(value), "{err} shows the value");
        }
        assert!(!format!("{:?}", AdyenSecrets::parse(&secrets(&[KEY, BASIC])).unwrap()).contains("horse"));
    }

    fn s_err(values: &[&str]) -> String {
        AdyenSecrets::parse(&secrets(values)).unwrap_err()
    }
}
