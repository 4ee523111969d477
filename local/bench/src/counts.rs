//! DynamoDB calls per webhook (counted by an SDK interceptor, with how many ran one after another), the
//! capacity units they cost computed from the serialized item sizes the way AWS bills them, and item sizes.

use integration_tests::{BeforeCall, TestContext};
use lambda_http::Request;
use payments_core::{fixtures, PaymentId, Transition};
use serde_json::json;
use shared::store::item::{event_to_item, item_size_bytes, payment_to_item, Item};
use shared::{decide, Channel, Decision, Outcome, SigningSecret};
use std::fmt::Write;
use webhook_intake::providers::{Providers, DEFAULT_PROVIDERS};
use webhook_intake::{process, App, IntakeSettings};
use webhook_signatures::samples::stripe_event;

/// A signed `kind` webhook for `payment` created `age_secs` before now, as lambda_http hands it to the
/// handler; without `metadata.payment_id` unless `with_metadata` (then found by its PSP reference).
fn webhook(event_id: &str, kind: &str, payment: &str, with_metadata: bool) -> Request {
    aged_webhook(event_id, kind, payment, with_metadata, 0)
}

fn aged_webhook(event_id: &str, kind: &str, payment: &str, with_metadata: bool, age_secs: i64) -> Request {
    let now = shared::clock::now_ms() / 1000;
    let mut event = stripe_event(event_id, kind, payment, now - age_secs);
    if !with_metadata {
        event["data"]["object"]["metadata"] = json!({});
    }
    let secret = SigningSecret::parse(crate::WEBHOOK_SECRET).expect("secret");
    let signed = crate::intake_process::signed(&secret, &event, now).expect("sign");
    lambda_http::request::from_str(&signed.to_string()).expect("apigw event")
}

fn app(ctx: &TestContext) -> App {
    let secrets =
        json!({ "stripe": [crate::WEBHOOK_SECRET], "standard": ["whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA=="] })
            .to_string();
    let providers = Providers::from_json(DEFAULT_PROVIDERS, &secrets).expect("providers");
    App::new(
        ctx.client.clone(),
        &ctx.config(),
        providers.into(),
        IntakeSettings::default(),
    )
}

/// Write units of one item of `bytes` (1 KB units); a transactional write costs twice.
fn wcu(bytes: usize, transactional: bool) -> usize {
    bytes.div_ceil(1024).max(1) * if transactional { 2 } else { 1 }
}

/// Writes the bench's DynamoDB tables: the calls each kind of webhook makes, then what the happy path costs
/// in capacity units.
pub async fn run(out: &mut String) {
    let ctx = TestContext::new().await;
    let app = app(&ctx);
    writeln!(out, "## DynamoDB calls per webhook (counted by an SDK interceptor)\n").ok();
    writeln!(
        out,
        "| scenario | calls | by operation | sequential |\n|---|---|---|---|"
    )
    .ok();
    calls_per_webhook(out, &ctx, &app).await;
    version_conflict(out, &ctx, &app).await;
    by_psp_reference(out, &ctx, &app).await;
    capacity_units(out);
}

/// A new payment of 1000 in the context's table; its id.
async fn new_payment(ctx: &TestContext, id: &str) -> PaymentId {
    ctx.store
        .create(fixtures::new_payment(id, 1000))
        .await
        .expect("create")
        .id
}

/// Hands `request` to the intake with the call counter reset and writes its row: the answer, the calls, the
/// calls by operation, and how many ran one after another. Returns the HTTP status.
async fn measure(out: &mut String, ctx: &TestContext, app: &App, name: &str, request: Request) -> u16 {
    ctx.calls.reset();
    let (response, m) = process(app, request).await;
    let ops: Vec<String> = ctx
        .calls
        .by_operation()
        .iter()
        .map(|(k, v)| format!("{k} x{v}"))
        .collect();
    writeln!(
        out,
        "| {name} ({}) | {} | {} | {} |",
        m.result,
        ctx.calls.calls().len(),
        ops.join(", "),
        ctx.calls.sequential_depth()
    )
    .ok();
    response.status().as_u16()
}

/// A first delivery, the same event again at once (the lease path), and the PSP's redeliveries of an event
/// before and after it was applied.
async fn calls_per_webhook(out: &mut String, ctx: &TestContext, app: &App) {
    let id = new_payment(ctx, "pay_bench_1").await;
    let happy = webhook("evt_b1", "payment_intent.succeeded", id.as_str(), true);
    let status = measure(out, ctx, app, "happy path: first event, lease free", happy).await;
    assert_eq!(status, 200);
    let again = webhook("evt_b1", "payment_intent.succeeded", id.as_str(), true);
    let name = "the same event again at once (not a redelivery: lease path)";
    measure(out, ctx, app, name, again).await;

    // Redeliveries: signed ten minutes after the event was created (the PSP's retry): read first.
    let late = new_payment(ctx, "pay_bench_late").await;
    let redelivery = || aged_webhook("evt_b_late", "payment_intent.succeeded", late.as_str(), true, 600);
    measure(out, ctx, app, "redelivery of an event not applied yet", redelivery()).await;
    measure(out, ctx, app, "redelivery of an event already applied", redelivery()).await;
}

/// A sync write lands between the intake's read and its write: one version conflict.
async fn version_conflict(out: &mut String, ctx: &TestContext, app: &App) {
    let id = new_payment(ctx, "pay_bench_2").await;
    let hook = BeforeCall::new();
    let racing = App {
        store: ctx.store_with_hook(hook.clone()),
        ..app.clone()
    };
    let (store, target) = (ctx.uncounted_store(), id.clone());
    hook.before_next("TransactWriteItems", move || async move {
        store
            .finalize(&target, &fixtures::observe(Channel::Sync, Outcome::Processing), None)
            .await
            .expect("sync write");
    });
    let request = webhook("evt_b2", "payment_intent.succeeded", id.as_str(), true);
    let name = "a sync write lands between read and write: one version conflict";
    measure(out, ctx, &racing, name, request).await;
}

