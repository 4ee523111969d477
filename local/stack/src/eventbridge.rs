//! Stripe events through Amazon EventBridge, locally (when `STRIPE_EVENT_SOURCE` is set): the Stripe events
//! queue and its DLQ created from the template, polled into `webhook-eventbridge`'s handler (the event source
//! mapping's stand-in, ReportBatchItemFailures honoured). What the bus delivers to the queue is put there by
//! the simulator through `local_dev::eventbridge::Bus` (the partner source, the bus and the rule).

use crate::clients::FunctionClients;
use aws_lambda_events::event::sqs::SqsEvent;
use local_dev::sqs_poller::SqsPoller;
use shared::telemetry::ErrorChain;
use shared::Env;
use std::time::Duration;
use tracing::error;
use webhook_intake::eventbridge::{Settings, StripeBridge};

/// The function's timeout in `infra/template.yaml` (25 s) less the answer margin.
const TIMEOUT: Duration = Duration::from_secs(23);

/// Creates the queue, builds the function on its own clients, and polls until the process ends; nothing when
/// `STRIPE_EVENT_SOURCE` is not set.
pub async fn start(clients: &FunctionClients, env: &Env, table: &str) -> Result<(), crate::Error> {
    if env.optional("STRIPE_EVENT_SOURCE").is_none() {
        return Ok(());
    }
    let bridge = StripeBridge::build(&Settings::from_env(env)?, clients.function("webhook-eventbridge"))?;
    let sqs = aws_sdk_sqs::Client::new(&clients.sdk());
    let (queue, dlq) = local_dev::queues::create_stripe_events(&sqs, table).await;
    println!("eventbridge: the simulator's events -> {queue} -> webhook-eventbridge (DLQ {dlq})");
    let mut poller = SqsPoller::new(clients.sqs("webhook-eventbridge"), &queue);
    poller.visibility_timeout = 5;
    tokio::spawn(async move {
        loop {
            let bridge = &bridge;
            let polled = poller
                .poll_once(|batch: SqsEvent| async move {
                    let deadline = tokio::time::Instant::now() + TIMEOUT;
                    match bridge.invoke(batch, deadline).await {
                        Ok(answer) => answer,
                        Err(never) => match never {},
                    }
                })
                .await;
            match polled {
                Ok(n) if n > 0 => continue,
                Ok(_) => {}
                Err(e) => error!(error = %ErrorChain(e.as_ref()), "Stripe events queue poll failed; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    Ok(())
}
