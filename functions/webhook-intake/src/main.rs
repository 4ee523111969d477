//! Lambda entry point: configuration, secrets and clients once per cold start, then the handler.

use lambda_http::{run, service_fn, Error};
use shared::{aws, telemetry, Config, Leases, PaymentStore};
use webhook_intake::providers::Providers;
use webhook_intake::{handle, App, IntakeSettings};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::sdk_config().await;
    let client = aws::dynamodb_client(&sdk);
    let app = App {
        store: PaymentStore::new(client.clone(), &config.table_name),
        leases: Leases::new(client, &config.table_name, config.lease),
        providers: Providers::from_env(&sdk).await?,
        settings: IntakeSettings::from_env()?,
    };
    run(service_fn(|req| handle(&app, req))).await
}
