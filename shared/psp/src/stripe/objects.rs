//! Stripe's objects as the system reads them (PaymentIntent, Charge, Refund, the error object).
//!
//! Only the fields we act on are read; everything else Stripe sends is ignored, so a new Stripe field never
//! breaks us. An `Option` field Stripe leaves out or sends as `null` reads as `None` (serde's rule for
//! `Option`, no `#[serde(default)]` needed). Values that let someone pay or authenticate (the client secret, the next action's URL) are kept
//! in types whose `Debug` prints `[redacted]`.
//!
//! What a PaymentIntent's status means in our terms is the core's one table
//! ([`payments_core::stripe::IntentStatus`]), which the protocol model decides with too.

use serde::Deserialize;
use shared::{
    Channel, Claims, ClientSecret, CorrelationId, Currency, CustomerAction, DisputeFact, DisputeId, DisputeReport,
    DisputeStatus, Observation, Outcome, Payment, PspReference, RedirectPolicy, RedirectUrl, RefundEntry, RefundReport,
    RefundStatus,
};
use std::collections::HashMap;
use std::fmt;

pub use payments_core::stripe::{IntentFacts, IntentStatus};

/// A Stripe PaymentIntent (`object: "payment_intent"`).
#[derive(Debug, Clone, Deserialize)]
pub struct PaymentIntent {
    pub id: String,
    pub amount: u64,
    /// Lowercase ISO code, as Stripe writes it.
    pub currency: String,
    pub status: IntentStatus,
    pub client_secret: Option<ClientSecret>,
    pub next_action: Option<NextAction>,
    pub last_payment_error: Option<LastPaymentError>,
    pub cancellation_reason: Option<String>,
    /// The charge's id, or the charge itself when requested with `expand[]=latest_charge`.
    pub latest_charge: Option<LatestCharge>,
    #[serde(default)]
    pub metadata: HashMap<String, String>,
    #[serde(default)]
    pub livemode: bool,
    /// Epoch seconds.
    #[serde(default)]
    pub created: i64,
}

/// A page of a search (`object: "search_result"`) or of a list (`object: "list"`, `GET /v1/refunds`).
#[derive(Debug, Clone, Deserialize)]
pub struct SearchResult<T> {
    pub data: Vec<T>,
    #[serde(default)]
    pub has_more: bool,
}

/// A page of `GET /v1/events` (`object: "list"`), newest first. Each event stays raw JSON: the webhook
/// intake's own parser reads it, exactly as it reads a delivered webhook's body.
#[derive(Debug, Clone, Deserialize)]
pub struct EventList {
    pub data: Vec<serde_json::Value>,
    #[serde(default)]
    pub has_more: bool,
}

/// A Stripe Dispute (`object: "dispute"`), as `charge.dispute.*` events carry it and `GET /v1/disputes/{id}`
/// answers. It names our payment only by its `payment_intent` (a dispute carries no metadata of ours).
#[derive(Debug, Clone, Deserialize)]
pub struct Dispute {
    pub id: String,
    pub amount: u64,
    pub currency: String,
    pub status: String,
    pub payment_intent: Option<String>,
}

impl Dispute {
    /// The dispute reporting `fact`; an error for a status or id we cannot read.
    pub fn report(&self, fact: DisputeFact) -> Result<DisputeReport, String> {
        let status = DisputeStatus::parse(&self.status).ok_or_else(|| {
            format!(
                "unknown dispute status {:?}",
                self.status.chars().take(40).collect::<String>()
            )
        })?;
        Ok(DisputeReport {
            id: DisputeId::parse(self.id.as_str()).map_err(|e| e.to_string())?,
            status,
            amount_minor: self.amount,
            fact,
        })
    }

    /// This dispute as read, as `path`'s observation reporting `fact`, found by its PaymentIntent (none: not
    /// ours, nothing to find), stamped with the query's time.
    pub fn observation(
        &self,
        path: Channel,
        fact: DisputeFact,
        correlation: CorrelationId,
    ) -> Result<Observation, String> {
        read_observation(
            path,
            Outcome::Dispute(self.report(fact)?),
            self.payment_intent.as_deref(),
            &self.currency,
            correlation,
        )
    }
}

