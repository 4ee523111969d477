//! Step 1's admission, shared by every scheme's request (Adyen's too): the provider the path names (404)
//! and a body the intake takes at all (413, 400), before any signature is checked.

use crate::answer::unknown_provider;
use crate::app::{App, IntakeSettings};
use crate::metrics::RequestMetrics;
use crate::providers::Providers;
use lambda_http::http::StatusCode;
use shared::http::ApiError;
use std::sync::Arc;

/// The providers as loaded now, once the request names one of them (404) and its body is one the intake
/// takes at all (see [`within_limits`]); the request's metrics name the provider from here on.
pub(crate) async fn admitted(
    app: &App,
    name: &str,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Arc<Providers>, ApiError> {
    let providers = app.providers.current().await;
    metrics.provider = providers.get(name).ok_or_else(|| unknown_provider(name))?.name.clone();
    within_limits(&app.settings, body)?;
    Ok(providers)
}

/// A body the intake takes at all: not empty, within `WEBHOOK_MAX_BODY_BYTES` (413).
fn within_limits(settings: &IntakeSettings, body: &[u8]) -> Result<(), ApiError> {
    if body.len() > settings.max_body_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("body over {} bytes", settings.max_body_bytes),
        ));
    }
    if body.is_empty() {
        return Err(ApiError::bad_request("empty body: not a webhook"));
    }
    Ok(())
}
