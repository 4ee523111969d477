//! What must not compile, checked with trybuild: the cases stay in `tests/ui/` and `tests/saga_ui/`.
//!
//! The crate's one integration-test binary (`tests/it/main.rs`): a module per area, a test per scenario.

mod client_view_compile;
mod saga_compile;
