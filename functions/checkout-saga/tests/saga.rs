//! The checkout saga against DynamoDB Local, the SQS emulator (escalations) and the PSP simulator (charges,
//! refunds, status queries over HTTP). Payment events reach the saga through the consumer library exactly as
//! SQS hands them over (the queue transport itself is tested by the outbox tests and the local-stack demo).
// Test code: a failed unwrap or index is the test failing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use checkout_saga::runner::{Runner, Settings};
use checkout_saga::{events, inventory, orders, sweeper};
use integration_tests::{dying_client, sqs_client, Fault, FaultInjector, TestContext};
use order_projection::OrderProjection;
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use serde_json::json;
use shared::consumer::Consumer;
use shared::lease::Leases;
use shared::psp::{ChargeRequest, PaymentIntent, Psp, PspError, PspSettings, Refund, StripeClient};
use shared::recovery::{Reconciled, Recovery, RecoverySettings};
use shared::retry::Backoff;
use shared::saga::{Checkout, Escalation, SagaEventKind, SagaRecord, SagaStatus, SagaStore, Step};
use shared::{CorrelationId, Money, OrderId, Path, PaymentStatus, PaymentStore, PspReference, SigningSecret, Sku};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const STOCK: u64 = 10;
const TEST_KEY: &str = "sk_test_saga";
/// How long the simulator's slow scenarios (a lasting 3-D Secure challenge, a retry after a decline, a long
/// processing) take here.
const SLOW: Duration = Duration::from_millis(1200);

/// The end-to-end scenarios of the Stripe-speaking simulator and the circuit breaker.
#[path = "saga/stripe.rs"]
mod stripe;

/// Deadlines that end every wait, and fair scans of the open-items index.
#[path = "saga/liveness.rs"]
mod liveness;

struct World {
    ctx: TestContext,
    sim: Arc<Simulator>,
    psp_url: String,
    escalation_url: String,
    sqs: aws_sdk_sqs::Client,
    sku: Sku,
}

async fn world() -> World {
    world_with(TestContext::new().await).await
}

async fn world_with(ctx: TestContext) -> World {
    world_with_slow(ctx, SLOW).await
}

/// A world whose slow scenarios take `slow`.
async fn world_with_slow(ctx: TestContext, slow: Duration) -> World {
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
        .queue_name(format!("escalations-{}", uuid::Uuid::new_v4().simple()))
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
fn later() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(600)
}

fn fast_backoff() -> Backoff {
    Backoff::new(3, Duration::from_millis(1), Duration::from_millis(5))
}

impl World {
    fn runner_with<P: Psp>(&self, client: aws_sdk_dynamodb::Client, psp: P, settings: Settings) -> Runner<P> {
        Runner {
            sagas: SagaStore::new(client.clone(), &self.ctx.table),
            recovery: Recovery {
                store: PaymentStore::new(client.clone(), &self.ctx.table),
                leases: Leases::new(
                    client,
                    &self.ctx.table,
                    integration_tests::test_lease_config(Duration::from_secs(30)),
                ),
                psp,
                settings: RecoverySettings {
                    stale_after: Duration::ZERO,
                    batch_limit: 100,
                },
            },
            escalation: Escalation::new(self.sqs.clone(), &self.escalation_url),
            settings,
        }
    }

    fn psp(&self) -> StripeClient {
        let mut settings = PspSettings::local(&self.psp_url, TEST_KEY).expect("PSP settings");
        settings.retries = fast_backoff();
        StripeClient::new(&settings, shared::psp::ApiKey::parse(TEST_KEY).unwrap()).expect("psp client")
    }

    /// A runner whose payments are past their deadline as soon as they are requested.
    fn runner_past_deadline(&self) -> Runner<StripeClient> {
        self.runner_with(
            self.ctx.client.clone(),
            self.psp(),
            Settings {
                payment_timeout: Duration::ZERO,
                backoff: fast_backoff(),
                ..Settings::default()
            },
        )
    }

