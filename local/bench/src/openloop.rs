//! `bench openloop`: an open-loop load run against the local world (issue 44, item 4). Webhooks go out at a
//! fixed arrival rate whatever the answers (a closed loop slows down with the system and hides its queue), and
//! each one's latency is counted from when it was due, not from when it was sent, into an HDR histogram: no
//! coordinated omission. The mix per payment: a `processing` event and a `succeeded` one, a fifth of them in
//! the wrong order, a tenth of the `succeeded` ones delivered twice. A refused delivery (429 from the route's
//! throttle, 503 from a held lease or an unknown payment, a 5xx, a broken connection) is sent again as a PSP
//! would, after 1, 2, 4, 8, 16 and 32 s (then this sender gives up, where a PSP goes on for days: "never
//! delivered"). Afterwards every payment is read back: versions 1, 2, 3 ..., at most one capture, no PSP
//! event applied twice, and captured wherever its capture was acknowledged: nothing lost, nothing applied
//! twice (the run fails otherwise).
//!
//! Not in the mix (yet): Adyen batches and checkouts. Run it through `scripts/openloop`, which starts the
//! local world; `bench openloop [--rates 10,25,50,100] [--seconds 10] [--results]`.

use hdrhistogram::Histogram;
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
use webhook_signatures::sign_stripe;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The waits before each resend of a refused delivery (a PSP's back-off, compressed).
const RESENDS_S: [u64; 6] = [1, 2, 4, 8, 16, 32];

/// One webhook to deliver: for which payment, which event, when it is due after the level's start.
#[derive(Debug, Clone)]
struct Delivery {
    payment: String,
    event: String,
    kind: &'static str,
    due: Duration,
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
    pub payments: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// First answers a second that were 2xx.
    pub throughput: f64,
    pub first_statuses: BTreeMap<u16, usize>,
    pub resends: usize,
    /// Deliveries never answered 2xx after every resend.
    pub undelivered: usize,
    /// What the read-back found wrong (lost, applied twice, versions with a gap).
    pub problems: Vec<String>,
}

/// The plan of one level: per payment its two events (a fifth swapped), a tenth of the captures again; due
/// at a fixed rate, in rounds so that a payment's events are apart.
fn plan(payments: &[String], rate: f64, seed: u64) -> Vec<Delivery> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rounds: [Vec<(String, String, &'static str)>; 3] = Default::default();
    for p in payments {
        let processing = (p.clone(), format!("evt_{p}_processing"), "payment_intent.processing");
        let succeeded = (p.clone(), format!("evt_{p}_succeeded"), "payment_intent.succeeded");
        let swapped = rng.random_bool(0.2);
        let [first, second, third] = &mut rounds;
        if swapped {
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
    rounds
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, (payment, event, kind))| Delivery {
            payment,
            event,
            kind,
            due: Duration::from_secs_f64(i as f64 / rate),
        })
        .collect()
}

fn event(id: &str, kind: &str, payment: &str) -> Value {
    json!({ "id": id, "object": "event", "type": kind, "created": shared::clock::now_ms() / 1000, "livemode": false,
        "data": { "object": { "id": format!("pi_{payment}"), "object": "payment_intent", "amount": 1000,
            "currency": "eur", "status": if kind.ends_with("succeeded") { "succeeded" } else { "processing" },
            "metadata": { "payment_id": payment } } } })
}

/// The world a level runs against.
#[derive(Clone)]
struct Target {
    client: HttpClient,
    api: String,
    secret: SigningSecret,
}

impl Target {
    /// One attempt: the status (0 when the connection failed).
    async fn send(&self, d: &Delivery) -> u16 {
        let Ok(body) = serde_json::to_vec(&event(&d.event, d.kind, &d.payment)) else {
            return 0;
        };
        let header = sign_stripe(&self.secret, shared::clock::now_ms() / 1000, &body);
        let url = format!("{}/webhooks/stripe", self.api);
        match self
            .client
            .send("POST", &url, &[("stripe-signature", header)], body)
            .await
        {
            Ok((status, _)) => status,
            Err(_) => 0,
        }
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

    /// `n` new payments through the payments API, 16 at a time.
    async fn payments(&self, n: usize, level: usize) -> Result<Vec<String>, BoxError> {
        let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
        let mut tasks = Vec::new();
        for i in 0..n {
            let (client, api, semaphore) = (self.client.signed(), self.api.clone(), semaphore.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = semaphore.acquire().await;
                let body = json!({ "order_id": format!("order-ol-{level}-{i}-{}", uuid::Uuid::new_v4().simple()),
                    "amount_minor": 1000, "currency": "EUR" });
                let key = [("idempotency-key", uuid::Uuid::new_v4().to_string())];
                client.json("POST", &format!("{api}/payments"), &key, &body).await
            }));
        }
        let mut ids = Vec::new();
        for task in tasks {
            let (status, body) = task.await??;
            if status != 201 {
                return Err(format!("create: {status} {body}").into());
            }
            ids.push(body["payment_id"].as_str().unwrap_or_default().to_owned());
        }
        Ok(ids)
    }
}

/// What is wrong with `payment` as the API reads it back: versions with a gap, more than one capture, a PSP
/// event applied twice, or, when its `succeeded` event was acknowledged (`acknowledged`), not captured: lost.
async fn check(target: &Target, payment: &str, acknowledged: bool) -> Result<Option<String>, BoxError> {
    let client = target.client.signed();
    let url = format!("{}/payments/{payment}/events", target.api);
    let (status, body) = client.json("GET", &url, &[], &Value::Null).await?;
    if status != 200 {
        return Ok(Some(format!("{payment}: events answered {status}")));
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
    Ok((!contiguous || captures > 1 || twice || lost).then(|| {
        format!("{payment}: versions {versions:?}, {captures} captures, a PSP event twice: {twice}, last {last}")
    }))
}

/// Runs one level: its payments, its deliveries at `rate` for `seconds`, the read-back.
async fn level(target: &Target, rate: f64, seconds: f64, n: usize) -> Result<Level, BoxError> {
    let payments = target.payments(((rate * seconds) / 2.1).ceil() as usize, n).await?;
    let deliveries = plan(&payments, rate, 44 + n as u64);
    let start = Instant::now() + Duration::from_millis(200);
    let tasks: Vec<_> = deliveries
        .iter()
        .map(|d| tokio::spawn(target.clone().deliver(d.clone(), start)))
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await?);
    }
    // The payments whose capture was acknowledged (2xx): those must read back captured.
    let acknowledged: std::collections::BTreeSet<&str> = deliveries
        .iter()
        .zip(&outcomes)
        .filter(|(d, o)| d.kind.ends_with("succeeded") && (200..300).contains(&o.status))
        .map(|(d, _)| d.payment.as_str())
        .collect();
    let mut problems = Vec::new();
    for p in &payments {
        problems.extend(check(target, p, acknowledged.contains(p.as_str())).await?);
    }
    Ok(figures(rate, seconds, payments.len(), &outcomes, problems))
}

