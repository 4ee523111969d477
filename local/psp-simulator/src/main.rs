//! `psp-simulator serve` runs the simulated PSP on 127.0.0.1; `psp-simulator demo` runs payments against
//! the local stack, with Stripe and with Adyen (`ADYEN_SHARE` of them, default 0.5), and prints a summary; `psp-simulator checkouts` runs checkout sagas through the local
//! stack (which calls `serve`), cancels some orders on purpose and checks stock and payments at the end
//! (`CANCEL_RATE`, default 0.2; `TIMEOUT_SECONDS`, default 120; `SLOW_SCENARIOS`, default false: also lasting
//! and abandoned challenges and declines retried later; with the simulator's Adyen side, `ADYEN_BASE_URL`,
//! `ADYEN_SHARE` of the checkouts, default 0.5, name Adyen and its payment methods, each payment also checked
//! there, the rest Stripe). Settings come from the environment (see README):
//! `SIMULATOR_PORT` (4000), `API` (http://127.0.0.1:3000), `WEBHOOK_SECRET` (the dev Stripe secret),
//! `CHECKOUTS` (50), `CONCURRENCY` (8), `DUPLICATE_RATE`, `REORDER_RATE`, `FAILURE_RATE`, `MAX_DELAY_MS`,
//! `SCENARIO` (serve: fixed scenario), `PSP_API_KEY` (serve: the account's secret key, default
//! `sk_test_local_simulator`), `SLOW_SECONDS` (serve: how long the slow scenarios take, default 180),
//! `STORM_RATE` (serve: share of requests answered 429/503, default 0), `WEBHOOK_LOSS_RATE` (serve: share
//! of webhooks never sent, still listed by `GET /v1/events`, default 0), `TABLE_NAME` (demo: read consumer
//! cursors), `STRIPE_EVENTS_QUEUE_URL` (serve: every Stripe event also put on the local EventBridge bus, whose
//! rule's target is this queue; the local stack polls it into webhook-eventbridge). `ADYEN_SIMULATOR_PORT` (serve: also the Adyen side on that port, when set; its notifications go to
//! `{API}/webhooks/adyen` signed with `ADYEN_HMAC_KEY` (hex) and Basic `ADYEN_WEBHOOK_USERNAME` /
//! `ADYEN_WEBHOOK_PASSWORD`, by default the local stack's `DEV_ADYEN_*` of `scripts/lib.sh`; the account's key
//! `ADYEN_API_KEY` and merchant account `ADYEN_MERCHANT_ACCOUNT` default to the simulator's dev ones).

use psp_simulator::adyen::{self, ledger::AdyenLedger, notify::Endpoint, AdyenSimulator};
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::demo::adyen::AdyenEndpoint;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::{Simulator, DEV_API_KEY};
use psp_simulator::{checkout_demo, client::HttpClient, demo};
use shared::SigningSecret;
use std::sync::Arc;
use std::time::Duration;
use webhook_signatures::adyen::{HmacKey, Mode};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn delivery() -> DeliveryOptions {
    let d = DeliveryOptions::default();
    DeliveryOptions {
        max_delay: Duration::from_millis(env_or("MAX_DELAY_MS", d.max_delay.as_millis() as u64)),
        duplicate_rate: env_or("DUPLICATE_RATE", d.duplicate_rate),
        reorder_rate: env_or("REORDER_RATE", d.reorder_rate),
        failure_rate: env_or("FAILURE_RATE", d.failure_rate),
        max_attempts: d.max_attempts,
        eventbridge: None,
    }
}

