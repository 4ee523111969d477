//! A live stack moving to the payment item as its own outbox: for 24 h after the deploy the stream holds
//! both forms, event items an older writer put in its transaction and payment change records that carry
//! their transition, mixed within one payment's history. Through the template's own filter, the relay
//! sends each event once, in version order per payment, with the body, group and deduplication id the
//! consumers know, and archives the new form's events so the history reads complete.

use super::e2e::{assert_applied_once_in_order, drain, Recording};
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use integration_tests::{fresh_queues, function_sqs_client, function_streams_client, sqs_client, TestContext};
use local_lambda::event_pattern::EventPattern;
use local_lambda::stream_pump::StreamPump;
use local_lambda::template::{Stack, Template};
use local_lambda::triggers::{FunctionTriggers, Trigger};
use outbox_relay::{relay, Publisher};
use payments_core::{decide, fixtures, Channel, Decision, Observation, Outcome, Payment, PaymentId};
use shared::consumer::Consumer;
use shared::store::item::{event_to_item, payment_to_item};

/// The relay mapping's `FilterCriteria`, as `infra/template.yaml` declares them.
fn outbox_filters() -> Vec<EventPattern> {
    let template = Template::from_repo().expect("infra/template.yaml");
    let relay = FunctionTriggers::read(&template, "OutboxRelayFunction", &Stack::default())
        .expect("the relay's triggers")
        .expect("in the stack");
    let Some((_, Trigger::Stream(mapping))) = relay.events.into_iter().find(|(n, _)| n == "Outbox") else {
        panic!("no Outbox stream mapping")
    };
    mapping.filters
}

/// The transition as the older writer committed it: one `TransactWriteItems` of the payment (no transition
/// on it) and its event item.
async fn old_form_write(ctx: &TestContext, current: &Payment, obs: &Observation) -> Payment {
    let Decision::Apply(t) = decide(current, obs, shared::clock::now_ms()) else {
        panic!("{obs:?} applies")
    };
    let payment = Put::builder()
        .table_name(&ctx.table)
        .set_item(Some(
            payment_to_item(&t.payment, shared::store::open_index::OpenShards::DEFAULT).unwrap(),
        ))
        .condition_expression("version = :v")
        .expression_attribute_values(":v", AttributeValue::N(current.version.to_string()))
        .build()
        .unwrap();
    let event = Put::builder()
        .table_name(&ctx.table)
        .set_item(Some(event_to_item(&t.event).unwrap()))
        .condition_expression("attribute_not_exists(sk)")
        .build()
        .unwrap();
    ctx.client
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(payment).build())
        .transact_items(TransactWriteItem::builder().put(event).build())
        .send()
        .await
        .unwrap();
    t.payment
}

/// A payment created and moved to `requires_action` by the older writer.
async fn old_form_payment(ctx: &TestContext, name: &str) -> Payment {
    let (created, event) = fixtures::new_payment(name, 1000).into_payment();
    ctx.client
        .transact_write_items()
        .transact_items(
            TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(&ctx.table)
                        .set_item(Some(
                            payment_to_item(&created, shared::store::open_index::OpenShards::DEFAULT).unwrap(),
                        ))
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .transact_items(
            TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(&ctx.table)
                        .set_item(Some(event_to_item(&event).unwrap()))
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    old_form_write(
        ctx,
        &created,
        &fixtures::observe(Channel::Sync, fixtures::requires_action()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_record_forms_are_relayed_once_in_order_through_the_templates_filter() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let publisher = Publisher::new(function_sqs_client("outbox-relay", None), &queues.queue_url)
        .with_history(ctx.store_for("outbox-relay"));

    // Written before the deploy and finished after it: v1, v2 event items; v3, v4 payment records.
    let mixed = old_form_payment(&ctx, "pay_mixed").await;
    // Only the older form (v1, v2, v3), and only the new form (v1, v2, v3).
    let old = old_form_payment(&ctx, "pay_old").await;
    old_form_write(&ctx, &old, &fixtures::webhook("evt_old", 10, Outcome::Succeeded)).await;
    let new: PaymentId = ctx
        .store
        .create(fixtures::new_payment("pay_new", 1000))
        .await
        .unwrap()
        .id;
    let lease = ctx.leases.acquire(&ctx.read(&new).await).await.unwrap();
    let obs = fixtures::observe(Channel::Sync, fixtures::requires_action());
    ctx.store.finalize(&new, &obs, lease.as_ref()).await.unwrap();
    // A change that moves no version (recovery deferring the open payment) and a lease: filtered out.
    shared::store::open_index::defer(&ctx.client, &ctx.table, shared::keys::payment(&new), 1)
        .await
        .unwrap();
    let obs = fixtures::webhook("evt_new", 10, Outcome::Succeeded);
    ctx.store.finalize(&new, &obs, None).await.unwrap();
    ctx.store
        .finalize(&mixed.id, &fixtures::webhook("evt_mixed", 10, Outcome::Succeeded), None)
        .await
        .unwrap();
    let refund = fixtures::webhook("evt_mixed_refund", 20, fixtures::refunded(400, false));
    ctx.store.finalize(&mixed.id, &refund, None).await.unwrap();

    let filters = outbox_filters();
    let mut pump = StreamPump::for_table(&ctx.client, function_streams_client("outbox-relay"), &ctx.table)
        .await
        .unwrap();
    let delivered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for _ in 0..10 {
        let n = pump
            .poll_once(|mut batch: StreamEvent| {
                // What the mapping hands the function: the records one of its filters passes.
                batch.records.retain(|r| {
                    let record = serde_json::to_value(r).unwrap();
                    filters.iter().any(|f| f.matches(&record))
                });
                let (publisher, delivered) = (&publisher, delivered.clone());
                async move {
                    for r in &batch.records {
                        delivered.lock().unwrap().push(r.event_name.clone());
                    }
                    relay(publisher, &batch).await
                }
            })
            .await
            .unwrap();
        if n == 0 {
            break;
        }
    }
    // Ten transitions, ten records: the version-less change, the leases, the history items the relay wrote
    // never reached the function.
    assert_eq!(delivered.lock().unwrap().len(), 10, "{:?}", delivered.lock().unwrap());

    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, Recording);
    let report = drain(&sqs, &queues.queue_url, &consumer, None).await;
    assert_eq!(
        (report.applied, report.failed, report.held_back),
        (10, 0, 0),
        "{report:?}"
    );
    // The history reads whole from the table as the relay left it: event items of both kinds (the older
    // writer's, the relay's archive) and the event the payment carries.
    for (id, count) in [(&mixed.id, 4), (&old.id, 3), (&new, 3)] {
        let events = ctx.store.events(id).await.unwrap();
        let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
        assert_eq!(versions, (1..=count).collect::<Vec<u64>>(), "{id}");
    }
    assert_applied_once_in_order(&ctx, &[mixed.id.clone(), old.id.clone(), new.clone()]).await;
}
