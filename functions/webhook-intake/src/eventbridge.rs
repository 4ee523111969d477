//! Stripe events through Amazon EventBridge, the optional second way in: Stripe's partner event source, the
//! event bus named after it, a rule on its source and our event types, an SQS queue (with a DLQ) and this
//! function on it (ReportBatchItemFailures). Each message is the EventBridge event; its `detail` is the
//! Stripe event, `detail-type` its type. See docs/WEBHOOKS.md for why a queue and not the function as the
//! rule's target.
//!
//! No signature: the bus is the trust boundary (only Stripe's partner source feeds it). The envelope is still
//! checked: its `source` must be the configured partner source (`aws.partner/stripe.com/...`), its `account`
//! the AWS account the stack runs in, its `detail-type` the Stripe event's own type. Anything else is refused:
//! counted (`RefusedDeliveries`, alarmed), logged, acknowledged (a retry would not change it). An accepted
//! event runs the webhook's own steps ([`crate::apply_unsigned`]), so the same event by webhook afterwards
//! is a `duplicate`, and the other way round.

use crate::handler::{apply_unsigned, Unsigned};
use crate::metrics::RequestMetrics;
use crate::providers::{Provider, ProviderSpec, Scheme};
use crate::{App, IntakeSettings};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use serde::Deserialize;
use shared::lambda::{BuildError, Clients};
use shared::telemetry;
use shared::{clock, Config, ConfigError, Env};
use std::convert::Infallible;
use tokio::time::Instant;
use tracing::{info, warn, Instrument};

/// What every Stripe partner event source's name starts with.
pub const STRIPE_SOURCE_PREFIX: &str = "aws.partner/stripe.com/";

/// Whom the envelope must name: Stripe's partner source and our AWS account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `STRIPE_EVENT_SOURCE`: the partner event source (and bus) name, `aws.partner/stripe.com/ed_...`.
    pub source: String,
    /// `STRIPE_EVENT_AWS_ACCOUNT`: the AWS account id the stack runs in (EventBridge's `account`).
    pub account: String,
}

impl Expected {
    /// Reads both; a source that is not Stripe's or an account that is not 12 digits fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let source = env.required("STRIPE_EVENT_SOURCE")?;
        if !source.starts_with(STRIPE_SOURCE_PREFIX) || source.len() == STRIPE_SOURCE_PREFIX.len() {
            return Err(ConfigError::Invalid {
                name: "STRIPE_EVENT_SOURCE",
                expected: "Stripe partner event source name (aws.partner/stripe.com/...)",
                value: source,
            });
        }
        let account = env.required("STRIPE_EVENT_AWS_ACCOUNT")?;
        if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ConfigError::Invalid {
                name: "STRIPE_EVENT_AWS_ACCOUNT",
                expected: "AWS account id (12 digits)",
                value: account,
            });
        }
        Ok(Self { source, account })
    }
}

/// The function's settings: the table and leases, the Stripe provider of `WEBHOOK_PROVIDERS` (its endpoint
/// checks; no secret), the intake's settings and the envelope's [`Expected`].
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    pub provider: Provider,
    pub intake: IntakeSettings,
    pub expected: Expected,
}

impl Settings {
    /// Reads the settings from `env`; without a Stripe provider the start fails (nothing to check events by).
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let invalid = |value: String| ConfigError::Invalid {
            name: "WEBHOOK_PROVIDERS",
            expected: "JSON list of providers with a Stripe provider",
            value,
        };
        let specs = ProviderSpec::from_env(env).map_err(|e| invalid(e.to_string()))?;
        let provider = specs
            .iter()
            .find(|spec| spec.scheme == Scheme::Stripe)
            .map(ProviderSpec::unsigned)
            .ok_or_else(|| invalid("no provider of scheme stripe".into()))?;
        Ok(Self {
            config: Config::from_env(env)?,
            provider,
            intake: IntakeSettings::from_env(env)?,
            expected: Expected::from_env(env)?,
        })
    }
}

/// The function: the intake's app, its Stripe provider, the envelope's expectations.
#[derive(Debug, Clone)]
pub struct StripeBridge {
    pub app: App,
    pub provider: Provider,
    pub expected: Expected,
}

