//! The PSP simulator's integration tests.
//!
//! The crate's one integration-test binary (`tests/it/main.rs`): a module per area, a test per scenario.

mod adyen;
mod adyen_client;
mod capture;
mod demo;
mod fixtures;
mod openapi;
mod rules;
mod support;
