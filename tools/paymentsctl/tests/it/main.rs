//! `paymentsctl`'s integration tests.
//!
//! The crate's one integration-test binary (`tests/it/main.rs`): a module per area, a test per scenario.

mod cli;
mod doctor;
mod invoke;
mod next_step;
mod paymentsctl;
mod stripe_setup;
