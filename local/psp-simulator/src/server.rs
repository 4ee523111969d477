//! The simulator's HTTP API on 127.0.0.1: Stripe's paths, form bodies, objects, errors and idempotency, so
//! the system's real Stripe client (`psp::StripeClient`) is what every test and demo exercises.
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/payment_intents` | create and confirm (`amount`, `currency`, `payment_method=pm_<scenario>`, `confirm=true`, `metadata[...]`, `return_url`): the PaymentIntent, or a 402 `card_error` for a decline |
//! | `GET /v1/payment_intents/{id}` | the PaymentIntent as it stands (`expand[]=latest_charge` expands the charge) |
//! | `POST /v1/payment_intents/{id}/cancel` | cancel; 400 `payment_intent_unexpected_state` once it succeeded |
//! | `POST /v1/refunds` | `payment_intent`, `amount` (optional: the rest): a Refund; `charge.refunded` is sent; 400 `charge_disputed` once the charge is disputed; a `pm_refund_fails` charge's refund is answered `pending`, then `refund.created`, `refund.updated` and `refund.failed` report it failed |
//! | `GET /v1/refunds` | a PaymentIntent's (`payment_intent`) or charge's refunds, newest first, `limit` 1 to 100, `starting_after`; an unknown `payment_intent` or cursor is `resource_missing` (`ledger::refunds`) |
//! | `GET /v1/refunds/{id}` | the Refund as it stands (a `pm_refund_fails` charge's: `failed`, as its webhooks said) |
//! | `POST /_sim/charges/{id}/dispute` | admin, no key: dispute a captured charge (`status`: `needs_response`, `under_review`, `won`, `lost`); the `charge.dispute.*` webhooks are sent (`ledger::disputes`) |
//! | `GET /v1/disputes/{id}` | the dispute as it stands (`ledger::disputes`); 404 `resource_missing` for an unknown id |
//! | `GET /v2/core/events/{id}` | an event-generation failure made in place of an event of a type [`Ledger::fail_event_generation`] armed (`ledger::health`), with `data.impact.related_object`; 404 `resource_missing` for another id; the failure itself is delivered thin (no `data`) |
//! | `GET /v1/webhook_endpoints`, `GET /v1/webhook_endpoints/{id}` | the account's webhook endpoints (`status`, `api_version`, `url`), `limit` 1 to 100 (`ledger::endpoints`); the simulator registers its one delivery URL at start |
//! | `POST /v1/webhook_endpoints` | create one (`url`, `enabled_events[]`, `api_version`): the endpoint with its `secret`; 400 for a missing `url` or `enabled_events`, a bad URL, an unknown event type or API version (`ledger::endpoints`) |
//! | `GET /v1/events` | the events created so far, newest first (`created[...]`, `types[]`, `limit`, `starting_after`): how the catch-up job finds webhooks that were lost (`ledger::events`) |
//!
//! Every request needs `Authorization: Bearer <key>` (401 otherwise), every POST an `Idempotency-Key`. The
//! webhooks each change causes are signed like Stripe's and delivered with the delivery faults of
//! [`crate::delivery`].

use crate::client::HttpClient;
use crate::delivery::{deliver, put_on_bus, DeliveryOptions};
use crate::ledger::{Ledger, WebhookEvent};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use shared::SigningSecret;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// The dev secret key of the simulated account (local only).
pub const DEV_API_KEY: &str = "sk_test_local_simulator";

pub struct Simulator {
    pub ledger: Ledger,
    pub webhook_url: String,
    pub secret: SigningSecret,
    pub delivery: DeliveryOptions,
    pub client: HttpClient,
    /// Probability that a request is answered with a 429 or 503 before any work (a storm: `STORM_RATE`).
    pub storm_rate: f64,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

fn response(status: u16, body: &serde_json::Value) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if let Ok(id) = hyper::header::HeaderValue::from_str(&format!("req_sim{}", uuid::Uuid::new_v4().simple())) {
        headers.insert("request-id", id);
    }
    response
}

/// Form pairs of a body or query string.
fn form(bytes: &[u8]) -> Result<BTreeMap<String, String>, serde_urlencoded::de::Error> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(bytes).map(|pairs| pairs.into_iter().collect())
}

/// Serves `listener`'s connections (HTTP/1, one task each) until the process ends, each request answered by
/// `route`: the one accept loop of both the Stripe side and the Adyen side ([`crate::adyen`]).
pub async fn accept<F, Fut>(listener: TcpListener, route: F) -> Result<(), Error>
where
    F: Fn(hyper::Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<hyper::Response<Full<Bytes>>, Error>> + Send + 'static,
{
    loop {
        let (stream, _) = listener.accept().await?;
        let route = route.clone();
        tokio::spawn(async move {
            // A connection that fails (the peer hung up) concerns that connection alone.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(route))
                .await;
        });
    }
}

impl Simulator {
    /// Serves the API on `listener` until the process ends.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> Result<(), Error> {
        accept(listener, move |req| self.clone().route(req)).await
    }

    /// Sends `events` in the background, with the delivery's faults.
    pub fn send_webhooks(self: &Arc<Self>, events: Vec<WebhookEvent>) {
        // Every event is recorded for `GET /v1/events`, including those whose webhook is lost on purpose.
        let events = self.ledger.record(events);
        if events.is_empty() {
            return;
        }
        let sim = self.clone();
        tokio::spawn(async move {
            if let Some(bus) = &sim.delivery.eventbridge {
                put_on_bus(bus, &events).await;
            }
            deliver(&sim.client, &sim.webhook_url, &sim.secret, events, &sim.delivery).await;
        });
    }

    /// Wakes `id` when its step falls due and sends the webhooks the step causes.
    fn schedule(self: &Arc<Self>, id: String, at_ms: i64) {
        let sim = self.clone();
        tokio::spawn(async move {
            let wait = u64::try_from(at_ms - shared::clock::now_ms()).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let events = sim.ledger.wake(&id);
            sim.send_webhooks(events);
        });
    }

    async fn route(self: Arc<Self>, req: hyper::Request<Incoming>) -> Result<hyper::Response<Full<Bytes>>, Error> {
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or_default().to_owned();
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (authorization, key) = (header("authorization"), header("idempotency-key"));
        let body = req.into_body().collect().await?.to_bytes();
        let params = match form(if method == "GET" { query.as_bytes() } else { &body }) {
            Ok(params) => params,
            Err(e) => {
                let answer = crate::ledger::Answer::error(
                    400,
                    "invalid_request_error",
                    None,
                    &format!("Invalid request body: {e}"),
                    serde_json::json!({}),
                );
                return Ok(response(answer.status, &answer.body));
            }
        };
        if let Some(delay) = self.ledger.take_hang() {
            tokio::time::sleep(delay).await;
        }
        if self.storm_rate > 0.0 && rand::random_bool(self.storm_rate.min(1.0)) {
            self.ledger.storm(if rand::random_bool(0.5) { 429 } else { 503 }, 1);
        }
        let effects = self
            .ledger
            .handle(&method, &path, authorization.as_deref(), key.as_deref(), &params);
        self.send_webhooks(effects.webhooks);
        for (id, at) in effects.later {
            self.schedule(id, at);
        }
        if effects.drop_answer {
            // The work is done and remembered under the key; the client never hears of it.
            return Err("answer dropped on purpose (lost_answer scenario)".into());
        }
        let answer = effects.answer.unwrap_or_else(|| {
            crate::ledger::Answer::error(500, "api_error", None, "no answer", serde_json::json!({}))
        });
        let mut answered = response(answer.status, &answer.body);
        if answer.body["error"]["code"] == crate::ledger::LOCK_TIMEOUT {
            // Stripe advises a retry of its lock timeouts; its libraries retry on this header.
            answered
                .headers_mut()
                .insert("stripe-should-retry", hyper::header::HeaderValue::from_static("true"));
        }
        if effects.replayed {
            answered
                .headers_mut()
                .insert("idempotent-replayed", hyper::header::HeaderValue::from_static("true"));
        }
        Ok(answered)
    }
}
