//! `bench openloop`: an open-loop load run against the local world (issue 44). Requests go out at a fixed
//! arrival rate whatever the answers (a closed loop slows down with the system and hides its queue), and each
//! one's latency is counted from when it was due, not from when it was sent, into an HDR histogram: no
//! coordinated omission. The mix: Stripe webhooks (per payment a `processing` and a `succeeded` event, a
//! fifth in the wrong order, a tenth of the `succeeded` ones delivered twice), Adyen notifications in batches
//! (several items of several payments in one request, each payment's `AUTHORISATION` and `CAPTURE`, a fifth
//! of the batches in the wrong order, a tenth of the capture batches twice) and checkouts through the
//! checkout API (`POST /checkouts`, charged at the PSP simulator, whose own webhooks then come too). A
//! refused request (429 from the route's throttle, 503 from a held lease, a 5xx, a broken connection) is sent
//! again as a PSP would, after 1, 2, 4, 8, 16 and 32 s (then this sender gives up, where a PSP goes on for
//! days: "never delivered"). Afterwards every payment is read back: versions 1, 2, 3 ..., at most one
//! capture, no PSP event applied twice, captured wherever its capture was acknowledged, and every accepted
//! checkout completed with its payment captured once: nothing lost, nothing applied twice (the run fails
//! otherwise).
//!
//! Run it through `scripts/openloop`, which starts the local world and the PSP simulator; `bench openloop
//! [--rates 10,25,50,100] [--seconds 10] [--results]`. `--consistency` is CI's short run (`scripts/test`): 3 s
//! at 8 requests a second, the read-back asserted, no figures kept.

