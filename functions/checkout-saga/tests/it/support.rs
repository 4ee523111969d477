//! What every scenario of the binary starts from: a world (a fresh table with stock, the Stripe-speaking
//! simulator on 127.0.0.1, an escalation queue), runners over it, PSPs that misbehave in one call, and the
//! saga logs the scenarios expect.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use checkout_saga::runner::{Runner, Settings};
use checkout_saga::saga::{Checkout, Escalation, SagaEventKind, SagaRecord, Step};
use checkout_saga::{events, inventory};
use integration_tests::{sqs_client, TestContext};
use order_projection::OrderProjection;
use psp::stripe::{ErrorObject, ErrorType, NextAction, RedirectToUrl};
use psp::{
    BreakerSettings, ChargeRequest, CircuitBreaker, GuardedStripe, PaymentIntent, PspError, Psps, Refund, StripeApi,
    StripeClient, StripeSettings, BREAKER_NAME,
};
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use recovery::RecoverySettings;
use serde_json::json;
use shared::consumer::Consumer;
use shared::retry::Backoff;
use shared::{Money, OrderId, PaymentId, PaymentStatus, PspReference, SigningSecret, Sku};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub const STOCK: u64 = 10;
pub const TEST_KEY: &str = "sk_test_saga";
/// How long the simulator's slow scenarios (a lasting 3-D Secure challenge, a retry after a decline, a long
/// processing) take here.
pub const SLOW: Duration = Duration::from_millis(1200);

pub struct World {
    pub ctx: TestContext,
    pub sim: Arc<Simulator>,
    pub psp_url: String,
    pub escalation_url: String,
    pub sqs: aws_sdk_sqs::Client,
    pub sku: Sku,
}

pub async fn world() -> World {
    world_with(TestContext::new().await).await
}

pub async fn world_with(ctx: TestContext) -> World {
    world_with_slow(ctx, SLOW).await
}

