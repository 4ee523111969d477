//! The protocol model's integration tests.
//!
//! The crate's one integration-test binary (`tests/it/main.rs`): a module per area, a test per scenario.

mod lease;
mod maps;
mod model;
mod outbox;
mod refund_owner;
