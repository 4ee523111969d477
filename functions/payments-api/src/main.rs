//! Lambda entry point: the settings and the DynamoDB client once per cold start, then the handler behind the
//! caller guard.

use lambda_http::Error;
use payments_api::{handle, App, Settings};
use shared::lambda::{serve_guarded, ColdStart};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let app = App::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    serve_guarded(&app.guard, |req| handle(&app, req)).await
}
