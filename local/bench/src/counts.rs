//! DynamoDB calls per webhook (counted by an SDK interceptor, with how many ran one after another), the
//! capacity units they cost as DynamoDB Local reports them (`ConsumedCapacity`) and as computed from the
//! serialized item sizes the way AWS bills them, and item sizes; and the guard CI runs on them
//! ([`Measured::guard`]).

use integration_tests::{BeforeCall, CapacityMeter, Interceptors, TestContext, Units};
use lambda_http::Request;
use payments_core::{fixtures, PaymentId, Transition};
use serde_json::json;
use serde_json::Value;
use shared::store::item::{event_to_item, item_size_bytes, payment_to_item, transition_to_item, Item};
use shared::{decide, Channel, Decision, Outcome, SigningSecret};
use std::collections::BTreeMap;
use std::fmt::Write;
use webhook_intake::providers::{Providers, DEFAULT_PROVIDERS};
use webhook_intake::{process, App, IntakeSettings};
use webhook_signatures::samples::{apigw_event, signature_headers, stripe_event};
use webhook_signatures::Scheme;

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
    let signed = signed(&secret, &event, now).expect("sign");
    lambda_http::request::from_str(&signed.to_string()).expect("apigw event")
}

/// The API Gateway event of `event` signed by Stripe at `signed_at`.
pub fn signed(
    secret: &SigningSecret,
    event: &Value,
    signed_at: i64,
) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
    let body = event.to_string().into_bytes();
    let id = event["id"].as_str().unwrap_or_default();
    let headers = signature_headers(Scheme::Stripe, secret, id, signed_at, &body)?;
    Ok(apigw_event("/webhooks/stripe", &headers, &body, false))
}

/// The intake on a client whose calls `ctx` counts and `meter` asks their `ConsumedCapacity`.
fn app(ctx: &TestContext, meter: &CapacityMeter) -> App {
    let client = integration_tests::client(
        &integration_tests::dynamodb_local::endpoint(),
        Interceptors {
            calls: Some(ctx.calls.clone()),
            capacity: Some(meter.clone()),
            ..Interceptors::default()
        },
    );
    let secrets =
        json!({ "stripe": [crate::WEBHOOK_SECRET], "standard": ["whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA=="] })
            .to_string();
    let providers = Providers::from_json(DEFAULT_PROVIDERS, &secrets).expect("providers");
    App::new(client, &ctx.config(), providers.into(), IntakeSettings::default())
}

/// Write units of one item of `bytes` (1 KB units); a transactional write costs twice.
fn wcu(bytes: usize, transactional: bool) -> usize {
    bytes.div_ceil(1024).max(1) * if transactional { 2 } else { 1 }
}

/// The scenarios the bill prices and the guard checks.
pub const NEW_WEBHOOK: &str = "new webhook";
pub const DUPLICATE: &str = "duplicate (redelivery of an applied event)";
pub const NOT_OURS: &str = "ignored (an event not ours)";
/// A first delivery that changes nothing (the lease path: read, lease, release): what a new event id about a
/// state already recorded costs, e.g. the same event again while the first is still applied.
pub const NO_CHANGE: &str = "a first delivery that changes nothing (lease path)";
/// A first event found by its PSP reference (no `metadata.payment_id`).
pub const BY_REFERENCE: &str = "found by PSP reference";

/// The most a new webhook that ends a payment may cost (CI fails above): 3 write units, table and indexes
/// together (lease put 1, the payment's put carrying its transition 1, the `open-items` entry it removes 1),
/// and 1 read.
pub const NEW_WEBHOOK_MAX: Units = Units {
    read: 1.0,
    write: 3.0,
    index: 0.0,
    open_items: 0.0,
};

/// What one scenario cost, as measured.
#[derive(Debug, Clone, Default)]
pub struct Scenario {
    /// Capacity units as DynamoDB Local reported them.
    pub units: Units,
    /// DynamoDB calls, by operation.
    pub calls: BTreeMap<String, usize>,
    /// How long the in-process handler took (this build, against DynamoDB Local).
    pub elapsed: std::time::Duration,
}

/// The measured scenarios by name, and the new webhook's write units from the serialized sizes.
#[derive(Debug, Default)]
pub struct Measured {
    pub scenarios: BTreeMap<&'static str, Scenario>,
    pub new_webhook_wcu_from_sizes: usize,
    /// Write units the relay's archive of one applied event costs (its history item's size), off the
    /// webhook's path: the bill prices it and the capacity model counts it against the table.
    pub archive_wcu_per_event: usize,
}

