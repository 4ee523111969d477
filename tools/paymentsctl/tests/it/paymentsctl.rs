//! `paymentsctl` against DynamoDB Local and the SQS emulator: the items are written by the system's own
//! stores, saga transitions and consumer library, never by hand (except the damage a test inflicts on purpose).

use aws_sdk_dynamodb::types::AttributeValue;
use checkout_saga::saga::{Escalation, PaymentPending, Saga, SagaStore, Started};
use integration_tests::{fresh_queues, sqs_client, TestContext};
use order_projection::OrderProjection;
use payments_core::fixtures;
use paymentsctl::settings::Ctx;
use paymentsctl::timeline::{self, Level, Options, Source, Timeline};
use paymentsctl::{escalations, parked, replay};
use serde_json::json;
use shared::consumer::Consumer;
use shared::store::ParkedKind;
use shared::{clock, Channel, Config, OrderId, Outcome, PaymentId, PaymentStatus, PspReference};

pub(crate) fn ctl(ctx: &TestContext) -> Ctx {
    let table = ctx.table.clone();
    let mut ctl = Ctx::new(
        integration_tests::local_sdk_config(&local_testkit::service::SQS.endpoint()),
        ctx.client.clone(),
        Config::from_lookup(move |name| (name == "TABLE_NAME").then(|| table.clone())).unwrap(),
    );
    ctl.sqs = sqs_client(None);
    ctl
}

fn options(escalation_queue: Option<String>) -> Options {
    let mut opts = Options::from_env(&shared::Env::process(), clock::now_ms()).unwrap();
    opts.escalation_queue = escalation_queue;
    opts
}

fn problems(t: &Timeline) -> Vec<String> {
    t.findings
        .iter()
        .filter(|f| matches!(f.level, Level::Gap | Level::Anomaly))
        .map(|f| f.message.clone())
        .collect()
}

async fn consume_all(ctx: &TestContext, id: &PaymentId) {
    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, OrderProjection);
    for e in ctx.events(id).await.unwrap() {
        consumer.apply(&e).await.unwrap();
    }
}

