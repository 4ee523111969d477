//! What one happy checkout through the saga costs, for the capacity model: the saga's start as
//! `checkout-api` runs it (reserve, create the payment, charge, finalize the sync answer, up to the wait) and
//! the delivery of its payment's events as `checkout-events` takes them from the queue (the consumer, then
//! the saga's resume up to its end), each on a client whose calls and `ConsumedCapacity` are counted, against
//! DynamoDB Local and the PSP simulator in process; the PSP requests are the simulator's count. A few
//! checkouts, the medians kept: the first one pays for the connections.

use crate::costs::{CheckoutCost, RequestCost};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use checkout_saga::runner::{Runner, Settings};
use checkout_saga::saga::{Checkout, Escalation};
use checkout_saga::{events, inventory};
use integration_tests::{CapacityMeter, Interceptors, TestContext};
use order_projection::OrderProjection;
use psp::{StripeClient, StripeSettings};
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use recovery::RecoverySettings;
use serde_json::json;
use shared::consumer::Consumer;
use shared::{Money, OrderId, SigningSecret, Sku};
use std::sync::Arc;
use std::time::{Duration, Instant};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The simulated account's key (local only).
const KEY: &str = "sk_test_bench_checkout";
/// Checkouts measured; the median of each figure is kept.
const CHECKOUTS: usize = 5;

/// The simulator on 127.0.0.1 (webhooks go nowhere: the saga learns the outcome by its own calls): its URL.
async fn simulator() -> Result<(Arc<Simulator>, String), BoxError> {
    let sim = Arc::new(Simulator {
        ledger: Ledger::new(
            KEY,
            Timings {
                slow: Duration::from_millis(200),
            },
            None,
        ),
        webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
        secret: SigningSecret::parse("whsec_bench_checkout_secret")?,
        delivery: DeliveryOptions {
            max_attempts: 1,
            ..DeliveryOptions::default()
        },
        client: HttpClient::default(),
        storm_rate: 0.0,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(sim.clone().serve(listener));
    Ok((sim, url))
}

/// A runner as `checkout-api` builds it, on `client`, charging through the simulator at `url`.
fn runner(ctx: &TestContext, client: &aws_sdk_dynamodb::Client, url: &str) -> Result<Runner<StripeClient>, BoxError> {
    let psp = StripeClient::new(&StripeSettings::local(url, KEY)?, psp::ApiKey::parse(KEY)?)?;
    // Never called on the happy path: no queue behind the escalation.
    let escalation = Escalation::new(integration_tests::sqs_client(None), "http://127.0.0.1:9/escalations");
    let settings = Settings::default();
    Ok(Runner::new(
        client,
        &ctx.config(),
        psp,
        RecoverySettings::default(),
        escalation,
        settings,
    ))
}

/// The payment's events of `payment` as the queue hands them to `checkout-events`.
async fn messages(ctx: &TestContext, payment: &shared::PaymentId) -> Result<Vec<SqsMessage>, BoxError> {
    let mut out = Vec::new();
    for (n, e) in ctx.events(payment).await?.iter().enumerate() {
        out.push(serde_json::from_value(json!({
            "messageId": format!("{}-{n}", e.event_id()),
            "body": shared::outbox::message_body(e),
            "attributes": { "MessageGroupId": e.payment_id.as_str(), "ApproximateReceiveCount": "1" },
            "messageAttributes": {}
        }))?);
    }
    Ok(out)
}

/// One measured half: the units and calls since `reset`, and the time it took.
struct Half {
    cost: RequestCost,
    ms: f64,
}

fn half(ctx: &TestContext, meter: &CapacityMeter, started: Instant) -> Half {
    let units = meter.units();
    Half {
        cost: RequestCost {
            rcu: units.read,
            wcu: units.write,
            index_units: units.index,
            open_items_units: units.open_items,
            calls: ctx.calls.by_operation(),
        },
        ms: started.elapsed().as_secs_f64() * 1e3,
    }
}

/// Measures [`CHECKOUTS`] happy checkouts; the median of each.
pub async fn run() -> Result<CheckoutCost, BoxError> {
    let ctx = TestContext::new().await;
    let meter = CapacityMeter::new();
    let client = integration_tests::client(
        &integration_tests::dynamodb_local::endpoint(),
        Interceptors {
            calls: Some(ctx.calls.clone()),
            capacity: Some(meter.clone()),
            ..Interceptors::default()
        },
    );
    let (sim, url) = simulator().await?;
    let runner = runner(&ctx, &client, &url)?;
    let sku = Sku::parse("sku-bench")?;
    inventory::put_stock(&ctx.client, &ctx.table, &sku, 1_000).await?;
    let mut measured = Vec::new();
    for _ in 0..CHECKOUTS {
        measured.push(one(&ctx, &meter, &client, &runner, &sim, &sku).await?);
    }
    Ok(median(measured))
}

/// One checkout: its start, then its events' delivery.
async fn one(
    ctx: &TestContext,
    meter: &CapacityMeter,
    client: &aws_sdk_dynamodb::Client,
    runner: &Runner<StripeClient>,
    sim: &Simulator,
    sku: &Sku,
) -> Result<CheckoutCost, BoxError> {
    let checkout = Checkout {
        sku: sku.clone(),
        quantity: 1,
        money: Money::new(2500, shared::Currency::parse("EUR")?)?,
        payment_method: "pm_succeeded".into(),
        psp: None,
    };
    let order = OrderId::parse(format!("order-{}", uuid::Uuid::new_v4().simple()))?;
    let (psp_before, _) = sim.ledger.auth_counts();
    ctx.calls.reset();
    meter.reset();
    let started = Instant::now();
    let waiting = runner.start(order, checkout).await?;
    let start = half(ctx, meter, started);
    let payment = waiting.payment_id.clone().ok_or("the checkout made no payment")?;
    let mut batch = SqsEvent::default();
    batch.records = messages(ctx, &payment).await?;
    let events = batch.records.len() as f64;
    ctx.calls.reset();
    meter.reset();
    let started = Instant::now();
    let consumer = Consumer::new(client.clone(), &ctx.table, OrderProjection);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let response = events::handle(&consumer, runner, batch, deadline).await;
    if !response.batch_item_failures.is_empty() {
        return Err(format!("the checkout's events failed: {response:?}").into());
    }
    let delivery = half(ctx, meter, started);
    let (psp_after, _) = sim.ledger.auth_counts();
    Ok(CheckoutCost {
        start: start.cost,
        delivery: delivery.cost,
        psp_calls: psp_after.saturating_sub(psp_before) as f64,
        events,
        start_ms: start.ms,
        delivery_ms: delivery.ms,
    })
}

/// The median of each figure (units and calls from the median checkout by start time).
fn median(mut all: Vec<CheckoutCost>) -> CheckoutCost {
    let mid = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    let start_ms = mid(all.iter().map(|c| c.start_ms).collect());
    let delivery_ms = mid(all.iter().map(|c| c.delivery_ms).collect());
    let psp_calls = mid(all.iter().map(|c| c.psp_calls).collect());
    all.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    let middle = all.get(all.len() / 2).cloned().unwrap_or_default();
    CheckoutCost {
        start_ms,
        delivery_ms,
        psp_calls,
        ..middle
    }
}
