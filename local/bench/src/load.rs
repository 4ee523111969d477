//! Latency, throughput and contention against the running local stack (HTTP on 127.0.0.1). On this
//! machine these figures mostly measure DynamoDB Local: informational.

use psp_simulator::client::HttpClient;
use serde_json::{json, Value};
use shared::SigningSecret;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use webhook_signatures::sign_stripe;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn create(client: &HttpClient, api: &str, n: usize) -> Result<Vec<String>, BoxError> {
    let mut ids = Vec::new();
    for i in 0..n {
        let (status, body) = client
            .signed()
            .json(
                "POST",
                &format!("{api}/payments"),
                &[("idempotency-key", uuid::Uuid::new_v4().to_string())],
                &json!({ "order_id": format!("order-bench-{i}"), "amount_minor": 1000, "currency": "EUR" }),
            )
            .await?;
        if status != 201 {
            return Err(format!("create: {status} {body}").into());
        }
        ids.push(body["payment_id"].as_str().unwrap_or_default().to_owned());
    }
    Ok(ids)
}

async fn send(
    client: &HttpClient,
    api: &str,
    secret: &SigningSecret,
    event: &Value,
) -> Result<(Duration, String), BoxError> {
    let body = serde_json::to_vec(event)?;
    let header = sign_stripe(secret, shared::clock::now_ms() / 1000, &body);
    let started = Instant::now();
    let (status, answer) = client
        .send(
            "POST",
            &format!("{api}/webhooks/stripe"),
            &[("stripe-signature", header)],
            body,
        )
        .await?;
    let result = answer["result"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| status.to_string());
    Ok((started.elapsed(), result))
}

fn event(id: &str, kind: &str, payment: &str) -> Value {
    json!({ "id": id, "object": "event", "type": kind, "created": shared::clock::now_ms() / 1000, "livemode": false,
        "data": { "object": { "id": format!("pi_{payment}"), "object": "payment_intent", "amount": 1000,
            "currency": "eur", "metadata": { "payment_id": payment } } } })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub async fn latency(out: &mut String, api: &str, secret: &SigningSecret, per_level: usize) -> Result<(), BoxError> {
    let client = HttpClient::default();
    writeln!(
        out,
        "## Webhook latency and throughput against the local stack ({per_level} webhooks per level)\n"
    )
    .ok();
    writeln!(out, "| concurrency | p50 | p99 | throughput |\n|---|---|---|---|").ok();
    for concurrency in [1usize, 8, 32] {
        let ids = create(&client, api, per_level).await?;
        let semaphore = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for id in ids {
            let (client, api, secret, semaphore) = (client.clone(), api.to_owned(), secret.clone(), semaphore.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = semaphore.acquire().await;
                send(
                    &client,
                    &api,
                    &secret,
                    &event(&format!("evt_{id}"), "payment_intent.succeeded", &id),
                )
                .await
            }));
        }
        let mut latencies = Vec::new();
        for t in tasks {
            latencies.push(t.await??.0);
        }
        let wall = started.elapsed();
        latencies.sort();
        writeln!(
            out,
            "| {concurrency} | {:.1} ms | {:.1} ms | {:.0} webhooks/s |",
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            per_level as f64 / wall.as_secs_f64()
        )
        .ok();
    }
    Ok(())
}

pub async fn contention(out: &mut String, api: &str, secret: &SigningSecret) -> Result<(), BoxError> {
    let client = HttpClient::default();
    writeln!(
        out,
        "\n## Contention: K concurrent deliveries of different events on one payment\n"
    )
    .ok();
    writeln!(out, "| K | wall time | answers |\n|---|---|---|").ok();
    for k in [2usize, 4, 8, 16, 32, 64] {
        let id = create(&client, api, 1).await?.remove(0);
        let started = Instant::now();
        let tasks: Vec<_> = (0..k)
            .map(|i| {
                let kind = if i % 2 == 0 {
                    "payment_intent.processing"
                } else {
                    "payment_intent.succeeded"
                };
                let e = event(&format!("evt_{id}_{i}"), kind, &id);
                let (client, api, secret) = (client.clone(), api.to_owned(), secret.clone());
                tokio::spawn(async move { send(&client, &api, &secret, &e).await })
            })
            .collect();
        let mut answers: BTreeMap<String, usize> = BTreeMap::new();
        for t in tasks {
            *answers.entry(t.await??.1).or_default() += 1;
        }
        let text: Vec<String> = answers.iter().map(|(r, n)| format!("{r} {n}")).collect();
        writeln!(
            out,
            "| {k} | {:.0} ms | {} |",
            started.elapsed().as_secs_f64() * 1e3,
            text.join(", ")
        )
        .ok();
    }
    writeln!(out, "\n503 answers are lease deferrals (`Retry-After`): the PSP delivers them again; exactly one terminal transition happens.").ok();
    Ok(())
}