/// A world whose slow scenarios take `slow`.
pub async fn world_with_slow(ctx: TestContext, slow: Duration) -> World {
    let sim = Arc::new(Simulator {
        ledger: Ledger::new(TEST_KEY, Timings { slow }, None),
        // Webhooks go nowhere: these tests drive outcomes through the saga's own PSP calls and recovery.
        webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
        secret: SigningSecret::parse("whsec_test").expect("secret"),
        delivery: DeliveryOptions {
            max_attempts: 1,
            ..DeliveryOptions::default()
        },
        client: HttpClient::default(),
        storm_rate: 0.0,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let psp_url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(sim.clone().serve(listener));
    let sqs = sqs_client(None);
    let escalation_url = sqs
        .create_queue()
        // Named as local_testkit::queues names the template's queue (`<prefix>-saga-escalations`), so that
        // scripts/check_permissions.py knows which queue the functions' escalations go to.
        .queue_name(format!("test-{}-saga-escalations", uuid::Uuid::new_v4().simple()))
        .send()
        .await
        .expect("escalation queue")
        .queue_url
        .expect("url");
    let sku = Sku::parse("sku-1").expect("sku");
    inventory::put_stock(&ctx.client, &ctx.table, &sku, STOCK)
        .await
        .expect("stock");
    World {
        ctx,
        sim,
        psp_url,
        escalation_url,
        sqs,
        sku,
    }
}

/// A deadline no test reaches.
pub fn later() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(600)
}

pub fn fast_backoff() -> Backoff {
    Backoff::new(3, Duration::from_millis(1), Duration::from_millis(5))
}

/// The runner's settings in these tests: the defaults, with retries in milliseconds.
pub fn settings() -> Settings {
    Settings {
        backoff: fast_backoff(),
        ..Settings::default()
    }
}

/// Recovery's settings in these tests: every open payment due at once, 100 a run.
fn recovery_settings() -> RecoverySettings {
    RecoverySettings {
        stale_after: Duration::ZERO,
        batch_limit: 100,
        ..RecoverySettings::default()
    }
}

impl World {
    pub fn runner_with<P: Psps + Clone>(
        &self,
        client: aws_sdk_dynamodb::Client,
        psp: P,
        settings: Settings,
    ) -> Runner<P> {
        let escalation = Escalation::new(self.sqs.clone(), &self.escalation_url);
        Runner::new(
            &client,
            &self.ctx.config(),
            psp,
            recovery_settings(),
            escalation,
            settings,
        )
    }

    pub fn psp(&self) -> StripeClient {
        let mut settings = StripeSettings::local(&self.psp_url, TEST_KEY).expect("PSP settings");
        settings.retries = fast_backoff();
        StripeClient::new(&settings, psp::ApiKey::parse(TEST_KEY).unwrap()).expect("psp client")
    }

    /// The simulator's Stripe client as a checkout function builds it with `STRIPE_CAPTURE_METHOD=manual`:
    /// its charges authorize, the saga captures.
    pub fn manual_capture_psp(&self) -> StripeClient {
        let mut settings = StripeSettings::local(&self.psp_url, TEST_KEY).expect("PSP settings");
        settings.retries = fast_backoff();
        settings.capture = psp::CaptureMethod::Manual;
        StripeClient::new(&settings, psp::ApiKey::parse(TEST_KEY).unwrap()).expect("psp client")
    }

    /// A runner whose payments are past their deadline as soon as they are requested.
    pub fn runner_past_deadline(&self) -> Runner<StripeClient> {
        self.runner_with(
            self.ctx.client.clone(),
            self.psp(),
            Settings {
                payment_timeout: Duration::ZERO,
                ..settings()
            },
        )
    }

    /// The simulator's Stripe client with a key it refuses (401, as Stripe answers a rolled or revoked key):
    /// a deployment fault.
    pub fn psp_with_rolled_key(&self) -> StripeClient {
        const ROLLED: &str = "sk_test_rolled";
        let mut settings = StripeSettings::local(&self.psp_url, ROLLED).expect("PSP settings");
        settings.retries = fast_backoff();
        StripeClient::new(&settings, psp::ApiKey::parse(ROLLED).unwrap()).expect("psp client")
    }

    pub fn runner(&self) -> Runner<StripeClient> {
        self.runner_over(self.psp())
    }

    /// A runner as `function` (its name in `infra/template.yaml`) builds it (`checkout_saga::build_runner`): the tests'
    /// settings, its PSP client behind the circuit breaker, and its DynamoDB and SQS calls (the breaker's
    /// included) recorded under that name when `AWS_CALL_RECORD` is set (`scripts/check_permissions.py`).
    pub fn runner_for(&self, function: &str) -> Runner<GuardedStripe> {
        self.runner_as(
            function,
            self.guarded_for(function, self.psp(), BreakerSettings::default()),
            settings(),
        )
    }

    /// A runner with `settings` over `psp` (e.g. [`World::guarded_for`]) whose DynamoDB and SQS calls are
    /// recorded as `function`'s.
    pub fn runner_as<P: Psps + Clone>(&self, function: &str, psp: P, settings: Settings) -> Runner<P> {
        let mut runner = self.runner_with(self.ctx.client_for(function), psp, settings);
        runner.escalation = Escalation::new(
            integration_tests::function_sqs_client(function, None),
            &self.escalation_url,
        );
        runner
    }

    /// `psp` behind the circuit breaker as `function` builds it (`PspSetSettings::build`): the breaker's
    /// item (`BREAKER#stripe`, shared by every function) read and written on `function`'s client.
    pub fn guarded_for<P: StripeApi>(&self, function: &str, psp: P, breaker: BreakerSettings) -> CircuitBreaker<P> {
        CircuitBreaker::new(
            psp,
            self.ctx.client_for(function),
            &self.ctx.table,
            BREAKER_NAME,
            breaker,
        )
    }

    /// A runner with the tests' settings over another PSP (a `Quirky` one).
    pub fn runner_over<P: StripeApi + Clone>(&self, psp: P) -> Runner<P> {
        self.runner_with(self.ctx.client.clone(), psp, settings())
    }

    pub fn checkout(&self, method: &str, quantity: u32) -> Checkout {
        Checkout {
            sku: self.sku.clone(),
            quantity,
            money: fixture_money(),
            payment_method: method.into(),
            psp: None,
        }
    }

    /// Hands the payment's events to the saga's inbox as SQS delivers them: consumer (on the tests' own
    /// client), then resume (on `runner`'s).
    pub async fn deliver<P: Psps>(&self, runner: &Runner<P>, record: &SagaRecord) {
        self.deliver_with(self.ctx.client.clone(), runner, record).await
    }

    /// As [`World::deliver`], with the consumer on `runner`'s client: the inbox as `checkout-events` runs it,
    /// consumer and resume in one function (a runner of [`World::runner_for`]`("checkout-events")`).
    pub async fn inbox_deliver<P: Psps>(&self, runner: &Runner<P>, record: &SagaRecord) {
        self.deliver_with(runner.sagas.client().clone(), runner, record).await
    }

    /// Applies the payment's events to the order projection only (the consumer, no resume).
    pub async fn project(&self, record: &SagaRecord) {
        let consumer = Consumer::new(self.ctx.client.clone(), &self.ctx.table, OrderProjection);
        let (response, _) = consumer.process(&self.messages(record).await).await;
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }

    async fn deliver_with<P: Psps>(&self, client: aws_sdk_dynamodb::Client, runner: &Runner<P>, record: &SagaRecord) {
        if record.payment_id.is_none() {
            return;
        }
        let consumer = Consumer::new(client, &self.ctx.table, OrderProjection);
        let mut batch = SqsEvent::default();
        batch.records = self.messages(record).await;
        let response = events::handle(&consumer, runner, batch, later()).await;
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }

    /// The saga's payment's events as SQS hands them to its consumers.
    async fn messages(&self, record: &SagaRecord) -> Vec<SqsMessage> {
        let Some(payment) = &record.payment_id else {
            return Vec::new();
        };
        self.ctx
            .events(payment)
            .await
            .expect("events")
            .iter()
            .enumerate()
            .map(|(n, e)| {
                serde_json::from_value(json!({ "messageId": format!("{}-{n}", e.event_id()),
                    "body": shared::outbox::message_body(e),
                    "attributes": { "MessageGroupId": e.payment_id.as_str(), "ApproximateReceiveCount": "1" },
                    "messageAttributes": {} }))
                .expect("message")
            })
            .collect()
    }

    pub async fn saga(&self, order: &OrderId) -> SagaRecord {
        self.runner()
            .sagas
            .load(order)
            .await
            .expect("load")
            .expect("saga exists")
            .record()
            .clone()
    }

    pub async fn log(&self, order: &OrderId) -> Vec<(SagaEventKind, Step)> {
        let events = self.runner().sagas.events(order).await.expect("events");
        let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
        assert_eq!(
            versions,
            (1..=events.len() as u64).collect::<Vec<_>>(),
            "versions 1, 2, 3, ..."
        );
        events.iter().map(|e| (e.kind, e.step)).collect()
    }

    pub async fn stock(&self) -> u64 {
        inventory::available(&self.ctx.client, &self.ctx.table, &self.sku)
            .await
            .expect("stock")
            .expect("sku exists")
    }

    pub async fn payment_status(&self, record: &SagaRecord) -> PaymentStatus {
        let id = record.payment_id.as_ref().expect("payment");
        self.ctx.store.get(id).await.expect("read").expect("payment").status
    }

    /// The PSP charged this saga's payment exactly once, and refunded what it says.
    pub fn assert_charged_once(&self, record: &SagaRecord, refunded: u64) {
        let id = record.payment_id.as_ref().expect("payment");
        let intents = self.sim.ledger.intents_for(id.as_str());
        assert_eq!(intents.len(), 1, "one charge at the PSP, got {intents:?}");
        let total = intents[0]["latest_charge"]["amount_refunded"].as_u64().unwrap_or(0);
        assert_eq!(total, refunded);
    }

    pub async fn escalations(&self) -> Vec<serde_json::Value> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.escalation_url)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("receive");
        out.messages()
            .iter()
            .filter_map(|m| m.body().and_then(|b| serde_json::from_str(b).ok()))
            .collect()
    }
}

