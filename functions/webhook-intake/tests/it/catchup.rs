//! The webhook catch-up against DynamoDB Local and the Stripe-speaking simulator, which loses every webhook
//! on purpose: a payment's success and its refund, never delivered, are found in Stripe's Events API and
//! applied as their webhooks would have been; a second run applies nothing new (dedup) and the cursor has
//! moved. A backlog larger than a run's bound is read over several runs, each bounded. A dispute (whose object
//! names no payment) is found by its PaymentIntent; an event for a payment never written is parked, as the
//! intake parks it. A PSP outage ends each run quietly, opens the breaker, and leaves the cursor.

use integration_tests::TestContext;
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use shared::psp::{ApiKey, BreakerSettings, ChargeRequest, CircuitBreaker, Psp, PspSettings, StripeClient};
use shared::store::ParkedKind;
use shared::{
    CorrelationId, Currency, EventKind, Money, NewPayment, OrderId, Path, PaymentId, PaymentStatus, PspReference,
    SigningSecret,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use webhook_intake::catchup::{CatchUp, CatchUpSettings, CursorStore};
use webhook_intake::providers::{ProviderSpec, Providers};
use webhook_intake::{App, IntakeSettings};

const KEY: &str = "sk_test_catchup";
/// Every AWS call the job makes is recorded under its function's name (`scripts/check_permissions.py`).
const FUNCTION: &str = "webhook-catchup";

struct World {
    ctx: TestContext,
    sim: Arc<Simulator>,
    psp: StripeClient,
}

impl World {
    async fn new() -> Self {
        let sim = Arc::new(Simulator {
            ledger: Ledger::new(KEY, Timings::default(), None),
            // Nothing listens there: even a webhook not lost on purpose would not arrive.
            webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
            secret: SigningSecret::parse("whsec_test").unwrap(),
            delivery: DeliveryOptions {
                max_attempts: 1,
                ..DeliveryOptions::default()
            },
            client: HttpClient::default(),
            storm_rate: 0.0,
        });
        sim.ledger.lose_webhooks(1.0);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(sim.clone().serve(listener));
        let psp = StripeClient::new(&PspSettings::local(&url, KEY).unwrap(), ApiKey::parse(KEY).unwrap()).unwrap();
        Self {
            ctx: TestContext::new().await,
            sim,
            psp,
        }
    }

    /// The job as its binary builds it, on its function's clients.
    fn job(&self, settings: CatchUpSettings) -> CatchUp {
        let client = self.ctx.client_for(FUNCTION);
        let spec = ProviderSpec::from_env(&shared::Env::from_lookup(|_| None)).unwrap();
        CatchUp {
            app: App {
                store: self.ctx.store_for(FUNCTION),
                leases: self.ctx.leases_for(FUNCTION),
                providers: Providers::default().into(),
                settings: IntakeSettings::default(),
            },
            provider: spec.into_iter().find(|s| s.name == "stripe").unwrap().unsigned(),
            adyen: None,
            psp: CircuitBreaker::new(
                self.psp.clone(),
                client.clone(),
                &self.ctx.table,
                shared::psp::BREAKER_NAME,
                BreakerSettings::default(),
            ),
            cursor: CursorStore {
                client,
                table: self.ctx.table.clone(),
            },
            // The events are seconds old: none is left to its webhook.
            settings: CatchUpSettings {
                settle: Duration::ZERO,
                ..settings
            },
        }
    }

    /// A charge of 10.00 EUR that succeeds at the PSP (its webhook lost), and our payment for it, still
    /// `pending` as the lost answer left it.
    async fn paid(&self, name: &str) -> (PaymentId, PspReference) {
        let id = PaymentId::parse(format!("pay_{name}_{}", uuid::Uuid::new_v4().simple())).unwrap();
        let order = OrderId::parse(format!("order-{name}")).unwrap();
        let money = Money::new(1000, Currency::parse("EUR").unwrap()).unwrap();
        let request = ChargeRequest {
            payment_id: &id,
            order_id: &order,
            money: &money,
            payment_method: "pm_succeeded",
        };
        let pi = self.psp.charge(&format!("{id}:charge"), &request).await.unwrap();
        let reference = PspReference::parse(pi.id.as_str()).unwrap();
        let new = NewPayment {
            id: id.clone(),
            order_id: order,
            money,
            provider: shared::PspName::Stripe,
            psp_reference: Some(reference.clone()),
            metadata: Default::default(),
            correlation_id: CorrelationId::parse("corr-setup").unwrap(),
            trace_context: None,
            now_ms: shared::clock::now_ms(),
        };
        self.ctx.uncounted_store().create(new).await.unwrap();
        (id, reference)
    }

    async fn status(&self, id: &PaymentId) -> PaymentStatus {
        self.ctx.store.get(id).await.unwrap().unwrap().status
    }
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

#[tokio::test]
async fn a_success_and_a_refund_whose_webhooks_were_lost_are_caught_up_once() {
    let w = World::new().await;
    let (id, reference) = w.paid("lost").await;
    w.psp.refund("lost:refund", &reference, None).await.unwrap();
    assert_eq!(w.status(&id).await, PaymentStatus::Pending, "no webhook arrived");
    let job = w.job(CatchUpSettings::default());

    let first = job.run(deadline()).await.unwrap();
    assert_eq!(
        (first.applied, first.deferred, first.pass_complete),
        (2, 0, true),
        "{first:?}"
    );
    let p = w.ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Refunded, 1000));
    let log: Vec<(EventKind, Path)> = w
        .ctx
        .store
        .events(&id)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.path))
        .collect();
    assert_eq!(
        log,
        [
            (EventKind::PaymentCreated, Path::Sync),
            (EventKind::PaymentCaptured, Path::Webhook),
            (EventKind::PaymentRefunded, Path::Webhook)
        ],
        "applied oldest first, as their webhooks would have been"
    );
    let cursor = job.cursor.load().await.unwrap().expect("the cursor is saved");
    assert!(cursor.pass.is_none(), "{cursor:?}");
    assert!(cursor.created_gte > shared::clock::now_ms() / 1000 - 60, "{cursor:?}");

    // A second later (the cursor is in Stripe's seconds), the next run.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = job.run(deadline()).await.unwrap();
    assert_eq!(
        second.applied, 0,
        "the overlap reads them again: duplicates, {second:?}"
    );
    assert_eq!(second.unchanged, 2, "{second:?}");
    assert_eq!(w.ctx.store.events(&id).await.unwrap().len(), 3, "nothing applied twice");
    let moved = job.cursor.load().await.unwrap().unwrap();
    assert!(
        moved.version > cursor.version && moved.created_gte > cursor.created_gte,
        "{moved:?}"
    );
    assert_eq!(w.sim.ledger.auth_counts().1, 0, "every list carried the key");
}

