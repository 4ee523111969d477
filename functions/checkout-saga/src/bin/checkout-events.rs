//! Lambda entry point of the saga's inbox: payment events from the FIFO queue (ReportBatchItemFailures),
//! applied to the order projection exactly once, then the waiting sagas resumed.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use order_projection::OrderProjection;
use shared::consumer::Consumer;
use shared::lambda::ColdStart;
use shared::telemetry;

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let dynamodb = start.dynamodb();
    let runner = checkout_saga::runner_from_env(&start.sdk, dynamodb.clone(), &start.config, &start.env).await?;
    let consumer = Consumer::new(dynamodb, &start.config.table_name, OrderProjection);
    run(service_fn(|event: LambdaEvent<SqsEvent>| {
        let (consumer, runner) = (&consumer, &runner);
        async move {
            let deadline = shared::clock::invocation_deadline(event.context.deadline, shared::clock::ANSWER_MARGIN);
            let response = checkout_saga::events::handle(consumer, runner, event.payload, deadline).await;
            // Lambda freezes the process after the answer: export this invocation's spans now.
            telemetry::flush();
            Ok::<_, Error>(response)
        }
    }))
    .await
}
