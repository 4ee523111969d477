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
//! | [`psp`] | Stripe: PaymentIntents, refunds, idempotency keys (replaying the first answer, pruned after a day), the search by payment id, webhooks in flight | `shared/src/psp/mod.rs` (`Psp`, `find_for_payment`), `shared/src/psp/stripe.rs` (`PaymentIntent::outcome`, `observation`), `local/psp-simulator/src/ledger.rs` |
//! | [`world`] | the state: DynamoDB items, PSP, actors' local state, fault budgets; the saga save and the finalize write | `shared/src/saga.rs` (`SagaStore::save`), `shared/src/store/mod.rs` (`create_writes`), `shared/src/store/finalize.rs` (`finalize_from`), `shared/src/lease.rs` |
//! | [`actors`] | saga runner, webhook intake, recovery (with its refund of money taken on a failed payment), customer, order projection: one step per call | see the table in [`actors`] |
//! | [`model`] | the stateright model: actions, faults, properties, the fair run behind the liveness check | |
//! | [`check`] | one breadth-first run and its report: state counts, counterexample traces | |
//!
//! # What it covers
//! One order of one unit of the last unit in stock, one amount, with every payment scenario (captured at
//! once, 3-D Secure, processing, declined); one or more saga runners at once; webhook intake; recovery; a
//! customer who completes the challenge, never acts, or cancels at any time; a PSP whose answers to the
//! runner and to recovery's refunds may be lost (the call happened), whose webhooks arrive late, out of order,
//! twice or never; crashes of any actor between any two steps (a crashed holder's lease expires; the sweeper
//! and the PSP's retries restart the work); the payment and abandonment deadlines; optionally a day passing
//! (Stripe prunes idempotency keys, its search index catches up, a charge retried then is past
//! `PSP_KEY_TRUSTED_FOR`).
//!
//! Properties (see [`model::ProtocolModel`]'s `properties`): never charged twice for one order; never
//! refunded more than captured, nor asked to; stock conserved; compensations only after their steps and in
//! reverse order; no secret on a terminal payment; money taken on a failed payment recorded once; every stored
//! saga passes the real load check; and liveness: from every reachable state, a fair run without further
//! faults ends the saga with the money settled (an order completed keeps one capture; a compensated one gave
//! every capture back) and no payment with money to give back.
//!
//! The model mirrors main as of af27798: the payment created in the transaction that saves its id
//! (`charging`), the charge that reads a bound PaymentIntent and a day later searches for the first one
//! (issue 12, item 4); money taken on a failed payment recorded once and given back by recovery (item 3); the
//! cancel that reads the PaymentIntent first and waits for a processing one ([`model::CancelMode`]). What it
//! found, and which tests in `tests/model.rs` pin it, is listed in the README's "The protocol model".
//!
//! # What it does not cover
//! - The AWS SDK and the HTTP layers themselves, signatures, parsing, the circuit breaker, escalation
//!   queues, metrics and alarms. A retried call that keeps failing is modelled as a lost answer or a crash;
//!   so is a resume cut at its invocation's deadline.
//! - Several orders, partial refunds by hand, customer retries after a decline (the customer abandons), and
//!   a refused charge other than an idempotency-key conflict.
//! - The outbox relay's ordering and the consumers' dedup: the projection is a best-effort copy of the
//!   payment's status, and the liveness check does not use it at all.
//! - Time beyond three marks (start, payment timeout, abandonment) and a day later; the open index's back-off
//!   (a deferred saga or payment is one whose actor has not taken its step yet); a lease is never lost by a
//!   live holder (its TTL exceeds the function timeout), only by one that crashed.
//! - Reads that follow each other with no write between are merged into one step where that saves states
//!   without hiding a write (loading a waiting saga with its payment's outcome; the cancel's reads of our
//!   payment and its PaymentIntent, with the load; the charge's read of the payment with its PSP call;
//!   intake's lease and read, joined in the code too; recovery's lease, refund and status query; the
//!   customer's cancel loads and saves the saga in one step).
//! - Money taken on a failed payment: main's own cancel no longer produces it, so the model makes it with an
//!   earlier cancel ([`model::CancelMode::FailsWhileProcessing`]) to check its recording and refund.

pub mod actors;
pub mod check;
pub mod ids;
pub mod model;
pub mod psp;
pub mod world;

pub use model::{CancelMode, Config, ProtocolModel};
