//! The simulator's Adyen side: Adyen's Checkout API v71 and its signed notifications, next to the Stripe side
//! ([`crate::server`]), so the system's Adyen client and its `/webhooks/adyen` intake are exercised against
//! Adyen's rules and shapes rather than against themselves.
//!
//! | route | does |
//! |---|---|
//! | `POST /v71/payments` | authorise (`amount`, `merchantAccount`, `reference`, `paymentMethod`, `returnUrl`): `Authorised`, `Refused` with `refusalReason`, or `RedirectShopper` with an `action` and no `pspReference` (it comes with `/payments/details`; [`cards`] picks) |
//! | `POST /v71/payments/details` | `details.redirectResult` from the redirect: the challenged payment is decided |
//! | `POST /v71/payments/{pspReference}/captures`, `/refunds` | `amount`, `merchantAccount`: 201 `received`; `CAPTURE` (and `CAPTURE_FAILED`, then a re-capture `CAPTURE` for a `CAPTURE_RECAPTURED` card), `REFUND` (and `REFUND_FAILED` or `REFUNDED_REVERSED`), the late failures without `originalReference` for a holder name ending `_NO_ORIGINAL` |
//! | `POST /v71/payments/{pspReference}/cancels`, `/reversals` | `merchantAccount`: 201 `received`; `CANCELLATION`, `CANCEL_OR_REFUND` notified |
//! | `POST /v71/cancels` | `merchantAccount`, `paymentReference` (our own reference): 201 `received`; `TECHNICAL_CANCEL` notified |
//! | `GET /_sim/references/{reference}` | admin, no key (Adyen has no such read): the latest payment with that merchant reference, `{status, captured, refunded}`, or 404; how the demos check a payment ends where Adyen says |
//!
//! Every request needs `X-API-Key` (401 otherwise); an `Idempotency-Key` is optional, as at Adyen, and
//! bounded to 64 characters ([`ledger`] holds the rules). Notifications go to the configured endpoint with
//! Basic auth, batched, duplicated and delayed ([`notify`]).

pub mod cards;
pub mod ledger;
pub mod notify;

use crate::client::HttpClient;
use crate::delivery::DeliveryOptions;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use ledger::{AdyenLedger, Handled, Notice};
use notify::{Endpoint, Outbox};
use std::sync::Arc;
use tokio::net::TcpListener;
use webhook_signatures::adyen::HmacKey;

/// The dev API key of the simulated Adyen account (local only).
pub const DEV_API_KEY: &str = "AQE_local_adyen_simulator_key";
/// The simulated account's merchant account.
pub const DEV_MERCHANT_ACCOUNT: &str = "LocalShopECOM";
/// The local stack's Adyen notification settings (`DEV_ADYEN_*` in `scripts/lib.sh`, which the intake's
/// local `WEBHOOK_SECRETS` holds): the HMAC key (hex) and the Basic auth credentials.
pub const DEV_HMAC_KEY: &str = "6C6F63616C2D6465762D616479656E2D686D61632D6B65792D30303030303030";
pub const DEV_WEBHOOK_USERNAME: &str = "adyen";
pub const DEV_WEBHOOK_PASSWORD: &str = "local-dev-adyen-password";

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The Adyen side: the account, the HMAC key its notifications are signed with, where they go (none: kept in
/// [`Outbox::sent`] only), and how.
pub struct AdyenSimulator {
    pub ledger: AdyenLedger,
    pub key: HmacKey,
    pub endpoint: Option<Endpoint>,
    pub delivery: DeliveryOptions,
    pub client: HttpClient,
    pub outbox: Outbox,
}

impl AdyenSimulator {
    /// A simulator for `ledger`'s account, notifying `endpoint` with items signed by `key`, with the faults of
    /// `delivery`.
    pub fn new(ledger: AdyenLedger, key: HmacKey, endpoint: Option<Endpoint>, delivery: DeliveryOptions) -> Arc<Self> {
        Arc::new(Self {
            ledger,
            key,
            endpoint,
            delivery,
            client: HttpClient::default(),
            outbox: Outbox::default(),
        })
    }

    /// Serves the API on `listener` and sends the notifications, until the process ends.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> Result<(), Error> {
        self.clone().notify_in_background();
        crate::server::accept(listener, move |req| self.clone().route(req)).await
    }

    /// Sends the queued notifications to the endpoint (if one is configured) in a task of their own, for as
    /// long as the process runs.
    pub fn notify_in_background(self: Arc<Self>) {
        if self.endpoint.is_some() {
            tokio::spawn(async move {
                if let Some(endpoint) = &self.endpoint {
                    self.outbox.run(&self.client, endpoint, &self.delivery).await;
                }
            });
        }
    }

    /// One HTTP request: the ledger's answer (the `Idempotency-Key` echoed, as Adyen does), its
    /// notifications signed and queued.
    pub async fn route(self: Arc<Self>, req: hyper::Request<Incoming>) -> Result<hyper::Response<Full<Bytes>>, Error> {
        let (method, path) = (req.method().as_str().to_owned(), req.uri().path().to_owned());
        if let (Some(reference), "GET") = (path.strip_prefix("/_sim/references/"), method.as_str()) {
            let view = self.ledger.view_by_reference(reference);
            let answer = match view.and_then(|v| serde_json::to_value(v).ok()) {
                Some(body) => crate::ledger::Answer { status: 200, body },
                None => ledger::error(404, "000", "No payment with this reference", "validation"),
            };
            return Ok(response(&Handled::answer(answer), None));
        }
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (api_key, key) = (header("x-api-key"), header("idempotency-key"));
        let body = req.into_body().collect().await?.to_bytes();
        let handled = self
            .ledger
            .handle(&method, &path, api_key.as_deref(), key.as_deref(), &body);
        self.notify(&handled.notices);
        Ok(response(&handled, key.as_deref()))
    }

    /// Signs and queues `notices` (kept in [`Outbox::sent`] also when no endpoint is configured).
    pub fn notify(&self, notices: &[Notice]) {
        if notices.is_empty() {
            return;
        }
        let now = shared::clock::now_ms();
        let account = self.ledger.merchant_account();
        let items = notices
            .iter()
            .map(|n| notify::item(n, account))
            .map(|item| notify::signed(&item, &self.key, now))
            .collect();
        self.outbox.push(items);
    }
}

fn response(handled: &Handled, key: Option<&str>) -> hyper::Response<Full<Bytes>> {
    let body = Bytes::from(handled.answer.body.to_string());
    let mut response = hyper::Response::new(Full::new(body));
    *response.status_mut() =
        hyper::StatusCode::from_u16(handled.answer.status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if let Some(value) = key.and_then(|k| hyper::header::HeaderValue::from_str(k).ok()) {
        headers.insert("idempotency-key", value);
    }
    response
}
