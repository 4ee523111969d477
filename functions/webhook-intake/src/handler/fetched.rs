//! An event read from Stripe's Events API by the catch-up job (`crate::catchup`) rather than delivered:
//! it goes through the very steps a webhook does after its signature (parse, endpoint check, lookup, lease,
//! the one finalize), so a lost webhook caught up ends exactly as its delivery would have.
//!
//! No signature: the event came over HTTPS from Stripe's API with our secret key, which authenticates it as
//! a signature authenticates a delivery. It is read first, as a redelivery is, since most events the
//! catch-up sees were delivered already (dedup by event id answers them from one read).

use super::{on_payment, triaged, Next};
use crate::metrics::RequestMetrics;
use crate::providers::Provider;
use crate::stripe;
use shared::http::ApiError;
use shared::CorrelationId;

/// Applies one Stripe event read from the Events API (its JSON as listed) as the intake applies a webhook;
/// the answer is the webhook's (`applied`, `duplicate`, `stale`, `ignored`, `quarantined`,
/// `unknown_payment`), an `Err` what the webhook would have answered with an error (a 503 to retry later).
pub async fn apply_fetched(
    app: &super::App,
    provider: &Provider,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<&'static str, ApiError> {
    let event = match triaged(app, provider, stripe::parse(body), None, body, metrics).await? {
        Next::Go(event) => event,
        Next::Answer(answer) => return Ok(answer),
    };
    let correlation_id = CorrelationId::derived("catchup", event.id.as_str());
    on_payment(app, provider, &event, true, correlation_id, body, metrics).await
}