    fn runner(&self) -> Runner<StripeClient> {
        self.runner_with(
            self.ctx.client.clone(),
            self.psp(),
            Settings {
                backoff: fast_backoff(),
                ..Settings::default()
            },
        )
    }

    fn checkout(&self, method: &str, quantity: u32) -> Checkout {
        Checkout {
            sku: self.sku.clone(),
            quantity,
            money: fixture_money(),
            payment_method: method.into(),
        }
    }

    /// Hands the payment's events to the saga's inbox as SQS delivers them: consumer, then resume.
    async fn deliver<P: Psp>(&self, runner: &Runner<P>, record: &SagaRecord) {
        let Some(payment) = &record.payment_id else { return };
        let consumer = Consumer::new(self.ctx.client.clone(), &self.ctx.table, OrderProjection);
        let records: Vec<SqsMessage> = self
            .ctx
            .store
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
            .collect();
        let mut batch = SqsEvent::default();
        batch.records = records;
        let response = events::handle(&consumer, runner, batch, later()).await;
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }

    async fn saga(&self, order: &OrderId) -> SagaRecord {
        self.runner()
            .sagas
            .load(order)
            .await
            .expect("load")
            .expect("saga exists")
            .record()
            .clone()
    }

    async fn log(&self, order: &OrderId) -> Vec<(SagaEventKind, Step)> {
        let events = self.runner().sagas.events(order).await.expect("events");
        let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
        assert_eq!(
            versions,
            (1..=events.len() as u64).collect::<Vec<_>>(),
            "versions 1, 2, 3, ..."
        );
        events.iter().map(|e| (e.kind, e.step)).collect()
    }

    async fn stock(&self) -> u64 {
        inventory::available(&self.ctx.client, &self.ctx.table, &self.sku)
            .await
            .expect("stock")
            .expect("sku exists")
    }

    async fn payment_status(&self, record: &SagaRecord) -> PaymentStatus {
        let id = record.payment_id.as_ref().expect("payment");
        self.ctx.store.get(id).await.expect("read").expect("payment").status
    }

    /// The PSP charged this saga's payment exactly once, and refunded what it says.
    fn assert_charged_once(&self, record: &SagaRecord, refunded: u64) {
        let id = record.payment_id.as_ref().expect("payment");
        let intents = self.sim.ledger.intents_for(id.as_str());
        assert_eq!(intents.len(), 1, "one charge at the PSP, got {intents:?}");
        let total = intents[0]["latest_charge"]["amount_refunded"].as_u64().unwrap_or(0);
        assert_eq!(total, refunded);
    }

    async fn escalations(&self) -> Vec<serde_json::Value> {
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

fn fixture_money() -> Money {
    Money::new(2500, shared::Currency::parse("EUR").expect("EUR")).expect("money")
}

fn order() -> OrderId {
    OrderId::parse(format!("order-{}", uuid::Uuid::new_v4().simple())).expect("order id")
}

use SagaEventKind as K;
use Step as S;

const HAPPY: [(K, S); 6] = [
    (K::SagaStarted, S::ReserveStock),
    (K::StockReserved, S::ReserveStock),
    (K::PaymentCreated, S::Charge),
    (K::PaymentRequested, S::Charge),
    (K::PaymentCaptured, S::AwaitPayment),
    (K::OrderConfirmed, S::ConfirmOrder),
];

const PAYMENT_FAILED: [(K, S); 7] = [
    (K::SagaStarted, S::ReserveStock),
    (K::StockReserved, S::ReserveStock),
    (K::PaymentCreated, S::Charge),
    (K::PaymentRequested, S::Charge),
    (K::StepFailed, S::AwaitPayment),
    (K::StepCompensated, S::Charge),
    (K::StockReleased, S::ReserveStock),
];

/// Compensations in reverse order of the steps: the charge (refund) before the reservation (release).
const FAILED_AFTER_CAPTURE: [(K, S); 8] = [
    (K::SagaStarted, S::ReserveStock),
    (K::StockReserved, S::ReserveStock),
    (K::PaymentCreated, S::Charge),
    (K::PaymentRequested, S::Charge),
    (K::PaymentCaptured, S::AwaitPayment),
    (K::StepFailed, S::ConfirmOrder),
    (K::PaymentRefunded, S::Charge),
    (K::StockReleased, S::ReserveStock),
];

#[tokio::test]
async fn the_happy_path_reserves_charges_waits_for_the_event_and_confirms() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 2))
        .await
        .expect("start");
    assert_eq!(
        waiting.status,
        SagaStatus::PaymentPending,
        "waits for the outcome event"
    );
    assert_eq!(w.stock().await, STOCK - 2);
    w.deliver(&runner, &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(w.log(&id).await, HAPPY);
    assert_eq!(w.stock().await, STOCK - 2);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Captured);
    let order_state = orders::status(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    assert_eq!(order_state, Some(("confirmed".into(), Some("completed".into()))));
    w.assert_charged_once(&done, 0);
    // Delivering the same events again changes nothing.
    w.deliver(&runner, &done).await;
    assert_eq!(w.log(&id).await.len(), HAPPY.len());
}

