//! The harness's own integration tests: the store, leases, the Stripe client, the PSP circuit breaker and
//! telemetry against DynamoDB Local, recorded answers and the PSP simulator.
//!
//! One integration-test binary (`tests/tests/it/main.rs`): a module per area, a test per scenario.

mod adyen_recovery;
mod breaker;
mod concurrency;
mod configuration_doc;
mod deploy_doc;
mod faults;
mod leases;
mod metrics;
mod openapi;
mod store;
mod stripe_client;
mod telemetry;
