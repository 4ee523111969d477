//! End to end on real local parts: DynamoDB Local -> its stream -> stream pump -> relay -> SQS emulator
//! (moto) -> consumer. Every transition arrives and is applied once, in version order per payment, with
//! duplicates injected at every hop and an SQS failure for one entry.

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use integration_tests::{
    fresh_queues, function_sqs_client, function_streams_client, sqs_client, SqsEntryFaults, TestContext,
};
use local_lambda::sqs_poller::SqsPoller;
use local_lambda::stream_pump::StreamPump;
use order_projection::OrderProjection;
use outbox_relay::{relay, replay_payment, Publisher};
use payments_core::fixtures;
use serde_json::json;
use shared::consumer::{BatchReport, Consumer, ConsumerError, Projection};
use shared::{Channel, Outcome, PaymentEvent, PaymentId};
use std::collections::HashMap;
use std::time::Duration;

/// The order projection plus a record per applied event that may be written only once: applying an event
/// twice would fail its transaction and show up as a failure.
pub(crate) struct Recording;

impl Projection for Recording {
    fn name(&self) -> &str {
        "recording"
    }
    fn effects(&self, table: &str, e: &PaymentEvent) -> Result<Vec<TransactWriteItem>, ConsumerError> {
        let mut items = OrderProjection.effects(table, e)?;
        let record = Put::builder()
            .table_name(table)
            .item("pk", AttributeValue::S(format!("APPLIED#{}", e.payment_id)))
            .item("sk", AttributeValue::S(format!("{:010}", e.version)))
            .item("kind", AttributeValue::S(e.kind.as_str().into()))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|err| ConsumerError::Effect(err.into()))?;
        items.push(TransactWriteItem::builder().put(record).build());
        Ok(items)
    }
}

/// Polls until the queue stays empty, handing each batch to the consumer (the SQS event source mapping's
/// part). `lose_every_nth_ack`: pretend some deletes were lost, so SQS redelivers after the visibility timeout.
pub(crate) async fn drain<P: Projection>(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    consumer: &Consumer<P>,
    lose_every_nth_ack: Option<usize>,
) -> BatchReport {
    let mut poller = SqsPoller::new(sqs.clone(), queue_url);
    poller.lose_every_nth_ack = lose_every_nth_ack;
    let total = std::sync::Mutex::new(BatchReport::default());
    let mut empty_rounds = 0;
    while empty_rounds < 4 {
        let received = poller
            .poll_once(|event: SqsEvent| async {
                let event = event;
                let (response, report) = consumer.process(&event.records).await;
                let mut t = total.lock().unwrap();
                t.applied += report.applied;
                t.skipped += report.skipped;
                t.held_back += report.held_back;
                t.failed += report.failed;
                response
            })
            .await
            .unwrap();
        if received == 0 {
            empty_rounds += 1;
            tokio::time::sleep(Duration::from_millis(700)).await;
        } else {
            empty_rounds = 0;
        }
    }
    total.into_inner().unwrap()
}

/// Among the outbox records of `event`: if the first batch (the first event of each of up to ten payments)
/// fails at entry `n`, the index of the first record that is not confirmed.
fn first_unconfirmed_when_failing(event: &StreamEvent, n: usize) -> usize {
    let mut first_batch: Vec<(String, usize)> = Vec::new();
    let outbox = event
        .records
        .iter()
        .filter(|r| shared::outbox::is_outbox_record(&r.event_name, &r.change.new_image));
    let mut count = 0;
    for (i, r) in outbox.enumerate() {
        count = i + 1;
        let Some(serde_dynamo::AttributeValue::S(p)) = r.change.new_image.get("payment_id") else {
            continue;
        };
        if first_batch.len() < 10 && !first_batch.iter().any(|(q, _)| q == p) {
            first_batch.push((p.clone(), i));
        }
    }
    let confirmed: Vec<usize> = first_batch
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != n)
        .map(|(_, (_, i))| *i)
        .collect();
    (0..count)
        .find(|i| !confirmed.contains(i))
        .expect("an unconfirmed record")
}

async fn pump_all(pump: &mut StreamPump, publisher: &Publisher, relay_twice: bool) -> usize {
    let mut total = 0;
    for _ in 0..10 {
        let n = pump
            .poll_once(|event: StreamEvent| async move {
                let response = relay(publisher, &event).await;
                if relay_twice {
                    // The same records relayed again (a retried invocation): FIFO dedup and the consumer absorb it.
                    relay(publisher, &event).await;
                }
                response
            })
            .await
            .unwrap();
        total += n;
        if n == 0 {
            break;
        }
    }
    total
}