/// What a happy checkout costs in DynamoDB calls (counted by the harness's SDK interceptor): the start up to
/// the wait, and the outcome event's delivery (consumer and resume) up to the confirmation.
#[tokio::test]
async fn a_happy_checkout_reads_each_saga_state_once_at_most() {
    let w = world().await;
    let runner = w.runner();
    w.ctx.calls.reset();
    let waiting = runner
        .start(order(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    let start = w.ctx.calls.by_operation();
    println!("start: {start:?}");
    // Saga put (with the order), reservation, payment create (with the saga's move that saves its id), finalize
    // of the sync answer, the request; the payment read before the charge (it tells whether the PSP already
    // answered for it) and the projection read that finds no outcome yet. No read of a saga this process has
    // just written.
    assert_eq!(start.get("TransactWriteItems"), Some(&5));
    assert_eq!(start.get("GetItem"), Some(&2), "the payment and the projection");
    w.ctx.calls.reset();
    w.deliver(&runner, &waiting).await;
    let delivery = w.ctx.calls.by_operation();
    println!("delivery: {delivery:?}");
    // The saga is read once when the event resumes it, then moves twice without reading itself again.
    assert_eq!(delivery.get("GetItem"), Some(&2), "the saga once, the projection once");
}

#[tokio::test]
async fn a_failed_payment_releases_the_stock() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_failed", 3))
        .await
        .expect("start");
    assert_eq!(w.stock().await, STOCK - 3);
    w.deliver(&runner, &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.log(&id).await, PAYMENT_FAILED);
    assert_eq!(w.stock().await, STOCK, "stock back");
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Failed);
    w.assert_charged_once(&done, 0);
}

#[tokio::test]
async fn a_failure_after_capture_refunds_then_releases_in_reverse_order() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    // The customer cancels while the payment is in flight: the order can no longer be confirmed.
    assert_eq!(
        orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap(),
        orders::Cancel::Cancelled
    );
    w.deliver(&runner, &waiting).await;
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.log(&id).await, FAILED_AFTER_CAPTURE);
    assert_eq!((done.captured, done.refunded_minor), (true, 2500));
    assert_eq!(w.stock().await, STOCK);
    assert_eq!(w.payment_status(&done).await, PaymentStatus::Refunded);
    w.assert_charged_once(&done, 2500);
}

#[tokio::test]
async fn out_of_stock_fails_the_first_step_and_charges_nothing() {
    let w = world().await;
    let id = order();
    let done = w
        .runner()
        .start(id.clone(), w.checkout("pm_succeeded", 11))
        .await
        .expect("start");
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(
        w.log(&id).await,
        [(K::SagaStarted, S::ReserveStock), (K::StepFailed, S::ReserveStock)]
    );
    assert_eq!((done.payment_id, w.stock().await), (None, STOCK));
}

