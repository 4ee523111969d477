//! The local stand-in for Stripe (its PaymentIntents and Refunds API, its objects, errors, idempotency and
//! signed webhooks), and the demos that drive payments and checkouts through the local stack.

pub mod adyen;
pub mod checkout_demo;
pub mod client;
pub mod delivery;
pub mod demo;
pub mod ledger;
pub mod server;
pub mod spec;