/// A level's figures from its outcomes.
fn figures(rate: f64, seconds: f64, payments: usize, outcomes: &[Outcome], problems: Vec<String>) -> Level {
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
         Stripe webhooks at a fixed arrival rate (per payment `processing` and `succeeded`, a fifth in the \
         wrong order, a tenth of the captures twice), latency from when each was due to its first answer \
         (HDR histogram, no coordinated omission); a refused one sent again after 1, 2, 4 ... 32 s, as a PSP \
         would, giving up after 63 s (\"never delivered\"; a PSP goes on for days). The local world runs the \
         template's default webhook throttle (50/s, burst 100) on this 2-core machine, with DynamoDB Local and \
         moto: figures, not limits.\n\n\
         | rate (webhooks/s) | deliveries | p50 | p99 | p999 | 2xx first answers/s | first answers | resends | \
         never delivered | read back |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for l in levels {
        let statuses: Vec<String> = l.first_statuses.iter().map(|(s, n)| format!("{s} x{n}")).collect();
        let read_back = if l.problems.is_empty() {
            format!(
                "{} payments: every acknowledged capture applied once, versions 1..n, no event twice",
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
        writeln!(
            out,
            "| {} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} | {} | {} | {} | {read_back} |",
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
        Some(rate) => writeln!(out, "\nThe knee: {rate} webhooks/s (first answers short of the rate by a tenth, or p99 ten times the lowest rate's).\n"),
        None => writeln!(out, "\nNo knee within these rates.\n"),
    }
    .ok();
    out
}

/// `bench openloop`: runs every rate against `API`, prints the table (and with `--results` writes it into
/// RESULTS.md); fails when anything was lost or applied twice.
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
            other => return Err(format!("bench openloop: unknown argument {other}").into()),
        }
    }
    let target = Target {
        client: HttpClient::default(),
        api: std::env::var("API").unwrap_or_else(|_| "http://127.0.0.1:3000".into()),
        secret: SigningSecret::parse(std::env::var("WEBHOOK_SECRET").unwrap_or_else(|_| crate::WEBHOOK_SECRET.into()))?,
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
        return Err(format!("{wrong} payments read back wrong (lost or applied twice)").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_sends_each_payments_two_events_some_swapped_some_twice_at_the_rate() {
        let payments: Vec<String> = (0..100).map(|i| format!("pay_{i}")).collect();
        let plan = plan(&payments, 50.0, 1);
        let twice = plan.len() - 200;
        assert!((3..=20).contains(&twice), "{twice} duplicates");
        let swapped = plan.iter().take(100).filter(|d| d.kind.ends_with("succeeded")).count();
        assert!((8..=35).contains(&swapped), "{swapped} in the wrong order");
        assert_eq!(plan.get(50).map(|d| d.due), Some(Duration::from_secs(1)));
    }

    #[test]
    fn the_knee_is_where_throughput_falls_short_or_latency_explodes() {
        let level = |rate: f64, throughput: f64, p99_ms: f64| Level {
            rate,
            deliveries: 0,
            payments: 0,
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