/// Runs one checkout with a process that dies after `calls` DynamoDB calls, then a restarted process.
/// Returns whether the kill fired (false: the run needed fewer calls).
async fn killed_then_resumed(w: &World, calls: usize, method: &str, cancel: bool) -> (bool, OrderId) {
    let id = order();
    let (dying, switch) = dying_client(calls);
    let doomed = w.runner_with(
        dying,
        w.psp(),
        Settings {
            backoff: Backoff::new(1, Duration::ZERO, Duration::ZERO),
            ..Settings::default()
        },
    );
    let cancel_order = || async {
        if cancel {
            let _ = orders::cancel(&w.ctx.client, &w.ctx.table, &id).await;
        }
    };
    // The doomed process: start, the customer's cancel, the outcome events.
    if let Ok(record) = doomed.start(id.clone(), w.checkout(method, 1)).await {
        cancel_order().await;
        w.deliver(&doomed, &record).await;
    }
    // The restarted process: start again (answers the existing saga), the cancel, the events, the sweeper.
    let runner = w.runner();
    let record = runner.start(id.clone(), w.checkout(method, 1)).await.expect("restart");
    cancel_order().await;
    w.deliver(&runner, &record).await;
    sweeper::sweep(&runner, Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    (switch.fired(), id)
}

#[tokio::test]
async fn a_process_killed_between_any_two_calls_resumes_and_completes_or_compensates() {
    let w = world().await;
    inventory::put_stock(&w.ctx.client, &w.ctx.table, &w.sku, 1000)
        .await
        .unwrap();
    for (method, cancel, expected, refunded) in [
        ("pm_succeeded", false, &HAPPY[..], 0),
        ("pm_failed", false, &PAYMENT_FAILED[..], 0),
        ("pm_succeeded", true, &FAILED_AFTER_CAPTURE[..], 2500),
    ] {
        let mut kills = 0;
        for calls in 0.. {
            let stock_before = w.stock().await;
            let (fired, id) = killed_then_resumed(&w, calls, method, cancel).await;
            let record = w.saga(&id).await;
            let kept = u64::from(record.status == SagaStatus::Completed);
            assert_eq!(
                w.stock().await,
                stock_before - kept,
                "stock moved exactly once each way"
            );
            assert_eq!(
                w.log(&id).await,
                expected,
                "{method} cancel={cancel} killed after {calls} calls"
            );
            assert!(record.status.is_terminal());
            w.assert_charged_once(&record, refunded);
            if !fired {
                break;
            }
            kills += 1;
        }
        assert!(kills >= 8, "{method}: killed at {kills} points");
        println!("{method} cancel={cancel}: killed at each of {kills} points, every run resumed");
    }
}

/// A PSP whose refunds keep failing (a broken refund API) while everything else works.
struct RefundsDown(StripeClient);

impl Psp for RefundsDown {
    async fn charge(&self, key: &str, request: &ChargeRequest<'_>) -> Result<PaymentIntent, PspError> {
        self.0.charge(key, request).await
    }
    async fn retrieve(&self, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.0.retrieve(reference).await
    }
    async fn cancel(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.0.cancel(key, reference).await
    }
    async fn refund(&self, _: &str, _: &PspReference, _: Option<u64>) -> Result<Refund, PspError> {
        Err(PspError::Unavailable("HTTP 503".into()))
    }
    async fn find_for_payment(&self, payment: &shared::PaymentId) -> Result<Option<PaymentIntent>, PspError> {
        self.0.find_for_payment(payment).await
    }
}

#[tokio::test]
async fn a_compensation_that_keeps_failing_is_escalated_to_the_dlq_and_resumed_later() {
    let w = world().await;
    let broken = w.runner_with(
        w.ctx.client.clone(),
        RefundsDown(w.psp()),
        Settings {
            backoff: fast_backoff(),
            ..Settings::default()
        },
    );
    let id = order();
    let waiting = broken
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    orders::cancel(&w.ctx.client, &w.ctx.table, &id).await.unwrap();
    w.deliver(&broken, &waiting).await;
    let stuck = w.saga(&id).await;
    assert_eq!(stuck.status, SagaStatus::RefundingPayment, "not dropped, not skipped");
    assert_eq!(
        w.stock().await,
        STOCK - 1,
        "stock stays reserved until the money is back"
    );
    let escalated = w.escalations().await;
    assert_eq!(escalated.len(), 1, "{escalated:?}");
    assert_eq!(escalated[0]["order_id"], id.as_str());
    assert_eq!(escalated[0]["action"], "refund_payment");
    assert_eq!(escalated[0]["attempts"], 3);
    // The refund API is back: the sweeper finds the open saga and finishes the compensations.
    let report = sweeper::sweep(&w.runner(), Duration::ZERO, 1000, later())
        .await
        .expect("sweep");
    assert!(report.resumed >= 1);
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Compensated);
    assert_eq!(w.log(&id).await, FAILED_AFTER_CAPTURE);
    assert_eq!(w.stock().await, STOCK);
    w.assert_charged_once(&done, 2500);
}

