//! Adyen's standard notifications, `POST /webhooks/adyen` (a provider of scheme `adyen` in
//! `WEBHOOK_PROVIDERS`): Basic auth on the request, an HMAC per item, each item applied through the steps and
//! the one `decide` every provider's webhook goes through, `[accepted]` once every item is durably handled.
//!
//! Adyen differs from the other schemes in what this module owns:
//! - **A batch, signed item by item** ([`notification`]): every item is verified before any is applied, so a
//!   request with one forged or unverifiable item is refused whole (401) and writes nothing.
//! - **No event id, no event time** ([`fact`]): the dedup identity is Adyen's own (eventCode, success,
//!   pspReference, originalReference), and the order is the decision's rules, not a clock.
//! - **One queue per endpoint**: Adyen retries an endpoint's notifications in order, so a 503 for one
//!   payment would hold up every other payment's. What cannot be applied now (its payment's lease held, its
//!   payment not written yet, a refund before its capture, storage refusing the write) is accepted and
//!   parked ([`parked`]) for the intake's own retry ([`retry`]), which ends: applied, or after its deadline quarantined
//!   and alarmed. Only when even the parking fails (storage down) is the answer a 503, since nothing could
//!   be kept.
//! - **Secrets** ([`config`]): HMAC keys marked test or live, and Basic auth credentials, from the same
//!   source as every provider's secrets.

pub mod config;
pub mod fact;
mod intake;
pub mod notification;
pub mod parked;
pub mod retry;

pub use intake::intake;