/// The EventBridge event as SQS carries it (the fields checked and the Stripe event).
#[derive(Deserialize)]
struct Envelope {
    source: String,
    account: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    detail: serde_json::Value,
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Applied or answered as a webhook would be (`applied`, `duplicate`, `ignored`, ...): acknowledged.
    Answered(&'static str),
    /// Not Stripe's partner source, not our account, or no EventBridge event: counted and acknowledged.
    Refused(String),
    /// What a webhook would get a 503 for (a lease held, a payment not written yet, DynamoDB down): left on
    /// the queue for its next receive.
    Retry,
}

impl StripeBridge {
    /// Built once per cold start from the settings on `clients` (no secret to read).
    pub fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        let providers = crate::providers::Providers::default().into();
        Ok(Self {
            app: App::new(clients.dynamodb, &settings.config, providers, settings.intake.clone()),
            provider: settings.provider.clone(),
            expected: settings.expected.clone(),
        })
    }

    /// One queue batch: never fails the invocation; a message to retry is in the answer (partial batch
    /// failure), as is every message the deadline leaves unhandled.
    pub async fn invoke(&self, batch: SqsEvent, deadline: Instant) -> Result<SqsBatchResponse, Infallible> {
        let mut response = SqsBatchResponse::default();
        for record in batch.records {
            let id = record.message_id.unwrap_or_default();
            let retry = Instant::now() >= deadline
                || self.deliver(&id, record.body.as_deref().unwrap_or_default()).await == Delivered::Retry;
            if retry {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id;
                response.batch_item_failures.push(failure);
            }
        }
        Ok(response)
    }

    /// One message, with its metrics record emitted.
    pub async fn deliver(&self, message_id: &str, body: &str) -> Delivered {
        let (delivered, metrics) = self.process(message_id, body).await;
        metrics.emit();
        delivered
    }

    /// One message: what became of it and its metrics record (tests read both). The request's span names the
    /// queue's message id; the event's own correlation id (`eventbridge-<event id>`) goes on what it writes.
    pub async fn process(&self, message_id: &str, body: &str) -> (Delivered, RequestMetrics) {
        let mut metrics = RequestMetrics {
            provider: self.provider.name.clone(),
            ..RequestMetrics::default()
        };
        let span = telemetry::request_span("eventbridge", message_id);
        let delivered = self.apply(body, &mut metrics).instrument(span).await;
        // The status a webhook would have got, so the intake's dashboards read both ways in alike.
        (metrics.result, metrics.status) = match &delivered {
            Delivered::Answered(answer) => ((*answer).to_owned(), 200),
            Delivered::Refused(_) => ("refused".to_owned(), 400),
            Delivered::Retry => ("retry".to_owned(), 503),
        };
        (delivered, metrics)
    }

    async fn apply(&self, body: &str, metrics: &mut RequestMetrics) -> Delivered {
        let detail = match self.admitted(body) {
            Ok(detail) => detail,
            Err(why) => {
                metrics.refused_deliveries = 1;
                warn!(reason = %why, "EventBridge delivery refused: not Stripe's partner source for this account");
                return Delivered::Refused(why);
            }
        };
        let received_secs = clock::now_ms() / 1000;
        let way = Unsigned::EventBridge { received_secs };
        match apply_unsigned(&self.app, &self.provider, &detail, way, metrics).await {
            Ok(answer) => Delivered::Answered(answer.as_str()),
            Err(e) if e.status.is_server_error() => {
                info!(code = e.code, message = %e.message, "EventBridge delivery left for a later receive");
                Delivered::Retry
            }
            Err(e) => {
                warn!(code = e.code, message = %e.message, "EventBridge delivery refused by the intake's steps");
                Delivered::Refused(format!("{}: {}", e.code, e.message))
            }
        }
    }

    /// The Stripe event of an envelope whose source, account and type are the expected ones; else why not
    /// (the sender's values quoted within the text rules, cut to 80 characters).
    fn admitted(&self, body: &str) -> Result<Vec<u8>, String> {
        let quoted = |v: &str| format!("{:?}", v.chars().take(80).collect::<String>());
        let envelope: Envelope = serde_json::from_str(body).map_err(|e| format!("not an EventBridge event: {e}"))?;
        if !envelope.source.starts_with(STRIPE_SOURCE_PREFIX) || envelope.source != self.expected.source {
            return Err(format!(
                "source {} is not {}",
                quoted(&envelope.source),
                self.expected.source
            ));
        }
        if envelope.account != self.expected.account {
            return Err(format!(
                "account {} is not {}",
                quoted(&envelope.account),
                self.expected.account
            ));
        }
        if envelope.detail.get("type").and_then(serde_json::Value::as_str) != Some(envelope.detail_type.as_str()) {
            return Err(format!(
                "detail-type {} is not the event's type",
                quoted(&envelope.detail_type)
            ));
        }
        serde_json::to_vec(&envelope.detail).map_err(|e| format!("detail: {e}"))
    }
}
