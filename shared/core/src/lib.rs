//! Pure payment logic shared by every path: the domain types, the one finalize decision and the client view.
//!
//! Nothing here does I/O or depends on the AWS SDK, so it is tested as pure functions and `trybuild` can
//! compile against it cheaply. Storage lives in the `shared` crate, which re-exports this one.

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
pub use refund::{refund_step, GiveBack, RefundEntry, RefundStatus, RefundStep, RefundTotals};
pub use secret::{ClientSecret, RedirectPolicy, RedirectUrl, RetryToken, SigningSecret};
pub use status::PaymentStatus;