#[tokio::test]
async fn a_backlog_over_the_bound_is_read_over_several_bounded_runs() {
    let w = World::new().await;
    let mut payments = Vec::new();
    for n in 0..3 {
        payments.push(w.paid(&format!("backlog{n}")).await.0);
    }
    // One event per page, two pages per run: three lost successes need two runs.
    let job = w.job(CatchUpSettings {
        page_size: 1,
        max_pages: 2,
        ..CatchUpSettings::default()
    });
    let first = job.run(deadline()).await.unwrap();
    assert_eq!(
        (first.pages, first.applied, first.pass_complete),
        (2, 2, false),
        "{first:?}"
    );
    let cut = job.cursor.load().await.unwrap().unwrap();
    assert!(cut.pass.is_some(), "the cut pass says where it stopped: {cut:?}");
    assert_eq!(w.status(&payments[2]).await, PaymentStatus::Captured, "newest first");
    assert_eq!(
        w.status(&payments[0]).await,
        PaymentStatus::Pending,
        "left for the next run"
    );

    let second = job.run(deadline()).await.unwrap();
    assert_eq!((second.applied, second.pass_complete), (1, true), "{second:?}");
    for id in &payments {
        assert_eq!(w.status(id).await, PaymentStatus::Captured);
    }
    let done = job.cursor.load().await.unwrap().unwrap();
    assert!(done.pass.is_none() && done.created_gte > cut.created_gte, "{done:?}");
}

#[tokio::test]
async fn a_dispute_whose_webhooks_were_lost_is_found_by_its_charge_and_an_unknown_payment_is_parked() {
    let w = World::new().await;
    let (id, reference) = w.paid("disputed").await;
    // A charge whose payment was never written: the intake's rules park it (no 503 window here).
    let orphan = PaymentId::parse(format!("pay_orphan_{}", uuid::Uuid::new_v4().simple())).unwrap();
    let (order, money) = (
        OrderId::parse("order-orphan").unwrap(),
        Money::new(500, Currency::parse("EUR").unwrap()).unwrap(),
    );
    let request = ChargeRequest {
        payment_id: &orphan,
        order_id: &order,
        money: &money,
        payment_method: "pm_succeeded",
    };
    w.psp.charge("orphan:charge", &request).await.unwrap();
    let charge = match w.psp.retrieve(&reference).await.unwrap().latest_charge {
        Some(shared::psp::stripe::LatestCharge::Expanded(charge)) => charge.id,
        other => panic!("{other:?}"),
    };
    let (_, events) = w.sim.ledger.dispute(&charge, "needs_response").unwrap();
    w.sim.send_webhooks(events);
    let mut job = w.job(CatchUpSettings::default());
    job.app.settings.unknown_payment_window = Duration::ZERO;

    let run = job.run(deadline()).await.unwrap();
    assert!(run.applied >= 2 && run.pass_complete, "{run:?}");
    let kinds: Vec<EventKind> = w.ctx.store.events(&id).await.unwrap().iter().map(|e| e.kind).collect();
    assert!(
        kinds.contains(&EventKind::PaymentCaptured) && kinds.contains(&EventKind::DisputeOpened),
        "the dispute object names no payment: found by its PaymentIntent, {kinds:?}"
    );
    let parked = w.ctx.store.parked(ParkedKind::UnknownPayment).await.unwrap();
    assert_eq!(
        parked.len(),
        1,
        "the orphan's success is parked as a webhook's would be: {parked:?}"
    );
}

#[tokio::test]
async fn a_psp_outage_ends_runs_quietly_opens_the_breaker_and_keeps_the_cursor() {
    let w = World::new().await;
    let (id, _) = w.paid("outage").await;
    let job = w.job(CatchUpSettings::default());
    w.sim.ledger.storm(503, 1000);
    for _ in 0..BreakerSettings::default().failure_threshold {
        let run = job.run(deadline()).await.unwrap();
        assert!(run.psp_unavailable && run.events == 0, "{run:?}");
    }
    assert!(
        matches!(
            job.psp.state().await.unwrap(),
            shared::psp::breaker::BreakerState::Open { .. }
        ),
        "five failed runs open the breaker"
    );
    let cursor = job.cursor.load().await.unwrap().unwrap();
    let day_ago = shared::clock::now_ms() / 1000 - 86_400;
    assert!(
        cursor.pass.is_none() && cursor.created_gte < day_ago,
        "nothing read: the cursor stays at the first look-back, {cursor:?}"
    );
    assert_eq!(w.status(&id).await, PaymentStatus::Pending);
}
