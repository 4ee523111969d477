//! Lambda entry point of the saga sweeper (EventBridge schedule): resumes sagas open for longer than
//! `SAGA_STUCK_AFTER_SECONDS` (default 60); each run writes `SweeperLagSeconds` and
//! `OldestOpenSagaAgeSeconds` (EMF).

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::lambda::ColdStart;
use shared::telemetry;
use std::time::Duration;

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let runner = checkout_saga::runner_from_env(&start.sdk, start.dynamodb(), &start.config, &start.env).await?;
    let stuck_after = start.env.seconds("SAGA_STUCK_AFTER_SECONDS", Duration::from_secs(60))?;
    run(service_fn(|event: LambdaEvent<Value>| {
        let runner = &runner;
        async move {
            let deadline = shared::clock::invocation_deadline(event.context.deadline, shared::clock::ANSWER_MARGIN);
            let report = checkout_saga::sweeper::sweep(runner, stuck_after, 100, deadline).await;
            // Lambda freezes the process after the answer: export this invocation's spans now.
            telemetry::flush();
            // The runtime records only the error's own text: hand it the whole chain.
            let report = report.map_err(|e| telemetry::ErrorChain(&e).to_string())?;
            tracing::info!(?report, "sweep done");
            shared::metrics::emit(&checkout_saga::metrics::swept(&report));
            Ok::<_, Error>(
                serde_json::json!({ "found": report.found, "resumed": report.resumed, "errors": report.errors }),
            )
        }
    }))
    .await
}
