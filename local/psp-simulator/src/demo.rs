//! The demo: N checkouts against the running local stack, with races on purpose (the sync answer and the
//! webhooks arrive together, webhooks duplicated, reordered, sometimes failing), then a summary read back
//! from the API and the table.

use crate::client::{BoxError, HttpClient};
use crate::delivery::{deliver, DeliveryOptions};
use crate::ledger::{Answer, Ledger, Scenario, Timings};
use rand::seq::IndexedRandom;
use rand::Rng;
use serde_json::{json, Value};
use shared::SigningSecret;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct DemoConfig {
    pub api: String,
    pub checkouts: usize,
    pub concurrency: usize,
    pub secret: SigningSecret,
    pub delivery: DeliveryOptions,
    /// Table to read events and consumer cursors from (`TABLE_NAME`), when reachable.
    pub table: Option<String>,
}

#[derive(Debug, Default)]
pub struct Summary {
    pub by_status: BTreeMap<String, usize>,
    pub webhook_results: BTreeMap<String, usize>,
    pub secrets_withheld: usize,
    pub secrets_on_terminal: usize,
    pub lost_updates: usize,
    pub not_finalized: usize,
    pub events: usize,
    pub events_consumed: usize,
}

const SECRET_FIELDS: [&str; 3] = ["client_secret", "redirect_url", "retry_token"];
/// The in-process PSP account's key (the demo calls the ledger directly, not over HTTP).
const DEMO_KEY: &str = "sk_test_demo";

fn carries_secret(view: &Value) -> bool {
    SECRET_FIELDS.iter().any(|f| view.get(f).is_some())
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "captured" | "failed" | "refunded")
}

struct Checkout {
    payment_id: String,
    sync_answer: Value,
    sync_asked_secret: bool,
    webhook_results: Vec<String>,
}

/// The demo plays the checkout orchestrator: it turns the PSP's answer to the charge (a PaymentIntent, or a
/// decline) into the payments API's `sync-result` body.
pub fn sync_result(answer: &Answer) -> Value {
    let pi = if answer.status == 200 {
        &answer.body
    } else {
        &answer.body["error"]["payment_intent"]
    };
    let reference = pi["id"].clone();
    match pi["status"].as_str().unwrap_or_default() {
        "requires_action" => json!({ "outcome": "requires_action", "psp_reference": reference,
            "client_secret": pi["client_secret"], "redirect_url": pi["next_action"]["redirect_to_url"]["url"] }),
        "processing" | "requires_capture" => json!({ "outcome": "processing", "psp_reference": reference }),
        "succeeded" => json!({ "outcome": "succeeded", "psp_reference": reference }),
        "canceled" => json!({ "outcome": "failed", "psp_reference": reference,
            "reason": pi["cancellation_reason"].as_str().unwrap_or("canceled") }),
        _ => json!({ "outcome": "attempt_failed", "psp_reference": reference,
            "decline_code": pi["last_payment_error"]["decline_code"].as_str().unwrap_or("declined") }),
    }
}