/// A checkout saga (with its order item) that charged `payment` and waits for the outcome.
pub(crate) async fn waiting_saga(
    ctx: &TestContext,
    order: &OrderId,
    payment: &PaymentId,
    reference: Option<PspReference>,
) -> Saga<PaymentPending> {
    let sagas = SagaStore::new(
        ctx.client.clone(),
        &ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let now = clock::now_ms;
    let (s, e) = Saga::<Started>::begin(order.clone(), fixtures::checkout(), now(), 120_000);
    let create_order = checkout_saga::orders::create(&ctx.table, order, now()).unwrap();
    sagas.save(&s, &e, vec![create_order]).await.unwrap();
    let (s, e) = s.stock_reserved(now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.payment_created(payment.clone(), now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.payment_requested(reference, false, now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    s
}

/// A checkout whose order was cancelled after the capture: charged, refunded, stock released.
async fn compensated_checkout(ctx: &TestContext, id: &str) -> (PaymentId, OrderId) {
    let payment = ctx.store.create(fixtures::new_payment(id, 2500)).await.unwrap();
    let reference = PspReference::parse(format!("pi_{id}")).unwrap();
    let mut captured = fixtures::observe(Channel::Sync, Outcome::Succeeded);
    captured.psp_reference = Some(reference.clone());
    ctx.store.finalize(&payment.id, &captured, None).await.unwrap();
    let refund = fixtures::webhook(
        &format!("evt_refund_{id}"),
        clock::now_ms(),
        fixtures::refunded(2500, true),
    );
    ctx.store.finalize(&payment.id, &refund, None).await.unwrap();
    // No relay runs here: the history archived as it would archive it.
    ctx.events(&payment.id).await.unwrap();

    let sagas = SagaStore::new(
        ctx.client.clone(),
        &ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let order = payment.order_id.clone();
    let now = clock::now_ms;
    let s = waiting_saga(ctx, &order, &payment.id, Some(reference.clone())).await;
    let (s, e) = s.payment_captured(reference, now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.confirmation_failed("order cancelled".into(), now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.refunded(2500, now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.stock_released(now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    (payment.id, order)
}

#[tokio::test]
async fn a_compensated_checkout_shows_the_transitions_the_refund_the_compensations_in_reverse_and_the_cursor() {
    let ctx = TestContext::new().await;
    let (payment, order) = compensated_checkout(&ctx, "pay_tl1").await;
    consume_all(&ctx, &payment).await;

    let t = timeline::build(&ctl(&ctx), order.as_str(), &options(None))
        .await
        .unwrap();
    assert_eq!(t.resolved_as, "order id");
    assert_eq!(t.payment.as_ref().unwrap().status, "refunded");
    let payment_lines: Vec<&str> = t
        .entries
        .iter()
        .filter(|e| e.source == Source::Payment)
        .map(|e| e.what.as_str())
        .collect();
    assert_eq!(payment_lines, ["PaymentCreated", "PaymentCaptured", "PaymentRefunded"]);
    let refund = t
        .entries
        .iter()
        .find(|e| e.what == "PaymentRefunded" && e.source == Source::Payment)
        .unwrap();
    assert_eq!(refund.path.as_deref(), Some("webhook"));
    assert_eq!(refund.psp_event_id.as_deref(), Some("evt_refund_pay_tl1"));
    let compensations: Vec<&str> = t
        .entries
        .iter()
        .filter(|e| e.compensation)
        .map(|e| e.what.as_str())
        .collect();
    assert_eq!(
        compensations,
        ["PaymentRefunded", "StockReleased"],
        "payment first, then stock"
    );
    assert_eq!(t.saga.as_ref().unwrap().status, "compensated");
    assert_eq!(t.cursors.len(), 1);
    assert_eq!(
        t.cursors[0].applied_version,
        Some(3),
        "the consumer is at the last version"
    );
    assert_eq!(t.projections[0].payment_status, "refunded");
    assert!(problems(&t).is_empty(), "{:?}", t.findings);

    // The same story from the payment id and from the PSP reference; the table and the JSON carry it.
    let by_payment = timeline::build(&ctl(&ctx), payment.as_str(), &options(None))
        .await
        .unwrap();
    assert_eq!(by_payment.resolved_as, "payment id");
    assert_eq!(by_payment.entries.len(), t.entries.len());
    let by_reference = timeline::build(&ctl(&ctx), "pi_pay_tl1", &options(None)).await.unwrap();
    assert_eq!(by_reference.resolved_as, "PSP reference");
    let by_event = timeline::build(&ctl(&ctx), "evt_refund_pay_tl1", &options(None))
        .await
        .unwrap();
    assert_eq!(by_event.resolved_as, "PSP event id");
    let text = timeline::render(&t);
    assert!(
        text.contains("PaymentRefunded (compensation)") && text.contains("applied up to v3"),
        "{text}"
    );
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json["cursors"][0]["applied_version"], 3);
}

#[tokio::test]
async fn a_missing_event_and_a_consumer_behind_are_called_out() {
    let ctx = TestContext::new().await;
    let payment = ctx.store.create(fixtures::new_payment("pay_gap", 1000)).await.unwrap();
    ctx.store
        .finalize(
            &payment.id,
            &fixtures::observe(Channel::Sync, Outcome::Processing),
            None,
        )
        .await
        .unwrap();
    ctx.store
        .finalize(&payment.id, &fixtures::observe(Channel::Sync, Outcome::Succeeded), None)
        .await
        .unwrap();
    ctx.events(&payment.id).await.unwrap();
    // The damage: version 2's event item is gone, and no consumer applied anything.
    ctx.client
        .delete_item()
        .table_name(&ctx.table)
        .key("pk", AttributeValue::S("PAYMENT#pay_gap".into()))
        .key("sk", AttributeValue::S("EVENT#0000000002".into()))
        .send()
        .await
        .unwrap();

    let t = timeline::build(&ctl(&ctx), "pay_gap", &options(None)).await.unwrap();
    let gap = t.findings.iter().find(|f| f.level == Level::Gap).expect("a gap");
    assert!(gap.message.contains("[2]"), "{}", gap.message);
    let behind = t
        .findings
        .iter()
        .find(|f| f.level == Level::Warning)
        .expect("consumer behind");
    assert!(
        behind.message.contains("order-projection has applied nothing of 3"),
        "{}",
        behind.message
    );
    assert!(timeline::render(&t).contains("GAP"));
}

pub(crate) fn stripe_body(kind: &str, payment: &str, amount: u64) -> Vec<u8> {
    json!({ "id": format!("evt_{kind}_{payment}_{amount}"), "object": "event", "type": kind,
            "created": clock::now_ms() / 1000, "livemode": false,
            "data": { "object": { "id": format!("pi_{payment}"), "object": "payment_intent", "amount": amount,
                "currency": "eur", "metadata": { "payment_id": payment }, "client_secret": "pi_1_secret_x",
                "next_action": { "type": "redirect_to_url", "redirect_to_url": { "url": "https://hooks.stripe.com/3ds" } } } } })
    .to_string()
    .into_bytes()
}

pub(crate) async fn park(ctx: &TestContext, kind: ParkedKind, body: &[u8]) -> String {
    let event_key = serde_json::from_slice::<serde_json::Value>(body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let redacted = webhook_intake::redact::redact(body);
    ctx.store
        .park(kind, "stripe", &event_key, "test", &redacted)
        .await
        .unwrap();
    format!("stripe#{event_key}")
}

#[tokio::test]
async fn a_parked_webhook_replays_through_finalize_once_its_payment_exists_and_a_dry_run_writes_nothing() {
    let ctx = TestContext::new().await;
    let key = park(
        &ctx,
        ParkedKind::UnknownPayment,
        &stripe_body("payment_intent.succeeded", "pay_pk", 1000),
    )
    .await;
    let ctl = ctl(&ctx);

    // Before the payment exists: nothing to do.
    let r = parked::replay(&ctl, &key, None, true).await.unwrap();
    assert_eq!(r.result, "unknown_payment");
    let event_id = &key["stripe#".len()..];
    let err = timeline::build(&ctl, event_id, &options(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is a parked webhook (unknown_payment") && err.contains("pay_pk"),
        "{err}"
    );

    ctx.store.create(fixtures::new_payment("pay_pk", 1000)).await.unwrap();
    let r = parked::replay(&ctl, &key, None, true).await.unwrap();
    assert_eq!(r.result, "would_apply", "{r:?}");
    assert!(!r.wrote);
    let id = PaymentId::parse("pay_pk").unwrap();
    assert_eq!(
        ctx.store.get(&id).await.unwrap().unwrap().version,
        1,
        "a dry run writes nothing"
    );
    let listed = parked::list(&ctl, Some(ParkedKind::UnknownPayment), None)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].replayed_at_ms.is_none());

    let t = timeline::build(&ctl, event_id, &options(None)).await.unwrap();
    assert_eq!(t.resolved_as, "parked PSP event id");
    assert_eq!(t.entries.iter().filter(|e| e.source == Source::Parked).count(), 1);
    assert!(t
        .findings
        .iter()
        .any(|f| f.level == Level::Warning && f.message.contains("parked replay")));

    let r = parked::replay(&ctl, &key, None, false).await.unwrap();
    assert_eq!(r.result, "applied", "{r:?}");
    let p = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(p.status, PaymentStatus::Captured);
    let events = ctx.events(&id).await.unwrap();
    assert_eq!(events.last().unwrap().path, Channel::Webhook);
    assert_eq!(
        events.last().unwrap().correlation_id.as_str(),
        format!("replay-{}", &key[7..])
    );
    let listed = parked::list(&ctl, None, Some(0)).await.unwrap();
    assert_eq!(listed[0].replay_result.as_deref(), Some("applied"));

    // Twice is harmless: the dedup on the payment says duplicate.
    let r = parked::replay(&ctl, &key, None, false).await.unwrap();
    assert_eq!(r.result, "duplicate");
    assert_eq!(ctx.store.get(&id).await.unwrap().unwrap().version, 2);
}

/// A parked replay that meets the payment's lease held by another worker (the intake or recovery at work)
/// waits for it within its deadline: it applies once the lease is freed, and when it is not freed in time it
/// fails saying so, writing nothing (never a quiet "busy" that exits 0).
#[tokio::test]
async fn a_parked_replay_waits_for_a_held_lease_within_its_deadline_and_then_says_so() {
    let ctx = TestContext::new().await;
    let ctl = ctl(&ctx);
    let leases = shared::Leases::new(ctx.client.clone(), ctx.table.clone(), ctl.config.lease);
    let deadline = parked::LEASE_WAIT.deadline;

    // Held for longer than the deadline: an error after waiting it out, naming the lease; nothing written.
    let key = park(
        &ctx,
        ParkedKind::UnknownPayment,
        &stripe_body("payment_intent.succeeded", "pay_held", 1000),
    )
    .await;
    let payment = ctx.store.create(fixtures::new_payment("pay_held", 1000)).await.unwrap();
    let held = leases.acquire(&ctx.read(&payment.id).await).await.unwrap().unwrap();
    let started = std::time::Instant::now();
    let err = parked::replay(&ctl, &key, None, false).await.map(|r| format!("{r:?}"));
    let waited = started.elapsed();
    let err = err
        .expect_err("a lease held past the deadline is an error, not a report")
        .to_string();
    assert!(err.contains("lease") && err.contains("pay_held"), "{err}");
    assert!(
        waited >= deadline && waited < deadline + std::time::Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(
        ctx.store.get(&payment.id).await.unwrap().unwrap().version,
        1,
        "nothing written"
    );
    leases.release(&held).await.unwrap();

    // Freed a second into the wait: the replay takes the lease and applies.
    let key = park(
        &ctx,
        ParkedKind::UnknownPayment,
        &stripe_body("payment_intent.succeeded", "pay_freed", 1000),
    )
    .await;
    let payment = ctx
        .store
        .create(fixtures::new_payment("pay_freed", 1000))
        .await
        .unwrap();
    let held = leases.acquire(&ctx.read(&payment.id).await).await.unwrap().unwrap();
    let freeing = leases.clone();
    let freed = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        freeing.release(&held).await.unwrap()
    });
    let r = parked::replay(&ctl, &key, None, false).await.unwrap();
    assert!(freed.await.unwrap(), "the test's lease was still held when freed");
    assert_eq!(r.result, "applied", "{r:?}");
    assert_eq!(
        ctx.store.get(&payment.id).await.unwrap().unwrap().status,
        PaymentStatus::Captured
    );
}

#[tokio::test]
async fn a_parked_webhook_that_is_still_wrong_or_lost_its_secrets_to_redaction_is_not_applied() {
    let ctx = TestContext::new().await;
    ctx.store.create(fixtures::new_payment("pay_q", 1000)).await.unwrap();
    let ctl = ctl(&ctx);
    let wrong_amount = park(
        &ctx,
        ParkedKind::Quarantined,
        &stripe_body("payment_intent.succeeded", "pay_q", 999),
    )
    .await;
    let action = park(
        &ctx,
        ParkedKind::Quarantined,
        &stripe_body("payment_intent.requires_action", "pay_q", 1000),
    )
    .await;

    let r = parked::replay(&ctl, &wrong_amount, Some(ParkedKind::Quarantined), true)
        .await
        .unwrap();
    assert_eq!(r.result, "refused", "{r:?}");
    let r = parked::replay(&ctl, &wrong_amount, Some(ParkedKind::Quarantined), false)
        .await
        .unwrap();
    assert_eq!(r.result, "refused");
    assert!(!r.wrote);
    let r = parked::replay(&ctl, &action, None, false).await.unwrap();
    assert_eq!(r.result, "redacted", "{r:?}");
    assert!(!r.wrote);
    let id = PaymentId::parse("pay_q").unwrap();
    assert_eq!(ctx.store.get(&id).await.unwrap().unwrap().version, 1, "nothing written");

    // The timeline shows both parked webhooks as lines and as warnings.
    let t = timeline::build(&ctl, "pay_q", &options(None)).await.unwrap();
    assert_eq!(t.entries.iter().filter(|e| e.source == Source::Parked).count(), 2);
}

#[tokio::test]
async fn escalations_are_listed_without_being_consumed_and_a_dry_run_retry_says_what_would_run() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let sagas = SagaStore::new(
        ctx.client.clone(),
        &ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let payment = ctx.store.create(fixtures::new_payment("pay_esc", 2500)).await.unwrap();
    let order = payment.order_id.clone();
    let now = clock::now_ms;
    // Captured money has the PSP reference its refund needs (a saga without one does not load).
    let reference = shared::PspReference::parse("pi_esc").unwrap();
    let s = waiting_saga(&ctx, &order, &payment.id, Some(reference.clone())).await;
    let (s, e) = s.payment_captured(reference, now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.confirmation_failed("order cancelled".into(), now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    Escalation::new(sqs.clone(), &queues.escalation_url)
        .escalate(&order, "refund_payment", 5, "PSP unavailable")
        .await
        .unwrap();

    let ctl = ctl(&ctx);
    for _ in 0..2 {
        let listed = escalations::peek(&ctl.sqs, &queues.escalation_url).await.unwrap();
        assert_eq!(listed.len(), 1, "still there after a listing");
        assert_eq!(listed[0].order_id, order.as_str());
        assert_eq!(listed[0].action, "refund_payment");
    }
    let report = escalations::retry(&ctl, order.as_str(), Some(&queues.escalation_url), true, true)
        .await
        .unwrap();
    assert_eq!((report.escalations, report.deleted), (1, 0));
    assert!(report.resumed.is_none(), "a dry run runs nothing");
    let out = report.render();
    assert!(
        out.contains("refunding_payment") && out.contains("refund the payment"),
        "{out}"
    );
    assert!(out.contains("1 escalation(s)") && out.contains("dry run"), "{out}");
    assert_eq!(
        escalations::peek(&ctl.sqs, &queues.escalation_url).await.unwrap().len(),
        1
    );

    let t = timeline::build(&ctl, order.as_str(), &options(Some(queues.escalation_url.clone())))
        .await
        .unwrap();
    assert_eq!(t.escalations.len(), 1);
    assert!(t.entries.iter().any(|e| e.source == Source::Escalation));
    assert!(problems(&t).iter().any(|m| m.contains("escalated")), "{:?}", t.findings);
}

#[tokio::test]
async fn replays_count_in_a_dry_run_and_publish_each_event_once_otherwise() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let (payment, _) = compensated_checkout(&ctx, "pay_rp").await;
    let ctl = ctl(&ctx);

    let dry = replay::range(&ctl, 0, clock::now_ms() + 1, Some(&queues.queue_url), true, false)
        .await
        .unwrap();
    assert_eq!((dry.events, dry.payments, dry.published), (3, 1, 0));
    assert!(dry.render().contains("would publish 3 event(s)"));
    let out = sqs
        .get_queue_attributes()
        .queue_url(&queues.queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    assert_eq!(
        out.attributes().unwrap()[&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );

    let done = replay::payment(&ctl, payment.as_str(), Some(&queues.queue_url), false)
        .await
        .unwrap();
    assert_eq!(done.published, 3);
    let received = sqs
        .receive_message()
        .queue_url(&queues.queue_url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    assert!(!received.messages().is_empty());

    let redrive = replay::redrive(&ctl, Some(&queues.dlq_url), Some(&queues.queue_url), true)
        .await
        .unwrap();
    assert_eq!((redrive.approximate, redrive.moved), (0, 0));
}

#[tokio::test]
async fn an_escalated_saga_is_resumed_by_retry_through_the_saga_runner_and_its_escalations_are_deleted() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let order = escalated_before_stock_release(&ctx, &queues.escalation_url, "order-retry").await;
    // The runner is built from the checkout functions' settings; releasing stock never calls the PSP.
    let mut ctl = ctl(&ctx);
    ctl.env = ctl
        .env
        .with("PSP_BASE_URL", "http://127.0.0.1:9")
        .with("PSP_API_KEY", "sk_test_unused")
        .with("PSP_REDIRECTS", "never");
    let report = escalations::retry(&ctl, order.as_str(), Some(&queues.escalation_url), false, true)
        .await
        .unwrap();
    assert_eq!(report.resumed.as_ref().map(|r| r.status.as_str()), Some("compensated"));
    assert_eq!(report.deleted, 1);
    let out = report.render();
    assert!(
        out.contains("release the reserved stock") && out.contains("resumed: now compensated"),
        "{out}"
    );
    assert!(out.contains("1 escalation message(s) of order-retry deleted"), "{out}");
    assert!(escalations::peek(&ctl.sqs, &queues.escalation_url)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(stock(&ctx).await, "12", "released once");
}

/// A saga whose payment failed, stuck before its stock release (the step that was escalated to
/// `escalation_url`), with 10 of `sku-1` in stock.
pub(crate) async fn escalated_before_stock_release(ctx: &TestContext, escalation_url: &str, order: &str) -> OrderId {
    let sku = shared::Sku::parse("sku-1").unwrap();
    checkout_saga::inventory::put_stock(&ctx.client, &ctx.table, &sku, 10)
        .await
        .unwrap();
    let sagas = SagaStore::new(
        ctx.client.clone(),
        &ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let order = OrderId::parse(order).unwrap();
    let payment = PaymentId::parse(format!("pay_{order}")).unwrap();
    let s = waiting_saga(ctx, &order, &payment, None).await;
    let (s, e) = s.payment_failed("declined".into(), clock::now_ms());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.payment_cancelled(clock::now_ms());
    sagas.save(&s, &e, vec![]).await.unwrap();
    Escalation::new(sqs_client(None), escalation_url)
        .escalate(&order, "release_stock", 5, "DynamoDB unavailable")
        .await
        .unwrap();
    order
}

/// The stock of `sku-1` available now.
pub(crate) async fn stock(ctx: &TestContext) -> String {
    let item = ctx
        .client
        .get_item()
        .table_name(&ctx.table)
        .key("pk", AttributeValue::S("SKU#sku-1".into()))
        .key("sk", AttributeValue::S("STOCK".into()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    item["available"].as_n().unwrap().to_owned()
}

/// What the intake's own logging setup (`shared::telemetry`, JSON as in Lambda) writes while `log` runs
/// inside a webhook request span that names `payment` (none: not found yet).
fn intake_log(correlation: &str, payment: Option<&str>, log: impl FnOnce()) -> Vec<String> {
    use tracing_subscriber::layer::SubscriberExt;
    let buffer = integration_tests::LogCapture::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::registry().with(shared::telemetry::layer(
        true,
        shared::telemetry::SpanCloses::Logged,
        move || writer.clone(),
    ));
    tracing::subscriber::with_default(subscriber, || {
        let span = shared::telemetry::request_span("webhook", correlation);
        if let Some(payment) = payment {
            shared::telemetry::record_payment(&span, payment);
        }
        span.in_scope(log);
    });
    buffer.lines()
}

/// A fresh log group on moto holding `lines` (each with its time), as the intake's log group would.
async fn intake_log_group(logs: &aws_sdk_cloudwatchlogs::Client, lines: Vec<(i64, String)>) -> String {
    use aws_sdk_cloudwatchlogs::types::InputLogEvent;
    let group = format!("/aws/lambda/test-intake-{}", uuid::Uuid::new_v4().simple());
    logs.create_log_group().log_group_name(&group).send().await.unwrap();
    logs.create_log_stream()
        .log_group_name(&group)
        .log_stream_name("2026/12/01/[$LATEST]1")
        .send()
        .await
        .unwrap();
    let events = lines.into_iter().map(|(at_ms, message)| {
        InputLogEvent::builder()
            .timestamp(at_ms)
            .message(message)
            .build()
            .unwrap()
    });
    logs.put_log_events()
        .log_group_name(&group)
        .log_stream_name("2026/12/01/[$LATEST]1")
        .set_log_events(Some(events.collect()))
        .send()
        .await
        .unwrap();
    group
}

#[tokio::test]
async fn deliveries_that_changed_nothing_come_from_a_logs_insights_query_merged_in_time_order() {
    let ctx = TestContext::new().await;
    let (payment, _) = compensated_checkout(&ctx, "pay_lg1").await;
    consume_all(&ctx, &payment).await;
    let pay = Some(payment.as_str());
    let finalized = |result: &'static str, psp_event_id: &'static str| {
        move || tracing::info!(result, psp_event_id, conflicts = 0, "webhook finalized")
    };
    let mut lines = intake_log(
        "c-applied",
        pay,
        finalized("Applied(PaymentRefunded)", "evt_refund_pay_lg1"),
    );
    lines.extend(intake_log(
        "c-dup",
        pay,
        finalized("Ignored(Duplicate)", "evt_refund_pay_lg1"),
    ));
    lines.extend(intake_log("c-lease", pay, || {
        tracing::info!(
            result = "Deferred(LeaseHeld)",
            psp_event_id = "evt_late",
            "webhook deferred: the payment's lease is held"
        )
    }));
    // Before the payment was found, the line names only what the event targets (its PSP reference).
    lines.extend(intake_log("c-early", None, || {
        tracing::info!(
            result = "Deferred(UnknownPayment)",
            psp_event_id = "evt_early",
            target = "pi_pay_lg1",
            "webhook deferred: payment not known yet"
        )
    }));
    lines.extend(intake_log(
        "c-other",
        Some("pay_other"),
        finalized("Ignored(Stale)", "evt_other"),
    ));
    assert!(
        lines.iter().any(|l| l.contains("time.busy")),
        "span close lines are in the log too"
    );
    let start = clock::now_ms() - 60_000;
    let timed: Vec<(i64, String)> = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| (start + i as i64, l))
        .collect();
    let ctl = ctl(&ctx);
    let group = intake_log_group(&ctl.logs, timed).await;

    let mut opts = options(None);
    opts.log_group = Some(group.clone());
    let t = timeline::build(&ctl, payment.as_str(), &opts).await.unwrap();
    let logs: Vec<(&str, Option<&str>)> = t
        .entries
        .iter()
        .filter(|e| e.source == Source::Logs)
        .map(|e| (e.what.as_str(), e.correlation_id.as_deref()))
        .collect();
    assert_eq!(
        logs,
        [
            ("Applied(PaymentRefunded)", Some("c-applied")),
            ("Ignored(Duplicate)", Some("c-dup")),
            ("Deferred(LeaseHeld)", Some("c-lease")),
            ("Deferred(UnknownPayment)", Some("c-early")),
        ],
        "{:?}",
        t.findings
    );
    assert!(t.entries.windows(2).all(|w| w[0].at_ms <= w[1].at_ms), "one time order");
    let duplicate = t.entries.iter().find(|e| e.what == "Ignored(Duplicate)").unwrap();
    assert_eq!(duplicate.psp_event_id.as_deref(), Some("evt_refund_pay_lg1"));
    assert_eq!(duplicate.payment_id.as_deref(), Some(payment.as_str()));
    assert!(
        duplicate.at_ms >= start && duplicate.at_ms < start + 100,
        "the log line's own time"
    );
    assert_eq!(t.deliveries.len(), 4);
    assert!(t.logs_queries[0].contains(&group), "{:?}", t.logs_queries);
    assert!(timeline::render(&t).contains("logs"));
}

#[tokio::test]
async fn an_order_with_a_declined_payment_and_its_retry_shows_both_payments_in_one_time_order() {
    let ctx = TestContext::new().await;
    let mut first = fixtures::new_payment("pay_try1", 2500);
    first.now_ms = clock::now_ms();
    let declined = ctx.store.create(first).await.unwrap();
    let order = declined.order_id.clone();
    let failed = Outcome::Failed {
        reason: "card_declined".into(),
    };
    ctx.store
        .finalize(&declined.id, &fixtures::observe(Channel::Sync, failed), None)
        .await
        .unwrap();
    let mut retry = fixtures::new_payment("pay_try2", 2500);
    retry.order_id = order.clone();
    retry.now_ms = clock::now_ms();
    let retried = ctx.store.create(retry).await.unwrap();
    ctx.store
        .finalize(&retried.id, &fixtures::observe(Channel::Sync, Outcome::Succeeded), None)
        .await
        .unwrap();
    consume_all(&ctx, &declined.id).await;
    consume_all(&ctx, &retried.id).await;
    waiting_saga(&ctx, &order, &retried.id, None).await;

    let t = timeline::build(&ctl(&ctx), order.as_str(), &options(None))
        .await
        .unwrap();
    let shown: Vec<&str> = t.payments.iter().map(|p| p.payment_id.as_str()).collect();
    assert_eq!(shown, ["pay_try1", "pay_try2"]);
    assert_eq!(
        t.payment.as_ref().unwrap().payment_id,
        "pay_try2",
        "the saga's payment first"
    );
    let lines: Vec<(&str, &str)> = t
        .entries
        .iter()
        .filter(|e| e.source == Source::Payment)
        .map(|e| (e.payment_id.as_deref().unwrap(), e.what.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            ("pay_try1", "PaymentCreated"),
            ("pay_try1", "PaymentFailed"),
            ("pay_try2", "PaymentCreated"),
            ("pay_try2", "PaymentCaptured"),
        ]
    );
    assert!(t.entries.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let cursors: Vec<(&str, Option<u64>)> = t
        .cursors
        .iter()
        .map(|c| (c.payment_id.as_str(), c.applied_version))
        .collect();
    assert_eq!(cursors, [("pay_try1", Some(2)), ("pay_try2", Some(2))]);
    assert!(problems(&t).is_empty(), "{:?}", t.findings);
    assert!(timeline::render(&t).contains("PAYMENT"));
}

mod breaker {
    //! `paymentsctl breaker show|reset` on the item the functions' breaker writes (through its own writer,
    //! `psp::breaker::item`), and on one left damaged on purpose.

    use super::*;
    use payments_core::breaker::Opening;
    use paymentsctl::breaker::{self, ResetOutcome};
    use psp::breaker::item::BreakerItem;
    use psp::BREAKER_NAME;

    const COOL_DOWN_MS: i64 = 30_000;

    fn item(ctx: &TestContext) -> BreakerItem {
        BreakerItem::new(ctx.client.clone(), ctx.table.clone(), BREAKER_NAME)
    }

    async fn open(ctx: &TestContext, now: i64) {
        let opening = Opening {
            failures: 5,
            requests: 3,
        };
        item(ctx)
            .open(Some(opening), now, now + COOL_DOWN_MS)
            .await
            .expect("opened");
    }

    #[tokio::test]
    async fn show_says_closed_without_an_item_and_reset_has_nothing_to_do() {
        let ctx = TestContext::new().await;
        let view = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!((view.state.as_str(), view.ends_at_ms), ("closed", None));
        assert!(!view.resettable());
        assert_eq!(
            breaker::reset(&ctl(&ctx), &view).await.unwrap(),
            ResetOutcome::AlreadyClosed
        );
        assert!(view.render().contains("closed"), "{}", view.render());
    }

    #[tokio::test]
    async fn show_reads_an_open_breaker_as_the_functions_do_and_reset_closes_it_once() {
        let ctx = TestContext::new().await;
        let now = clock::now_ms();
        open(&ctx, now).await;
        let view = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!(view.state, "open");
        assert_eq!((view.failures, view.failed_requests), (Some(5), Some(3)));
        assert_eq!(
            (view.changed_at_ms, view.ends_at_ms),
            (Some(now), Some(now + COOL_DOWN_MS))
        );
        let text = view.render();
        assert!(text.contains("5 attempts over 3 requests"), "{text}");

        assert_eq!(breaker::reset(&ctl(&ctx), &view).await.unwrap(), ResetOutcome::Reset);
        let after = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!((after.state.as_str(), after.failures), ("closed", None));
        assert_eq!(
            breaker::reset(&ctl(&ctx), &after).await.unwrap(),
            ResetOutcome::AlreadyClosed
        );
    }

    #[tokio::test]
    async fn a_reset_does_not_clobber_a_change_made_after_show() {
        let ctx = TestContext::new().await;
        let now = clock::now_ms();
        open(&ctx, now - 2 * COOL_DOWN_MS).await;
        let shown = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!(shown.state, "probing", "its cool-down is over");
        // A function's probe failed meanwhile: opened again, for another cool-down.
        item(&ctx).open(None, now, now + COOL_DOWN_MS).await.unwrap();
        let refused = breaker::reset(&ctl(&ctx), &shown).await.unwrap_err();
        assert!(refused.to_string().contains("changed since it was shown"), "{refused}");
        let still = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!(
            (still.state.as_str(), still.ends_at_ms),
            ("open", Some(now + COOL_DOWN_MS))
        );
    }

    #[tokio::test]
    async fn a_damaged_open_item_shows_the_end_that_applies() {
        let ctx = TestContext::new().await;
        let now = clock::now_ms();
        let put = |attributes: Vec<(&'static str, AttributeValue)>| {
            let mut put = ctx
                .client
                .put_item()
                .table_name(&ctx.table)
                .item("pk", AttributeValue::S(format!("BREAKER#{BREAKER_NAME}")))
                .item("sk", AttributeValue::S("BREAKER".into()));
            for (name, value) in attributes {
                put = put.item(name, value);
            }
            put.send()
        };
        let changed = now - 1_000;
        put(vec![
            ("state", AttributeValue::S("open".into())),
            ("open_until_ms", AttributeValue::S("soon".into())),
            ("changed_at_ms", AttributeValue::N(changed.to_string())),
        ])
        .await
        .unwrap();
        let view = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!(
            (view.state.as_str(), view.ends_at_ms),
            ("open", Some(changed + COOL_DOWN_MS))
        );

        let next_year = now + 365 * 86_400_000;
        put(vec![
            ("state", AttributeValue::S("open".into())),
            ("open_until_ms", AttributeValue::N(next_year.to_string())),
            ("changed_at_ms", AttributeValue::N(changed.to_string())),
        ])
        .await
        .unwrap();
        let view = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!(view.ends_at_ms, Some(changed + 10 * COOL_DOWN_MS), "capped");
        assert_eq!(view.stored_end_ms, Some(next_year));

        put(vec![("state", AttributeValue::S("open".into()))]).await.unwrap();
        let view = breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap();
        assert_eq!(
            (view.state.as_str(), view.ends_at_ms),
            ("probing", None),
            "no change time: ended"
        );
        assert_eq!(breaker::reset(&ctl(&ctx), &view).await.unwrap(), ResetOutcome::Reset);
        assert_eq!(breaker::show(&ctl(&ctx), BREAKER_NAME).await.unwrap().state, "closed");
    }
}
