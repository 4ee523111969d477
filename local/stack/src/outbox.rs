//! The outbox running locally: stream pump -> relay -> SQS FIFO -> order projection, in a loop.

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::sqs::SqsEvent;
use local_dev::sqs_poller::SqsPoller;
use local_dev::stream_pump::StreamPump;
use order_projection::OrderProjection;
use outbox_relay::{relay, Publisher};
use shared::consumer::Consumer;
use std::time::Duration;
use tracing::{error, info};

pub async fn run(sdk: aws_config::SdkConfig, dynamodb: aws_sdk_dynamodb::Client, table: String) {
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queues = local_dev::queues::create(&sqs, &table).await;
    info!(queue = %queues.queue_url, dlq = %queues.dlq_url, "outbox queues ready");
    println!(
        "outbox: stream pump -> relay -> {} -> order projection",
        queues.queue_url
    );
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let mut pump = match StreamPump::for_table(&dynamodb, streams, &table).await {
        Ok(pump) => pump,
        Err(e) => {
            error!(error = %e, "no stream on the table; the outbox does not run");
            return;
        }
    };
    let publisher = Publisher::new(sqs.clone(), &queues.queue_url);
    let consumer = Consumer::new(dynamodb, &table, OrderProjection);
    let mut poller = SqsPoller::new(sqs, &queues.queue_url);
    poller.visibility_timeout = 5;
    loop {
        let publisher = &publisher;
        let relayed = pump
            .poll_once(|event: StreamEvent| async move { relay(publisher, &event).await })
            .await;
        if let Err(e) = relayed {
            error!(error = %e, "stream pump failed; retrying");
        }
        let consumer = &consumer;
        let consumed = poller
            .poll_once(|event: SqsEvent| async move { consumer.handle(event).await })
            .await;
        match consumed {
            Ok(n) if n > 0 => continue,
            Ok(_) => {}
            Err(e) => error!(error = %e, "SQS poll failed; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