/// The type of the thin event by which Stripe says it failed to generate an event (never delivered, never
/// listed by `GET /v1/events`) and names the object it was about.
pub const GENERATION_FAILURE_RESOLVED: &str = "v2.core.health.event_generation_failure.resolved";

/// Stripe's event-generation failure as `GET /v2/core/events/{id}` answers it: the thin event delivered to an
/// event destination carries no data, only its id, so the object is learnt from this read.
#[derive(Debug, Clone, Deserialize)]
pub struct GenerationFailure {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: GenerationFailureData,
}

/// The failure's `data`; only `impact` is read (`alert_id`, `summary`, `severity`, ... are for people).
#[derive(Debug, Clone, Deserialize)]
pub struct GenerationFailureData {
    pub impact: GenerationFailureImpact,
}

/// What the failure kept from us: the event type never generated and the object it was about.
#[derive(Debug, Clone, Deserialize)]
pub struct GenerationFailureImpact {
    /// The type of event Stripe failed to generate (`refund.updated`, ...).
    pub event_type: String,
    pub related_object: RelatedObject,
}

/// The object an event-generation failure names (`id` `re_...`, `type` `refund`, `url` `/v1/refunds/re_...`).
#[derive(Debug, Clone, Deserialize)]
pub struct RelatedObject {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
}

/// Which events one `GET /v1/events` asks for: created within `[created_gte, created_lte]` (epoch seconds),
/// of `types` (at most 20, Stripe's limit), after the event `starting_after` in the list's order (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventQuery<'a> {
    pub created_gte: i64,
    pub created_lte: i64,
    pub types: &'a [&'a str],
    pub starting_after: Option<&'a str>,
    /// 1 to 100.
    pub limit: u8,
}

/// What the customer must do (`next_action`). Only a redirect carries a URL we hand on; `use_stripe_sdk` is
/// served by the client secret.
#[derive(Debug, Clone, Deserialize)]
pub struct NextAction {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub redirect_to_url: Option<RedirectToUrl>,
}

#[derive(Clone, Deserialize)]
pub struct RedirectToUrl {
    pub url: Option<String>,
}

impl fmt::Debug for RedirectToUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RedirectToUrl([redacted])")
    }
}

/// Why the last attempt failed (`last_payment_error`).
#[derive(Debug, Clone, Deserialize)]
pub struct LastPaymentError {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub code: Option<String>,
    pub decline_code: Option<String>,
}

impl LastPaymentError {
    /// The decline as we record it: the decline code, else the error code, made to follow the text rules
    /// (`shared::text::sanitized`): recovery cannot refuse a PSP's answer, and the webhook intake checks the
    /// raw values itself before it gets here.
    pub fn reason(&self) -> String {
        shared::text::sanitized(self.raw_reason(), shared::text::MAX_REASON_CHARS)
    }

    /// The decline code, else the error code, as Stripe sent it.
    pub fn raw_reason(&self) -> &str {
        self.decline_code
            .as_deref()
            .or(self.code.as_deref())
            .unwrap_or("payment_failed")
    }
}

/// The customer's action from a PaymentIntent's client secret and `next_action` (webhooks and status queries
/// alike), under this process's redirect policy: see [`customer_action_with`].
pub fn customer_action(
    client_secret: Option<&ClientSecret>,
    next_action: Option<&NextAction>,
) -> Result<CustomerAction, String> {
    customer_action_with(client_secret, next_action, RedirectPolicy::current())
}

/// The secret, and the URL when the action is a redirect. A URL `policy` refuses (another host than
/// `REDIRECT_HOSTS`, plain http, user info) is not handed on, but it drops only itself: the client secret
/// alone serves the action (Stripe.js handles 3-D Secure with it), so the payment still waits for the
/// customer instead of the answer being unusable. Only an action with neither is an error. The decision is
/// the core's [`CustomerAction::offered`] (the protocol model takes it too); this logs the refusal.
pub fn customer_action_with(
    client_secret: Option<&ClientSecret>,
    next_action: Option<&NextAction>,
    policy: &RedirectPolicy,
) -> Result<CustomerAction, String> {
    // Deserialized as it came; checked here like any secret that enters (an empty one is none).
    let secret = client_secret
        .map(|s| ClientSecret::parse(s.expose()))
        .transpose()
        .map_err(|e| e.to_string())?;
    let raw = next_action
        .and_then(|a| a.redirect_to_url.as_ref())
        .and_then(|r| r.url.clone());
    let url = raw.map(|url| RedirectUrl::parse_with(url, policy));
    let offered = CustomerAction::offered(secret, url).map_err(|e| format!("next_action: {e}"))?;
    if let Some(refused) = &offered.refused_url {
        // The URL itself is never logged: it may carry a one-time token.
        tracing::warn!(error = %refused, "redirect URL refused by our policy; the client secret alone is handed on");
    }
    Ok(offered.action)
}

