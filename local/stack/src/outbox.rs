//! The outbox running locally: stream pump -> relay -> SQS FIFO -> the checkout saga's inbox (order
//! projection, then the waiting sagas) in a loop; and the saga sweeper and reconciler on short timers.

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::sqs::SqsEvent;
use checkout_saga::runner::Runner;
use local_dev::queues::Queues;
use local_dev::sqs_poller::SqsPoller;
use local_dev::stream_pump::StreamPump;
use order_projection::OrderProjection;
use outbox_relay::{relay, Publisher};
use shared::consumer::Consumer;
use shared::psp::GuardedStripe;
use shared::recovery;
use shared::telemetry::ErrorChain;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info};

/// The saga inbox function's timeout in `infra/template.yaml` (25 s) less the answer margin.
const CONSUMER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(23);

pub async fn run(
    sdk: aws_config::SdkConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    table: String,
    queues: Queues,
    checkout: Option<Arc<Runner<GuardedStripe>>>,
) {
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    info!(queue = %queues.queue_url, dlq = %queues.dlq_url, "outbox queues ready");
    println!(
        "outbox: stream pump -> relay -> {} -> order projection",
        queues.queue_url
    );
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let mut pump = match StreamPump::for_table(&dynamodb, streams, &table).await {
        Ok(pump) => pump,
        Err(e) => {
            error!(error = %ErrorChain(e.as_ref()), "no stream on the table; the outbox does not run");
            return;
        }
    };
    let publisher = Publisher::new(sqs.clone(), &queues.queue_url).with_parking(&queues.relay_failures_url);
    let consumer = Consumer::new(dynamodb, &table, OrderProjection);
    let mut poller = SqsPoller::new(sqs, &queues.queue_url);
    poller.visibility_timeout = 5;
    loop {
        let publisher = &publisher;
        let relayed = pump
            .poll_once(|event: StreamEvent| async move { relay(publisher, &event).await })
            .await;
        if let Err(e) = relayed {
            error!(error = %ErrorChain(e.as_ref()), "stream pump failed; retrying");
        }
        let (consumer, checkout) = (&consumer, &checkout);
        let consumed = poller
            .poll_once(|event: SqsEvent| async move {
                match checkout {
                    // As in AWS: the consumer's function timeout bounds the resumes.
                    Some(runner) => {
                        let deadline = tokio::time::Instant::now() + CONSUMER_TIMEOUT;
                        checkout_saga::events::handle(consumer, runner, event, deadline).await
                    }
                    None => consumer.handle(event).await,
                }
            })
            .await;
        match consumed {
            Ok(n) if n > 0 => continue,
            Ok(_) => {}
            Err(e) => {
                error!(error = %ErrorChain(e.as_ref()), "SQS poll failed; retrying");
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The sweeper (every 5 s, sagas open for 10 s) and the reconciler (every 5 s, with the runner's recovery
/// settings): the local stand-ins for their EventBridge schedules.
pub async fn schedules(runner: Arc<Runner<GuardedStripe>>) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        match checkout_saga::sweeper::sweep(
            &runner,
            Duration::from_secs(10),
            100,
            tokio::time::Instant::now() + CONSUMER_TIMEOUT,
        )
        .await
        {
            Ok(report) if report.found > 0 => info!(?report, "saga sweep"),
            Ok(_) => {}
            Err(e) => error!(error = %ErrorChain(&e), "saga sweep failed"),
        }
        match runner
            .recovery
            .run(tokio::time::Instant::now() + CONSUMER_TIMEOUT)
            .await
        {
            Ok(report) if report.found > 0 => shared::metrics::emit(&recovery::emf(&report, shared::clock::now_ms())),
            Ok(_) => {}
            Err(e) => error!(error = %ErrorChain(&e), "recovery run failed"),
        }
    }
}
