//! Lambda entry point: configuration and the DynamoDB client once per cold start, then the handler.

use lambda_http::Error;
use shared::http::CallerGuard;
use shared::lambda::{serve_guarded, ColdStart};
use shared::PaymentStore;
use payments_api::{handle, App};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let guard = CallerGuard::from(&start.env)?;
    let app = App::from_env(PaymentStore::new(start.dynamodb(), start.config.table_name), &start.env)?;
    serve_guarded(guard, |req| handle(&app, req)).await
}