async fn checkout(client: &HttpClient, psp: &Ledger, config: &DemoConfig, n: usize) -> Result<Checkout, BoxError> {
    let scenario = *[
        Scenario::RequiresAction,
        Scenario::Processing,
        Scenario::Succeeded,
        Scenario::Failed,
        Scenario::Declined,
    ]
    .choose(&mut rand::rng())
    .unwrap_or(&Scenario::Succeeded);
    let amount = rand::rng().random_range(100..100_000u64);
    let (status, created) = client
        .json(
            "POST",
            &format!("{}/payments", config.api),
            &[("idempotency-key", format!("demo-{n}-{}", uuid::Uuid::new_v4()))],
            &json!({ "order_id": format!("order-demo-{n}"), "amount_minor": amount, "currency": "EUR" }),
        )
        .await?;
    if status != 201 {
        return Err(format!("create answered {status}: {created}").into());
    }
    let payment_id = created["payment_id"].as_str().unwrap_or_default().to_owned();
    let params: BTreeMap<String, String> = [
        ("amount", amount.to_string()),
        ("currency", "eur".to_owned()),
        ("confirm", "true".to_owned()),
        // The simulator refuses, as Stripe does, a confirm that may redirect and has no return URL.
        ("automatic_payment_methods[enabled]", "true".to_owned()),
        ("automatic_payment_methods[allow_redirects]", "never".to_owned()),
        (
            "payment_method",
            format!("pm_{}", serde_json::to_value(scenario)?.as_str().unwrap_or("succeeded")),
        ),
        ("metadata[payment_id]", payment_id.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let charged = psp.handle(
        "POST",
        "/v1/payment_intents",
        Some(&format!("Bearer {DEMO_KEY}")),
        Some(&format!("charge-{payment_id}")),
        &params,
    );
    let events = charged.webhooks;
    let sync_body = sync_result(&charged.answer.ok_or("the PSP did not answer the charge")?);
    let sync_asked_secret = sync_body.get("client_secret").is_some() || sync_body.get("redirect_url").is_some();
    // The race on purpose: the webhooks and the synchronous answer at the same time.
    let sync_delay = rand::rng().random_range(Duration::ZERO..=config.delivery.max_delay);
    let url = format!("{}/webhooks/stripe", config.api);
    let (webhooks, sync) = tokio::join!(deliver(client, &url, &config.secret, events, &config.delivery), async {
        tokio::time::sleep(sync_delay).await;
        client
            .json(
                "POST",
                &format!("{}/payments/{payment_id}/sync-result", config.api),
                &[],
                &sync_body,
            )
            .await
    });
    let (_, sync_answer) = sync?;
    Ok(Checkout {
        payment_id,
        sync_answer,
        sync_asked_secret,
        webhook_results: webhooks.into_iter().map(|d| d.result).collect(),
    })
}

/// Runs the demo and returns its summary.
pub async fn run(config: DemoConfig) -> Result<Summary, BoxError> {
    let config = Arc::new(config);
    let psp = Arc::new(Ledger::new(DEMO_KEY, Timings::default(), None));
    let client = HttpClient::default();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
    let mut tasks = Vec::new();
    for n in 0..config.checkouts {
        let (config, psp, client, semaphore) = (config.clone(), psp.clone(), client.clone(), semaphore.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = semaphore.acquire().await;
            checkout(&client, &psp, &config, n).await
        }));
    }
    let mut checkouts = Vec::new();
    for t in tasks {
        checkouts.push(t.await??);
    }

    let mut summary = Summary::default();
    for c in &checkouts {
        for r in &c.webhook_results {
            *summary.webhook_results.entry(r.clone()).or_default() += 1;
        }
        let status = c.sync_answer["status"].as_str().unwrap_or("?");
        if is_terminal(status) && carries_secret(&c.sync_answer) {
            summary.secrets_on_terminal += 1;
        }
        if c.sync_asked_secret && is_terminal(status) && !carries_secret(&c.sync_answer) {
            summary.secrets_withheld += 1;
        }
    }
    // Every payment ends terminal; its log is contiguous; the consumer catches up.
    let deadline = Instant::now() + Duration::from_secs(30);
    for c in &checkouts {
        let view = loop {
            let (_, view) = client
                .json(
                    "GET",
                    &format!("{}/payments/{}", config.api, c.payment_id),
                    &[],
                    &Value::Null,
                )
                .await?;
            if is_terminal(view["status"].as_str().unwrap_or("")) || Instant::now() > deadline {
                break view;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let status = view["status"].as_str().unwrap_or("?").to_owned();
        if !is_terminal(&status) {
            summary.not_finalized += 1;
        }
        if is_terminal(&status) && carries_secret(&view) {
            summary.secrets_on_terminal += 1;
        }
        *summary.by_status.entry(status).or_default() += 1;
        let (_, log) = client
            .json(
                "GET",
                &format!("{}/payments/{}/events", config.api, c.payment_id),
                &[],
                &Value::Null,
            )
            .await?;
        let versions: Vec<u64> = log["events"]
            .as_array()
            .map(|e| e.iter().filter_map(|x| x["version"].as_u64()).collect())
            .unwrap_or_default();
        if versions != (1..=versions.len() as u64).collect::<Vec<_>>()
            || view["version"].as_u64() != Some(versions.len() as u64)
        {
            summary.lost_updates += 1;
        }
        summary.events += versions.len();
    }
    if let Some(table) = &config.table {
        summary.events_consumed = consumed(table, &checkouts, deadline).await?;
    }
    Ok(summary)
}

/// Events the order projection applied for the demo's payments (its cursors), waiting for it to catch up.
async fn consumed(table: &str, checkouts: &[Checkout], deadline: Instant) -> Result<usize, BoxError> {
    let ddb = shared::aws::dynamodb_client(&shared::aws::sdk_config().await);
    let mut total = 0;
    for c in checkouts {
        let payment_id = shared::PaymentId::parse(c.payment_id.as_str())?;
        let payment = ddb
            .get_item()
            .table_name(table)
            .set_key(Some(shared::keys::payment(&payment_id)))
            .send()
            .await?;
        let version: usize = payment
            .item()
            .and_then(|i| i.get("version"))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        loop {
            let cursor = ddb
                .get_item()
                .table_name(table)
                .set_key(Some(shared::keys::consumer_cursor("order-projection", &payment_id)))
                .consistent_read(true)
                .send()
                .await?;
            let applied: usize = cursor
                .item()
                .and_then(|i| i.get("applied_version"))
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if applied >= version || Instant::now() > deadline {
                total += applied;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(total)
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let payments: usize = self.by_status.values().sum();
        writeln!(f, "payments: {payments}")?;
        for (status, n) in &self.by_status {
            writeln!(f, "  {status:<16} {n}")?;
        }
        writeln!(f, "webhook answers:")?;
        for (result, n) in &self.webhook_results {
            writeln!(f, "  {result:<16} {n}")?;
        }
        writeln!(
            f,
            "duplicates absorbed:          {}",
            self.webhook_results.get("duplicate").unwrap_or(&0)
        )?;
        writeln!(
            f,
            "stale writes prevented:       {}",
            self.webhook_results.get("stale").unwrap_or(&0)
        )?;
        writeln!(
            f,
            "secrets withheld:             {} (sync answers asking for an action on a payment already terminal)",
            self.secrets_withheld
        )?;
        writeln!(f, "secrets on terminal payments: {}", self.secrets_on_terminal)?;
        writeln!(f, "lost updates:                 {}", self.lost_updates)?;
        writeln!(f, "not finalized:                {}", self.not_finalized)?;
        writeln!(
            f,
            "events relayed and consumed:  {} of {} (order projection)",
            self.events_consumed, self.events
        )
    }
}
