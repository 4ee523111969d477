//! `paymentsctl` against DynamoDB Local and the SQS emulator: the items are written by the system's own
//! stores, saga transitions and consumer library, never by hand (except the damage a test inflicts on purpose).

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::{fresh_queues, sqs_client, TestContext};
use order_projection::OrderProjection;
use payments_core::fixtures;
use paymentsctl::settings::Ctx;
use paymentsctl::timeline::{self, Level, Options, Source, Timeline};
use paymentsctl::{escalations, parked, replay};
use serde_json::json;
use shared::consumer::Consumer;
use shared::saga::{Escalation, PaymentPending, Saga, SagaStore, Started};
use shared::store::ParkedKind;
use shared::{clock, Config, OrderId, Outcome, Path, PaymentId, PaymentStatus, PspReference};

fn ctl(ctx: &TestContext) -> Ctx {
    let table = ctx.table.clone();
    Ctx {
        sdk: integration_tests::local_sdk_config(&local_dev::service::SQS.endpoint()),
        config: Config::from_lookup(move |name| (name == "TABLE_NAME").then(|| table.clone())).unwrap(),
        dynamodb: ctx.client.clone(),
        sqs: sqs_client(None),
    }
}

fn options(escalation_queue: Option<String>) -> Options {
    let mut opts = Options::from_env(clock::now_ms());
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
    for e in ctx.store.events(id).await.unwrap() {
        consumer.apply(&e).await.unwrap();
    }
}

/// A checkout saga (with its order item) that charged `payment` and waits for the outcome.
async fn waiting_saga(
    ctx: &TestContext,
    order: &OrderId,
    payment: &PaymentId,
    reference: Option<PspReference>,
) -> Saga<PaymentPending> {
    let sagas = SagaStore::new(ctx.client.clone(), &ctx.table);
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
    let mut captured = fixtures::observe(Path::Sync, Outcome::Succeeded);
    captured.psp_reference = Some(reference.clone());
    ctx.store.finalize(&payment.id, &captured, None).await.unwrap();
    let refund = fixtures::webhook(
        &format!("evt_refund_{id}"),
        clock::now_ms(),
        fixtures::refunded(2500, true),
    );
    ctx.store.finalize(&payment.id, &refund, None).await.unwrap();

    let sagas = SagaStore::new(ctx.client.clone(), &ctx.table);
    let order = payment.order_id.clone();
    let now = clock::now_ms;
    let s = waiting_saga(ctx, &order, &payment.id, Some(reference)).await;
    let (s, e) = s.payment_captured(now());
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
    assert_eq!(t.projection.as_ref().unwrap().payment_status, "refunded");
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
        .finalize(&payment.id, &fixtures::observe(Path::Sync, Outcome::Processing), None)
        .await
        .unwrap();
    ctx.store
        .finalize(&payment.id, &fixtures::observe(Path::Sync, Outcome::Succeeded), None)
        .await
        .unwrap();
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

fn stripe_body(kind: &str, payment: &str, amount: u64) -> Vec<u8> {
    json!({ "id": format!("evt_{kind}_{payment}_{amount}"), "object": "event", "type": kind,
            "created": clock::now_ms() / 1000, "livemode": false,
            "data": { "object": { "id": format!("pi_{payment}"), "object": "payment_intent", "amount": amount,
                "currency": "eur", "metadata": { "payment_id": payment }, "client_secret": "pi_1_secret_x",
                "next_action": { "type": "redirect_to_url", "redirect_to_url": { "url": "https://hooks.stripe.com/3ds" } } } } })
    .to_string()
    .into_bytes()
}

async fn park(ctx: &TestContext, kind: ParkedKind, body: &[u8]) -> String {
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
    let events = ctx.store.events(&id).await.unwrap();
    assert_eq!(events.last().unwrap().path, Path::Webhook);
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
    let sagas = SagaStore::new(ctx.client.clone(), &ctx.table);
    let payment = ctx.store.create(fixtures::new_payment("pay_esc", 2500)).await.unwrap();
    let order = payment.order_id.clone();
    let now = clock::now_ms;
    let s = waiting_saga(&ctx, &order, &payment.id, None).await;
    let (s, e) = s.payment_captured(now());
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
    let out = escalations::retry(&ctl, order.as_str(), Some(&queues.escalation_url), true)
        .await
        .unwrap();
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
    let sku = shared::Sku::parse("sku-1").unwrap();
    checkout_saga::inventory::put_stock(&ctx.client, &ctx.table, &sku, 10)
        .await
        .unwrap();
    // A saga whose payment failed, stuck before its stock release (the step that was escalated).
    let sagas = SagaStore::new(ctx.client.clone(), &ctx.table);
    let order = OrderId::parse("order-retry").unwrap();
    let now = clock::now_ms;
    let s = waiting_saga(&ctx, &order, &PaymentId::parse("pay_retry").unwrap(), None).await;
    let (s, e) = s.payment_failed("declined".into(), now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.payment_cancelled(now());
    sagas.save(&s, &e, vec![]).await.unwrap();
    Escalation::new(sqs.clone(), &queues.escalation_url)
        .escalate(&order, "release_stock", 5, "DynamoDB unavailable")
        .await
        .unwrap();
    // The runner is built from the checkout functions' settings; releasing stock never calls the PSP.
    std::env::set_var("PSP_BASE_URL", "http://127.0.0.1:9");
    std::env::set_var("PSP_API_KEY", "sk_test_unused");

    let ctl = ctl(&ctx);
    let out = escalations::retry(&ctl, order.as_str(), Some(&queues.escalation_url), false)
        .await
        .unwrap();
    assert!(
        out.contains("release the reserved stock") && out.contains("resumed: now compensated"),
        "{out}"
    );
    assert!(out.contains("1 escalation message(s) of order-retry deleted"), "{out}");
    assert!(escalations::peek(&ctl.sqs, &queues.escalation_url)
        .await
        .unwrap()
        .is_empty());
    let stock = ctx
        .client
        .get_item()
        .table_name(&ctx.table)
        .key("pk", AttributeValue::S("SKU#sku-1".into()))
        .key("sk", AttributeValue::S("STOCK".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(stock.item.unwrap()["available"].as_n().unwrap(), "12", "released once");
}
