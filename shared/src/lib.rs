//! The one library every function uses: the pure payments core (re-exported by name below) and everything
//! around it that touches AWS: the DynamoDB payment store with its versioned write, leases, the outbox and
//! consumer contracts, configuration, serving and telemetry.
//!
//! # What it keeps, and what it does not
//!
//! It keeps what more than one function uses: the payment store and its one write (the API, the intake,
//! recovery, the saga, `paymentsctl`), leases, settings, serving, telemetry, metrics, retries and the clock,
//! and the two contracts between functions that belong to no one of them (`outbox`: what the relay
//! publishes; `consumer`: how a queue's consumer applies it). A feature lives with the function that runs it:
//! the PSP clients are their own crate (`psp`, `shared/psp`: the checkout functions, recovery and the
//! catch-up call a PSP), recovery is its own library crate (`recovery`, `shared/recovery`, which the reconciler runs and the checkout
//! functions use too), the saga's storage is the saga's (`checkout_saga::saga`).
//!
//! # Layout
//!
//! Two crates, one rule between them: what can be decided without I/O is decided in `payments_core`
//! (`shared/core`, no AWS SDK, no network), and this crate only reads, calls and writes around those
//! decisions. A module here that starts deciding a payment's fate on its own is a second table of a decision
//! the core already holds.
//!
//! | module | owns | must never |
//! |---|---|---|
//! | [`store`] | the payment item (its own outbox: it carries the transition that wrote it), its history and the one versioned write (`finalize`: decide, write under the version token, decide again on a conflict), idempotent create, parked webhooks | write a payment without its version condition, or without the transition it records (`transition_to_item`) |
//! | [`apply`] | the one "read, take the lease at the version read, finalize, release" sequence of the intake and `paymentsctl parked replay` | drop a failed lease release: it travels with the error it followed or is logged |
//! | [`payment_ref`] | which payment a PSP object names (our id in its metadata, else its bound PSP reference), and the one lookup every path (intake, parked replay, recovery's recheck) makes | find a payment by reference alone where the object carries our id |
//! | [`lease`] | one live worker per payment: the `LEASE#` item, its owner token and expiry | count on DynamoDB's TTL to have deleted an expired lease, or release another owner's |
//! | [`keys`] | every partition and sort key of the one table | be bypassed: no other module spells a key prefix |
//! | [`outbox`] | which stream records are outbox events and the SQS message each becomes | send an event a queue or a stream shard cannot carry |
//! | [`consumer`] | applying each payment's events once and in version order, with the consumer's cursor in the same transaction | skip an event after a gap (it is held back and redelivered) |
//! | [`http`] | JSON answers and errors of the HTTP functions, the caller guard | answer with a secret of a terminal payment (the core's [`ClientView`] makes that a type error) |
//! | [`router`] | the one HTTP route table matcher (404, 405 with `Allow`, stage prefixes) | decode percent-escapes into a different route |
//! | [`lambda`] | what every `main` does around its handler: the cold start, the clients, serving with a deadline | answer before the telemetry is flushed, or lose an error's cause on the way to the runtime |
//! | [`config`] | reading settings from the environment through one [`Env`] | take a malformed value, or a missing required one, for a default: both fail the start |
//! | [`aws`] | the SDK clients, built once per cold start, and Secrets Manager reads | log a secret's value |
//! | [`telemetry`] | the one tracing setup, request spans, OpenTelemetry export | log a request body or a secret |
//! | [`metrics`] | the one Embedded Metric Format writer | publish a metric without its `Stage` dimension |
//! | [`retry`] | exponential backoff with full jitter | retry without a bound |
//! | [`clock`] | wall-clock time in the items' units ([`clock::WallClock`]), the invocation's deadline, the monotonic clock of caches ([`clock::MonotonicClock`]) | let a decision read the system time past the [`clock::WallClock`] it was given (tests move that one ahead) |
//!
//! # Errors
//!
//! Each layer has its own error types, and each becomes an answer in one place: an HTTP function's answer is
//! one [`http::ApiError`] (status, `{"error": code, "message": ...}`, `Retry-After` on a 503:
//! [`http::ApiError::into_response`]), an event function's is the error its handler returns to
//! [`lambda::serve_event`] (the invocation fails, its whole cause chain recorded: the event source retries it
//! and the failure is counted and alarmed), or, for a queue batch, the messages it lists as failed (partial
//! batch failure). Below that edge an error is a value (`thiserror` enums wrapping the layer below with
//! `#[from]`, the cause kept as `source()`), returned rather than logged as well: it is logged, with its whole
//! [`telemetry::ErrorChain`], where it becomes an answer or is handled (a retry, a back-off). A 4xx writes
//! nothing.
//!
//! | layer | error types | how each becomes an answer |
//! |---|---|---|
//! | the core (`payments_core`) | [`DomainError`] (input that breaks a rule), `saga::InconsistentSaga` (a stored saga that fails its check) | parsed at the edge: a 400 ([`http::ApiError::bad_request`]); an inconsistent saga is escalated for an operator and answered 500 `checkout_needs_operator` |
//! | settings ([`config`], [`lambda`]) | [`ConfigError`], [`lambda::BuildError`] | the cold start fails: the function never serves with a setting it cannot read |
//! | storage ([`store`], [`lease`], [`apply`]) | [`StoreError`] ([`StoreError::is_transient`]), `store::transact::TransactError`, `apply::ApplyError`, `consumer::ConsumerError` | over HTTP `From<StoreError> for ApiError`: 404, 409, a transient failure 503 to retry, anything else a logged 500; in an event function, the handler's error |
//! | the PSP clients (`psp`) | `PspError` (`is_transient`, `is_deferred`) | never an answer by itself: the saga retries a transient one, waits out a deferred one (breaker open, key refused) and compensates a decline or refusal; recovery backs the payment off |
//! | each function | `RunError`, `SagaStoreError`, `ResumeError`, `SweeperError` (checkout), `RecoveryError` (recovery), `CatchUpError`, `ProvidersError` (intake), `RelayError` (relay), each wrapping the layers above | an HTTP function turns them into its `ApiError` in one function (the checkout API's `run_failed`; the intake ends a delivery in an `Answer` or an `ApiError`); an event function returns them to `serve_event` |
//!
//! # Names
//!
//! The core's types are re-exported under their own names, so a function depends on `shared` alone; the list
//! below is what the functions, tools and tests use. The core's modules stay in the core (`payments_core::saga`
//! is the saga's state machine, `checkout_saga::saga` its storage; `payments_core::recovery` is recovery's
//! pure step, the `recovery` crate its shell), except [`text`], the input rules every entry point applies.

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod apply;
pub mod aws;
pub mod clock;
pub mod config;
pub mod consumer;
pub mod http;
pub mod keys;
pub mod lambda;
pub mod lease;
pub mod metrics;
pub mod outbox;
pub mod payment_ref;
pub mod retry;
pub mod router;
pub mod store;
pub mod telemetry;