/// `latest_charge`: an id, or the expanded Charge.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum LatestCharge {
    Expanded(Box<Charge>),
    Id(String),
}

/// A Stripe Charge (`object: "charge"`).
#[derive(Debug, Clone, Deserialize)]
pub struct Charge {
    pub id: String,
    pub amount: u64,
    /// Cumulative, in the smallest unit.
    pub amount_refunded: u64,
    #[serde(default)]
    pub captured: bool,
    pub currency: String,
    pub payment_intent: Option<String>,
    pub payment_method_details: Option<PaymentMethodDetails>,
}

/// `payment_method_details` of a charge: of a card, what an authorization's capture depends on.
#[derive(Debug, Clone, Deserialize)]
pub struct PaymentMethodDetails {
    pub card: Option<CardDetails>,
}

/// `payment_method_details.card`.
#[derive(Debug, Clone, Deserialize)]
pub struct CardDetails {
    /// Manual capture: when (epoch seconds) Stripe releases the authorization if it is not captured.
    pub capture_before: Option<i64>,
}

/// A Stripe Refund (`object: "refund"`). `status`: `pending`, `requires_action`, `succeeded`, `failed` or
/// `canceled`.
#[derive(Debug, Clone, Deserialize)]
pub struct Refund {
    pub id: String,
    pub amount: u64,
    pub currency: String,
    pub status: String,
    pub payment_intent: Option<String>,
    pub charge: Option<String>,
}

impl Refund {
    /// The money is on its way back (or back): `pending` or `succeeded`.
    pub fn is_accepted(&self) -> bool {
        matches!(self.status.as_str(), "pending" | "succeeded")
    }

    /// This refund as the PSP answered the call that made it or a read of it (recovery's give-back, the
    /// saga's compensation), as `path`'s refund report (answering the give-back of failure
    /// `answers_give_back`, if it is one), stamped with the query's time. Its amount is its own, not a claim
    /// on the payment's; its currency and PaymentIntent are checked.
    pub fn observation(
        &self,
        path: Channel,
        answers_give_back: Option<u32>,
        correlation: CorrelationId,
    ) -> Result<Observation, String> {
        let status =
            RefundStatus::parse(&self.status).ok_or_else(|| format!("unknown refund status {:?}", self.status))?;
        let report = RefundReport {
            refund: RefundEntry {
                refund_id: self.id.clone(),
                amount_minor: self.amount,
                status,
            },
            failure_reason: None,
            answers_give_back,
        };
        read_observation(
            path,
            Outcome::Refund(report),
            self.payment_intent.as_deref(),
            &self.currency,
            correlation,
        )
    }
}

/// The refunds of `listed` (a PaymentIntent's, as Stripe lists them) that `payment` has not recorded as they
/// stand: what a read of the PSP's refunds adds before anyone refunds again (the saga's refund step,
/// recovery's give-back), so nobody makes again a refund whose answer and webhooks were lost.
pub fn unrecorded<'a>(payment: &Payment, listed: &'a [Refund]) -> Vec<&'a Refund> {
    listed
        .iter()
        .filter(|r| {
            !payment
                .refunds
                .iter()
                .any(|k| k.refund_id == r.id && k.status.as_str() == r.status)
        })
        .collect()
}

/// An object read at the PSP (a refund, a dispute) as `path`'s observation of `outcome`: found by its
/// PaymentIntent (none: not ours, nothing to find), its currency a claim on the payment's (its amount is its
/// own, no claim), stamped with the query's time (to the second, as the PSP's own).
fn read_observation(
    path: Channel,
    outcome: Outcome,
    payment_intent: Option<&str>,
    currency: &str,
    correlation: CorrelationId,
) -> Result<Observation, String> {
    let mut observation = Observation::new(path, outcome, correlation);
    observation.psp_reference = payment_intent
        .map(PspReference::parse)
        .transpose()
        .map_err(|e| e.to_string())?;
    observation.claims = Claims {
        amount_minor: None,
        currency: Some(Currency::parse(currency).map_err(|e| e.to_string())?),
    };
    observation.occurred_at_ms = Some(shared::clock::now_ms().div_euclid(1000).saturating_mul(1000));
    Ok(observation)
}