impl Measured {
    /// The CI guard: a new webhook within [`NEW_WEBHOOK_MAX`] (DynamoDB Local's figure and the one from the
    /// serialized sizes), a redelivery of an applied event one read and nothing else. Says every breach.
    pub fn guard(&self) -> Result<(), String> {
        let mut breaches = Vec::new();
        let scenario = |name: &str| self.scenarios.get(name).cloned().unwrap_or_default();
        let new = scenario(NEW_WEBHOOK);
        if new.units.write + new.units.index > NEW_WEBHOOK_MAX.write || new.units.read > NEW_WEBHOOK_MAX.read {
            breaches.push(format!(
                "a new webhook consumed {} WCU + {} index units and {} RCU (DynamoDB Local's ConsumedCapacity); \
                 at most {} write units in all and {} RCU",
                new.units.write, new.units.index, new.units.read, NEW_WEBHOOK_MAX.write, NEW_WEBHOOK_MAX.read
            ));
        }
        if self.new_webhook_wcu_from_sizes as f64 > NEW_WEBHOOK_MAX.write {
            breaches.push(format!(
                "a new webhook costs {} WCU from the serialized item sizes; at most {}",
                self.new_webhook_wcu_from_sizes, NEW_WEBHOOK_MAX.write
            ));
        }
        let dup = scenario(DUPLICATE);
        let calls: usize = dup.calls.values().sum();
        if calls != 1 || dup.calls.get("GetItem") != Some(&1) || dup.units.read > 1.0 || dup.units.write > 0.0 {
            breaches.push(format!(
                "a redelivery of an applied event made {:?} ({} RCU, {} WCU); one GetItem of at most 1 RCU expected",
                dup.calls, dup.units.read, dup.units.write
            ));
        }
        if breaches.is_empty() {
            Ok(())
        } else {
            Err(breaches.join("\n"))
        }
    }
}

/// Writes the bench's DynamoDB tables: the calls and units each kind of webhook costs, then what the happy
/// path costs in capacity units from the item sizes. Returns what it measured.
pub async fn run(out: &mut String) -> Measured {
    let ctx = TestContext::new().await;
    let meter = CapacityMeter::new();
    let app = app(&ctx, &meter);
    let mut measured = Measured::default();
    let mut m = Meter {
        ctx: &ctx,
        app: &app,
        meter: &meter,
        out,
        measured: &mut measured,
    };
    writeln!(m.out, "## DynamoDB calls per webhook (counted by an SDK interceptor)\n").ok();
    writeln!(
        m.out,
        "Units as DynamoDB Local reports them (`ReturnConsumedCapacity = INDEXES` on every call): the table's \
         read and write units, and apart the global secondary indexes' (the `open-items` entry a terminal \
         status deletes, a query of `by-psp-reference`); a conditional check that fails reports none.\n"
    )
    .ok();
    writeln!(
        m.out,
        "| scenario | calls | by operation | sequential | RCU | WCU | index units |\n|---|---|---|---|---|---|---|"
    )
    .ok();
    calls_per_webhook(&mut m).await;
    version_conflict(&mut m).await;
    by_psp_reference(&mut m).await;
    (measured.new_webhook_wcu_from_sizes, measured.archive_wcu_per_event) = capacity_units(out);
    measured
}

/// What measuring one scenario needs: the table, the intake, the meters and where the rows and figures go.
struct Meter<'a> {
    ctx: &'a TestContext,
    app: &'a App,
    meter: &'a CapacityMeter,
    out: &'a mut String,
    measured: &'a mut Measured,
}

/// A new payment of 1000 in the context's table; its id.
async fn new_payment(ctx: &TestContext, id: &str) -> PaymentId {
    ctx.store
        .create(fixtures::new_payment(id, 1000))
        .await
        .expect("create")
        .id
}

/// A new payment of 1000 whose PaymentIntent (`pi_<id>`, as the samples name it) the charge's answer bound.
async fn new_payment_with_reference(ctx: &TestContext, id: &str) -> PaymentId {
    let mut new = fixtures::new_payment(id, 1000);
    new.psp_reference = Some(shared::PspReference::parse(format!("pi_{id}")).expect("reference"));
    ctx.store.create(new).await.expect("create").id
}

