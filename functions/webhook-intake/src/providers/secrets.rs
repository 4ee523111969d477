//! Whether a secret can be one for its scheme: an empty or truncated secret pasted into Secrets Manager
//! would otherwise load and answer 401 to every webhook.

use shared::SigningSecret;
use webhook_signatures::{standard_key, Scheme, MIN_SECRET_BYTES};

/// Why a secret cannot be one for its scheme (the reason only, never the value).
pub(super) fn check_secret(scheme: Scheme, secret: &SigningSecret) -> Result<(), String> {
    if scheme == Scheme::Adyen {
        return crate::adyen::config::check(secret);
    }
    let Some(key) = secret.expose().strip_prefix("whsec_") else {
        return Err("does not start with whsec_".to_owned());
    };
    let key_bytes = match scheme {
        // Adyen's secrets were checked above.
        Scheme::Stripe | Scheme::Adyen => key.len(),
        Scheme::Standard => standard_key(secret)
            .map_err(|_| "is not base64 after whsec_ (a Standard Webhooks secret)".to_owned())?
            .len(),
    };
    if key_bytes < MIN_SECRET_BYTES {
        return Err(format!("is shorter than {MIN_SECRET_BYTES} bytes after whsec_"));
    }
    Ok(())
}
