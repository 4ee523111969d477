//! A model of the checkout protocol (saga, payment finalize, lease, PSP, recovery), checked exhaustively with
//! [`stateright`].
//!
//! It drives the real pure core: the finalize decision ([`payments_core::decide`]), the saga typestate and its
//! load check ([`payments_core::saga`]) and the client view ([`payments_core::ClientView`]) run inside the
//! model's steps, so the checker checks that code, not a retelling of it. What the model must paraphrase
//! (DynamoDB's conditional writes, the lease, the PSP, the runner's and paths' control flow) is written
//! step by step, each step naming the function it mirrors.
//!
//! | module | owns | mirrors |
//! |---|---|---|
//! | [`ids`] | the one checkout: order, SKU, amount, deadlines | |
//! | [`psp`] | Stripe: PaymentIntents, refunds, idempotency keys (replaying the first answer, pruned after a day), webhooks in flight | `shared/src/psp/mod.rs` (`Psp`), `shared/src/psp/stripe.rs` (`PaymentIntent::outcome`, `observation`), `local/psp-simulator` |
//! | [`world`] | the state: DynamoDB items, PSP, actors' local state, fault budgets; the saga save and the finalize write | `shared/src/saga.rs` (`SagaStore::save`), `shared/src/store/finalize.rs` (`finalize_from`), `shared/src/lease.rs` |
//! | [`actors`] | saga runner, webhook intake, recovery, customer, anomaly refunds, order projection: one step per call | see the table in [`actors`] |
//! | [`model`] | the stateright model: actions, faults, properties, the fair run behind the liveness check | |
//! | [`check`] | one breadth-first run and its report: state counts, counterexample traces | |
//!
//! # What it covers
//! One order of one unit of the last unit in stock, one amount, with every payment scenario (captured at
//! once, 3-D Secure, processing, declined); one or more saga runners at once; webhook intake; recovery; a
//! customer who completes the challenge, never acts, or cancels at any time; a PSP whose answers to the
//! runner, recovery and refunds may be lost (the call happened), whose webhooks arrive late, out of order,
//! twice or never; crashes of any actor between any two steps (a crashed holder's lease expires; the sweeper
//! and the PSP's retries restart the work); the payment and abandonment deadlines; optionally a day passing
//! (Stripe prunes idempotency keys, our 24-hour records expire).
//!
//! Properties (see [`model::ProtocolModel`]'s `properties`): never charged twice for one order; never
//! refunded more than captured (nor asked to); stock conserved; compensations only after their steps and in
//! reverse order; no secret on a terminal payment; every stored saga passes the real load check; and
//! liveness: from every reachable state, a fair run without further faults ends the saga with the money
//! settled (an order completed keeps one capture; a compensated one gave every capture back).
//! Optional: a late success on a failed payment is recorded once (`Config::late_success_recorded_once`).
//!
//! What the model found in the code (each pinned by a test in `tests/model.rs` that expects the
//! counterexample) is listed in the README's "The protocol model".
//!
//! # What it does not cover
//! - The AWS SDK and the HTTP layers themselves, signatures, parsing, the circuit breaker, escalation
//!   queues, metrics and alarms. A retried call that keeps failing is modelled as a lost answer or a crash.
//! - Several orders, partial refunds by hand, customer retries after a decline (the customer abandons), and
//!   a refused charge other than an idempotency-key conflict.
//! - The outbox relay's ordering and the consumers' dedup: the projection is a best-effort copy of the
//!   payment's status, and the liveness check does not use it at all.
//! - Time beyond three marks (start, payment timeout, abandonment) and a day later; a lease is never lost by
//!   a live holder (its TTL exceeds the function timeout), only by one that crashed.
//! - Reads that follow each other with no write between are merged into one step where that saves states
//!   without hiding a write (loading a waiting saga with its payment's outcome; intake's lease and read,
//!   joined in the code too; the customer's cancel loads and saves the saga in one step).
//! - The intended behaviour of issue 12 is modelled where main does not have it yet: the payment id saved
//!   before the charge ([`model::ChargeMode::SavedBeforeCharge`]) and the refund of money taken on a failed
//!   payment ([`actors::refund_anomaly`]). Main's charge step is [`model::ChargeMode::IdempotencyRecord`].

pub mod actors;
pub mod check;
pub mod ids;
pub mod model;
pub mod psp;
pub mod world;

pub use model::{ChargeMode, Config, ProtocolModel};