/// Hands `request` to `app` (the meter's intake, or one with a hooked store) with the counters reset and
/// writes its row: the answer, the calls, the calls by operation, how many ran one after another, and the
/// units; kept as scenario `keep` when given. Returns the HTTP status.
async fn measure_with(m: &mut Meter<'_>, app: &App, name: &str, request: Request, keep: Option<&'static str>) -> u16 {
    m.ctx.calls.reset();
    m.meter.reset();
    let started = std::time::Instant::now();
    let (response, metrics) = process(app, request).await;
    let elapsed = started.elapsed();
    let (calls, units) = (m.ctx.calls.by_operation(), m.meter.units());
    let ops: Vec<String> = calls.iter().map(|(k, v)| format!("{k} x{v}")).collect();
    writeln!(
        m.out,
        "| {name} ({}) | {} | {} | {} | {} | {} | {} |",
        metrics.result,
        m.ctx.calls.calls().len(),
        ops.join(", "),
        m.ctx.calls.sequential_depth(),
        units.read,
        units.write,
        units.index
    )
    .ok();
    if let Some(key) = keep {
        let scenario = Scenario { units, calls, elapsed };
        m.measured.scenarios.insert(key, scenario);
    }
    response.status().as_u16()
}

/// [`measure_with`] on the meter's intake.
async fn measure(m: &mut Meter<'_>, name: &str, request: Request, keep: Option<&'static str>) -> u16 {
    let app = m.app;
    measure_with(m, app, name, request, keep).await
}

/// A first delivery, the same event again at once (the lease path), the PSP's redeliveries of an event
/// before and after it was applied, and an event that is not ours.
async fn calls_per_webhook(m: &mut Meter<'_>) {
    // The usual order: the charge's answer bound the PaymentIntent's id, then its webhook ends the payment.
    let id = new_payment_with_reference(m.ctx, "pay_bench_1").await;
    let happy = webhook("evt_b1", "payment_intent.succeeded", id.as_str(), true);
    let name = "happy path: first event, the PSP reference bound by the charge's answer";
    let status = measure(m, name, happy, Some(NEW_WEBHOOK)).await;
    assert_eq!(status, 200);
    // The webhook first to learn the reference also puts its `by-psp-reference` entry (once per payment).
    let first = new_payment(m.ctx, "pay_bench_ref").await;
    let binds = webhook("evt_b_ref", "payment_intent.succeeded", first.as_str(), true);
    measure(m, "first event, which also binds the PSP reference", binds, None).await;
    let again = webhook("evt_b1", "payment_intent.succeeded", id.as_str(), true);
    let name = "the same event again at once (not a redelivery: lease path)";
    measure(m, name, again, Some(NO_CHANGE)).await;

    // Redeliveries: signed ten minutes after the event was created (the PSP's retry): read first.
    let late = new_payment(m.ctx, "pay_bench_late").await;
    let redelivery = || aged_webhook("evt_b_late", "payment_intent.succeeded", late.as_str(), true, 600);
    measure(m, "redelivery of an event not applied yet", redelivery(), None).await;
    measure(
        m,
        "redelivery of an event already applied",
        redelivery(),
        Some(DUPLICATE),
    )
    .await;

    // Another system's PaymentIntent in the same account: no marker, no payment id, no payment holds it.
    let foreign = webhook("evt_b_foreign", "payment_intent.succeeded", "pay_not_ours", false);
    measure(
        m,
        "an event not ours (no marker, reference unknown)",
        foreign,
        Some(NOT_OURS),
    )
    .await;
}

/// A sync write lands between the intake's read and its write: one version conflict.
async fn version_conflict(m: &mut Meter<'_>) {
    let (ctx, app) = (m.ctx, m.app);
    let id = new_payment(ctx, "pay_bench_2").await;
    let hook = BeforeCall::new();
    let racing = App {
        store: ctx.store_with_hook(hook.clone()),
        ..app.clone()
    };
    let (store, target) = (ctx.uncounted_store(), id.clone());
    hook.before_next("PutItem", move || async move {
        store
            .finalize(&target, &fixtures::observe(Channel::Sync, Outcome::Processing), None)
            .await
            .expect("sync write");
    });
    let request = webhook("evt_b2", "payment_intent.succeeded", id.as_str(), true);
    let name =
        "a sync write lands between read and write: one version conflict (units: its hooked store is not metered)";
    measure_with(m, &racing, name, request, None).await;
}

/// A webhook without `metadata.payment_id`: the intake finds the payment by its PSP reference.
async fn by_psp_reference(m: &mut Meter<'_>) {
    let mut new = fixtures::new_payment("pay_bench_3", 1000);
    new.psp_reference = Some(shared::PspReference::parse("pi_pay_bench_3").expect("ref"));
    m.ctx.store.create(new).await.expect("create");
    let request = webhook("evt_b3", "payment_intent.succeeded", "pay_bench_3", false);
    let name = "found by PSP reference (no metadata.payment_id)";
    measure(m, name, request, Some(BY_REFERENCE)).await;
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

/// The lease item's size as DynamoDB counts it (names plus values): its key, a UUID owner, two expiry
/// numbers and the payment version it was taken at.
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
        + "at_version".len()
        + 2
}

