//! The outbox relay's integration tests.
//!
//! The crate's one integration-test binary (`tests/it/main.rs`): a module per area, a test per scenario.

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

mod carried_cursor;
mod e2e;
mod migration;
