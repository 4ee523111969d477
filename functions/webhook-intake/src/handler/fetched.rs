//! A Stripe event that came without a signature, over a channel that authenticates it instead: read from
//! Stripe's Events API by the catch-up job (`crate::catchup`) with our secret key, or delivered by Amazon
//! EventBridge from Stripe's partner event source (`crate::eventbridge`), where the bus is the trust
//! boundary. It goes through the very steps a webhook does after its signature (parse, endpoint check,
//! lookup, lease, the one finalize), so an event ends the same whichever way it came; dedup by its id
//! answers the second way in `duplicate`.

use super::{is_redelivery, on_payment, stripe_parsed, triaged};
use crate::answer::{Answer, Flow};
use crate::metrics::RequestMetrics;
use crate::providers::Provider;
use shared::http::ApiError;
use shared::CorrelationId;

/// The way an unsigned event came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsigned {
    /// Listed by the Events API: read first, as a redelivery is, since most events the catch-up sees were
    /// delivered already (dedup by event id answers them from one read).
    EventsApi,
    /// Delivered through EventBridge, received at this time (epoch seconds): a redelivery, read first, when
    /// it comes as late after its creation as a webhook's retry would.
    EventBridge { received_secs: i64 },
}

/// Applies one Stripe event read from the Events API (its JSON as listed) as the intake applies a webhook;
/// the answer is the webhook's (`applied`, `duplicate`, `stale`, `ignored`, `quarantined`,
/// `unknown_payment`), an `Err` what the webhook would have answered with an error (a 503 to retry later).
pub async fn apply_fetched(
    app: &crate::app::App,
    provider: &Provider,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    apply_unsigned(app, provider, body, Unsigned::EventsApi, metrics).await
}

/// Applies one unsigned Stripe event (its JSON) that came `way`, with the answers of [`apply_fetched`].
pub async fn apply_unsigned(
    app: &crate::app::App,
    provider: &Provider,
    body: &[u8],
    way: Unsigned,
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let event = match triaged(app, provider, stripe_parsed(body, metrics), None, body, metrics).await? {
        Flow::Go(event) => event,
        Flow::Answered(answer) => return Ok(answer),
    };
    let (prefix, redelivery) = match way {
        Unsigned::EventsApi => ("catchup", true),
        Unsigned::EventBridge { received_secs } => ("eventbridge", is_redelivery(&app.settings, &event, received_secs)),
    };
    let correlation_id = CorrelationId::derived(prefix, event.id.as_str());
    on_payment(app, provider, &event, redelivery, correlation_id, body, metrics).await
}