async fn burst(ctx: &TestContext, payments: usize) -> Vec<PaymentId> {
    let mut ids = Vec::new();
    for p in 0..payments {
        let id = ctx
            .store
            .create(fixtures::new_payment(&format!("pay_burst_{p}"), 1000))
            .await
            .unwrap()
            .id;
        let lease = ctx.leases.acquire(&ctx.read(&id).await).await.unwrap();
        ctx.store
            .finalize(
                &id,
                &fixtures::observe(Channel::Sync, fixtures::requires_action()),
                lease.as_ref(),
            )
            .await
            .unwrap();
        // Sync and webhook race on the outcome; the webhook is delivered twice.
        let outcome = if p % 3 == 0 {
            fixtures::failed()
        } else {
            Outcome::Succeeded
        };
        let tasks: Vec<_> = [
            fixtures::observe(Channel::Sync, outcome.clone()),
            fixtures::webhook(&format!("evt_{p}"), 10, outcome.clone()),
            fixtures::webhook(&format!("evt_{p}"), 10, outcome),
            fixtures::webhook(&format!("evt_{p}_late"), 5, Outcome::Processing),
        ]
        .into_iter()
        .map(|obs| {
            let (store, id) = (ctx.store.clone(), id.clone());
            tokio::spawn(async move { store.finalize(&id, &obs, None).await.unwrap() })
        })
        .collect();
        for t in tasks {
            t.await.unwrap();
        }
        if p % 3 != 0 {
            ctx.store
                .finalize(
                    &id,
                    &fixtures::webhook(&format!("evt_{p}_refund"), 20, fixtures::refunded(400, false)),
                    None,
                )
                .await
                .unwrap();
        }
        ids.push(id);
    }
    ids
}

