//! Pure payment logic shared by every path: the domain types, the one finalize decision, the client view, and
//! the tables that say what happens next (a saga's step, recovery's step, a refund's, the breaker's rule).
//!
//! Nothing here does I/O or depends on the AWS SDK, so it is tested as pure functions, the protocol model
//! (`tools/protocol-model`) explores the same functions the functions run, and `trybuild` can compile against
//! it cheaply. Storage and the calls around these decisions live in the `shared` crate, which re-exports the
//! types by name.
//!
//! # Layout
//!
//! | module | owns | must never |
//! |---|---|---|
//! | [`finalize`] | [`decide`]: the one decision the sync, webhook and recovery paths all call (apply, ignore or defer) | read anything but the payment, the observation and the time it is given: every path gets the same answer from the same facts |
//! | [`observation`] | what one path learned ([`Observation`]: its [`Channel`], the PSP's [`Outcome`], [`Claims`]) and the check that it is about this payment | carry a raw PSP object |
//! | [`payment`] | the payment record ([`Payment`]) and what a new one is made from ([`NewPayment`]) | change a payment's PSP once recorded |
//! | [`status`] | [`PaymentStatus`] and the table of allowed moves | let a terminal payment become non-terminal |
//! | [`event`] | the event item ([`PaymentEvent`]): audit log and outbox in one | hold a secret or a raw PSP object |
//! | [`client_view`] | [`ClientView`]: the only type a handler returns about a payment | hold a secret for a terminal payment (no variant has the field) |
//! | [`secret`] | client secrets, redirect URLs, retry tokens, signing secrets | print one (`Debug` is `[redacted]`, no `Display`) |
//! | [`refund`] | refunds as the PSP reports them and what to do about a failed one ([`refund_step`]) | count as refunded what the PSP has not said `succeeded` |
//! | [`dispute`] | disputes as the PSP reports them, beside the payment | change a payment's status |
//! | [`recovery`] | what recovery does with one open payment before any I/O ([`recovery_step`]) | ask a PSP other than the payment's own (invariant 13) |
//! | [`saga`] | the checkout saga's states as types, their transitions and the one table of its next step | let a stored saga run a step out of order |
//! | [`breaker`] | the PSP circuit breaker's rule: what counts, when it opens, when it closes | keep state of its own (the shell stores it) |
//! | [`provider`] | the PSP a payment belongs to ([`PspName`]) and which references it can issue | be a client: it names a PSP, it does not call one |
//! | [`stripe`] | what a Stripe PaymentIntent's status means for our payment ([`stripe::IntentStatus`]: its outcome, the cancel's view of it) | read Stripe's objects (`psp::stripe` does) |
//! | [`ids`], [`money`], [`metadata`], [`text`], [`error`] | values parsed once at the edge (ids, amounts, metadata, text within its limits) and their one error ([`DomainError`]) | accept text a queue or a stream cannot carry |
//! | `fixtures` (feature `fixtures`) | builders for other crates' tests | be used outside tests |

// Unit tests may be long (a table of cases, a story): the 60-line limit is for the code they test.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod breaker;
pub mod client_view;
pub mod dispute;
pub mod error;
pub mod event;
pub mod finalize;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod ids;
pub mod metadata;
pub mod money;
pub mod observation;
pub mod payment;
pub mod provider;
pub mod recovery;
pub mod refund;
pub mod saga;
pub mod secret;
pub mod status;
pub mod stripe;
pub mod text;

pub use client_view::ClientView;
pub use dispute::{Dispute, DisputeFact, DisputeReport, DisputeStatus};
pub use error::DomainError;
pub use event::{EventKind, PaymentEvent};
pub use finalize::{decide, Decision, DeferReason, IgnoreReason, Transition};
pub use ids::{CorrelationId, DisputeId, IdempotencyKey, OrderId, PaymentId, PspEventId, PspReference, Sku};
pub use metadata::Metadata;
pub use money::{Currency, Money};
pub use observation::{Channel, Claims, Observation, Outcome, RefundReport};
pub use payment::{CustomerAction, NewPayment, Offered, Payment, StrayCapture};
pub use provider::{KnownPsps, PspName, StandardPsp};
pub use recovery::{recovery_step, NothingToAsk, RecoveryStep, Unasked};
pub use refund::{
    give_back_key, give_back_refund, refund_step, saga_refund_settled, stray_refund_key, GiveBack, GiveBackRefund,
    RefundEntry, RefundStatus, RefundStep, RefundTotals,
};
pub use secret::{ClientSecret, RedirectPolicy, RedirectUrl, RetryToken, SigningSecret};
pub use status::PaymentStatus;