pub fn fixture_money() -> Money {
    Money::new(2500, shared::Currency::parse("EUR").expect("EUR")).expect("money")
}

pub fn order() -> OrderId {
    OrderId::parse(format!("order-{}", uuid::Uuid::new_v4().simple())).expect("order id")
}

pub use checkout_saga::saga::{SagaEventKind as K, Step as S};

pub const HAPPY: [(K, S); 6] = [
    (K::SagaStarted, S::ReserveStock),
    (K::StockReserved, S::ReserveStock),
    (K::PaymentCreated, S::Charge),
    (K::PaymentRequested, S::Charge),
    (K::PaymentCaptured, S::AwaitPayment),
    (K::OrderConfirmed, S::ConfirmOrder),
];

pub const PAYMENT_FAILED: [(K, S); 7] = [
    (K::SagaStarted, S::ReserveStock),
    (K::StockReserved, S::ReserveStock),
    (K::PaymentCreated, S::Charge),
    (K::PaymentRequested, S::Charge),
    (K::StepFailed, S::AwaitPayment),
    (K::StepCompensated, S::Charge),
    (K::StockReleased, S::ReserveStock),
];

/// Compensations in reverse order of the steps: the charge (refund) before the reservation (release).
pub const FAILED_AFTER_CAPTURE: [(K, S); 8] = [
    (K::SagaStarted, S::ReserveStock),
    (K::StockReserved, S::ReserveStock),
    (K::PaymentCreated, S::Charge),
    (K::PaymentRequested, S::Charge),
    (K::PaymentCaptured, S::AwaitPayment),
    (K::StepFailed, S::ConfirmOrder),
    (K::PaymentRefunded, S::Charge),
    (K::StockReleased, S::ReserveStock),
];