#[tokio::test]
async fn recovery_resolves_a_payment_whose_webhook_never_came() {
    let w = world().await;
    let runner = w.runner();
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_silent", 1))
        .await
        .expect("start");
    assert_eq!(w.payment_status(&waiting).await, PaymentStatus::Processing);
    // The reconciler's scheduled run: found through the sparse index, asked at the PSP, finalized.
    let report = runner.recovery.run(later()).await.expect("recovery run");
    assert_eq!((report.found, report.applied), (1, 1), "{report:?}");
    let payment_id = waiting.payment_id.clone().expect("payment");
    let events = w.ctx.store.events(&payment_id).await.unwrap();
    let last = events.last().expect("events");
    assert_eq!((last.path, last.status), (Path::Recovery, PaymentStatus::Captured));
    // Terminal now: no longer in the index, so the next run finds nothing.
    assert_eq!(runner.recovery.run(later()).await.unwrap().found, 0);
    w.deliver(&runner, &waiting).await;
    assert_eq!(w.saga(&id).await.status, SagaStatus::Completed);
}

#[tokio::test]
async fn a_payment_past_its_deadline_is_handed_to_recovery_by_the_saga() {
    let w = world().await;
    let runner = w.runner_past_deadline();
    let id = order();
    let record = runner
        .start(id.clone(), w.checkout("pm_silent", 1))
        .await
        .expect("start");
    assert!(record.recovery_requested);
    assert_eq!(
        w.payment_status(&record).await,
        PaymentStatus::Captured,
        "recovery applied the PSP's answer"
    );
    w.deliver(&runner, &record).await;
    let log = w.log(&id).await;
    assert_eq!(log[4], (K::RecoveryRequested, S::AwaitPayment));
    assert_eq!(log.last(), Some(&(K::OrderConfirmed, S::ConfirmOrder)));
}

/// A PSP whose status query runs `during` while the call is in flight (recovery holds the lease then).
struct StatusHook<F>(StripeClient, F);

impl<F, Fut> Psp for StatusHook<F>
where
    F: Fn() -> Fut + Send + Sync,
    Fut: std::future::Future<Output = ()> + Send,
{
    async fn charge(&self, key: &str, request: &ChargeRequest<'_>) -> Result<PaymentIntent, PspError> {
        self.0.charge(key, request).await
    }
    async fn retrieve(&self, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        (self.1)().await;
        self.0.retrieve(reference).await
    }
    async fn cancel(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.0.cancel(key, reference).await
    }
    async fn refund(&self, key: &str, reference: &PspReference, amount: Option<u64>) -> Result<Refund, PspError> {
        self.0.refund(key, reference, amount).await
    }
    async fn find_for_payment(&self, payment: &shared::PaymentId) -> Result<Option<PaymentIntent>, PspError> {
        self.0.find_for_payment(payment).await
    }
}

