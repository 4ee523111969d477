//! Lambda entry point of the saga's inbox: payment events from the FIFO queue (ReportBatchItemFailures),
//! applied to the order projection exactly once, then the waiting sagas resumed.

use checkout_saga::{CheckoutEvents, Settings};
use lambda_runtime::Error;
use shared::lambda::{serve_event, ColdStart};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let inbox = CheckoutEvents::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    serve_event(|batch, deadline| inbox.invoke(batch, deadline)).await
}