use hdrhistogram::Histogram;
use psp_simulator::adyen::notify::{self, Endpoint};
use psp_simulator::client::HttpClient;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use shared::SigningSecret;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use webhook_signatures::adyen::{Amount, AmountValue, HmacKey, Item, Mode};
use webhook_signatures::sign_stripe;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The waits before each resend of a refused delivery (a PSP's back-off, compressed).
const RESENDS_S: [u64; 6] = [1, 2, 4, 8, 16, 32];

/// Adyen items one notification carries at most (the simulator's `MAX_BATCH`).
const ADYEN_BATCH: usize = 3;

/// One Adyen notification item: the payment it is about, its event code and its own reference.
#[derive(Debug, Clone)]
struct AdyenItem {
    payment: String,
    /// The payment's pspReference (its `AUTHORISATION`'s own).
    payment_ref: String,
    code: &'static str,
}

/// What one request of the mix is.
#[derive(Debug, Clone)]
enum Request {
    /// A Stripe webhook: for which payment, which event.
    Stripe {
        payment: String,
        event: String,
        kind: &'static str,
    },
    /// An Adyen notification carrying several items.
    Adyen(Vec<AdyenItem>),
    /// A checkout started through the checkout API.
    Checkout { order: String },
}

/// One request to make, and when it is due after the level's start.
#[derive(Debug, Clone)]
struct Delivery {
    request: Request,
    due: Duration,
}

impl Delivery {
    /// The payments whose capture this request acknowledges when it is answered 2xx.
    fn captures(&self) -> Vec<&str> {
        match &self.request {
            Request::Stripe { payment, kind, .. } if kind.ends_with("succeeded") => vec![payment.as_str()],
            Request::Adyen(items) => items
                .iter()
                .filter(|i| i.code == "CAPTURE")
                .map(|i| i.payment.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// What became of one delivery.
#[derive(Debug, Clone)]
struct Outcome {
    /// From when it was due to its first answer.
    first_answer: Duration,
    first_status: u16,
    attempts: usize,
    /// The last answer's status (0: no answer).
    status: u16,
}

/// One level's figures.
#[derive(Debug)]
pub struct Level {
    pub rate: f64,
    pub deliveries: usize,
    /// Payments read back (Stripe's and Adyen's and the checkouts').
    pub payments: usize,
    /// Of the deliveries: Stripe webhooks, Adyen notifications (and their items), checkouts.
    pub mix: (usize, usize, usize, usize),
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// First answers a second that were 2xx.
    pub throughput: f64,
    pub first_statuses: BTreeMap<u16, usize>,
    pub resends: usize,
    /// Deliveries never answered 2xx after every resend.
    pub undelivered: usize,
    /// What the read-back found wrong (lost, applied twice, versions with a gap, a checkout not completed).
    pub problems: Vec<String>,
}

/// The payments and orders of one level.
struct Units {
    stripe: Vec<String>,
    /// Each Adyen payment with its pspReference.
    adyen: Vec<(String, String)>,
    orders: Vec<String>,
}

/// The plan of one level: per Stripe payment its two events (a fifth swapped), a tenth of the captures
/// again; the Adyen payments' `AUTHORISATION`s and `CAPTURE`s in batches of up to three (a fifth of the
/// payments' captures before their authorisations, a tenth of the capture batches again); the checkouts. Due
/// at a fixed rate, in rounds so that a payment's events are apart, the checkouts spread over the rounds.
fn plan(units: &Units, rate: f64, seed: u64) -> Vec<Delivery> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rounds: [Vec<Request>; 3] = Default::default();
    for p in &units.stripe {
        let processing = Request::Stripe {
            payment: p.clone(),
            event: format!("evt_{p}_processing"),
            kind: "payment_intent.processing",
        };
        let succeeded = Request::Stripe {
            payment: p.clone(),
            event: format!("evt_{p}_succeeded"),
            kind: "payment_intent.succeeded",
        };
        let [first, second, third] = &mut rounds;
        if rng.random_bool(0.2) {
            first.push(succeeded.clone());
            second.push(processing);
        } else {
            first.push(processing);
            second.push(succeeded.clone());
        }
        if rng.random_bool(0.1) {
            third.push(succeeded);
        }
    }
    for batch in units.adyen.chunks(ADYEN_BATCH) {
        let items = |code| -> Vec<AdyenItem> {
            batch
                .iter()
                .map(|(payment, payment_ref)| AdyenItem {
                    payment: payment.clone(),
                    payment_ref: payment_ref.clone(),
                    code,
                })
                .collect()
        };
        let (authorisations, captures) = (Request::Adyen(items("AUTHORISATION")), Request::Adyen(items("CAPTURE")));
        let [first, second, third] = &mut rounds;
        if rng.random_bool(0.2) {
            first.push(captures.clone());
            second.push(authorisations);
        } else {
            first.push(authorisations);
            second.push(captures.clone());
        }
        if rng.random_bool(0.1) {
            third.push(captures);
        }
    }
    // The checkouts spread over the three rounds, a third in each, at random places.
    for (i, order) in units.orders.iter().enumerate() {
        if let Some(round) = rounds.get_mut(i % 3) {
            let at = if round.is_empty() {
                0
            } else {
                rng.random_range(0..round.len())
            };
            round.insert(at, Request::Checkout { order: order.clone() });
        }
    }
    rounds
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, request)| Delivery {
            request,
            due: Duration::from_secs_f64(i as f64 / rate),
        })
        .collect()
}

fn stripe_event(id: &str, kind: &str, payment: &str) -> Value {
    json!({ "id": id, "object": "event", "type": kind, "created": shared::clock::now_ms() / 1000, "livemode": false,
        "data": { "object": { "id": format!("pi_{payment}"), "object": "payment_intent", "amount": 1000,
            "currency": "eur", "status": if kind.ends_with("succeeded") { "succeeded" } else { "processing" },
            "metadata": { "payment_id": payment } } } })
}

/// Adyen's side of the local world: its merchant account, the HMAC key and the Basic credentials the intake
/// verifies (`scripts/lib.sh`'s development values unless set).
#[derive(Clone)]
struct AdyenSide {
    merchant_account: String,
    key: Arc<HmacKey>,
    endpoint: Endpoint,
}

impl AdyenSide {
    fn from_env(api: &str) -> Result<Self, BoxError> {
        let or = |read: Result<String, std::env::VarError>, default: &str| read.unwrap_or_else(|_| default.to_owned());
        let hex = or(std::env::var("DEV_ADYEN_HMAC_KEY"), DEV_ADYEN_HMAC_KEY);
        Ok(Self {
            merchant_account: or(std::env::var("ADYEN_MERCHANT_ACCOUNT"), "LocalShopECOM"),
            key: Arc::new(HmacKey::from_hex(Mode::Test, &hex).map_err(|e| format!("DEV_ADYEN_HMAC_KEY: {e}"))?),
            endpoint: Endpoint {
                url: format!("{api}/webhooks/adyen"),
                username: or(std::env::var("DEV_ADYEN_USER"), "adyen"),
                password: or(std::env::var("DEV_ADYEN_PASSWORD"), "local-dev-adyen-password"),
            },
        })
    }

    /// The notification carrying `items`, each signed on its own.
    fn notification(&self, items: &[AdyenItem]) -> Value {
        let now = shared::clock::now_ms();
        let signed: Vec<Value> = items
            .iter()
            .map(|i| {
                let capture = i.code == "CAPTURE";
                let item = Item {
                    psp_reference: Some(if capture {
                        format!("{}CAP", &i.payment_ref[..13])
                    } else {
                        i.payment_ref.clone()
                    }),
                    original_reference: capture.then(|| i.payment_ref.clone()),
                    merchant_account_code: Some(self.merchant_account.clone()),
                    merchant_reference: Some(i.payment.clone()),
                    amount: Some(Amount {
                        value: Some(AmountValue::Number(1000)),
                        currency: Some("EUR".into()),
                    }),
                    event_code: Some(i.code.to_owned()),
                    success: Some("true".into()),
                    reason: None,
                    additional_data: None,
                };
                notify::signed(&item, &self.key, now)
            })
            .collect();
        notify::notification(&signed)
    }
}

/// The local world's development Adyen HMAC key (`scripts/lib.sh`).
const DEV_ADYEN_HMAC_KEY: &str = "6C6F63616C2D6465762D616479656E2D686D61632D6B65792D30303030303030";

/// The world a level runs against.
#[derive(Clone)]
struct Target {
    client: HttpClient,
    api: String,
    secret: SigningSecret,
    adyen: AdyenSide,
    /// The stock item the checkouts buy.
    sku: String,
}

impl Target {
    /// One attempt: the status (0 when the connection failed).
    async fn send(&self, d: &Delivery) -> u16 {
        let answer = match &d.request {
            Request::Stripe { payment, event, kind } => {
                let Ok(body) = serde_json::to_vec(&stripe_event(event, kind, payment)) else {
                    return 0;
                };
                let header = sign_stripe(&self.secret, shared::clock::now_ms() / 1000, &body);
                let url = format!("{}/webhooks/stripe", self.api);
                self.client
                    .send("POST", &url, &[("stripe-signature", header)], body)
                    .await
            }
            Request::Adyen(items) => {
                let body = self.adyen.notification(items);
                let auth = [("authorization", self.adyen.endpoint.authorization())];
                self.client.json("POST", &self.adyen.endpoint.url, &auth, &body).await
            }
            Request::Checkout { order } => {
                let body = json!({ "order_id": order, "sku": self.sku, "quantity": 1, "amount_minor": 1000,
                    "currency": "EUR", "payment_method": "pm_succeeded" });
                let url = format!("{}/checkouts", self.api);
                self.client.signed().json("POST", &url, &[], &body).await
            }
        };
        answer.map_or(0, |(status, _)| status)
    }

    /// Delivers `d` at its time after `start`, then again on the PSP's schedule until a 2xx or a final "no".
    async fn deliver(self, d: Delivery, start: Instant) -> Outcome {
        let due = start + d.due;
        tokio::time::sleep_until(due).await;
        let mut status = self.send(&d).await;
        let (first_answer, first_status) = (due.elapsed(), status);
        let mut attempts = 1;
        for wait in RESENDS_S {
            if !(status == 0 || status == 429 || status >= 500) {
                break;
            }
            tokio::time::sleep(Duration::from_secs(wait)).await;
            status = self.send(&d).await;
            attempts += 1;
        }
        Outcome {
            first_answer,
            first_status,
            attempts,
            status,
        }
    }

    /// `n` new payments of `provider` through the payments API, 16 at a time (an Adyen one with its
    /// pspReference, as a shop records it from the authorisation's answer).
    async fn payments(&self, n: usize, level: usize, provider: &str) -> Result<Vec<(String, String)>, BoxError> {
        let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
        let mut tasks = Vec::new();
        for i in 0..n {
            let (client, api, semaphore) = (self.client.signed(), self.api.clone(), semaphore.clone());
            let provider = provider.to_owned();
            tasks.push(tokio::spawn(async move {
                let _permit = semaphore.acquire().await;
                let run = uuid::Uuid::new_v4().simple().to_string();
                let mut body = json!({ "order_id": format!("order-ol-{level}-{i}-{run}"),
                    "amount_minor": 1000, "currency": "EUR", "provider": provider });
                let reference = run[..16].to_uppercase();
                if provider == "adyen" {
                    body["psp_reference"] = json!(reference);
                }
                let key = [("idempotency-key", uuid::Uuid::new_v4().to_string())];
                let answer = client.json("POST", &format!("{api}/payments"), &key, &body).await;
                answer.map(|answer| (answer, reference))
            }));
        }
        let mut ids = Vec::new();
        for task in tasks {
            let ((status, body), reference) = task.await??;
            if status != 201 {
                return Err(format!("create: {status} {body}").into());
            }
            ids.push((body["payment_id"].as_str().unwrap_or_default().to_owned(), reference));
        }
        Ok(ids)
    }

    /// Stock for every checkout of the run.
    async fn stock(&self, available: usize) -> Result<(), BoxError> {
        let url = format!("{}/inventory/{}", self.api, self.sku);
        let (status, body) = self
            .client
            .signed()
            .json("PUT", &url, &[], &json!({ "available": available }))
            .await?;
        if !(200..300).contains(&status) {
            return Err(format!("stock: {status} {body}").into());
        }
        Ok(())
    }
}

/// How long after the read-back starts a payment may still be behind what was acknowledged: its log is the
/// history items the outbox relay archives from the table's stream (issue 43), behind the payment item by the
/// relay's lag, and an Adyen item answered `[accepted]` may have been parked for the catch-up's retry (durable
/// before the answer, applied at a later run); past this machine's capacity both take minutes. A gap or a
/// missing capture still there after it is lost.
const ARCHIVE_CATCHES_UP_WITHIN: Duration = Duration::from_secs(300);

/// What is wrong with `payment` as the API reads it back: versions with a gap (read again until `deadline`:
/// the relay may not have archived them yet), more than one capture, a PSP event applied twice, or, when its
/// capture was acknowledged (`acknowledged`), not captured: lost.
async fn check(
    target: &Target,
    payment: &str,
    acknowledged: bool,
    deadline: Instant,
) -> Result<Option<String>, BoxError> {
    loop {
        match check_once(target, payment, acknowledged).await? {
            Some(Wrong::Gap(_)) if Instant::now() < deadline => tokio::time::sleep(Duration::from_secs(1)).await,
            Some(Wrong::Gap(why) | Wrong::Other(why)) => return Ok(Some(why)),
            None => return Ok(None),
        }
    }
}

/// What one read of a payment's log found wrong: a gap in its versions alone (the archive may catch up), or
/// anything else.
enum Wrong {
    Gap(String),
    Other(String),
}

async fn check_once(target: &Target, payment: &str, acknowledged: bool) -> Result<Option<Wrong>, BoxError> {
    let client = target.client.signed();
    let url = format!("{}/payments/{payment}/events", target.api);
    let (status, body) = client.json("GET", &url, &[], &Value::Null).await?;
    if status != 200 {
        return Ok(Some(Wrong::Other(format!("{payment}: events answered {status}"))));
    }
    let events = body["events"].as_array().cloned().unwrap_or_default();
    let versions: Vec<u64> = events.iter().filter_map(|e| e["version"].as_u64()).collect();
    let captures = events
        .iter()
        .filter(|e| e["status"] == "captured" && e["previous_status"] != "captured")
        .count();
    let mut seen = std::collections::BTreeSet::new();
    let twice = events
        .iter()
        .filter_map(|e| e["psp_event_id"].as_str())
        .any(|id| !seen.insert(id.to_owned()));
    let last = events.last().map(|e| e["status"].clone()).unwrap_or_default();
    let contiguous = versions.iter().enumerate().all(|(i, v)| *v == i as u64 + 1);
    let lost = acknowledged && (captures != 1 || last != "captured");
    let why = format!("{payment}: versions {versions:?}, {captures} captures, a PSP event twice: {twice}, last {last}");
    Ok(if captures > 1 || twice {
        Some(Wrong::Other(why))
    } else if !contiguous || lost {
        Some(Wrong::Gap(why))
    } else {
        None
    })
}

/// How long a checkout the API accepted may take to complete, from when the payments' read-back ended: the
/// simulator's webhook (which a throttled route refuses, and the simulator gives up on), else recovery's
/// run, then the saga's events.
const CHECKOUT_COMPLETES_WITHIN: Duration = Duration::from_secs(300);

/// What is wrong with the accepted checkout `order`: not completed within [`CHECKOUT_COMPLETES_WITHIN`] of
/// `since`, or its payment read back wrong (lost, captured twice).
async fn check_checkout(target: &Target, order: &str, since: Instant) -> Result<Option<String>, BoxError> {
    let client = target.client.signed();
    let url = format!("{}/checkouts/{order}", target.api);
    loop {
        let (status, body) = client.json("GET", &url, &[], &Value::Null).await?;
        if status == 200 && body["status"] == "completed" {
            let payment = body["payment_id"].as_str().unwrap_or_default().to_owned();
            return check(target, &payment, true, since + ARCHIVE_CATCHES_UP_WITHIN).await;
        }
        if since.elapsed() > CHECKOUT_COMPLETES_WITHIN {
            return Ok(Some(format!("checkout {order}: {status} {}", body["status"])));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs one level: its payments, its requests at `rate` for `seconds`, the read-back.
async fn level(target: &Target, rate: f64, seconds: f64, n: usize) -> Result<Level, BoxError> {
    // About 60 % of the requests Stripe webhooks, 25 % Adyen notifications, 15 % checkouts.
    let requests = rate * seconds;
    let stripe = ((requests * 0.6) / 2.1).ceil() as usize;
    let adyen = ((requests * 0.25) / 2.1 * ADYEN_BATCH as f64).ceil() as usize;
    let checkouts = (requests * 0.15).ceil() as usize;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let units = Units {
        stripe: target
            .payments(stripe, n, "stripe")
            .await?
            .into_iter()
            .map(|(p, _)| p)
            .collect(),
        adyen: target.payments(adyen, n, "adyen").await?,
        orders: (0..checkouts).map(|i| format!("ol-{n}-{i}-{}", &run[..12])).collect(),
    };
    target.stock(checkouts + 1).await?;
    let deliveries = plan(&units, rate, 44 + n as u64);
    let start = Instant::now() + Duration::from_millis(200);
    let tasks: Vec<_> = deliveries
        .iter()
        .map(|d| tokio::spawn(target.clone().deliver(d.clone(), start)))
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await?);
    }
    let ok = |o: &Outcome| (200..300).contains(&o.status);
    // The payments whose capture was acknowledged (2xx): those must read back captured.
    let acknowledged: std::collections::BTreeSet<&str> = deliveries
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| ok(o))
        .flat_map(|(d, _)| d.captures())
        .collect();
    let mut problems = Vec::new();
    let read_back = Instant::now();
    let payments = units.stripe.iter().chain(units.adyen.iter().map(|(p, _)| p));
    for p in payments {
        let deadline = read_back + ARCHIVE_CATCHES_UP_WITHIN;
        problems.extend(check(target, p, acknowledged.contains(p.as_str()), deadline).await?);
    }
    let checkouts_read = Instant::now();
    for (d, o) in deliveries.iter().zip(&outcomes) {
        if let (Request::Checkout { order }, true) = (&d.request, ok(o)) {
            problems.extend(check_checkout(target, order, checkouts_read).await?);
        }
    }
    let mix = deliveries
        .iter()
        .fold((0, 0, 0, 0), |(s, a, items, c), d| match &d.request {
            Request::Stripe { .. } => (s + 1, a, items, c),
            Request::Adyen(batch) => (s, a + 1, items + batch.len(), c),
            Request::Checkout { .. } => (s, a, items, c + 1),
        });
    let read = units.stripe.len() + units.adyen.len() + units.orders.len();
    Ok(figures(rate, seconds, read, mix, &outcomes, problems))
}

/// A level's figures from its outcomes.
fn figures(
    rate: f64,
    seconds: f64,
    payments: usize,
    mix: (usize, usize, usize, usize),
    outcomes: &[Outcome],
    problems: Vec<String>,
) -> Level {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).ok();
    let mut first_statuses = BTreeMap::new();
    for o in outcomes {
        if let Some(h) = hist.as_mut() {
            h.saturating_record(u64::try_from(o.first_answer.as_micros()).unwrap_or(u64::MAX).max(1));
        }
        *first_statuses.entry(o.first_status).or_insert(0) += 1;
    }
    let ms = |q: f64| hist.as_ref().map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1e3);
    let ok = outcomes.iter().filter(|o| (200..300).contains(&o.first_status)).count();
    Level {
        rate,
        deliveries: outcomes.len(),
        payments,
        mix,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        throughput: ok as f64 / (outcomes.len() as f64 / rate).max(seconds.min(1.0)),
        first_statuses,
        resends: outcomes.iter().map(|o| o.attempts - 1).sum(),
        undelivered: outcomes.iter().filter(|o| !(200..300).contains(&o.status)).count(),
        problems,
    }
}