/// What one test's PSP does differently from the simulator's Stripe client, in one call; every other call goes
/// through unchanged.
#[derive(Clone)]
pub enum Quirk {
    /// Refunds keep failing (a broken refund API).
    RefundsDown,
    /// Refunds are made, then their answer is lost, every time.
    RefundAnswersLost,
    /// Refunds are made and answered `pending`, as Stripe answers a refund that takes days (the answer
    /// replayed for the key stays `pending`; the outcome comes by webhook).
    RefundsPending,
    /// Charges are made, then their answer is lost (the connection drops after the request was sent), every
    /// time.
    ChargeAnswersLost,
    /// Charges take this long to answer (a slow or hanging connection), then are made.
    SlowCharges(Duration),
    /// Each status query runs this while the call is in flight (recovery holds the lease then).
    DuringRetrieve(Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>),
    /// The charges of these orders never reach the PSP: every attempt fails as a PSP that is down does.
    ChargesDownFor(Vec<OrderId>),
    /// Refunds are refused for good with this Stripe error code (HTTP 400 `invalid_request_error`).
    RefundsRefused(&'static str),
    /// Charges are made, and the answer's 3-D Secure redirect URL is this one (one our policy refuses).
    RedirectTo(&'static str),
    /// Charges are made, this runs with the payment and the PaymentIntent (a webhook arriving, the customer
    /// cancelling), then the answer is a refusal (`idempotency_error`, as after a deploy changed the request).
    ChargeRefusedAfter(AfterCharge),
    /// Charges are made, then their answer never comes (the connection hangs until the invocation is cut).
    ChargeAnswersHang,
    /// Refunds hang: no answer before the invocation is cut.
    RefundsHang,
    /// The search by the payment's id is refused for good (HTTP 400 `invalid_request_error`, as Stripe
    /// refuses search where it does not offer it); each call is counted.
    SearchRefused(Arc<AtomicUsize>),
}

/// How long a hanging call of [`Quirk`] hangs: longer than any invocation of the tests.
const HANG: Duration = Duration::from_secs(600);

/// What [`Quirk::ChargeRefusedAfter`] runs between the charge and its refused answer.
pub type AfterCharge = Arc<dyn Fn(PaymentId, PaymentIntent) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A Stripe error answer as the client reads it: `kind`, `code`.
pub fn refusal(status: u16, kind: ErrorType, code: &str) -> PspError {
    PspError::Refused {
        status,
        error: Box::new(ErrorObject {
            kind,
            code: Some(code.into()),
            decline_code: None,
            message: Some(format!("refused in a test: {code}")),
            param: None,
            payment_intent: None,
        }),
    }
}

/// The simulator's Stripe client with one `Quirk`.
#[derive(Clone)]
pub struct Quirky(pub StripeClient, pub Quirk);

fn answer_lost() -> PspError {
    PspError::Unavailable("connection reset after the request was sent".into())
}

impl StripeApi for Quirky {
    async fn charge(&self, key: &str, request: &ChargeRequest<'_>) -> Result<PaymentIntent, PspError> {
        match &self.1 {
            Quirk::ChargeAnswersLost => {
                let _done_at_the_psp = self.0.charge(key, request).await;
                Err(answer_lost())
            }
            Quirk::SlowCharges(delay) => {
                tokio::time::sleep(*delay).await;
                self.0.charge(key, request).await
            }
            Quirk::ChargesDownFor(orders) if orders.contains(request.order_id) => {
                Err(PspError::Unavailable("HTTP 503".into()))
            }
            Quirk::RedirectTo(url) => {
                let mut intent = self.0.charge(key, request).await?;
                intent.next_action = Some(NextAction {
                    kind: Some("redirect_to_url".into()),
                    redirect_to_url: Some(RedirectToUrl {
                        url: Some((*url).into()),
                    }),
                });
                Ok(intent)
            }
            Quirk::ChargeAnswersHang => {
                let _done_at_the_psp = self.0.charge(key, request).await;
                tokio::time::sleep(HANG).await;
                Err(answer_lost())
            }
            Quirk::ChargeRefusedAfter(after) => {
                let intent = self.0.charge(key, request).await?;
                after(request.payment_id.clone(), intent).await;
                Err(refusal(400, ErrorType::IdempotencyError, "idempotency_key_in_use"))
            }
            _ => self.0.charge(key, request).await,
        }
    }
    async fn retrieve(&self, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        if let Quirk::DuringRetrieve(during) = &self.1 {
            during().await;
        }
        self.0.retrieve(reference).await
    }
    async fn cancel(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.0.cancel(key, reference).await
    }
    async fn capture(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.0.capture(key, reference).await
    }
    async fn refund(&self, key: &str, reference: &PspReference, amount: Option<u64>) -> Result<Refund, PspError> {
        match &self.1 {
            Quirk::RefundsDown => Err(PspError::Unavailable("HTTP 503".into())),
            Quirk::RefundsHang => {
                tokio::time::sleep(HANG).await;
                Err(answer_lost())
            }
            Quirk::RefundsRefused(code) => Err(refusal(400, ErrorType::InvalidRequestError, code)),
            Quirk::RefundAnswersLost => {
                let _done_at_the_psp = self.0.refund(key, reference, amount).await;
                Err(answer_lost())
            }
            Quirk::RefundsPending => self.0.refund(key, reference, amount).await.map(|r| Refund {
                status: "pending".into(),
                ..r
            }),
            _ => self.0.refund(key, reference, amount).await,
        }
    }
    async fn retrieve_refund(&self, refund: &str) -> Result<Refund, PspError> {
        self.0.retrieve_refund(refund).await
    }
    async fn retrieve_dispute(&self, dispute: &str) -> Result<psp::stripe::Dispute, PspError> {
        self.0.retrieve_dispute(dispute).await
    }
    async fn retrieve_generation_failure(
        &self,
        event: &shared::PspEventId,
    ) -> Result<psp::stripe::GenerationFailure, PspError> {
        self.0.retrieve_generation_failure(event).await
    }
    async fn list_refunds(&self, reference: &PspReference) -> Result<Vec<Refund>, PspError> {
        self.0.list_refunds(reference).await
    }
    async fn find_for_payment(&self, payment: &PaymentId) -> Result<Option<PaymentIntent>, PspError> {
        if let Quirk::SearchRefused(calls) = &self.1 {
            calls.fetch_add(1, Ordering::SeqCst);
            return Err(refusal(400, ErrorType::InvalidRequestError, "search_not_available"));
        }
        self.0.find_for_payment(payment).await
    }
}
