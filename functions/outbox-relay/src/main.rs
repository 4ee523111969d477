//! Lambda entry point of the outbox relay: its settings and SQS client once per cold start, then the relay.

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::Error;
use outbox_relay::{handle, Publisher, Settings};
use shared::lambda::{serve_event, ColdStart};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let publisher = Publisher::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    serve_event(|event: Event, _| handle(&publisher, event)).await
}
