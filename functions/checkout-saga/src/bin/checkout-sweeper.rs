//! Lambda entry point of the saga sweeper (EventBridge schedule): resumes sagas open for longer than
//! `SAGA_STUCK_AFTER_SECONDS` (default 60); each run writes `SweeperLagSeconds` and
//! `OldestOpenSagaAgeSeconds` (EMF). Invoked with `{"resume": {"order_id": ...}}` it resumes that one saga
//! (`paymentsctl escalations retry`; `checkout_saga::resume`).

use checkout_saga::{CheckoutSweeper, Settings};
use lambda_runtime::Error;
use shared::lambda::{serve_event, ColdStart};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let sweeper = CheckoutSweeper::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    serve_event(|event: serde_json::Value, deadline| sweeper.invoke(event, deadline)).await
}
