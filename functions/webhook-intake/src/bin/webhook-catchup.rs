//! Lambda entry point of the webhook catch-up (EventBridge schedule): Stripe's Events API read from the
//! cursor and each event applied through the intake's own steps (`webhook_intake::catchup`).
//!
//! Configuration: [`webhook_intake::catchup::Settings`] (`TABLE_NAME`, `WEBHOOK_PROVIDERS`: its Stripe
//! provider's endpoint checks; without a Stripe provider only the parked Adyen items are retried; with a
//! Stripe provider the PSP's settings `PSP_BASE_URL`, `PSP_API_KEY_ARN` or `PSP_API_KEY`, ..., paced at
//! `PSP_SCAN_RATE_PER_SECOND`;
//! `CATCHUP_OVERLAP_SECONDS`, `CATCHUP_SETTLE_SECONDS`, `CATCHUP_MAX_PAGES`, `CATCHUP_FIRST_LOOK_BACK_SECONDS`,
//! `STRIPE_EVENT_SOURCE` (when set, each run reports whether that partner event source is active),
//! the intake's settings, lease settings).

use lambda_runtime::Error;
use shared::lambda::{serve_event, ColdStart};
use webhook_intake::catchup::{CatchUp, Settings};

// One thread: Lambda gives a process one invocation at a time (why: `shared::lambda`).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let start = ColdStart::begin().await?;
    let job = CatchUp::build(&Settings::from_env(&start.env)?, start.clients()).await?;
    serve_event(|_: serde_json::Value, deadline| job.invoke(deadline)).await
}
