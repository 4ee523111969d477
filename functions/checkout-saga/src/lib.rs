//! The checkout saga (orchestration): reserve stock, create and charge the payment, wait for its outcome
//! from the queue, confirm the order; on failure the completed steps are compensated in reverse order.
//!
//! The states and their legal moves are types in `payments_core::saga`; the saga's storage and escalation
//! are this crate's [`saga`] (re-exporting the core's types), retries `shared`'s. This crate holds the
//! checkout's steps ([`runner`]), its own items ([`inventory`], [`orders`]), the three entry points ([`api`], [`events`], [`sweeper`], and the sweeper's one-order
//! [`resume`] on an operator's request), how each function is built from
//! its [`Settings`] ([`CheckoutApi`], [`CheckoutEvents`], [`CheckoutSweeper`]) and its [`metrics`].

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod api;
pub mod events;
mod function;
pub mod inventory;
pub mod metrics;
pub mod orders;
pub mod resume;
pub mod runner;
pub mod saga;
pub mod sweeper;

pub use function::{build_runner, CheckoutApi, CheckoutEvents, CheckoutSweeper, Settings, SweeperError};