/// A webhook without `metadata.payment_id`: the intake finds the payment by its PSP reference.
async fn by_psp_reference(out: &mut String, ctx: &TestContext, app: &App) {
    let mut new = fixtures::new_payment("pay_bench_3", 1000);
    new.psp_reference = Some(shared::PspReference::parse("pi_pay_bench_3").expect("ref"));
    ctx.store.create(new).await.expect("create");
    let request = webhook("evt_b3", "payment_intent.succeeded", "pay_bench_3", false);
    let name = "found by PSP reference (no metadata.payment_id)";
    measure(out, ctx, app, name, request).await;
}

/// The happy path's two transitions as the core decides them: to `requires_action` (the sync answer, with
/// its client secret and redirect URL), then captured by the webhook.
fn happy_path() -> (Transition, Transition) {
    let payment = fixtures::payment("pay_0123456789abcdef0123456789abcdef");
    let Decision::Apply(action) = decide(
        &payment,
        &fixtures::observe(Channel::Sync, fixtures::requires_action()),
        1,
    ) else {
        unreachable!()
    };
    let Decision::Apply(captured) = decide(
        &action.payment,
        &fixtures::webhook("evt_1NG8Du2eZvKYlo2CUI79vXWy", 1, Outcome::Succeeded),
        2,
    ) else {
        unreachable!()
    };
    (*action, *captured)
}

/// The lease item's size as DynamoDB counts it (names plus values): its key, a UUID owner and two expiry
/// numbers.
fn lease_bytes() -> usize {
    "pk".len()
        + "LEASE#pay_0123456789abcdef0123456789abcdef".len()
        + "sk".len()
        + "LEASE".len()
        + "owner".len()
        + 36
        + "expires_at_ms".len()
        + 8
        + "expires_at".len()
        + 6
}

/// Capacity units of the happy path, from the serialized items: their sizes, then the units of the lease
/// put, the read and the transaction, against the target.
fn capacity_units(out: &mut String) {
    let (action, captured) = happy_path();
    let payment_bytes = item_size_bytes(&payment_to_item(&captured.payment).expect("item"));
    let action_bytes = item_size_bytes(&payment_to_item(&action.payment).expect("item"));
    let event_bytes = item_size_bytes(&event_to_item(&captured.event).expect("item"));
    let lease_bytes = lease_bytes();
    let lease_put = wcu(lease_bytes, false);
    let tx = wcu(payment_bytes.max(action_bytes), true) + wcu(event_bytes, true) + wcu(lease_bytes, true);
    writeln!(
        out,
        "\n## Capacity units per webhook (happy path), from serialized item sizes\n"
    )
    .ok();
    writeln!(out, "| item | bytes |\n|---|---|").ok();
    for (item, bytes) in [
        ("payment, requires_action (client secret + redirect URL)", action_bytes),
        ("payment, captured (one PSP event id seen)", payment_bytes),
        ("event", event_bytes),
        ("lease", lease_bytes),
    ] {
        writeln!(out, "| {item} | {bytes} |").ok();
    }
    writeln!(out, "\n- lease acquire (PutItem): {lease_put} WCU").ok();
    writeln!(out, "- read (GetItem, strongly consistent, <= 4 KB): 1 RCU").ok();
    writeln!(
        out,
        "- TransactWriteItems (payment put, event put, lease delete; 2 WCU per KB each): {tx} WCU"
    )
    .ok();
    writeln!(out, "- index writes: `by-psp-reference` is KEYS_ONLY on `psp_reference`, written only when a payment's reference is first set (1 WCU then, 0 on every later webhook)").ok();
    writeln!(
        out,
        "- **total per webhook: {} WCU, 1 RCU** (target: at most 7 WCU and 1 RCU, items at most 1 KB)",
        lease_put + tx
    )
    .ok();
    open_index_cost(out, &action.payment, &captured.payment);
}

/// The sparse `open-items` index (recovery, saga sweeper): what it costs per payment.
fn open_index_cost(out: &mut String, open: &shared::Payment, closed: &shared::Payment) {
    let item = payment_to_item(open).expect("item");
    let entry: Item = ["pk", "sk", "open_shard", "opened_at_ms"]
        .iter()
        .filter_map(|k| item.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    assert_eq!(entry.len(), 4, "an open payment carries the index key");
    assert!(
        !payment_to_item(closed).expect("item").contains_key("open_shard"),
        "a terminal payment leaves the index"
    );
    let entry_bytes = item_size_bytes(&entry) + 100; // + the index entry overhead AWS bills
    let per_entry = wcu(entry_bytes, true);
    writeln!(
        out,
        "\n## The sparse `open-items` index (recovery and the saga sweeper)\n"
    )
    .ok();
    writeln!(
        out,
        "- entry (KEYS_ONLY: pk, sk, open_shard, opened_at_ms + 100 B overhead): {entry_bytes} B, counted at the transactional rate: {per_entry} WCU"
    )
    .ok();
    writeln!(
        out,
        "- payment created: +{per_entry} WCU (entry put); webhook to a non-terminal status: +0 (no index key changes); \
         webhook to a terminal status: +{per_entry} WCU (entry deleted)"
    )
    .ok();
    writeln!(
        out,
        "- so the happy-path terminal webhook above costs {per_entry} WCU more with recovery's index; a sort key on the last change \
         would cost 2 x {per_entry} WCU more on every non-terminal webhook as well"
    )
    .ok();
}