/// The knee: the first rate whose first answers fall short of it by a tenth, or whose p99 is ten times the
/// lowest rate's.
fn knee(levels: &[Level]) -> Option<f64> {
    let base = levels.first()?.p99_ms.max(1.0);
    levels
        .iter()
        .find(|l| l.throughput < 0.9 * l.rate || l.p99_ms > 10.0 * base)
        .map(|l| l.rate)
}

/// The levels as markdown.
fn markdown(levels: &[Level], seconds: f64) -> String {
    let mut out = format!(
        "## Open-loop load run against the local world (`scripts/openloop`, {seconds} s per rate)\n\n\
         Requests at a fixed arrival rate: Stripe webhooks (per payment `processing` and `succeeded`, a fifth \
         in the wrong order, a tenth of the captures twice), Adyen notifications in batches of up to three \
         items of different payments (`AUTHORISATION`s, then `CAPTURE`s; a fifth of the batches in the wrong \
         order, a tenth of the capture batches twice) and checkouts through `POST /checkouts` (charged at the \
         PSP simulator, whose webhooks come on top). Latency from when each was due to its first answer (HDR \
         histogram, no coordinated omission); a refused one sent again after 1, 2, 4 ... 32 s, as a PSP \
         would, giving up after 63 s (\"never delivered\"; a PSP goes on for days). The local world runs the \
         template's default throttles (webhooks 50/s, burst 100; checkouts 100/s) on this 2-core machine, \
         with DynamoDB Local and moto: figures, not limits.\n\n\
         | rate (requests/s) | requests: all = Stripe / Adyen (items) / checkouts | p50 | p99 | p999 | 2xx first answers/s \
         | first answers | resends | never delivered | read back |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for l in levels {
        let statuses: Vec<String> = l.first_statuses.iter().map(|(s, n)| format!("{s} x{n}")).collect();
        let read_back = if l.problems.is_empty() {
            format!(
                "{} payments and checkouts: every acknowledged capture applied once, every accepted checkout \
                 completed, versions 1..n, no event twice",
                l.payments
            )
        } else {
            format!(
                "{} of {} wrong: {}",
                l.problems.len(),
                l.payments,
                l.problems.first().cloned().unwrap_or_default()
            )
        };
        let (s, a, items, c) = l.mix;
        writeln!(
            out,
            "| {} | {} = {s} / {a} ({items}) / {c} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} | {} | {} | {} | {read_back} |",
            l.rate,
            l.deliveries,
            l.p50_ms,
            l.p99_ms,
            l.p999_ms,
            l.throughput,
            statuses.join(", "),
            l.resends,
            l.undelivered
        )
        .ok();
    }
    match knee(levels) {
        Some(rate) => writeln!(out, "\nThe knee: {rate} requests/s (first answers short of the rate by a tenth, or p99 ten times the lowest rate's).\n"),
        None => writeln!(out, "\nNo knee within these rates.\n"),
    }
    .ok();
    out
}

