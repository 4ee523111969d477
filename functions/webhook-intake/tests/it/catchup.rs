//! The webhook catch-up against DynamoDB Local and the Stripe-speaking simulator, which loses every webhook
//! on purpose: a payment's success and its refund, never delivered, are found in Stripe's Events API and
//! applied as their webhooks would have been; a second run applies nothing new (dedup) and the cursor has
//! moved. A backlog larger than a run's bound is read over several runs, each bounded. A dispute (whose object
//! names no payment) is found by its PaymentIntent; an event for a payment never written is parked, as the
//! intake parks it. A PSP outage ends each run quietly, opens the breaker, and leaves the cursor.

use integration_tests::TestContext;
use psp::{ApiKey, BreakerSettings, ChargeRequest, CircuitBreaker, StripeApi, StripeClient, StripeSettings};
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use shared::store::ParkedKind;
use shared::{
    Channel, CorrelationId, Currency, EventKind, Money, NewPayment, OrderId, PaymentId, PaymentStatus, PspReference,
    SigningSecret,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use webhook_intake::catchup::{CatchUp, CatchUpSettings, CursorStore, SourceWatch, StripeEvents};
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
        let psp = StripeClient::new(&StripeSettings::local(&url, KEY).unwrap(), ApiKey::parse(KEY).unwrap()).unwrap();
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
            app: App::new(
                client.clone(),
                &self.ctx.config(),
                Providers::default().into(),
                IntakeSettings::default(),
            ),
            stripe: Some(StripeEvents {
                provider: spec.into_iter().find(|s| s.name == "stripe").unwrap().unsigned(),
                psp: CircuitBreaker::new(
                    self.psp.clone(),
                    client.clone(),
                    &self.ctx.table,
                    psp::BREAKER_NAME,
                    BreakerSettings::default(),
                ),
                cursor: CursorStore {
                    client,
                    table: self.ctx.table.clone(),
                },
            }),
            adyen: None,
            source: None,
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

/// The Stripe part of a job built with one.
fn stripe(job: &CatchUp) -> &StripeEvents {
    job.stripe.as_ref().unwrap()
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
    let log: Vec<(EventKind, Channel)> = w
        .ctx
        .events(&id)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.path))
        .collect();
    assert_eq!(
        log,
        [
            (EventKind::PaymentCreated, Channel::Sync),
            (EventKind::PaymentCaptured, Channel::Webhook),
            (EventKind::PaymentRefunded, Channel::Webhook)
        ],
        "applied oldest first, as their webhooks would have been"
    );
    let cursor = stripe(&job).cursor.load().await.unwrap().expect("the cursor is saved");
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
    assert_eq!(w.ctx.events(&id).await.unwrap().len(), 3, "nothing applied twice");
    let moved = stripe(&job).cursor.load().await.unwrap().unwrap();
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
    let cut = stripe(&job).cursor.load().await.unwrap().unwrap();
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
    let done = stripe(&job).cursor.load().await.unwrap().unwrap();
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
        Some(psp::stripe::LatestCharge::Expanded(charge)) => charge.id,
        other => panic!("{other:?}"),
    };
    let (_, events) = w.sim.ledger.dispute(&charge, "needs_response").unwrap();
    w.sim.send_webhooks(events);
    let mut job = w.job(CatchUpSettings::default());
    job.app.settings.unknown_payment_window = Duration::ZERO;

    let run = job.run(deadline()).await.unwrap();
    assert!(run.applied >= 2 && run.pass_complete, "{run:?}");
    let kinds: Vec<EventKind> = w.ctx.events(&id).await.unwrap().iter().map(|e| e.kind).collect();
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
            stripe(&job).psp.state().await.unwrap(),
            psp::breaker::BreakerState::Open { .. }
        ),
        "five failed runs open the breaker"
    );
    let cursor = stripe(&job).cursor.load().await.unwrap().unwrap();
    let day_ago = shared::clock::now_ms() / 1000 - 86_400;
    assert!(
        cursor.pass.is_none() && cursor.created_gte < day_ago,
        "nothing read: the cursor stays at the first look-back, {cursor:?}"
    );
    assert_eq!(w.status(&id).await, PaymentStatus::Pending);
}

