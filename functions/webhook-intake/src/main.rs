//! Lambda entry point: settings, secrets and clients once per cold start, then the handler.

use lambda_http::{run, service_fn, Error};
use shared::lambda::ColdStart;
use webhook_intake::{handle, App, Settings};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let app = App::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    run(service_fn(|req| handle(&app, req))).await
}