pub(crate) async fn assert_applied_once_in_order(ctx: &TestContext, ids: &[PaymentId]) {
    for id in ids {
        let events = ctx.events(id).await.unwrap();
        let applied = ctx
            .client
            .query()
            .table_name(&ctx.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(format!("APPLIED#{id}")))
            .send()
            .await
            .unwrap();
        let versions: Vec<u64> = applied
            .items()
            .iter()
            .map(|i| i["sk"].as_s().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            versions,
            events.iter().map(|e| e.version).collect::<Vec<_>>(),
            "{id}: every event applied once"
        );
        let payment = ctx.store.get(id).await.unwrap().unwrap();
        let projection = ctx
            .client
            .get_item()
            .table_name(&ctx.table)
            .set_key(Some(order_projection::key(&payment.order_id, id)))
            .send()
            .await
            .unwrap();
        let item = projection.item().expect("projection");
        assert_eq!(item["payment_status"].as_s().unwrap(), payment.status.as_str(), "{id}");
        assert_eq!(
            item["payment_version"].as_n().unwrap(),
            &payment.version.to_string(),
            "{id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_sqs_failure_for_one_entry_reports_it_and_every_later_record_and_nothing_is_lost() {
    shared::telemetry::init();
    let ctx = TestContext::new().await;
    let faults = SqsEntryFaults::new();
    let sqs = sqs_client(Some(faults.clone()));
    let queues = fresh_queues(&sqs).await;
    let publisher = Publisher::new(
        function_sqs_client("outbox-relay", Some(faults.clone())),
        &queues.queue_url,
    )
    .with_history(ctx.store_for("outbox-relay"));
    let ids = burst(&ctx, 6).await;

    let mut pump = StreamPump::for_table(&ctx.client, function_streams_client("outbox-relay"), &ctx.table)
        .await
        .unwrap();
    faults.fail_entry_once(2);
    let first_answer = std::sync::Arc::new(std::sync::Mutex::new(None));
    pump.poll_once(|event: StreamEvent| {
        let publisher = &publisher;
        let first = first_answer.clone();
        async move {
            let response = relay(publisher, &event).await;
            let mut first = first.lock().unwrap();
            if first.is_none() {
                // Positions of the outbox records in this batch, and what the relay reported.
                let outbox: Vec<usize> = event
                    .records
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| shared::outbox::is_outbox_record(&r.event_name, &r.change.new_image))
                    .map(|(i, _)| i)
                    .collect();
                let reported: Vec<String> = response
                    .batch_item_failures
                    .iter()
                    .filter_map(|f| f.item_identifier.clone())
                    .collect();
                // The first SendMessageBatch carries the first event of each payment; its third entry fails.
                // Everything from the first outbox record not confirmed on must be reported.
                let failed_event = first_unconfirmed_when_failing(&event, 2);
                let expected: Vec<String> = event.records[outbox[failed_event]..]
                    .iter()
                    .filter_map(|r| r.change.sequence_number.clone())
                    .collect();
                *first = Some((reported, expected));
            }
            response
        }
    })
    .await
    .unwrap();
    assert_eq!(faults.injected(), 1);
    let (reported, expected) = first_answer.lock().unwrap().take().unwrap();
    assert!(!expected.is_empty());
    assert_eq!(
        reported, expected,
        "the failed record and every later record are reported"
    );

    // The stream redelivers from the failed record; everything reaches the queue and the consumer.
    pump_all(&mut pump, &publisher, false).await;
    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, Recording);
    let report = drain(&sqs, &queues.queue_url, &consumer, None).await;
    assert_eq!(report.failed, 0);
    assert_applied_once_in_order(&ctx, &ids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_with_races_and_duplicates_at_every_hop_is_applied_exactly_once_in_order() {
    let ctx = TestContext::new().await;
    let faults = SqsEntryFaults::new();
    let sqs = sqs_client(Some(faults.clone()));
    let queues = fresh_queues(&sqs).await;
    let publisher = Publisher::new(
        function_sqs_client("outbox-relay", Some(faults.clone())),
        &queues.queue_url,
    )
    .with_history(ctx.store_for("outbox-relay"));
    let ids = burst(&ctx, 12).await;
    let total_events: usize = {
        let mut n = 0;
        for id in &ids {
            n += ctx.events(id).await.unwrap().len();
        }
        n
    };

    let mut pump = StreamPump::for_table(&ctx.client, function_streams_client("outbox-relay"), &ctx.table)
        .await
        .unwrap();
    faults.fail_entry_once(7);
    let relayed = pump_all(&mut pump, &publisher, true).await;
    assert!(
        relayed >= total_events,
        "the stream carried every event item ({relayed} records, {total_events} events)"
    );
    // An operator replays two payments on top: consumers absorb it.
    replay_payment(&ctx.store, &publisher, &ids[0]).await.unwrap();
    replay_payment(&ctx.store, &publisher, &ids[5]).await.unwrap();

    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, Recording);
    // Every 5th acknowledgement is lost: SQS redelivers after the visibility timeout.
    let report = drain(&sqs, &queues.queue_url, &consumer, Some(5)).await;
    assert_eq!(
        dlq_depth(&sqs, &queues.dlq_url).await,
        0,
        "nothing waited in a FIFO group until the DLQ"
    );
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(report.applied as usize, total_events, "{report:?}");
    assert!(
        report.skipped > 0,
        "duplicates reached the consumer and were skipped: {report:?}"
    );
    assert_applied_once_in_order(&ctx, &ids).await;
    for id in &ids {
        let payment = ctx.store.get(id).await.unwrap().unwrap();
        assert_eq!(
            consumer.applied_version(&payment.order_id, id).await.unwrap(),
            payment.version
        );
    }

    // Replaying the whole time range (the operator's tool when the stream's 24 h are gone) changes nothing.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let replayed = outbox_relay::replay_range(&ctx.store, &publisher, 0, shared::clock::now_ms())
        .await
        .unwrap();
    assert_eq!(replayed, total_events);
    let again = drain(&sqs, &queues.queue_url, &consumer, None).await;
    assert_eq!((again.applied, again.failed), (0, 0), "{again:?}");
    assert_applied_once_in_order(&ctx, &ids).await;
}

async fn dlq_depth(sqs: &aws_sdk_sqs::Client, dlq_url: &str) -> usize {
    let out = sqs
        .get_queue_attributes()
        .queue_url(dlq_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    out.attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A message that ended in the DLQ is moved back and applied once; redriving twice is safe.
#[tokio::test]
async fn redriving_the_dlq_applies_its_messages_once() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_dlq", 1000))
        .await
        .unwrap()
        .id;
    let events = ctx.events(&id).await.unwrap();
    // The event landed in the DLQ (a consumer kept failing on it).
    Publisher::new(sqs.clone(), &queues.dlq_url)
        .publish(&events)
        .await
        .unwrap();
    assert_eq!(dlq_depth(&sqs, &queues.dlq_url).await, 1);
    let moved = outbox_relay::redrive_dlq(&sqs, &queues.dlq_url, &queues.queue_url)
        .await
        .unwrap();
    assert_eq!(moved, 1);
    assert_eq!(
        outbox_relay::redrive_dlq(&sqs, &queues.dlq_url, &queues.queue_url)
            .await
            .unwrap(),
        0
    );
    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, Recording);
    let report = drain(&sqs, &queues.queue_url, &consumer, None).await;
    assert_eq!((report.applied, report.failed), (1, 0));
    assert_eq!(dlq_depth(&sqs, &queues.dlq_url).await, 0);
    assert_applied_once_in_order(&ctx, &[id]).await;
}

#[tokio::test]
async fn a_gap_is_held_back_never_skipped_and_alarmed_when_it_persists() {
    let ctx = TestContext::new().await;
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_gap", 1000))
        .await
        .unwrap()
        .id;
    ctx.store
        .finalize(&id, &fixtures::observe(Channel::Sync, Outcome::Processing), None)
        .await
        .unwrap();
    ctx.store
        .finalize(&id, &fixtures::observe(Channel::Sync, Outcome::Succeeded), None)
        .await
        .unwrap();
    let events = ctx.events(&id).await.unwrap();
    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, Recording);
    let message = |e: &PaymentEvent, receives: u32, n: usize| -> SqsMessage {
        serde_json::from_value(
            json!({ "messageId": format!("m{n}"), "body": shared::outbox::message_body(e),
            "attributes": { "MessageGroupId": e.payment_id.as_str(), "ApproximateReceiveCount": receives.to_string() },
            "messageAttributes": {} }),
        )
        .unwrap()
    };
    // Version 1 applied; version 3 arrives before 2: held back, and so is everything after it in its group.
    let (r, report) = consumer
        .process(&[
            message(&events[0], 1, 0),
            message(&events[2], 1, 1),
            message(&events[1], 1, 2),
        ])
        .await;
    assert_eq!((report.applied, report.held_back), (1, 1));
    assert_eq!(
        r.batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect::<Vec<_>>(),
        vec!["m1", "m2"]
    );
    assert_eq!(consumer.applied_version(&events[0].order_id, &id).await.unwrap(), 1);
    // It keeps coming back without its predecessor: alarmed.
    let (_, report) = consumer.process(&[message(&events[2], 6, 3)]).await;
    assert_eq!((report.held_back, report.gap_persistent), (1, 1));
    // The predecessor arrives: 2 then 3 apply; a redelivered 2 is skipped.
    let (r, report) = consumer
        .process(&[
            message(&events[1], 2, 4),
            message(&events[2], 7, 5),
            message(&events[1], 3, 6),
        ])
        .await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!((report.applied, report.skipped), (2, 1));
    assert_eq!(consumer.applied_version(&events[0].order_id, &id).await.unwrap(), 3);
}

