//! Webhook delivery the way a PSP does it, with the faults a PSP shows: a delay, duplicates, reordering,
//! and failed attempts retried with backoff (also on 5xx answers). With an event destination of type
//! `amazon_eventbridge` ([`DeliveryOptions::eventbridge`]) each event is also put on the partner bus (the
//! local stand-in, `local_lambda::eventbridge`), as a shop running both ways while it moves has them.

use crate::client::HttpClient;
use crate::ledger::WebhookEvent;
use rand::Rng;
use shared::SigningSecret;
use std::time::Duration;
use webhook_signatures::sign_stripe;

#[derive(Debug, Clone)]
pub struct DeliveryOptions {
    pub max_delay: Duration,
    /// Probability that an event is delivered twice.
    pub duplicate_rate: f64,
    /// Probability that a payment's events are delivered newest first.
    pub reorder_rate: f64,
    /// Probability that an attempt fails before reaching the endpoint (retried).
    pub failure_rate: f64,
    pub max_attempts: u32,
    /// The partner event bus Stripe's EventBridge destination puts every event on, besides the webhook.
    pub eventbridge: Option<local_lambda::eventbridge::Bus>,
}

impl Default for DeliveryOptions {
    fn default() -> Self {
        Self {
            max_delay: Duration::from_millis(5),
            duplicate_rate: 0.3,
            reorder_rate: 0.3,
            failure_rate: 0.1,
            max_attempts: 6,
            eventbridge: None,
        }
    }
}

/// The endpoint's final answer to one delivery (`result` or `error`), or `undelivered`.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub event_id: String,
    pub result: String,
}

/// Puts `events` on the partner bus; an event the bus does not take (SQS unreachable) is reported on stderr and
/// left to the webhook and the catch-up, as a destination's failed delivery is.
pub async fn put_on_bus(bus: &local_lambda::eventbridge::Bus, events: &[WebhookEvent]) {
    for event in events {
        if let Err(e) = bus.put(&event.body).await {
            eprintln!("psp-simulator: event {} not put on the EventBridge bus: {e}", event.id);
        }
    }
}

/// Delivers one payment's events (in PSP order, or reversed when reordering), each possibly twice.
pub async fn deliver(
    client: &HttpClient,
    url: &str,
    secret: &SigningSecret,
    events: Vec<WebhookEvent>,
    options: &DeliveryOptions,
) -> Vec<Delivered> {
    let (reorder, plan) = {
        let mut rng = rand::rng();
        let reorder = rng.random_bool(options.reorder_rate);
        let plan: Vec<(WebhookEvent, u32, Duration)> = events
            .into_iter()
            .map(|e| {
                let copies = if rng.random_bool(options.duplicate_rate) { 2 } else { 1 };
                let delay = rng.random_range(Duration::ZERO..=options.max_delay);
                (e, copies, delay)
            })
            .collect();
        (reorder, plan)
    };
    let plan: Vec<_> = if reorder {
        plan.into_iter().rev().collect()
    } else {
        plan
    };
    let mut out = Vec::new();
    for (event, copies, delay) in plan {
        tokio::time::sleep(delay).await;
        let body = serde_json::to_vec(&event.body).unwrap_or_default();
        let results = if copies == 2 {
            // The duplicate races the original.
            let (a, b) = tokio::join!(
                deliver_one(client, url, secret, &body, options),
                deliver_one(client, url, secret, &body, options)
            );
            vec![a, b]
        } else {
            vec![deliver_one(client, url, secret, &body, options).await]
        };
        for result in results {
            out.push(Delivered {
                event_id: event.id.clone(),
                result,
            });
        }
    }
    out
}

async fn deliver_one(
    client: &HttpClient,
    url: &str,
    secret: &SigningSecret,
    body: &[u8],
    options: &DeliveryOptions,
) -> String {
    for attempt in 0..options.max_attempts {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(attempt.min(5)))).await;
        }
        if rand::rng().random_bool(options.failure_rate) {
            continue; // the attempt never reached the endpoint
        }
        let header = sign_stripe(secret, shared::clock::now_ms() / 1000, body);
        match client
            .send("POST", url, &[("stripe-signature", header)], body.to_vec())
            .await
        {
            Ok((status, answer)) if status < 500 => {
                return answer["result"]
                    .as_str()
                    .or(answer["error"].as_str())
                    .unwrap_or("?")
                    .to_owned();
            }
            _ => continue,
        }
    }
    "undelivered".to_owned()
}
