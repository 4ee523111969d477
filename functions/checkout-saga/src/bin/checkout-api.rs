//! Lambda entry point of the checkout API (HTTP API, IAM-authorized).

use lambda_http::{run, service_fn, Error};
use shared::http::CallerGuard;
use shared::{aws, telemetry, Config, Env};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let env = Env::process();
    let config = Config::from(&env)?;
    // Only the orchestrator's role may call the checkout API (an HTTP API has no resource policy).
    let guard = CallerGuard::from(&env)?;
    let sdk = aws::sdk_config().await;
    let runner = checkout_saga::runner_from_env(&sdk, aws::dynamodb_client(&sdk), &config, &env).await?;
    run(service_fn(|req| async {
        let answer = match guard.check(&req) {
            Ok(()) => checkout_saga::api::handle(&runner, req).await,
            Err(refused) => Ok(refused.into_response()),
        };
        // Lambda freezes the process after the answer: export this invocation's spans now.
        telemetry::flush();
        answer
    }))
    .await
}
