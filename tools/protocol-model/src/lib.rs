//! A model of the checkout protocol (saga, payment finalize, lease, PSP, recovery, the sweeper and the PSP's
//! circuit breaker), checked exhaustively with [`stateright`].
//!
//! It runs the real decisions: every choice a step makes is a call into the pure core, so the checker checks
//! that code, not a retelling of it. The finalize decision ([`payments_core::decide`]); the saga typestate, its
//! load check and its transitions ([`payments_core::saga`], `set_aside` included); what a loaded saga does next
//! ([`payments_core::saga::Loaded::step_at`]: the table with the deadlines, which `Runner::advance`,
//! `action_name` and `paymentsctl` use); what a waiting saga does with its payment's outcome
//! ([`payments_core::saga::awaited`]); the charge's first call ([`payments_core::saga::charge_call`]); the cancel's read ([`payments_core::saga::IntentState`]);
//! a refund refused for good ([`payments_core::saga::RefundImpossible`]); the sweeper's decision after a resume
//! ([`payments_core::saga::after_resume`]); the breaker's counting ([`payments_core::breaker::Failures`]);
//! recovery's questions (`Payment::is_open`, `refund_due`); the client view ([`payments_core::ClientView`]).
//! What the model must paraphrase (DynamoDB's conditional writes, the lease, the PSP, the order of each actor's
//! I/O) is written step by step, each step naming the function it mirrors.
//!
//! | module | owns | mirrors |
//! |---|---|---|
//! | [`ids`] | the one checkout: order, SKU, amount, deadlines | |
//! | [`psp`] | Stripe: PaymentIntents, refunds, idempotency keys (replaying the first answer, a saved 500, `idempotency_error` after a changed request, pruned after a day), disputes, 401s, the search by payment id, webhooks in flight | `shared/psp/src/stripe.rs` (`StripeApi`, `find_for_payment`), `shared/psp/src/stripe/objects.rs` (`PaymentIntent::outcome`, `observation`), `local/psp-simulator/src/ledger.rs` |
//! | [`world`] | the state: DynamoDB items, PSP, the sweeper's index, the breaker, escalations, actors' local state, fault budgets; the saga save and the finalize write | `functions/checkout-saga/src/saga.rs` (`SagaStore::save`), `shared/src/store/mod.rs` (`create_writes`), `shared/src/store/finalize.rs` (`finalize_from`), `shared/src/lease.rs` |
//! | [`actors`] | saga runner (its escalation and deferral), webhook intake, recovery (with its refund of money taken on a failed payment), customer, order projection, the sweeper, the PSP's faults: one step per call | see the table in [`actors`] |
//! | [`model`] | the stateright model: actions, faults, refusals, properties, the fair run behind the liveness check | |
//! | [`check`] | one breadth-first run and its report: state counts, counterexample traces | |
//! | [`lease`] | the lease rule on its own (two takers, crashes, lost answers, expiry) | `shared/src/lease.rs` |
//! | [`outbox`] | the payment item as its own outbox: one conditional put per transition, the stream, the relay's filter, archive and send, the consumer, with crashes, lost answers, redeliveries and the older form's records | `shared/src/store/finalize.rs` (`write`), `shared/src/outbox.rs`, `functions/outbox-relay/src/lib.rs` (`relay`), `shared/src/consumer.rs` |
//! | [`refund_owner`] | one owner per refund at Stripe and Adyen: the saga's refund step and recovery's give-backs, lost answers and webhooks, Stripe's keys forgotten after a day | `functions/checkout-saga/src/runner/steps.rs` (`refund_payment`), `shared/src/recovery.rs` (`give_back_failed_refund`, `unrecorded`), `shared/src/recovery/adyen.rs` |
//!
//! # What it covers
//! One order of one unit of the last unit in stock, one amount, with every payment scenario (captured at
//! once, 3-D Secure, processing, declined); one or more saga runners at once; webhook intake; recovery; a
//! customer who completes the challenge, never acts, or cancels at any time; a PSP whose answers to the
//! runner and to recovery's refunds may be lost (the call happened), whose webhooks arrive late, out of order,
//! twice or never; crashes of any actor between any two steps (a crashed holder's lease expires; the sweeper
//! and the PSP's retries restart the work); the payment and abandonment deadlines; optionally a day passing
//! (Stripe prunes idempotency keys, its search index catches up, a charge retried then is past
//! `PSP_KEY_TRUSTED_FOR_MS`). Optionally ([`model::Refusals`]): refusals for good (a disputed charge's refund,
//! a retried charge refused after a deploy, a refused search, a saved 500 replayed for the charge's key, a
//! 3-D Secure redirect URL our redirect policy refuses: [`psp::Offer`], read by the core's
//! `CustomerAction::offered` as the Stripe client reads it), a
//! 401 until an operator fixes the key, the breaker ([`model::BreakerMode`]), escalation with the sweeper
//! ([`model::SweeperMode`]) and a second order in the shard that only the sweeper resumes (one saga a run,
//! oldest first).
//!
//! Properties (see [`model::ProtocolModel`]'s `properties`): never charged twice for one order; never
//! refunded more than captured, nor asked to; stock conserved; compensations only after their steps and in
//! reverse order; no secret on a terminal payment; money taken on a failed payment recorded once; every stored
//! saga passes the real load check; a saga escalated at most once; no PSP call for one saga repeating without
//! bound; no captured money without the reference a refund needs; the breaker never opened by one request's
//! failures; and liveness: from every reachable state, a fair run without further faults ends the saga with
//! the money settled (an order completed keeps one capture; a compensated one gave every capture back, but a
//! refund refused for good and escalated once) or sets it aside after exactly one escalation, sweeps the
//! shard's other order, and leaves no payment with money to give back.
//!
//! The broken variants ([`CancelMode::OldMain`], `search_after_a_day: false`, `refused_refund_reads_back:
//! false`, `fresh_charge_key`, `never_abandon`, [`model::SweeperMode::Today`], [`model::BreakerMode::Today`],
//! `copies_reference: false`, `redirect_drops_action`, `deadline_clears_set_aside`) are the code before a fix, kept to show the checks are not vacuous. What the
//! model found, and which tests in `tests/it/model.rs` pin it, is listed in this crate's `README.md` ("What the model found").
//!
//! # What it cannot see
//! - The shells: the AWS SDK and HTTP, the Stripe client's parsing beyond the customer's action (a refused
//!   redirect URL is modelled through the core's decision, with one fixed policy), signatures, metrics and
//!   alarms. A retried call that keeps failing
//!   is a lost answer, a crash, or a replayed 500; a resume cut at its invocation's deadline is a crash.
//! - Several orders beyond the shard's other one (which only waits for a sweep), partial refunds by hand,
//!   customer retries after a decline (the customer abandons), and expiry of payments with nothing to ask.
//! - The outbox relay's ordering and the consumers' dedup: the projection is a best-effort copy of the
//!   payment's status, and the liveness check does not use it at all.
//! - Time beyond three marks (start, payment timeout, abandonment), each state's deadline (the core's
//!   `saga::deadline`, passed or not: [`model::Config::deadlines`]), the set-aside schedule's looks in the day
//!   after an escalation (the core's `set_aside_due`) and a day later: the open index's back-off (a deferred
//!   saga waits until the breaker closes or the key is fixed), news resuming a set-aside saga (only the
//!   sweeper's looks do); a lease is never lost by a live holder (its TTL exceeds the function timeout), only
//!   by one that crashed.
//! - Reads that follow each other with no write between are merged into one step where that saves states
//!   without hiding a write (loading a waiting saga with its payment's outcome; the cancel's reads of our
//!   payment and its PaymentIntent, with the load; the charge's read of the payment with its PSP call;
//!   intake's lease and read, joined in the code too; recovery's lease, refund and status query; the
//!   customer's cancel loads and saves the saga in one step; one resume's attempts at a call whose answer the
//!   PSP replays).
//! - Money taken on a failed payment: main's own cancel no longer produces it, so the model makes it with an
//!   earlier cancel ([`model::CancelMode::FailsWhileProcessing`]) to check its recording and refund.

pub mod actors;
pub mod check;
pub mod ids;
pub mod lease;
pub mod model;
pub mod outbox;
pub mod psp;
pub mod refund_owner;
pub mod world;

pub use model::{CancelMode, Config, ProtocolModel};
