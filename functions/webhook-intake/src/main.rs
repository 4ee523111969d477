//! Lambda entry point: configuration, secrets and clients once per cold start, then the handler.

use lambda_http::{run, service_fn, Error};
use shared::{aws, telemetry, Config, Env};
use webhook_intake::{handle, App};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let env = Env::process();
    let config = Config::from(&env)?;
    let sdk = aws::sdk_config().await;
    let client = aws::dynamodb_client(&sdk);
    let app = App::from_env(&sdk, client, &config, &env).await?;
    run(service_fn(|req| handle(&app, req))).await
}
