//! The checkout demo: N checkout sagas through the running local stack (`/checkouts`), with the simulator
//! (`psp-simulator serve`) failing payments on purpose (declined, failed, silent) and customers cancelling
//! orders while their payment is in flight, so confirmations fail after the capture; with `slow` also 3-D
//! Secure challenges that last (racing the abandonment deadline) or are abandoned, and declines the customer
//! retries later (the stack's `CHECKOUT_ABANDON_AFTER_SECONDS` and the simulator's `SLOW_SECONDS` set to
//! seconds, as `scripts/test` does). It waits until every
//! saga ended, then checks that stock and payments are consistent:
//! - the stock left is the initial stock minus what completed orders took (every failed checkout gave its
//!   stock back);
//! - a completed saga's payment is captured; a compensated one's is failed, or refunded in full when money
//!   had been taken;
//! - each compensation is in the saga's log, in reverse order of the steps (refund before stock release).
//!
//! With the simulator's Adyen side (`ADYEN_BASE_URL`) an `ADYEN_SHARE` of the checkouts name `"psp": "adyen"`
//! and Adyen's `paymentMethod` objects ([`ADYEN_METHODS`]), the rest `"psp": "stripe"`, in one run on one
//! stack (each checkout chooses its PSP, whatever the stack's `SAGA_PSP`); each Adyen saga's payment is also
//! checked where Adyen holds it (the simulator's admin read `GET {ADYEN_BASE_URL}/_sim/references/{payment id}`): a completed
//! saga's captured in full and not refunded, a compensated one's refunded in full when captured, else never
//! captured and not left authorised (money held).

use crate::client::{BoxError, HttpClient};
use rand::seq::IndexedRandom;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct CheckoutDemoConfig {
    pub api: String,
    pub checkouts: usize,
    pub concurrency: usize,
    /// Share of orders the customer cancels right after starting the checkout.
    pub cancel_rate: f64,
    /// How long to wait for every saga to end.
    pub timeout: Duration,
    /// Also the slow scenarios: lasting and abandoned challenges, declines retried later.
    pub slow: bool,
    /// The simulator's Adyen side, for the checkouts charged through Adyen; `None`: every checkout Stripe's.
    pub adyen: Option<AdyenSide>,
    /// The share of checkouts charged through Adyen when `adyen` is set (`ADYEN_SHARE`).
    pub adyen_share: f64,
}

/// The simulator's Adyen side, as the shop's own server reaches it.
pub struct AdyenSide {
    /// `ADYEN_BASE_URL`.
    pub base_url: String,
    /// `ADYEN_API_KEY`: the shop's key, for the `/payments/details` a challenged shopper's return makes.
    pub api_key: String,
}

#[derive(Debug, Default)]
pub struct CheckoutSummary {
    /// (payment method, saga outcome) -> count.
    pub outcomes: BTreeMap<(String, String), usize>,
    pub completed: usize,
    pub compensated: usize,
    pub refunded_after_capture: usize,
    pub cancels_accepted: usize,
    pub stock_initial: u64,
    pub stock_expected: u64,
    pub stock_left: u64,
    pub unfinished: usize,
    pub inconsistencies: Vec<String>,
}

impl CheckoutSummary {
    pub fn consistent(&self) -> bool {
        self.unfinished == 0 && self.inconsistencies.is_empty() && self.stock_left == self.stock_expected
    }
}

impl fmt::Display for CheckoutSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "checkout sagas by payment method and outcome:")?;
        for ((method, outcome), n) in &self.outcomes {
            writeln!(f, "  {method:<22} {outcome:<12} {n}")?;
        }
        writeln!(
            f,
            "completed {}, compensated {} (of which refunded after capture: {}), customer cancels {}",
            self.completed, self.compensated, self.refunded_after_capture, self.cancels_accepted
        )?;
        writeln!(
            f,
            "stock: initial {}, left {}, expected {} (initial minus completed orders)",
            self.stock_initial, self.stock_left, self.stock_expected
        )?;
        writeln!(f, "unfinished sagas: {}", self.unfinished)?;
        writeln!(f, "inconsistencies: {}", self.inconsistencies.len())?;
        for i in &self.inconsistencies {
            writeln!(f, "  {i}")?;
        }
        Ok(())
    }
}

const METHODS: [&str; 6] = [
    "pm_succeeded",
    "pm_processing",
    "pm_requires_action",
    "pm_failed",
    "pm_declined",
    "pm_silent",
];

