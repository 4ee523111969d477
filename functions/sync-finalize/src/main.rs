//! Lambda entry point: configuration and the DynamoDB client once per cold start, then the handler.

use lambda_http::{run, service_fn, Error};
use shared::http::CallerGuard;
use shared::{aws, telemetry, Config, Env, PaymentStore};
use sync_finalize::{handle, App};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let env = Env::process();
    let config = Config::from(&env)?;
    // Only the orchestrator's role may call the payments API (an HTTP API has no resource policy).
    let guard = CallerGuard::from(&env)?;
    let client = aws::dynamodb_client(&aws::sdk_config().await);
    let app = App {
        store: PaymentStore::new(client, config.table_name),
    };
    run(service_fn(|req| async {
        let answer = match guard.check(&req) {
            Ok(()) => handle(&app, req).await,
            Err(refused) => Ok(refused.into_response()),
        };
        // Lambda freezes the process after the answer: export this invocation's spans now.
        telemetry::flush();
        answer
    }))
    .await
}