#[tokio::test]
async fn recovery_and_webhook_intake_never_work_on_one_payment_at_once() {
    let w = world().await;
    let runner = w.runner();
    let waiting = runner.start(order(), w.checkout("pm_silent", 1)).await.expect("start");
    let payment_id = waiting.payment_id.clone().expect("payment");
    let correlation = CorrelationId::parse("corr-recovery").unwrap();

    // Intake holds the payment's lease (it is finalizing a webhook): recovery skips the payment.
    let intake_lease = w
        .ctx
        .leases
        .acquire(&payment_id)
        .await
        .unwrap()
        .expect("intake takes the lease");
    let before = w.ctx.store.get(&payment_id).await.unwrap().unwrap().version;
    let skipped = runner
        .recovery
        .reconcile(&payment_id, correlation.clone())
        .await
        .unwrap();
    assert_eq!(skipped, Reconciled::Busy);
    assert_eq!(
        w.ctx.store.get(&payment_id).await.unwrap().unwrap().version,
        before,
        "nothing written"
    );
    w.ctx.leases.release(&intake_lease).await.unwrap();

    // Recovery holds the lease: intake's acquisition (the one its handler makes) is refused meanwhile.
    let intake_leases = w.ctx.leases.clone();
    let id = payment_id.clone();
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = refused.clone();
    let hooked = w.runner_with(
        w.ctx.client.clone(),
        StatusHook(w.psp(), move || {
            let (leases, id, seen) = (intake_leases.clone(), id.clone(), seen.clone());
            async move {
                let lease = leases.acquire(&id).await.expect("lease call");
                seen.store(lease.is_none(), std::sync::atomic::Ordering::SeqCst);
            }
        }),
        Settings::default(),
    );
    let applied = hooked.recovery.reconcile(&payment_id, correlation).await.unwrap();
    assert_eq!(applied, Reconciled::Applied(shared::EventKind::PaymentCaptured));
    assert!(
        refused.load(std::sync::atomic::Ordering::SeqCst),
        "intake could not take the lease during recovery"
    );
    // Released in the finalize transaction: intake can work on the payment right after.
    let after = w.ctx.leases.acquire(&payment_id).await.unwrap();
    assert!(after.is_some(), "lease released with the write");
}

#[tokio::test]
async fn transaction_conflicts_throttling_and_a_lost_answer_are_retried_without_running_a_step_twice() {
    let faults = FaultInjector::new();
    let w = world_with(TestContext::with_faults(faults.clone()).await).await;
    let runner = w.runner();
    faults
        .fail_next("TransactWriteItems", Fault::TransactionConflict, 1)
        .fail_next("GetItem", Fault::Throttling, 2);
    let id = order();
    let waiting = runner
        .start(id.clone(), w.checkout("pm_succeeded", 2))
        .await
        .expect("start");
    faults.fail_next("TransactWriteItems", Fault::ResponseLostAfterCommit, 2);
    w.deliver(&runner, &waiting).await;
    assert_eq!(faults.pending(), 0, "every fault was injected");
    let done = w.saga(&id).await;
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(w.log(&id).await, HAPPY, "no step ran twice");
    assert_eq!(w.stock().await, STOCK - 2, "stock taken once");
    w.assert_charged_once(&done, 0);
}

mod api {
    use super::*;
    use checkout_saga::api::handle;
    use lambda_http::http::{Method, StatusCode};
    use lambda_http::{Body, Request};
    use serde_json::Value;