/// Stripe's error object (`{"error": {...}}`).
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorObject {
    #[serde(rename = "type")]
    pub kind: ErrorType,
    pub code: Option<String>,
    pub decline_code: Option<String>,
    pub message: Option<String>,
    pub param: Option<String>,
    /// The PaymentIntent as it stands, sent with errors about one (a decline, a cancel in the wrong state).
    pub payment_intent: Option<Box<PaymentIntent>>,
}

/// `{"error": ...}`, the body of every Stripe error answer.
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    ApiError,
    AuthenticationError,
    CardError,
    IdempotencyError,
    InvalidRequestError,
    PermissionError,
    #[serde(other)]
    Other,
}

impl ErrorType {
    /// Stripe's name of the type (`other` for one this version does not know).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiError => "api_error",
            Self::AuthenticationError => "authentication_error",
            Self::CardError => "card_error",
            Self::IdempotencyError => "idempotency_error",
            Self::InvalidRequestError => "invalid_request_error",
            Self::PermissionError => "permission_error",
            Self::Other => "other",
        }
    }
}

impl ErrorObject {
    /// One line for logs and escalations: type, code and decline code, never a secret (Stripe's messages
    /// name parameters, not their values).
    pub fn summary(&self) -> String {
        let mut s = format!("{:?}", self.kind);
        for part in [&self.code, &self.decline_code, &self.message].into_iter().flatten() {
            s.push_str(": ");
            s.push_str(part);
        }
        s
    }
}

impl PaymentIntent {
    /// The cumulative refunded amount, when the charge is expanded.
    pub fn amount_refunded(&self) -> Option<u64> {
        match &self.latest_charge {
            Some(LatestCharge::Expanded(charge)) => Some(charge.amount_refunded),
            _ => None,
        }
    }

    /// An authorization's capture deadline (epoch ms), when the charge is expanded and says it.
    pub fn capture_before_ms(&self) -> Option<i64> {
        match &self.latest_charge {
            Some(LatestCharge::Expanded(charge)) => charge
                .payment_method_details
                .as_ref()?
                .card
                .as_ref()?
                .capture_before
                .map(|s| s.saturating_mul(1000)),
            _ => None,
        }
    }

    /// What this PaymentIntent's status tells about our payment (the core's table, [`IntentStatus::outcome`]);
    /// `None` when it tells nothing new. `Err` when Stripe asks for an action we cannot hand on (no client secret and
    /// no usable URL).
    pub fn outcome(&self) -> Result<Option<Outcome>, String> {
        let facts = IntentFacts {
            declined: self.last_payment_error.as_ref().map(LastPaymentError::raw_reason),
            refunded_minor: self.amount_refunded(),
            cancellation_reason: self.cancellation_reason.as_deref(),
            capture_before_ms: self.capture_before_ms(),
        };
        self.status.outcome(&facts, || self.action())
    }

    /// The customer's action: the client secret, and the redirect URL when the action is a redirect.
    pub fn action(&self) -> Result<CustomerAction, String> {
        customer_action(self.client_secret.as_ref(), self.next_action.as_ref())
    }

    /// The observation of this PaymentIntent on `path`: its outcome, the PaymentIntent id as the PSP
    /// reference, and its amount and currency as claims, which the decision checks against the payment.
    pub fn observation(
        &self,
        path: shared::Channel,
        correlation: shared::CorrelationId,
    ) -> Result<Option<Observation>, String> {
        let Some(outcome) = self.outcome()? else {
            return Ok(None);
        };
        let mut observation = Observation::new(path, outcome, correlation);
        observation.psp_reference = Some(PspReference::parse(self.id.as_str()).map_err(|e| e.to_string())?);
        observation.claims = Claims {
            amount_minor: Some(self.amount),
            currency: Some(Currency::parse(&self.currency).map_err(|e| e.to_string())?),
        };
        Ok(Some(observation))
    }
}

#[cfg(test)]
mod tests;