#[test]
fn outbox_records_are_transitions_of_payments_and_inserted_event_items() {
    let image = |value: serde_json::Value| -> serde_dynamo::Item { serde_json::from_value(value).unwrap() };
    let payment = |event_version: Option<&str>| {
        let mut v = json!({ "entity": { "S": "payment" }, "version": { "N": "3" } });
        if let Some(ev) = event_version {
            v["event_version"] = json!({ "N": ev });
        }
        image(v)
    };
    let entity = |e: &str| image(json!({ "entity": { "S": e } }));
    let is = shared::outbox::is_outbox_record;
    assert!(is("INSERT", &entity("event")));
    assert!(!is("MODIFY", &entity("event")));
    assert!(!is("INSERT", &entity("history")));
    assert!(is("INSERT", &payment(Some("3"))) && is("MODIFY", &payment(Some("3"))));
    assert!(!is("MODIFY", &payment(None)), "a change that moved no version");
    assert!(!is("MODIFY", &payment(Some("2"))), "a marker left behind");
    assert!(!is("UNKNOWN_TO_SDK_VERSION", &entity("event")));
    assert!(!is("UNKNOWN_TO_SDK_VERSION", &payment(Some("3"))));
    assert!(!is(
        "REMOVE",
        &serde_dynamo::Item::from(HashMap::<String, serde_dynamo::AttributeValue>::new())
    ));
}

