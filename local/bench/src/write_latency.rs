//! The one call issue 43 changed on a webhook's path, timed both ways against the same DynamoDB Local: the
//! finalize write as it was (`TransactWriteItems`: the payment under its version and its event item) and as
//! it is (one conditional `PutItem` of the payment carrying its transition). The read and the lease put
//! before it are the same calls as before. Alternated, each write on a payment of its own.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use integration_tests::TestContext;
use payments_core::fixtures;
use shared::store::item::{event_to_item, payment_to_item, transition_to_item};
use shared::{decide, Decision, Outcome, Transition};
use std::fmt::Write;
use std::time::{Duration, Instant};

/// The transition a webhook makes on payment `id`, created in the table first.
async fn transition(ctx: &TestContext, id: &str) -> (u64, Transition) {
    let payment = ctx.store.create(fixtures::new_payment(id, 1000)).await.expect("create");
    let obs = fixtures::webhook(&format!("evt_{id}"), 1, Outcome::Succeeded);
    let Decision::Apply(t) = decide(&payment, &obs, shared::clock::now_ms()) else {
        unreachable!("a success applies to a pending payment")
    };
    (payment.version, *t)
}

async fn transactional(ctx: &TestContext, expected: u64, t: &Transition) -> Duration {
    let payment = Put::builder()
        .table_name(&ctx.table)
        .set_item(Some(
            payment_to_item(&t.payment, shared::store::open_index::OpenShards::DEFAULT).expect("item"),
        ))
        .condition_expression("version = :v")
        .expression_attribute_values(":v", AttributeValue::N(expected.to_string()))
        .build()
        .expect("put");
    let event = Put::builder()
        .table_name(&ctx.table)
        .set_item(Some(event_to_item(&t.event).expect("item")))
        .condition_expression("attribute_not_exists(sk)")
        .build()
        .expect("put");
    let started = Instant::now();
    ctx.client
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(payment).build())
        .transact_items(TransactWriteItem::builder().put(event).build())
        .send()
        .await
        .expect("transaction");
    started.elapsed()
}

async fn single_put(ctx: &TestContext, expected: u64, t: &Transition) -> Duration {
    let started = Instant::now();
    ctx.client
        .put_item()
        .table_name(&ctx.table)
        .set_item(Some(
            transition_to_item(&t.payment, &t.event, shared::store::open_index::OpenShards::DEFAULT).expect("item"),
        ))
        .condition_expression("version = :v")
        .expression_attribute_values(":v", AttributeValue::N(expected.to_string()))
        .send()
        .await
        .expect("put");
    started.elapsed()
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

/// Times `n` writes of each form and writes their p50 and p99.
pub async fn run(out: &mut String, n: usize) {
    let ctx = TestContext::new().await;
    let (mut before, mut after) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let (old_v, old_t) = transition(&ctx, &format!("pay_lat_tx_{i}")).await;
        let (new_v, new_t) = transition(&ctx, &format!("pay_lat_put_{i}")).await;
        if i % 2 == 0 {
            before.push(transactional(&ctx, old_v, &old_t).await);
            after.push(single_put(&ctx, new_v, &new_t).await);
        } else {
            after.push(single_put(&ctx, new_v, &new_t).await);
            before.push(transactional(&ctx, old_v, &old_t).await);
        }
    }
    before.sort();
    after.sort();
    writeln!(
        out,
        "\n## The finalize write, before and after issue 43 ({n} each, alternated, DynamoDB Local)\n"
    )
    .ok();
    writeln!(out, "| write | p50 | p99 |\n|---|---|---|").ok();
    for (name, times) in [
        ("TransactWriteItems: payment + event item (before)", &before),
        ("PutItem: the payment carrying its transition (after)", &after),
    ] {
        let (p50, p99) = (quantile(times, 0.5), quantile(times, 0.99));
        writeln!(
            out,
            "| {name} | {:.1} ms | {:.1} ms |",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        )
        .ok();
    }
}
