//! Lambda entry point of the EventBridge way in: Stripe events from the partner event source's bus, through
//! an SQS queue (ReportBatchItemFailures), applied through the intake's own steps
//! (`webhook_intake::eventbridge`).
//!
//! Configuration: [`webhook_intake::eventbridge::Settings`] (`TABLE_NAME`, `WEBHOOK_PROVIDERS`: its Stripe
//! provider's endpoint checks; `STRIPE_EVENT_SOURCE`, `STRIPE_EVENT_AWS_ACCOUNT`; the intake's settings,
//! lease settings).

use lambda_runtime::Error;
use shared::lambda::{serve_event, ColdStart};
use webhook_intake::eventbridge::{Settings, StripeBridge};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let bridge = StripeBridge::build(&Settings::from_env(&start.env)?, start.clients())?;
    serve_event(|batch, deadline| bridge.invoke(batch, deadline)).await
}
