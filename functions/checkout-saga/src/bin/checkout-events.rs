//! Lambda entry point of the saga's inbox: payment events from the FIFO queue (ReportBatchItemFailures),
//! applied to the order projection exactly once, then the waiting sagas resumed.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use order_projection::OrderProjection;
use shared::consumer::Consumer;
use shared::{aws, telemetry, Config, Env};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let env = Env::process();
    let config = Config::from(&env)?;
    let sdk = aws::sdk_config().await;
    let dynamodb = aws::dynamodb_client(&sdk);
    let runner = checkout_saga::runner_from_env(&sdk, dynamodb.clone(), &config, &env).await?;
    let consumer = Consumer::new(dynamodb, &config.table_name, OrderProjection);
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
