//! Lambda entry point of the webhook catch-up (EventBridge schedule): Stripe's Events API read from the
//! cursor and each event applied through the intake's own steps (`webhook_intake::catchup`).
//!
//! Configuration: `TABLE_NAME`, `WEBHOOK_PROVIDERS` (its Stripe provider's endpoint checks; without a Stripe
//! provider only the parked Adyen items are retried), with a Stripe provider the PSP's settings
//! (`PSP_BASE_URL`, `PSP_API_KEY_ARN` or `PSP_API_KEY`, see README), `CATCHUP_OVERLAP_SECONDS`,
//! `CATCHUP_SETTLE_SECONDS`, `CATCHUP_MAX_PAGES`, `CATCHUP_FIRST_LOOK_BACK_SECONDS`, lease settings.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::lambda::ColdStart;
use shared::telemetry::ErrorChain;
use shared::{clock, telemetry};
use webhook_intake::catchup::CatchUp;

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let job = CatchUp::from_env(&start.sdk, start.dynamodb(), &start.config, &start.env).await?;
    run(service_fn(|event: LambdaEvent<Value>| {
        let job = &job;
        async move {
            let deadline = clock::invocation_deadline(event.context.deadline, clock::ANSWER_MARGIN);
            let report = job.run(deadline).await;
            // Lambda freezes the process after the answer: export this invocation's spans now.
            telemetry::flush();
            // The runtime records only the error's own text: hand it the whole chain.
            let report = report.map_err(|e| ErrorChain(&e).to_string())?;
            tracing::info!(?report, "catch-up run");
            Ok::<_, Error>(serde_json::to_value(&report)?)
        }
    }))
    .await
}
