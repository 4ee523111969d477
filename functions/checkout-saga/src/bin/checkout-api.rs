//! Lambda entry point of the checkout API (HTTP API, IAM-authorized).

use checkout_saga::{CheckoutApi, Settings};
use lambda_http::Error;
use shared::lambda::{serve_guarded, ColdStart};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let api = CheckoutApi::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    serve_guarded(&api.guard, |req| checkout_saga::api::handle(&api.runner, req)).await
}
