//! One Adyen request: its size, its Basic auth, every item's HMAC (all before anything is written), then
//! each item applied through the intake's steps on the payment, or parked for the retry, and `[accepted]`.

use super::config::AdyenSecrets;
use super::fact::{self, Notification};
use super::notification;
use super::parked::{self, ParkedItem};
use crate::admission::admitted;
use crate::answer::{unknown_provider, Answer};
use crate::app::App;
use crate::metrics::RequestMetrics;
use crate::payment::{locate, on_payment_with};
use crate::providers::{Provider, Providers};
use crate::redact::redact;
use lambda_http::http::StatusCode;
use lambda_http::Request;
use shared::http::{self, ApiError};
use shared::store::ParkedKind;
use shared::{CorrelationId, PaymentStatus};
use std::sync::Arc;
use tracing::{info, warn};
use webhook_signatures::adyen::{self, Item, Mode, Unsigned};

/// What became of one item.
pub(crate) enum Handled {
    /// Applied, a duplicate, stale, ignored, quarantined or parked as an unknown payment: done with.
    Done(Answer),
    /// Cannot be applied now (the intake's 503 answer): the caller parks it or leaves it parked.
    NotNow(ApiError),
}

/// `POST /webhooks/<name>` of an Adyen provider: `[accepted]` once every item is applied or parked.
pub async fn intake(
    app: &App,
    req: &Request,
    name: &str,
    correlation_id: CorrelationId,
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let (providers, verified) = verified(app, req, name, metrics).await?;
    let provider = providers.get(name).ok_or_else(|| unknown_provider(name))?;
    let received = shared::clock::now_ms() / 1000;
    for (item, mode) in verified {
        let parked = ParkedItem::new(item, mode, received);
        if let Handled::NotNow(why) = handle(app, provider, &parked, false, correlation_id.clone(), metrics).await? {
            parked::park(app, provider, &parked, &why).await?;
        }
    }
    Ok(Answer::Accepted)
}

/// The body's size, the Basic auth, and every item's HMAC. A refusal (401) re-reads the secrets once (Adyen
/// may have been given a new key or password) and is then final: nothing is written.
async fn verified(
    app: &App,
    req: &Request,
    name: &str,
    metrics: &mut RequestMetrics,
) -> Result<(Arc<Providers>, Vec<(Item, Mode)>), ApiError> {
    let body = http::body_bytes(req);
    let providers = admitted(app, name, body, metrics).await?;
    let authorization = http::header(req, "authorization");
    let checked = match check(&providers, name, authorization, body)? {
        Err(_) => match app.providers.refresh_after_failed_signature().await {
            Some(fresh) => check(&fresh, name, authorization, body)?.map(|v| (fresh, v)),
            None => check(&providers, name, authorization, body)?.map(|v| (providers, v)),
        },
        Ok(v) => Ok((providers, v)),
    };
    checked.map_err(|refused| {
        metrics.unauthorized = 1;
        warn!(provider = %name, error = %refused, "Adyen notification refused");
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", refused)
    })
}

/// `Err` (outer) a body that is not a notification (400); `Ok(Err)` why the request is not Adyen's (401).
fn check(
    providers: &Providers,
    name: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Result<Result<Vec<(Item, Mode)>, String>, ApiError> {
    let provider = providers.get(name).ok_or_else(|| unknown_provider(name))?;
    let secrets = AdyenSecrets::parse(&provider.secrets).map_err(|why| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "misconfigured",
            format!("provider {name} {why}"),
        )
    })?;
    if !secrets.authorizes(authorization) {
        return Ok(Err("Basic auth missing or wrong".to_owned()));
    }
    let items = notification::items(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let modes: Result<Vec<Mode>, Unsigned> = items
        .iter()
        .enumerate()
        .map(|(i, item)| adyen::verify(i, item, &secrets.keys))
        .collect();
    Ok(modes
        .map(|m| items.into_iter().zip(m).collect())
        .map_err(|e| e.to_string()))
}

/// One verified item: read in our terms, then applied; what we cannot read is quarantined, what we do not
/// act on acknowledged. `Err` only when storage failed even for the quarantine.
pub(crate) async fn handle(
    app: &App,
    provider: &Provider,
    parked: &ParkedItem,
    redelivery: bool,
    correlation_id: CorrelationId,
    metrics: &mut RequestMetrics,
) -> Result<Handled, ApiError> {
    let body = parked.to_body();
    let notification = match fact::parse(&parked.item, parked.mode(), parked.created) {
        Ok(Some(n)) => n,
        Ok(None) => {
            info!(event_code = ?parked.item.event_code, "Adyen eventCode not handled; acknowledged");
            return Ok(Handled::Done(Answer::Ignored));
        }
        Err(unparseable) => {
            metrics.quarantines = 1;
            let key = parked.key();
            app.store
                .park(
                    ParkedKind::Quarantined,
                    &provider.name,
                    &key,
                    &unparseable.0,
                    &redact(&body),
                )
                .await?;
            warn!(reason = %unparseable.0, key, "signed but unusable Adyen item quarantined");
            return Ok(Handled::Done(Answer::Quarantined));
        }
    };
    Ok(
        match on_notification(app, provider, &notification, redelivery, correlation_id, &body, metrics).await {
            Ok(answer) => Handled::Done(answer),
            Err(e) => Handled::NotNow(e),
        },
    )
}

/// The notification through the intake's steps on the payment (lookup, lease, the one finalize). A
/// `CANCEL_OR_REFUND` is a refund when the payment holds a capture, else a cancel; if the payment was
/// captured meanwhile (the write then finds the cancel stale), it is applied once more as the refund.
async fn on_notification(
    app: &App,
    provider: &Provider,
    n: &Notification,
    redelivery: bool,
    correlation_id: CorrelationId,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let Some(if_captured) = &n.if_captured else {
        return event_on_payment(app, provider, &n.event, redelivery, correlation_id, body, metrics).await;
    };
    let captured = holds_capture(app, n).await?;
    let mut event = n.event.clone();
    if captured {
        event.outcome = if_captured.clone();
    }
    let answer = event_on_payment(app, provider, &event, redelivery, correlation_id.clone(), body, metrics).await?;
    if answer != Answer::Stale || captured || !holds_capture(app, n).await? {
        return Ok(answer);
    }
    event.outcome = if_captured.clone();
    event_on_payment(app, provider, &event, true, correlation_id, body, metrics).await
}

/// One event of a notification through the steps on the payment every scheme shares, its observation
/// without a time.
async fn event_on_payment(
    app: &App,
    provider: &Provider,
    event: &crate::psp_event::PspEvent,
    redelivery: bool,
    correlation_id: CorrelationId,
    body: &[u8],
    metrics: &mut RequestMetrics,
) -> Result<Answer, ApiError> {
    let mut observation = event.observation(event.check(&provider.expect).err(), correlation_id);
    // Adyen's `eventDate` is unsigned: no time is recorded or compared (the order is the decision's rules).
    observation.occurred_at_ms = None;
    on_payment_with(app, provider, event, observation, redelivery, body, metrics).await
}

/// Does the payment the notification is about hold a capture (captured, refunded, or a capture taken after
/// it failed)? An unknown payment holds none.
async fn holds_capture(app: &App, n: &Notification) -> Result<bool, ApiError> {
    let Some(id) = locate(app, &n.event).await? else {
        return Ok(false);
    };
    Ok(app.store.get(&id).await?.is_some_and(|p| {
        matches!(p.status, PaymentStatus::Captured | PaymentStatus::Refunded) || p.stray_capture.is_some()
    }))
}