/// The scenarios that take the simulator's `SLOW_SECONDS` or the stack's abandonment deadline to end.
const SLOW_METHODS: [&str; 4] = [
    "pm_slow_action",
    "pm_abandoned_action",
    "pm_decline_then_retry",
    "pm_slow_processing",
];

/// Adyen's payment methods for a saga (name, `paymentMethod`): a plain test card, a refusal by the issuer, a
/// 3-D Secure card whose challenge nobody finishes (abandoned, then cancelled), and one the shopper finishes
/// on the shop's page, outside the saga ([`finish_challenge`]: the saga learns it from Adyen's
/// `AUTHORISATION` notification and captures).
pub const ADYEN_METHODS: [(&str, &str); 4] = [
    (
        "adyen_card",
        r#"{"type":"scheme","encryptedCardNumber":"test_4111111111111111","holderName":"J. Smith"}"#,
    ),
    (
        "adyen_declined",
        r#"{"type":"scheme","encryptedCardNumber":"test_4111111111111111","holderName":"DECLINED"}"#,
    ),
    (
        "adyen_3ds_abandoned",
        r#"{"type":"scheme","encryptedCardNumber":"test_4917610000000000","holderName":"J. Smith"}"#,
    ),
    (
        "adyen_3ds_notified",
        r#"{"type":"scheme","encryptedCardNumber":"test_4917610000000000","holderName":"J. Smith"}"#,
    ),
];

