//! Re-signs the sample webhook events in `events/` with the current time and the dev secrets (or the
//! secrets in `WEBHOOK_SECRETS`). Run from the repository root:
//!
//!     cargo run -p webhook-signatures --features signing --bin sign-events
//!
//! Signatures expire after 300 s: re-sign right before `cargo lambda invoke --data-file events/...`.

use payments_core::SigningSecret;
use std::collections::HashMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use webhook_signatures::samples::sign_all;
use webhook_signatures::Scheme;

/// The development secrets documented in README (the same as `scripts/lib.sh`).
const DEV_SECRETS: &str =
    r#"{"stripe":["whsec_local_dev_stripe_signing_secret"],"standard":["whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA=="]}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secrets_json = std::env::var("WEBHOOK_SECRETS").unwrap_or_else(|_| DEV_SECRETS.to_owned());
    let secrets: HashMap<String, Vec<String>> = serde_json::from_str(&secrets_json)?;
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs())?;
    for (provider, scheme) in [("stripe", Scheme::Stripe), ("standard", Scheme::Standard)] {
        let secret = secrets
            .get(provider)
            .and_then(|list| list.first())
            .ok_or_else(|| format!("no secret for {provider} in WEBHOOK_SECRETS"))?;
        let secret = SigningSecret::parse(secret.clone())?;
        for file in sign_all(Path::new("events"), provider, scheme, &secret, now)? {
            println!("signed {}", file.display());
        }
    }
    Ok(())
}
