//! Lambda entry point of the outbox relay: the SQS client once per cold start, then the relay.

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use outbox_relay::{relay, Publisher};
use shared::{aws, telemetry, Env};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let env = Env::process();
    // The stage every metric carries (`UnsendableEvents`); a Lambda without one fails its start.
    shared::metrics::init_stage(&env)?;
    let queue_url = env.required("QUEUE_URL")?;
    let mut publisher = Publisher::new(aws_sdk_sqs::Client::new(&aws::sdk_config().await), queue_url);
    // Where notices of events SQS would refuse are parked (the relay-failures queue, alarmed).
    if let Some(parking) = env.optional("RELAY_FAILURES_QUEUE_URL") {
        publisher = publisher.with_parking(parking);
    }
    run(service_fn(|event: LambdaEvent<Event>| {
        let publisher = &publisher;
        async move {
            let response = relay(publisher, &event.payload).await;
            // Lambda freezes the process after the answer: export this invocation's spans now.
            telemetry::flush();
            Ok::<_, Error>(response)
        }
    }))
    .await
}
