//! The local stand-in for a Stripe-like PSP, and the demo that drives checkouts through the local stack.

pub mod checkout_demo;
pub mod client;
pub mod delivery;
pub mod demo;
pub mod psp;
pub mod server;