/// The job's environment in a deployment whose webhook providers are `providers`: the test's table and no
/// PSP settings at all (no `PSP_BASE_URL`, no Stripe key).
fn env_without_stripe(ctx: &TestContext, providers: &'static str) -> shared::Env {
    let table = ctx.table.clone();
    shared::Env::from_lookup(move |name| match name {
        "TABLE_NAME" => Some(table.clone()),
        "WEBHOOK_PROVIDERS" => Some(providers.to_owned()),
        _ => None,
    })
}

async fn job_from_env(ctx: &TestContext, env: &shared::Env) -> CatchUp {
    let settings = webhook_intake::catchup::Settings::from_env(env).unwrap();
    CatchUp::build(&settings, ctx.clients_for(FUNCTION))
        .await
        .unwrap_or_else(|e| panic!("the job starts without a Stripe provider: {e}"))
}

/// An Adyen-only deployment (Adyen has no events list): the job starts without any Stripe setting and
/// retries the Adyen items the intake parked, reading no Stripe page.
#[tokio::test]
async fn without_a_stripe_provider_the_job_starts_and_retries_parked_adyen_items() {
    use webhook_intake::adyen::parked::ParkedItem;
    use webhook_signatures::adyen::{Amount, AmountValue, Item, Mode};
    let ctx = TestContext::new().await;
    let env = env_without_stripe(&ctx, r#"[{"name":"adyen","scheme":"adyen","livemode":false}]"#);
    let job = job_from_env(&ctx, &env).await;
    let id = PaymentId::parse(format!("pay_adyenonly_{}", uuid::Uuid::new_v4().simple())).unwrap();
    let reference = "7914073381342284";
    let new = NewPayment {
        id: id.clone(),
        order_id: OrderId::parse("order-adyen-only").unwrap(),
        money: Money::new(1130, Currency::parse("EUR").unwrap()).unwrap(),
        provider: shared::PspName::Adyen,
        psp_reference: Some(PspReference::parse(reference).unwrap()),
        metadata: Default::default(),
        correlation_id: CorrelationId::parse("corr-setup").unwrap(),
        trace_context: None,
        now_ms: shared::clock::now_ms(),
    };
    ctx.uncounted_store().create(new).await.unwrap();
    // Its AUTHORISATION, parked by the intake (say its lease was held when it came).
    let item = Item {
        psp_reference: Some(reference.into()),
        merchant_account_code: Some("TestMerchant".into()),
        merchant_reference: Some(id.as_str().into()),
        amount: Some(Amount {
            value: Some(AmountValue::Number(1130)),
            currency: Some("EUR".into()),
        }),
        event_code: Some("AUTHORISATION".into()),
        success: Some("true".into()),
        ..Item::default()
    };
    let parked = ParkedItem::new(item, Mode::Test, shared::clock::now_ms() / 1000);
    let body = String::from_utf8(parked.to_body()).unwrap();
    ctx.store
        .park(ParkedKind::Retrying, "adyen", &parked.key(), "lease held", &body)
        .await
        .unwrap();

    let run = job.run(deadline()).await.unwrap();
    assert_eq!((run.pages, run.events), (0, 0), "no Stripe to read: {run:?}");
    let retried = run.adyen_retry.expect("the Adyen retry ran");
    assert_eq!((retried.retried, retried.done), (1, 1), "{retried:?}");
    assert_eq!(
        ctx.store.get(&id).await.unwrap().unwrap().status,
        PaymentStatus::Processing
    );
    assert!(ctx.store.parked(ParkedKind::Retrying).await.unwrap().is_empty());
}

/// A deployment with only Standard Webhooks providers starts the job too; a run reads nothing and retries
/// nothing.
#[tokio::test]
async fn a_standard_only_deployment_starts_the_job_with_nothing_to_do() {
    let ctx = TestContext::new().await;
    let env = env_without_stripe(&ctx, r#"[{"name":"acme","scheme":"standard"}]"#);
    let job = job_from_env(&ctx, &env).await;
    let run = job.run(deadline()).await.unwrap();
    assert_eq!((run.pages, run.events, &run.adyen_retry), (0, 0, &None), "{run:?}");
}

/// An event the intake cannot apply now (its payment's lease held by another worker past the intake's wait:
/// the intake answers 503) does not stop the run: a later payment's event is applied in the same run, and
/// the cursor is saved before the deferred event (not past it), so the next run reads it again and applies
/// it.
#[tokio::test]
async fn an_event_deferred_now_does_not_stop_a_later_payments_event() {
    let w = World::new().await;
    let (early, _) = w.paid("early").await;
    // Stripe's seconds: the later payment's event is listed after the early one's.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (later, _) = w.paid("later").await;
    let held = w
        .ctx
        .leases
        .acquire(&w.ctx.read(&early).await)
        .await
        .unwrap()
        .expect("the early payment's lease");
    let job = w.job(CatchUpSettings::default());

    let report = job.run(deadline()).await.unwrap();

    assert_eq!(
        (report.deferred, report.applied, report.pass_complete),
        (1, 1, true),
        "{report:?}"
    );
    assert_eq!(
        w.status(&later).await,
        PaymentStatus::Captured,
        "the later payment's event applied"
    );
    assert_eq!(w.status(&early).await, PaymentStatus::Pending, "deferred");
    let successes = psp::stripe::EventQuery {
        created_gte: 0,
        created_lte: i64::MAX,
        types: &["payment_intent.succeeded"],
        starting_after: None,
        limit: 10,
    };
    let listed = w.psp.list_events(&successes).await.unwrap();
    let early_created = listed
        .data
        .iter()
        .filter_map(|e| e["created"].as_i64())
        .min()
        .expect("events");
    let cursor = stripe(&job).cursor.load().await.unwrap().expect("saved");
    assert_eq!(
        cursor.created_gte, early_created,
        "saved before the deferred event: {cursor:?}"
    );

    // The lease ends; the next run applies the deferred event.
    w.ctx.leases.release(&held).await.unwrap();
    let next = job.run(deadline()).await.unwrap();
    assert_eq!((next.deferred, next.applied), (0, 1), "{next:?}");
    assert_eq!(w.status(&early).await, PaymentStatus::Captured);
}

/// The catch-up is a scanner: its Stripe client keeps to `PSP_SCAN_RATE_PER_SECOND` (default 10, under
/// Stripe's 25 requests/s in test mode with the reconciler's 10), as the job reads its settings.
#[test]
fn the_jobs_stripe_client_keeps_to_the_scan_rate() {
    let env = |rate: Option<&'static str>| {
        shared::Env::from_lookup(move |name| match name {
            "TABLE_NAME" => Some("payments".to_owned()),
            "WEBHOOK_PROVIDERS" => Some(r#"[{"name":"stripe","scheme":"stripe","livemode":false}]"#.to_owned()),
            "PSP_BASE_URL" => Some("http://127.0.0.1:9".to_owned()),
            "PSP_API_KEY" => Some("sk_test_catchup".to_owned()),
            "PSP_REDIRECTS" => Some("never".to_owned()),
            "PSP_SCAN_RATE_PER_SECOND" => rate.map(str::to_owned),
            _ => None,
        })
    };
    let rate = |rate| {
        let settings = webhook_intake::catchup::Settings::from_env(&env(rate)).unwrap();
        settings
            .stripe
            .and_then(|(_, psp)| psp.scan_rate)
            .map(std::num::NonZeroU32::get)
    };
    assert_eq!(rate(Some("3")), Some(3));
    assert_eq!(rate(None), Some(10));
    assert!(webhook_intake::catchup::Settings::from_env(&env(Some("0"))).is_err());
}

/// The partner event source the template grants webhook-catchup to describe in `scripts/check_permissions.py`
/// (its `StripePartnerEventSource` sample): the one test whose call is recorded names it.
const GRANTED_SOURCE: &str = "aws.partner/stripe.com/ed_test_catchupcheck";
/// moto's account, which a partner source is created for so that this account's `DescribeEventSource` sees it.
const MOTO_ACCOUNT: &str = "123456789012";

/// An EventBridge client on the moto server the tests run, its calls recorded as `function`'s when given.
fn eventbridge(function: Option<&str>) -> aws_sdk_eventbridge::Client {
    let sdk = integration_tests::local_sdk_config(&local_testkit::service::SQS.endpoint());
    let mut config = aws_sdk_eventbridge::config::Builder::from(&sdk);
    if let Some(recorder) = function.and_then(local_testkit::aws_calls::CallRecorder::from_env) {
        config = config.interceptor(recorder);
    }
    aws_sdk_eventbridge::Client::from_conf(config.build())
}

/// Stripe's side: the partner event source offered to this account (as a Stripe event destination does).
async fn offered(name: &str) {
    eventbridge(None)
        .create_partner_event_source()
        .name(name)
        .account(MOTO_ACCOUNT)
        .send()
        .await
        .unwrap();
}

/// Each run reports the source's state before its work: an active source is `EventSourceActive` 1, and the
/// run goes on as before.
#[tokio::test]
async fn a_run_reports_an_active_partner_event_source() {
    let ctx = TestContext::new().await;
    offered(GRANTED_SOURCE).await;
    let env = env_without_stripe(&ctx, r#"[{"name":"adyen","scheme":"adyen","livemode":false}]"#);
    let mut job = job_from_env(&ctx, &env).await;
    let watch = SourceWatch {
        client: eventbridge(Some(FUNCTION)),
        name: GRANTED_SOURCE.to_owned(),
    };
    let found = watch.check().await;
    assert_eq!((found.state.as_str(), found.active), ("ACTIVE", 1));
    job.source = Some(watch);
    let report = job
        .invoke(tokio::time::Instant::now() + Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(report.event_source_state.as_deref(), Some("ACTIVE"));
}

/// A source whose destination was removed on Stripe's side (`DELETED`) delivers nothing: reported as 0.
/// Its call is not recorded: the role may describe only the stage's own source.
#[tokio::test]
async fn a_deleted_partner_event_source_is_reported_not_active() {
    let name = format!("aws.partner/stripe.com/ed_test_{}", uuid::Uuid::new_v4().simple());
    offered(&name).await;
    eventbridge(None)
        .delete_partner_event_source()
        .name(&name)
        .account(MOTO_ACCOUNT)
        .send()
        .await
        .unwrap();
    let watch = SourceWatch {
        client: eventbridge(None),
        name,
    };
    let found = watch.check().await;
    assert_eq!((found.state.as_str(), found.active), ("DELETED", 0));
}

/// EventBridge does not answer (here: a source it does not know): the state is `UNKNOWN`, the metric 0, and
/// the run is not stopped by it.
#[tokio::test]
async fn a_failed_question_is_reported_not_active_and_the_run_goes_on() {
    let ctx = TestContext::new().await;
    let env = env_without_stripe(&ctx, r#"[{"name":"adyen","scheme":"adyen","livemode":false}]"#);
    let mut job = job_from_env(&ctx, &env).await;
    let watch = SourceWatch {
        client: eventbridge(None),
        name: format!("aws.partner/stripe.com/ed_unknown_{}", uuid::Uuid::new_v4().simple()),
    };
    let found = watch.check().await;
    assert_eq!((found.state.as_str(), found.active), ("UNKNOWN", 0));
    job.source = Some(watch);
    let report = job
        .invoke(tokio::time::Instant::now() + Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(report.event_source_state.as_deref(), Some("UNKNOWN"));
    assert!(report.adyen_retry.is_some(), "the run went on: {report:?}");
}