/// The shopper finishes the challenge of `order`'s payment on the shop's page: its redirect URL (the payment's
/// action, once the saga has charged) brings back the `redirectResult` the shop's server hands to Adyen's
/// `/payments/details`. `false` when no action appeared within a few seconds (the charge went otherwise).
async fn finish_challenge(client: &HttpClient, config: &CheckoutDemoConfig, order: &str) -> Result<bool, BoxError> {
    let Some(adyen) = &config.adyen else {
        return Ok(false);
    };
    let until = Instant::now() + Duration::from_secs(10);
    let saga_url = format!("{}/checkouts/{order}", config.api);
    while Instant::now() < until {
        let saga = expect_ok(client, "GET", &saga_url, &Value::Null).await?;
        if let Some(payment) = saga["payment_id"].as_str() {
            let view = expect_ok(
                client,
                "GET",
                &format!("{}/payments/{payment}", config.api),
                &Value::Null,
            )
            .await?;
            let url = view["redirect_url"].as_str().unwrap_or_default();
            if let Some((_, result)) = url.split_once("redirectResult=") {
                let details = json!({ "details": { "redirectResult": result } });
                let headers = [("x-api-key", adyen.api_key.clone())];
                let url = format!("{}/v71/payments/details", adyen.base_url);
                let (status, answer) = client.json("POST", &url, &headers, &details).await?;
                return match status {
                    200 => Ok(true),
                    _ => Err(format!("/payments/details answered {status}: {answer}").into()),
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(false)
}

/// The PSP and payment method of a new checkout: the PSP (`stripe` or `adyen`, as the request names it), the
/// method's name (for the summary) and what the saga is given.
fn pick_method(config: &CheckoutDemoConfig) -> (&'static str, String, String) {
    let mut rng = rand::rng();
    if config.adyen.is_some() && rng.random_bool(config.adyen_share.clamp(0.0, 1.0)) {
        let (name, method) = *ADYEN_METHODS.choose(&mut rng).unwrap_or(&ADYEN_METHODS[0]);
        return ("adyen", name.to_owned(), method.to_owned());
    }
    let methods: Vec<&str> = if config.slow {
        METHODS.iter().chain(SLOW_METHODS.iter()).copied().collect()
    } else {
        METHODS.to_vec()
    };
    let method = methods.choose(&mut rng).copied().unwrap_or("pm_succeeded");
    ("stripe", method.to_owned(), method.to_owned())
}

struct Started {
    order: String,
    method: String,
    quantity: u64,
    /// Charged through Adyen (its payment is also checked there).
    adyen: bool,
}

async fn expect_ok(client: &HttpClient, method: &str, url: &str, body: &Value) -> Result<Value, BoxError> {
    let (status, answer) = client.signed().json(method, url, &[], body).await?;
    if !(200..300).contains(&status) {
        return Err(format!("{method} {url} answered {status}: {answer}").into());
    }
    Ok(answer)
}

async fn start(
    client: &HttpClient,
    config: &CheckoutDemoConfig,
    sku: &str,
    n: usize,
) -> Result<(Started, bool), BoxError> {
    let (psp, name, method) = pick_method(config);
    let quantity = rand::rng().random_range(1..=3u64);
    let order = format!("order-{sku}-{n}");
    let body = json!({ "order_id": order, "sku": sku, "quantity": quantity,
        "amount_minor": rand::rng().random_range(500..50_000u64), "currency": "EUR", "payment_method": method, "psp": psp });
    expect_ok(client, "POST", &format!("{}/checkouts", config.api), &body).await?;
    let cancelled = if rand::rng().random_bool(config.cancel_rate) {
        let (status, _) = client
            .signed()
            .json(
                "POST",
                &format!("{}/checkouts/{order}/cancel", config.api),
                &[],
                &Value::Null,
            )
            .await?;
        status == 200
    } else {
        false
    };
    if name == "adyen_3ds_notified" && !cancelled && !finish_challenge(client, config, &order).await? {
        return Err(format!("{order}: no 3-D Secure action to finish").into());
    }
    Ok((
        Started {
            order,
            method: name,
            quantity,
            adyen: psp == "adyen",
        },
        cancelled,
    ))
}

fn position(log: &[Value], kind: &str) -> Option<usize> {
    log.iter().position(|e| e["type"] == kind)
}

/// Checks one ended saga against its payment and its log; returns what is wrong.
async fn check(client: &HttpClient, api: &str, saga: &Value) -> Result<Vec<String>, BoxError> {
    let order = saga["order_id"].as_str().unwrap_or_default();
    let log = expect_ok(client, "GET", &format!("{api}/checkouts/{order}/events"), &Value::Null).await?;
    let log = log.as_array().cloned().unwrap_or_default();
    let payment = match saga["payment_id"].as_str() {
        Some(id) => Some(expect_ok(client, "GET", &format!("{api}/payments/{id}"), &Value::Null).await?),
        None => None,
    };
    let payment_status = payment.as_ref().and_then(|p| p["status"].as_str()).unwrap_or("none");
    let mut wrong = Vec::new();
    let mut expect = |ok: bool, what: &str| {
        if !ok {
            wrong.push(format!("{order}: {what} (payment {payment_status})"));
        }
    };
    match saga["status"].as_str() {
        Some("completed") => {
            expect(
                payment_status == "captured",
                "completed but the payment is not captured",
            );
            expect(
                position(&log, "OrderConfirmed").is_some(),
                "completed without OrderConfirmed",
            );
        }
        Some("compensated") if saga["captured"] == true => {
            expect(
                payment_status == "refunded",
                "money taken but the payment is not refunded",
            );
            expect(
                saga["refunded_minor"] == saga["amount_minor"],
                "refund is not the full amount",
            );
            let (refund, release) = (position(&log, "PaymentRefunded"), position(&log, "StockReleased"));
            expect(
                matches!((refund, release), (Some(r), Some(s)) if r < s),
                "compensations not in reverse order (refund, then release)",
            );
        }
        Some("compensated") => {
            expect(
                matches!(payment_status, "failed" | "none"),
                "compensated without money taken, but the payment is not failed",
            );
            if saga["failed_step"] != "reserve_stock" {
                let (cancel, release) = (position(&log, "StepCompensated"), position(&log, "StockReleased"));
                expect(
                    matches!((cancel, release), (Some(c), Some(s)) if c < s),
                    "compensations not in reverse order (charge, then stock)",
                );
            }
        }
        other => expect(false, &format!("not ended: {other:?}")),
    }
    Ok(wrong)
}

/// Checks one ended saga's payment where Adyen holds it (module doc); returns what is wrong.
async fn adyen_says(client: &HttpClient, adyen: &AdyenSide, saga: &Value) -> Result<Vec<String>, BoxError> {
    let order = saga["order_id"].as_str().unwrap_or_default();
    let Some(payment_id) = saga["payment_id"].as_str() else {
        return Ok(Vec::new());
    };
    let url = format!("{}/_sim/references/{payment_id}", adyen.base_url);
    let (status, view) = client.json("GET", &url, &[], &Value::Null).await?;
    let (captured, refunded) = (view["captured"].as_u64(), view["refunded"].as_u64());
    let amount = saga["amount_minor"].as_u64();
    let held = view["status"] == "authorised" && captured == Some(0);
    let fine = match (saga["status"].as_str(), saga["captured"] == true) {
        (Some("completed"), _) => captured == amount && refunded == Some(0),
        (Some("compensated"), true) => captured.is_some_and(|c| c > 0) && refunded == captured,
        (Some("compensated"), false) => status == 404 || (captured == Some(0) && !held),
        _ => true,
    };
    Ok(if fine {
        Vec::new()
    } else {
        vec![format!(
            "{order}: Adyen holds its payment as {view} (HTTP {status}), the saga {}",
            saga["status"]
        )]
    })
}

/// Runs the demo and returns its summary: stocks a fresh SKU, starts every checkout, waits for the sagas to
/// end, then checks each saga and the stock left.
pub async fn run(config: CheckoutDemoConfig) -> Result<CheckoutSummary, BoxError> {
    let config = Arc::new(config);
    let client = HttpClient::default();
    let sku = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut summary = CheckoutSummary {
        stock_initial: 1000,
        ..Default::default()
    };
    expect_ok(
        &client,
        "PUT",
        &format!("{}/inventory/{sku}", config.api),
        &json!({ "available": summary.stock_initial }),
    )
    .await?;
    let started = start_all(&client, &config, &sku, &mut summary).await?;
    let ended = wait_for_ends(&client, &config, &started).await?;
    summary.unfinished = started.len() - ended.len();
    let taken = tally(&client, &config, &started, &ended, &mut summary).await?;
    let stock = expect_ok(&client, "GET", &format!("{}/inventory/{sku}", config.api), &Value::Null).await?;
    summary.stock_left = stock["available"].as_u64().unwrap_or_default();
    summary.stock_expected = summary.stock_initial - taken;
    Ok(summary)
}

/// Starts the checkouts, at most `concurrency` at a time (as many customers at once), counting the cancels
/// the API accepted.
async fn start_all(
    client: &HttpClient,
    config: &Arc<CheckoutDemoConfig>,
    sku: &str,
    summary: &mut CheckoutSummary,
) -> Result<Vec<Started>, BoxError> {
    let semaphore = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
    let mut tasks = Vec::new();
    for n in 0..config.checkouts {
        let (config, client, semaphore, sku) = (config.clone(), client.clone(), semaphore.clone(), sku.to_owned());
        tasks.push(tokio::spawn(async move {
            let _permit = semaphore.acquire().await;
            start(&client, &config, &sku, n).await
        }));
    }
    let mut started = Vec::new();
    for task in tasks {
        let (s, cancelled) = task.await??;
        summary.cancels_accepted += usize::from(cancelled);
        started.push(s);
    }
    Ok(started)
}

/// Polls the sagas until every one ended or the timeout passed (the silent payments need the deadline and
/// recovery); returns the ended ones by order id.
async fn wait_for_ends(
    client: &HttpClient,
    config: &CheckoutDemoConfig,
    started: &[Started],
) -> Result<BTreeMap<String, Value>, BoxError> {
    let deadline = Instant::now() + config.timeout;
    let mut ended: BTreeMap<String, Value> = BTreeMap::new();
    while ended.len() < started.len() && Instant::now() < deadline {
        for s in started {
            if ended.contains_key(&s.order) {
                continue;
            }
            let saga = expect_ok(
                client,
                "GET",
                &format!("{}/checkouts/{}", config.api, s.order),
                &Value::Null,
            )
            .await?;
            if matches!(saga["status"].as_str(), Some("completed" | "compensated")) {
                ended.insert(s.order.clone(), saga);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(ended)
}

/// Counts each saga's outcome into `summary` and checks its payment (and, for an Adyen one, what Adyen
/// holds); a saga that did not end is an inconsistency. Returns the stock the completed orders took.
async fn tally(
    client: &HttpClient,
    config: &CheckoutDemoConfig,
    started: &[Started],
    ended: &BTreeMap<String, Value>,
    summary: &mut CheckoutSummary,
) -> Result<u64, BoxError> {
    let mut taken = 0;
    for s in started {
        let Some(saga) = ended.get(&s.order) else {
            summary
                .inconsistencies
                .push(format!("{}: did not end within {:?}", s.order, config.timeout));
            continue;
        };
        let outcome = saga["status"].as_str().unwrap_or_default().to_owned();
        if outcome == "completed" {
            summary.completed += 1;
            taken += s.quantity;
        } else {
            summary.compensated += 1;
            if saga["captured"] == true {
                summary.refunded_after_capture += 1;
            }
        }
        *summary.outcomes.entry((s.method.clone(), outcome)).or_default() += 1;
        summary.inconsistencies.extend(check(client, &config.api, saga).await?);
        if let (Some(adyen), true) = (&config.adyen, s.adyen) {
            summary.inconsistencies.extend(adyen_says(client, adyen, saga).await?);
        }
    }
    Ok(taken)
}
