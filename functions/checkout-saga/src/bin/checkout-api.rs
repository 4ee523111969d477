//! Lambda entry point of the checkout API (HTTP API, IAM-authorized).

use lambda_http::Error;
use shared::http::CallerGuard;
use shared::lambda::{serve_guarded, ColdStart};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let guard = CallerGuard::from(&start.env)?;
    let runner = checkout_saga::runner_from_env(&start.sdk, start.dynamodb(), &start.config, &start.env).await?;
    serve_guarded(guard, |req| checkout_saga::api::handle(&runner, req)).await
}