/// Capacity units of the happy path, from the serialized items: their sizes, then the units of the lease
/// put, the read and the transaction, against the target. Returns the write units in all, and the relay's
/// archive of the event (off the webhook's path).
fn capacity_units(out: &mut String) -> (usize, usize) {
    let (action, captured) = happy_path();
    let payment_bytes = item_size_bytes(
        &transition_to_item(
            &captured.payment,
            &captured.event,
            shared::store::open_index::OpenShards::DEFAULT,
        )
        .expect("item"),
    );
    let action_bytes = item_size_bytes(
        &transition_to_item(
            &action.payment,
            &action.event,
            shared::store::open_index::OpenShards::DEFAULT,
        )
        .expect("item"),
    );
    let event_bytes = item_size_bytes(&event_to_item(&captured.event).expect("item"));
    let lease_bytes = lease_bytes();
    let lease_put = wcu(lease_bytes, false);
    // A put is billed on the larger of the item before and after it.
    let put = wcu(payment_bytes.max(action_bytes), false);
    let index = wcu(open_entry_bytes(&action.payment), false);
    let archive = wcu(event_bytes, false);
    writeln!(
        out,
        "\n## Capacity units per webhook (happy path), from serialized item sizes\n"
    )
    .ok();
    writeln!(out, "| item | bytes |\n|---|---|").ok();
    for (item, bytes) in [
        (
            "payment, requires_action (client secret + redirect URL), with its transition",
            action_bytes,
        ),
        (
            "payment, captured (one PSP event id seen), with its transition",
            payment_bytes,
        ),
        (
            "history item (the relay archives it, off the webhook's path)",
            event_bytes,
        ),
        ("lease", lease_bytes),
    ] {
        writeln!(out, "| {item} | {bytes} |").ok();
    }
    writeln!(out, "\n- lease acquire (PutItem): {lease_put} WCU").ok();
    writeln!(out, "- read (GetItem, strongly consistent, <= 4 KB): 1 RCU").ok();
    writeln!(
        out,
        "- PutItem of the payment under its version, carrying its transition (its stream record is the event; the lease is freed by the version, not deleted): {put} WCU"
    )
    .ok();
    writeln!(out, "- `open-items` entry removed by the terminal status (an index write, at the rate of the put that causes it): {index} WCU").ok();
    writeln!(out, "- index writes: `by-psp-reference` is KEYS_ONLY on `psp_reference`, written only when a payment's reference is first set (1 WCU then, 0 on every later webhook)").ok();
    writeln!(
        out,
        "- **total per webhook that ends a payment: {} WCU with the index, 1 RCU** (target, guarded in CI: at most {} write units, table and indexes, and {} RCU, items at most 1 KB); off its path the relay archives the event ({archive} WCU)",
        lease_put + put + index,
        NEW_WEBHOOK_MAX.write,
        NEW_WEBHOOK_MAX.read
    )
    .ok();
    open_index_cost(out, &action.payment, &captured.payment);
    (lease_put + put + index, archive)
}

/// The `open-items` entry of `open` as the index bills it (its keys + 100 B overhead).
fn open_entry_bytes(open: &shared::Payment) -> usize {
    let item = payment_to_item(open, shared::store::open_index::OpenShards::DEFAULT).expect("item");
    let entry: Item = ["pk", "sk", "open_shard", "opened_at_ms"]
        .iter()
        .filter_map(|k| item.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    item_size_bytes(&entry) + 100
}

/// The sparse `open-items` index (recovery, saga sweeper): what it costs per payment.
fn open_index_cost(out: &mut String, open: &shared::Payment, closed: &shared::Payment) {
    let item = payment_to_item(open, shared::store::open_index::OpenShards::DEFAULT).expect("item");
    let entry: Item = ["pk", "sk", "open_shard", "opened_at_ms"]
        .iter()
        .filter_map(|k| item.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    assert_eq!(entry.len(), 4, "an open payment carries the index key");
    assert!(
        !payment_to_item(closed, shared::store::open_index::OpenShards::DEFAULT)
            .expect("item")
            .contains_key("open_shard"),
        "a terminal payment leaves the index"
    );
    let entry_bytes = open_entry_bytes(open);
    let per_entry = wcu(entry_bytes, false);
    writeln!(
        out,
        "\n## The sparse `open-items` index (recovery and the saga sweeper)\n"
    )
    .ok();
    writeln!(
        out,
        "- entry (KEYS_ONLY: pk, sk, open_shard, opened_at_ms + 100 B overhead): {entry_bytes} B, at the rate of the single put that changes it: {per_entry} WCU"
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
