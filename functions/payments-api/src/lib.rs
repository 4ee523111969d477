//! The payments API the checkout orchestrator calls (IAM-authorized, internal):
//!
//! | route | does |
//! |---|---|
//! | `POST /payments` | create under an `Idempotency-Key` (201; replay 200; same key, other body 422) |
//! | `POST /payments/{id}/sync-result` | the PSP's synchronous answer through the shared finalize (200, client view) |
//! | `GET /payments/{id}` | the client view from a strongly consistent read |
//! | `GET /payments/{id}/events` | the payment's event log, oldest first |
//!
//! Every answer about a payment is a `ClientView` built from the latest item, so a terminal payment is
//! answered with its outcome only, never with a secret or redirect URL.

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod handler;
pub mod requests;
mod routes;

pub use handler::{handle, App, Settings};
pub use routes::{route_table, PaymentsApiRoute};