    async fn call(
        runner: &Runner<StripeClient>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| Body::from(b.to_string())).unwrap_or(Body::Empty);
        let req: Request = lambda_http::http::Request::builder()
            .method(method)
            .uri(path)
            .body(body)
            .expect("request");
        let response = handle(runner, req).await.expect("answer");
        let bytes = match response.body() {
            Body::Text(t) => t.as_bytes().to_vec(),
            Body::Binary(b) => b.clone(),
            _ => Vec::new(),
        };
        (response.status(), serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    fn start_body(order: &str, quantity: u32) -> Value {
        json!({ "order_id": order, "sku": "sku-1", "quantity": quantity, "amount_minor": 2500, "currency": "EUR",
                "payment_method": "pm_succeeded" })
    }

    #[tokio::test]
    async fn sample_api_events_run_through_the_handler() {
        let w = world().await;
        let runner = w.runner();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events");
        for (file, status) in [
            ("api-put-stock.json", StatusCode::OK),
            ("api-start-checkout.json", StatusCode::ACCEPTED),
            ("api-get-checkout.json", StatusCode::OK),
            ("api-get-checkout-events.json", StatusCode::OK),
            ("api-cancel-checkout.json", StatusCode::OK),
        ] {
            let text = std::fs::read_to_string(dir.join(file)).expect("sample");
            let req = lambda_http::request::from_str(&text).expect("API Gateway event");
            let response = handle(&runner, req).await.expect("answer");
            assert_eq!(response.status(), status, "{file}");
        }
        let sku = Sku::parse("sku-sample").unwrap();
        let left = inventory::available(&w.ctx.client, &w.ctx.table, &sku).await.unwrap();
        // The cancel ran the compensations at once: the captured payment refunded, the stock back.
        assert_eq!(left, Some(10));
    }

    #[tokio::test]
    async fn bad_requests_get_a_json_error_and_write_nothing() {
        let w = world().await;
        let runner = w.runner();
        let mut unknown_field = start_body("order-bad-1", 1);
        unknown_field["coupon"] = json!("FREE");
        let mut bad_currency = start_body("order-bad-2", 1);
        bad_currency["currency"] = json!("euro");
        for (body, field) in [
            (start_body("order-bad-0", 0), "quantity"),
            (unknown_field, "coupon"),
            (bad_currency, "currency"),
            (start_body("order bad", 1), "order_id"),
            (json!({ "order_id": "order-bad-3" }), "sku"),
        ] {
            let (status, answer) = call(&runner, Method::POST, "/checkouts", Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
            assert_eq!(answer["error"], "bad_request");
            assert!(
                answer["message"].as_str().unwrap_or_default().contains(field),
                "{answer}"
            );
        }
        assert_eq!(w.stock().await, STOCK, "nothing reserved");
        for order in ["order-bad-0", "order-bad-1", "order-bad-2", "order-bad-3"] {
            let id = OrderId::parse(order).unwrap();
            assert!(runner.sagas.load(&id).await.unwrap().is_none(), "no saga for {order}");
            assert!(orders::status(&w.ctx.client, &w.ctx.table, &id)
                .await
                .unwrap()
                .is_none());
        }
        let (status, _) = call(&runner, Method::GET, "/checkouts", None).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, _) = call(&runner, Method::GET, "/checkouts/order-missing", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = call(&runner, Method::POST, "/checkouts/order-missing/cancel", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = call(
            &runner,
            Method::PUT,
            "/inventory/sku-1",
            Some(json!({ "available": -1 })),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(w.stock().await, STOCK);
    }

    #[tokio::test]
    async fn a_checkout_through_the_api_with_its_log_and_a_late_cancel() {
        let w = world().await;
        let runner = w.runner();
        let (status, saga) = call(&runner, Method::POST, "/checkouts", Some(start_body("order-api-1", 2))).await;
        assert_eq!(
            (status, saga["status"].as_str()),
            (StatusCode::ACCEPTED, Some("payment_pending"))
        );
        // Starting the same order again answers the same saga, reserves nothing more.
        let (status, again) = call(&runner, Method::POST, "/checkouts", Some(start_body("order-api-1", 2))).await;
        assert_eq!(
            (status, &again["payment_id"]),
            (StatusCode::ACCEPTED, &saga["payment_id"])
        );
        assert_eq!(w.stock().await, STOCK - 2);
        let record = w.saga(&OrderId::parse("order-api-1").unwrap()).await;
        w.deliver(&runner, &record).await;
        let (_, done) = call(&runner, Method::GET, "/checkouts/order-api-1", None).await;
        assert_eq!(done["status"], "completed");
        let (_, log) = call(&runner, Method::GET, "/checkouts/order-api-1/events", None).await;
        let kinds: Vec<&str> = log
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["type"].as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "SagaStarted",
                "StockReserved",
                "PaymentCreated",
                "PaymentRequested",
                "PaymentCaptured",
                "OrderConfirmed"
            ]
        );
        let (status, answer) = call(&runner, Method::POST, "/checkouts/order-api-1/cancel", None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        let (_, stock) = call(&runner, Method::GET, "/inventory/sku-1", None).await;
        assert_eq!(stock["available"], STOCK - 2);
    }
}
