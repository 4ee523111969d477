//! The outbox running locally: stream pump -> relay -> SQS FIFO -> the checkout saga's inbox (order
//! projection, then the waiting sagas) in a loop; and the saga sweeper, the reconciler and the webhook
//! catch-up on short timers.

use crate::clients::FunctionClients;
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use aws_lambda_events::event::sqs::SqsEvent;
use checkout_saga::{CheckoutEvents, CheckoutSweeper};
use local_dev::queues::Queues;
use local_dev::sqs_poller::SqsPoller;
use local_dev::stream_pump::StreamPump;
use order_projection::OrderProjection;
use outbox_relay::{relay, Publisher};
use psp::PspSet;
use reconciler::Recovery;
use shared::consumer::Consumer;
use shared::telemetry::ErrorChain;
use std::time::Duration;
use tracing::{error, info};
use webhook_intake::catchup::CatchUp;

/// The saga inbox function's timeout in `infra/template.yaml` (25 s) less the answer margin.
const CONSUMER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(23);

/// `dynamodb` is the stack's own client (it finds the table's stream); the relay (`publisher`, built as its
/// function) and its stream reads run on outbox-relay's clients, the consumer, the saga's resumes
/// (`checkout`) and the queue's reads on checkout-events'.
pub async fn run(
    clients: FunctionClients,
    dynamodb: aws_sdk_dynamodb::Client,
    table: String,
    queues: Queues,
    publisher: Publisher,
    checkout: Option<CheckoutEvents>,
) {
    info!(queue = %queues.queue_url, dlq = %queues.dlq_url, "outbox queues ready");
    println!(
        "outbox: stream pump -> relay -> {} -> order projection",
        queues.queue_url
    );
    let streams = clients.streams("outbox-relay");
    let mut pump = match StreamPump::for_table(&dynamodb, streams, &table).await {
        Ok(pump) => pump,
        Err(e) => {
            error!(error = %ErrorChain(e.as_ref()), "no stream on the table; the outbox does not run");
            return;
        }
    };
    let consumer = Consumer::new(clients.dynamodb("checkout-events"), &table, OrderProjection);
    let mut poller = SqsPoller::new(clients.sqs("checkout-events"), &queues.queue_url);
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
                    Some(inbox) => {
                        let deadline = tokio::time::Instant::now() + CONSUMER_TIMEOUT;
                        checkout_saga::events::handle(&inbox.consumer, &inbox.runner, event, deadline).await
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

/// The sweeper (every 5 s, sagas open for `SAGA_STUCK_AFTER_SECONDS`, 10 s here), the reconciler (every 5 s, with the local recovery
/// settings) and the webhook catch-up (every 5 s): the local stand-ins for their EventBridge schedules.
pub async fn schedules(sweeper: CheckoutSweeper, reconciler: Recovery<PspSet>, catchup: CatchUp) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        match sweeper.sweep(tokio::time::Instant::now() + CONSUMER_TIMEOUT).await {
            Ok(report) if report.found > 0 => info!(?report, "saga sweep"),
            Ok(_) => {}
            Err(e) => error!(error = %ErrorChain(&e), "saga sweep failed"),
        }
        match reconciler.run(tokio::time::Instant::now() + CONSUMER_TIMEOUT).await {
            Ok(report) if report.found > 0 => shared::metrics::emit(&reconciler::emf(&report, shared::clock::now_ms())),
            Ok(_) => {}
            Err(e) => error!(error = %ErrorChain(&e), "recovery run failed"),
        }
        match catchup.run(tokio::time::Instant::now() + CONSUMER_TIMEOUT).await {
            Ok(report) if report.applied > 0 => info!(?report, "webhook catch-up applied lost events"),
            Ok(_) => {}
            Err(e) => error!(error = %ErrorChain(&e), "webhook catch-up run failed"),
        }
    }
}
