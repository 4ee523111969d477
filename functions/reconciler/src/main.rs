//! Lambda entry point of recovery (EventBridge schedule). The logic is `shared::recovery`, shared with the
//! checkout saga, which hands a payment to recovery when it does not resolve in time.
//!
//! Configuration: `TABLE_NAME`, each configured PSP's settings (Stripe: `PSP_BASE_URL`, `PSP_API_KEY_ARN` or
//! `PSP_API_KEY`; Adyen: `ADYEN_BASE_URL`, `ADYEN_API_KEY_ARN` or `ADYEN_API_KEY`, ...; see README; each
//! payment is asked about, or Adyen's ended, at its own PSP only), `RECOVERY_STALE_AFTER_SECONDS` (default
//! 300), `RECOVERY_BATCH_LIMIT` (default 200), `RECOVERY_EXPIRE_AFTER_SECONDS` (default 7 days: when a
//! payment with nothing to ask its PSP expires, or one still open at its PSP is ended there), lease settings.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::lambda::ColdStart;
use shared::lease::Leases;
use shared::recovery::{self, Recovery, RecoverySettings};
use shared::telemetry::ErrorChain;
use shared::{clock, telemetry, PaymentStore};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let client = start.dynamodb();
    let recovery = Recovery {
        store: PaymentStore::new(client.clone(), &start.config.table_name),
        leases: Leases::new(client.clone(), &start.config.table_name, start.config.lease),
        psp: shared::psp::set::from_env(&start.sdk, client, &start.config.table_name, &start.env).await?,
        settings: RecoverySettings::from(&start.env)?,
    };
    run(service_fn(|event: LambdaEvent<Value>| {
        let recovery = &recovery;
        async move {
            let deadline = clock::invocation_deadline(event.context.deadline, clock::ANSWER_MARGIN);
            let report = recovery.run(deadline).await;
            // Lambda freezes the process after the answer: export this invocation's spans now.
            telemetry::flush();
            // The runtime records only the error's own text: hand it the whole chain.
            let report = report.map_err(|e| ErrorChain(&e).to_string())?;
            shared::metrics::emit(&recovery::emf(&report, clock::now_ms()));
            Ok::<_, Error>(serde_json::json!({ "found": report.found, "applied": report.applied, "busy": report.busy }))
        }
    }))
    .await
}
