//! Lambda entry point of recovery (EventBridge schedule). The logic is the `recovery` library,
//! which the checkout saga uses too: it hands a payment to recovery when it does not resolve in time.
//!
//! Configuration: [`recovery::Settings`] (`TABLE_NAME`, each configured PSP's settings: Stripe's
//! `PSP_BASE_URL`, `PSP_API_KEY_ARN` or `PSP_API_KEY`, Adyen's `ADYEN_BASE_URL`, `ADYEN_API_KEY_ARN` or
//! `ADYEN_API_KEY`, ...; each payment is asked about, or Adyen's ended, at its own PSP only, each PSP at most
//! at its scan rate, `PSP_SCAN_RATE_PER_SECOND` and `ADYEN_SCAN_RATE_PER_SECOND` (default 10 each);
//! `RECOVERY_STALE_AFTER_SECONDS` (default 300), `RECOVERY_BATCH_LIMIT` (default 200),
//! `RECOVERY_EXPIRE_AFTER_SECONDS` (default 7 days: when a payment with nothing to ask its PSP expires, or one
//! still open at its PSP is ended there), lease settings). Each run's answer and metrics:
//! [`Recovery::invoke`].

use lambda_runtime::Error;
use recovery::{Recovery, Settings};
use shared::lambda::{serve_event, ColdStart};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let recovery = Recovery::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    serve_event(|_: serde_json::Value, deadline| recovery.invoke(deadline)).await
}
