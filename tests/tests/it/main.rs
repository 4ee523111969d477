//! The harness's own integration tests: the store, leases, the Stripe client and telemetry against DynamoDB
//! Local and recorded answers.
//!
//! One integration-test binary (`tests/tests/it/main.rs`): a module per area, a test per scenario.

mod concurrency;
mod faults;
mod leases;
mod openapi;
mod store;
mod stripe_client;
mod telemetry;
