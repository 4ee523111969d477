//! Lambda entry point of the order projection consumer (SQS FIFO trigger, ReportBatchItemFailures).

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use order_projection::OrderProjection;
use shared::consumer::Consumer;
use shared::{aws, telemetry, Config};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let config = Config::from_env()?;
    let consumer = Consumer::new(
        aws::dynamodb_client(&aws::sdk_config().await),
        config.table_name,
        OrderProjection,
    );
    run(service_fn(|event: LambdaEvent<SqsEvent>| {
        let consumer = &consumer;
        async move { Ok::<_, Error>(consumer.handle(event.payload).await) }
    }))
    .await
}
