//! PSP webhooks behind API Gateway (`POST /webhooks/{provider}`): verified on the raw bytes in constant
//! time, parsed into our terms, deduplicated by PSP event id, lease-guarded, checked against the payment,
//! and finalized through the same decision and write as the sync and recovery paths.
//!
//! Answers (an [`Answer`] as JSON `{"result": ...}`, or an error `{"error": ..., "message": ...}`): 200
//! `applied` | `duplicate` | `stale` | `ignored` | `quarantined` | `unknown_payment`; 400 not a webhook;
//! 401 signature or timestamp; 404 unknown provider; 413 body too large; 503 + `Retry-After` when the lease
//! stays held, the payment is not known yet, or DynamoDB stays unavailable. A 4xx writes nothing. Adyen's
//! endpoint (scheme `adyen`) answers 200 `[accepted]` once every item is applied or parked for the intake's
//! own retry, never a 503 while anything can be kept (see [`adyen`]).

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod admission;
pub mod adyen;
pub mod answer;
mod app;
pub mod catchup;
pub mod eventbridge;
mod handler;
pub mod metrics;
mod payment;
pub mod providers;
pub mod psp_event;
pub mod redact;
pub mod standard;
pub mod stripe;

pub use answer::Answer;
pub use app::{App, IntakeSettings, Settings};
pub use handler::{apply_fetched, apply_unsigned, handle, process, route_table, Unsigned};