/// A poison event in the stream (a reason with U+FFFF, written around the entry points' text rules) is sent
/// made sendable and parked for an operator instead of failing the batch: no record is reported for retry,
/// and the payment's later events still reach the consumer, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poison_event_is_parked_and_the_payments_later_events_still_flow() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let publisher = Publisher::new(function_sqs_client("outbox-relay", None), &queues.queue_url)
        .with_parking(&queues.relay_failures_url)
        .with_history(ctx.store_for("outbox-relay"));
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_poison", 1000))
        .await
        .unwrap()
        .id;
    let poison = Outcome::AttemptFailed {
        reason: "declined\u{FFFF}\u{1}".into(),
        retry_token: None,
    };
    ctx.store
        .finalize(&id, &fixtures::observe(Channel::Sync, poison), None)
        .await
        .unwrap();
    ctx.store
        .finalize(&id, &fixtures::webhook("evt_later", 10, Outcome::Succeeded), None)
        .await
        .unwrap();
    let events = ctx.events(&id).await.unwrap();
    assert_eq!(events.len(), 3);
    assert!(
        shared::outbox::check_sendable(&events[1]).is_err(),
        "the stored event is poison"
    );

    let mut pump = StreamPump::for_table(&ctx.client, function_streams_client("outbox-relay"), &ctx.table)
        .await
        .unwrap();
    let failures = std::sync::Arc::new(std::sync::Mutex::new(0usize));
    for _ in 0..10 {
        let failures = failures.clone();
        let publisher = &publisher;
        let n = pump
            .poll_once(|event: StreamEvent| {
                let failures = failures.clone();
                async move {
                    let response = relay(publisher, &event).await;
                    *failures.lock().unwrap() += response.batch_item_failures.len();
                    response
                }
            })
            .await
            .unwrap();
        if n == 0 {
            break;
        }
    }
    assert_eq!(*failures.lock().unwrap(), 0, "no record is retried");

    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, Recording);
    let report = drain(&sqs, &queues.queue_url, &consumer, None).await;
    assert_eq!((report.applied, report.failed), (3, 0), "{report:?}");
    assert_applied_once_in_order(&ctx, std::slice::from_ref(&id)).await;

    let parked = sqs
        .receive_message()
        .queue_url(&queues.relay_failures_url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let notices: Vec<serde_json::Value> = parked
        .messages()
        .iter()
        .filter_map(|m| m.body().and_then(|b| serde_json::from_str(b).ok()))
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["event_id"], events[1].event_id());
    assert_eq!(notices[0]["problem"], "characters");
}

/// Every message in `queue_url` (read until it stays empty).
async fn all_messages(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Vec<serde_json::Value> {
    let mut found = Vec::new();
    for _ in 0..3 {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        found.extend(
            out.messages()
                .iter()
                .filter_map(|m| m.body().and_then(|b| serde_json::from_str(b).ok())),
        );
    }
    found
}

/// A batch that fails (here: SQS refuses an entry) is retried whole by the stream; the poison event in it
/// gets one notice for the operator, not one per attempt (issue 25 item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poison_event_in_a_retried_batch_is_noticed_once() {
    let ctx = TestContext::new().await;
    let faults = SqsEntryFaults::new();
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    let publisher = Publisher::new(
        function_sqs_client("outbox-relay", Some(faults.clone())),
        &queues.queue_url,
    )
    .with_parking(&queues.relay_failures_url);
    let id = ctx
        .store
        .create(fixtures::new_payment("pay_poison_retry", 1000))
        .await
        .unwrap()
        .id;
    let poison = Outcome::AttemptFailed {
        reason: "declined\u{FFFF}".into(),
        retry_token: None,
    };
    ctx.store
        .finalize(&id, &fixtures::observe(Channel::Sync, poison), None)
        .await
        .unwrap();
    let mut pump = StreamPump::for_table(&ctx.client, function_streams_client("outbox-relay"), &ctx.table)
        .await
        .unwrap();
    // The first SendMessageBatch (the payment's first event) fails: every record is reported and retried.
    faults.fail_entry_once(0);
    // Its first record is the payment's first event, so the first poll accepts nothing; the next one retries.
    let delivered = pump_all(&mut pump, &publisher, false).await + pump_all(&mut pump, &publisher, false).await;
    assert_eq!(faults.injected(), 1);
    assert!(delivered >= 2, "the batch was delivered again: {delivered}");

    let consumer = Consumer::new(ctx.client.clone(), &ctx.table, Recording);
    let report = drain(&sqs, &queues.queue_url, &consumer, None).await;
    assert_eq!((report.applied, report.failed), (2, 0), "{report:?}");
    let notices = all_messages(&sqs, &queues.relay_failures_url).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["version"], 2);
}
