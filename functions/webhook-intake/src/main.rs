//! Lambda entry point: configuration, secrets and clients once per cold start, then the handler.

use lambda_http::{run, service_fn, Error};
use shared::lambda::ColdStart;
use webhook_intake::{handle, App};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let app = App::from_env(&start.sdk, start.dynamodb(), &start.config, &start.env).await?;
    run(service_fn(|req| handle(&app, req))).await
}