pub use config::{Config, ConfigError, Env};
pub use lease::{Lease, LeaseConfig, Leases};
pub use store::{FinalizeOutcome, FinalizeResult, PaymentStore, StoreError};

// The payment, what becomes of it and what we tell the client.
pub use payments_core::{ClientView, CustomerAction, NewPayment, Payment, PaymentStatus, StrayCapture};

// The one finalize decision: what a path observed and what the decision makes of it.
pub use payments_core::{
    decide, Channel, Claims, Decision, DeferReason, EventKind, IgnoreReason, Observation, Outcome, PaymentEvent,
    Transition,
};

// Refunds and disputes as the PSP reports them.
pub use payments_core::{
    refund_step, saga_refund_settled, Dispute, DisputeFact, DisputeReport, DisputeStatus, GiveBack, RefundEntry,
    RefundReport, RefundStatus, RefundStep,
};

// Identifiers, money and the PSP a payment belongs to, each parsed once at the edge.
pub use payments_core::{
    CorrelationId, Currency, DisputeId, DomainError, IdempotencyKey, KnownPsps, Metadata, Money, OrderId, PaymentId,
    PspEventId, PspName, PspReference, Sku,
};

// Values that never reach a log.
pub use payments_core::{ClientSecret, RedirectPolicy, RedirectUrl, RetryToken, SigningSecret};

/// The limits and the character set of text that enters from outside: every entry point applies them.
pub use payments_core::text;