/// `bench openloop`: runs every rate against `API`, prints the table (and with `--results` writes it into
/// RESULTS.md); fails when anything was lost or applied twice. `--consistency`: CI's short run.
pub async fn command(args: &[String]) -> Result<(), BoxError> {
    let mut rates = vec![10.0, 25.0, 50.0, 100.0];
    let (mut seconds, mut results) = (10.0, false);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--rates" => rates = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--seconds" => seconds = value()?.parse()?,
            "--results" => results = true,
            "--consistency" => (rates, seconds) = (vec![8.0], 3.0),
            other => return Err(format!("bench openloop: unknown argument {other}").into()),
        }
    }
    let api = std::env::var("API").unwrap_or_else(|_| "http://127.0.0.1:3000".into());
    let target = Target {
        client: HttpClient::default(),
        adyen: AdyenSide::from_env(&api)?,
        api,
        secret: SigningSecret::parse(std::env::var("WEBHOOK_SECRET").unwrap_or_else(|_| crate::WEBHOOK_SECRET.into()))?,
        sku: format!("sku-openloop-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
    };
    let mut levels = Vec::new();
    for (n, rate) in rates.iter().enumerate() {
        levels.push(level(&target, *rate, seconds, n).await?);
    }
    let text = markdown(&levels, seconds);
    print!("{text}");
    if results {
        crate::capacity::report::replace_in_results("openloop", &text)?;
    }
    // A delivery still refused after the last resend is this sender giving up (a PSP goes on for days); a
    // payment read back wrong is the system losing or doubling something.
    let wrong: usize = levels.iter().map(|l| l.problems.len()).sum();
    if wrong > 0 {
        let all: Vec<&String> = levels.iter().flat_map(|l| &l.problems).collect();
        return Err(format!("{wrong} payments or checkouts read back wrong (lost or applied twice): {all:?}").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(stripe: usize, adyen: usize, orders: usize) -> Units {
        Units {
            stripe: (0..stripe).map(|i| format!("pay_{i}")).collect(),
            adyen: (0..adyen)
                .map(|i| (format!("pay_a{i}"), format!("REF{i:013}")))
                .collect(),
            orders: (0..orders).map(|i| format!("order-{i}")).collect(),
        }
    }

    #[test]
    fn the_plan_mixes_stripe_events_adyen_batches_and_checkouts_some_swapped_some_twice_at_the_rate() {
        let plan = plan(&units(100, 60, 30), 50.0, 1);
        let stripe = plan
            .iter()
            .filter(|d| matches!(d.request, Request::Stripe { .. }))
            .count();
        let twice = stripe - 200;
        assert!((3..=20).contains(&twice), "{twice} duplicates");
        let swapped = plan
            .iter()
            .take(130)
            .filter(|d| matches!(&d.request, Request::Stripe { kind, .. } if kind.ends_with("succeeded")))
            .count();
        assert!((8..=35).contains(&swapped), "{swapped} in the wrong order");
        // Adyen: 20 batches of three items, each batch's authorisations and captures, some captures again.
        let batches: Vec<&Vec<AdyenItem>> = plan
            .iter()
            .filter_map(|d| match &d.request {
                Request::Adyen(items) => Some(items),
                _ => None,
            })
            .collect();
        assert!((40..=48).contains(&batches.len()), "{} batches", batches.len());
        assert!(batches
            .iter()
            .all(|b| b.len() == 3 && b.iter().all(|i| i.code == b[0].code)));
        let orders = plan
            .iter()
            .filter(|d| matches!(d.request, Request::Checkout { .. }))
            .count();
        assert_eq!(orders, 30, "every checkout once");
        assert_eq!(plan.get(50).map(|d| d.due), Some(Duration::from_secs(1)));
        // What a 2xx acknowledges: a succeeded event's payment, every capture of a batch, no checkout.
        let captured: usize = plan.iter().map(|d| d.captures().len()).sum();
        assert!(captured >= 100 + 60, "{captured}");
    }

    #[test]
    fn an_adyen_notification_carries_each_item_signed_as_the_intake_verifies_it() {
        let side = AdyenSide::from_env("http://127.0.0.1:1").unwrap();
        let items = [("pay_a", "ABCDEFGHIJKLMNOP"), ("pay_b", "BCDEFGHIJKLMNOPQ")].map(|(p, r)| AdyenItem {
            payment: p.into(),
            payment_ref: r.into(),
            code: "CAPTURE",
        });
        let body = side.notification(&items);
        let wrapped = body["notificationItems"].as_array().unwrap();
        assert_eq!(wrapped.len(), 2);
        let first = &wrapped[0]["NotificationRequestItem"];
        assert_eq!(first["originalReference"], "ABCDEFGHIJKLMNOP");
        assert_eq!(first["merchantReference"], "pay_a");
        let parsed: Item = serde_json::from_value(first.clone()).unwrap();
        assert_eq!(first["additionalData"]["hmacSignature"], side.key.sign(&parsed));
    }

    #[test]
    fn the_knee_is_where_throughput_falls_short_or_latency_explodes() {
        let level = |rate: f64, throughput: f64, p99_ms: f64| Level {
            rate,
            deliveries: 0,
            payments: 0,
            mix: (0, 0, 0, 0),
            p50_ms: 0.0,
            p99_ms,
            p999_ms: 0.0,
            throughput,
            first_statuses: BTreeMap::new(),
            resends: 0,
            undelivered: 0,
            problems: Vec::new(),
        };
        let levels = [
            level(10.0, 10.0, 30.0),
            level(25.0, 25.0, 40.0),
            level(50.0, 40.0, 60.0),
        ];
        assert_eq!(knee(&levels), Some(50.0));
        assert_eq!(knee(&levels[..2]), None);
        assert_eq!(knee(&[level(10.0, 10.0, 30.0), level(20.0, 20.0, 400.0)]), Some(20.0));
    }
}
