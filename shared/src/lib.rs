//! The one library every function uses: the pure payments core (re-exported) plus everything that touches
//! AWS: the DynamoDB payment store with its versioned write, leases, configuration and telemetry.

pub use payments_core::*;

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
pub mod psp;
pub mod recovery;
pub mod retry;
pub mod router;
pub mod saga;
pub mod store;
pub mod telemetry;

pub use config::{Config, ConfigError, Env};
pub use lease::{Lease, LeaseConfig, Leases};
pub use store::{FinalizeOutcome, FinalizeResult, PaymentStore, StoreError};
