//! The simulator's HTTP API on 127.0.0.1 (the PSP side the checkout saga and recovery call):
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/payment_intents` (`Idempotency-Key`) | `{"payment_id", "amount_minor", "currency", "scenario"? or "payment_method": "pm_<scenario>"}`: the synchronous answer as a `sync-result` body, then the webhooks are delivered in the background |
//! | `GET /v1/payment_intents/{id}` | the intent's current status (for recovery) |
//! | `POST /v1/refunds` (`Idempotency-Key`) | `{"payment_intent", "amount_minor"}`: refund once per key, `charge.refunded` delivered |

use crate::client::HttpClient;
use crate::delivery::{deliver, DeliveryOptions};
use crate::psp::{Psp, Scenario};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rand::seq::IndexedRandom;
use serde_json::{json, Value};
use shared::SigningSecret;
use std::sync::Arc;
use tokio::net::TcpListener;

pub struct Simulator {
    pub psp: Psp,
    pub webhook_url: String,
    pub secret: SigningSecret,
    pub delivery: DeliveryOptions,
    /// Scenario when a charge names none.
    pub default_scenario: Option<Scenario>,
    pub client: HttpClient,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

fn answer(status: u16, body: Value) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

impl Simulator {
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> Result<(), Error> {
        loop {
            let (stream, _) = listener.accept().await?;
            let sim = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| sim.clone().route(req));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn route(self: Arc<Self>, req: hyper::Request<Incoming>) -> Result<hyper::Response<Full<Bytes>>, Error> {
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let key = req
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body: Value = serde_json::from_slice(&req.into_body().collect().await?.to_bytes()).unwrap_or(Value::Null);
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        Ok(match (method.as_str(), segments.as_slice()) {
            ("POST", ["v1", "payment_intents"]) => {
                let Some(key) = key else {
                    return Ok(answer(400, json!({ "error": "Idempotency-Key required" })));
                };
                // The scenario: named outright, or by a test payment method `pm_<scenario>` (as Stripe's
                // test cards pick outcomes).
                let named = body.get("scenario").cloned().or_else(|| {
                    body["payment_method"]
                        .as_str()
                        .and_then(|m| m.strip_prefix("pm_"))
                        .map(|s| Value::String(s.to_owned()))
                });
                let scenario = match named {
                    Some(s) => match serde_json::from_value::<Scenario>(s) {
                        Ok(s) => s,
                        Err(e) => return Ok(answer(400, json!({ "error": e.to_string() }))),
                    },
                    None => self
                        .default_scenario
                        .unwrap_or_else(|| *Scenario::ALL.choose(&mut rand::rng()).unwrap_or(&Scenario::Succeeded)),
                };
                let (Some(payment_id), Some(amount), Some(currency)) = (
                    body["payment_id"].as_str(),
                    body["amount_minor"].as_u64(),
                    body["currency"].as_str(),
                ) else {
                    return Ok(answer(
                        400,
                        json!({ "error": "payment_id, amount_minor and currency are required" }),
                    ));
                };
                let (intent, events) = self.psp.charge(&key, payment_id, amount, currency, scenario);
                let sim = self.clone();
                tokio::spawn(async move {
                    deliver(&sim.client, &sim.webhook_url, &sim.secret, events, &sim.delivery).await;
                });
                answer(200, Psp::sync_answer(&intent))
            }
            ("GET", ["v1", "payment_intents", id]) => match self.psp.status(id) {
                Some(intent) => answer(200, serde_json::to_value(intent)?),
                None => answer(404, json!({ "error": "no such payment intent" })),
            },
            ("POST", ["v1", "refunds"]) => {
                let Some(key) = key else {
                    return Ok(answer(400, json!({ "error": "Idempotency-Key required" })));
                };
                let (Some(intent), Some(amount)) = (body["payment_intent"].as_str(), body["amount_minor"].as_u64())
                else {
                    return Ok(answer(
                        400,
                        json!({ "error": "payment_intent and amount_minor are required" }),
                    ));
                };
                match self.psp.refund(&key, intent, amount) {
                    Ok((total, event)) => {
                        let sim = self.clone();
                        tokio::spawn(async move {
                            deliver(
                                &sim.client,
                                &sim.webhook_url,
                                &sim.secret,
                                event.into_iter().collect(),
                                &sim.delivery,
                            )
                            .await;
                        });
                        answer(200, json!({ "status": "succeeded", "amount_refunded": total }))
                    }
                    Err(e) => answer(422, json!({ "error": e })),
                }
            }
            _ => answer(404, json!({ "error": "no such route" })),
        })
    }
}
