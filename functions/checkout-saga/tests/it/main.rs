//! The checkout saga's integration tests, against DynamoDB Local, the SQS emulator (escalations) and the PSP
//! simulator (charges, refunds, status queries over HTTP).
//!
//! The crate's one integration-test binary (`tests/it/main.rs`): a module per area, a test per scenario;
//! `support` holds the setup they share.

// Test code: a failed unwrap or index is the test failing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::too_many_lines
)]

/// Checkouts charged through Adyen: authorise, capture, refusal, refund, a charge replayed by its key.
mod adyen;
/// The checkout API over its HTTP handler.
mod api;
/// Issue 44: a checkout function keeps to its Stripe budget.
mod budget;
/// Checkouts with the longest ids, inside Stripe's limits (metadata, idempotency keys).
mod limits;
/// Deadlines that end every wait, and fair scans of the open-items index.
mod liveness;
/// Every loop has an end: escalated sagas set aside, deadlines in every state, permanent refusals.
mod loops;
mod manual_capture;
/// The age of the oldest open payment and saga that each scheduled run publishes.
mod oldest;
/// The refund step's read-back recorded whatever it decides (the core's rule the protocol model runs too).
mod read_back;
/// Failed refunds given back again by recovery.
mod refund_failures;
/// One order resumed by the sweeper function on an operator's request (`{"resume": {"order_id": ..}}`).
mod resume;
/// The saga's steps and compensations, crashes, faults and recovery.
mod saga;
/// The end-to-end scenarios of the Stripe-speaking simulator and the circuit breaker.
mod stripe;
mod support;