fn text(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The local API's Adyen endpoint, `{api}/webhooks/adyen`, and how it takes notifications (settings in the
/// module doc).
fn adyen_endpoint(api: &str) -> Result<AdyenEndpoint, Error> {
    let hex = text("ADYEN_HMAC_KEY", adyen::DEV_HMAC_KEY);
    let key = HmacKey::from_hex(Mode::Test, &hex).map_err(|why| format!("ADYEN_HMAC_KEY {why}"))?;
    let endpoint = Endpoint {
        url: format!("{api}/webhooks/adyen"),
        username: text("ADYEN_WEBHOOK_USERNAME", adyen::DEV_WEBHOOK_USERNAME),
        password: text("ADYEN_WEBHOOK_PASSWORD", adyen::DEV_WEBHOOK_PASSWORD),
    };
    Ok(AdyenEndpoint { key, endpoint })
}

/// The Adyen side on `port`, notifying `{api}/webhooks/adyen`.
async fn serve_adyen(api: String, port: u16) -> Result<(), Error> {
    let AdyenEndpoint { key, endpoint } = adyen_endpoint(&api)?;
    let ledger = AdyenLedger::new(
        text("ADYEN_API_KEY", adyen::DEV_API_KEY),
        text("ADYEN_MERCHANT_ACCOUNT", adyen::DEV_MERCHANT_ACCOUNT),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "Adyen simulator on http://127.0.0.1:{port}/v71, notifications to {}",
        endpoint.url
    );
    AdyenSimulator::new(ledger, key, Some(endpoint), delivery())
        .serve(listener)
        .await
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let api = std::env::var("API").unwrap_or_else(|_| "http://127.0.0.1:3000".into());
    let secret = SigningSecret::parse(
        std::env::var("WEBHOOK_SECRET").unwrap_or_else(|_| "whsec_local_dev_stripe_signing_secret".into()),
    )?;
    match std::env::args().nth(1).as_deref() {
        Some("serve") => serve(api, secret).await,
        Some("demo") => payments_demo(api, secret).await,
        Some("checkouts") => checkouts(api).await,
        _ => Err("usage: psp-simulator serve | demo | checkouts".into()),
    }
}

/// `serve`: the Stripe side on `SIMULATOR_PORT`, webhooks to `{api}/webhooks/stripe` signed with `secret`,
/// and the Adyen side too when `ADYEN_SIMULATOR_PORT` is set (settings in the module doc).
async fn serve(api: String, secret: SigningSecret) -> Result<(), Error> {
    let port: u16 = env_or("SIMULATOR_PORT", 4000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let default_scenario = std::env::var("SCENARIO")
        .ok()
        .and_then(|s| serde_json::from_value(serde_json::Value::String(s)).ok());
    println!("PSP simulator on http://127.0.0.1:{port}, webhooks to {api}/webhooks/stripe");
    let api_key = std::env::var("PSP_API_KEY").unwrap_or_else(|_| DEV_API_KEY.into());
    let timings = Timings {
        slow: Duration::from_secs(env_or("SLOW_SECONDS", Timings::default().slow.as_secs())),
    };
    if let Some(port) = std::env::var("ADYEN_SIMULATOR_PORT").ok().and_then(|p| p.parse().ok()) {
        spawn_adyen(api.clone(), port);
    }
    let ledger = Ledger::new(api_key, timings, default_scenario);
    ledger.lose_webhooks(env_or("WEBHOOK_LOSS_RATE", 0.0));
    // The account's one endpoint, as Stripe lists it (`GET /v1/webhook_endpoints`, read by `paymentsctl doctor`).
    ledger.add_webhook_endpoint(&format!("{api}/webhooks/stripe"), None);
    let mut delivery = delivery();
    if let Ok(queue) = std::env::var("STRIPE_EVENTS_QUEUE_URL") {
        // The local stack's EventBridge way in: every event also goes to the partner bus (its queue).
        let sqs = aws_sdk_sqs::Client::new(&shared::aws::sdk_config().await);
        println!("PSP simulator: every event also on the EventBridge bus -> {queue}");
        delivery.eventbridge = Some(local_lambda::eventbridge::Bus::local(sqs, queue));
    }
    let sim = Simulator {
        ledger,
        webhook_url: format!("{api}/webhooks/stripe"),
        secret,
        delivery,
        client: HttpClient::default(),
        storm_rate: env_or("STORM_RATE", 0.0),
    };
    Arc::new(sim).serve(listener).await
}

/// Runs the Adyen side beside the Stripe side; its failure is reported and does not stop the Stripe side.
fn spawn_adyen(api: String, port: u16) {
    tokio::spawn(async move {
        if let Err(e) = serve_adyen(api, port).await {
            eprintln!("Adyen simulator stopped: {e}");
        }
    });
}

/// `demo`: payments through the local stack, Stripe's and Adyen's; an inconsistency found fails the command.
async fn payments_demo(api: String, secret: SigningSecret) -> Result<(), Error> {
    let adyen = adyen_endpoint(&api)?;
    let config = demo::DemoConfig {
        api,
        checkouts: env_or("CHECKOUTS", 50),
        concurrency: env_or("CONCURRENCY", 8),
        secret,
        delivery: delivery(),
        table: std::env::var("TABLE_NAME").ok(),
        adyen_share: env_or("ADYEN_SHARE", 0.5),
        adyen,
    };
    let summary = demo::run(config).await?;
    print!("{summary}");
    if !summary.consistent(std::env::var_os("TABLE_NAME").is_some()) {
        return Err("the demo found a lost update, a secret on a terminal payment, an unfinished payment, a payment not where its PSP says, or an event not consumed".into());
    }
    Ok(())
}

/// `checkouts`: checkout sagas through the local stack; inconsistent stock or payments fail the command.
async fn checkouts(api: String) -> Result<(), Error> {
    let config = checkout_demo::CheckoutDemoConfig {
        api,
        checkouts: env_or("CHECKOUTS", 40),
        concurrency: env_or("CONCURRENCY", 8),
        cancel_rate: env_or("CANCEL_RATE", 0.2),
        timeout: Duration::from_secs(env_or("TIMEOUT_SECONDS", 120)),
        slow: env_or("SLOW_SCENARIOS", false),
        adyen: std::env::var("ADYEN_BASE_URL")
            .ok()
            .map(|base_url| checkout_demo::AdyenSide {
                base_url,
                api_key: text("ADYEN_API_KEY", adyen::DEV_API_KEY),
            }),
        adyen_share: env_or("ADYEN_SHARE", 0.5),
    };
    let summary = checkout_demo::run(config).await?;
    print!("{summary}");
    if !summary.consistent() {
        return Err("the checkout demo found inconsistent stock or payments, or unfinished sagas".into());
    }
    Ok(())
}
