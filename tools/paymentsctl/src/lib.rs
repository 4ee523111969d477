//! `paymentsctl`: the on-call engineer's one command. It reads (and, for replays and retries, writes) the same
//! table and queues as the functions, from the same settings (`TABLE_NAME`, `QUEUE_URL`,
//! `ESCALATION_QUEUE_URL`, the SDK's endpoint variables), and writes only through the functions' own code.
//!
//! | module | owns |
//! |---|---|
//! | [`settings`] | the table and queue URLs (locally found by the local stack's queue names) |
//! | [`when`] | human times: `2026-12-01T10:00Z`, `--last 2h`, epoch milliseconds |
//! | [`deliveries`] | the intake's log lines about a payment's deliveries: a Logs Insights query, or the local log |
//! | [`timeline`] | one time-ordered story of a payment or order from every item that mentions it, with gaps and anomalies |
//! | [`parked`] | parked webhooks: list, and replay through the intake's parser, check and the one finalize |
//! | [`escalations`] | the saga escalation queue: list (without consuming), retry through the saga runner |
//! | [`breaker`] | the PSP circuit breaker's item: show, and reset conditioned on what was shown |
//! | [`replay`] | republishing events to the queue, DLQ redrive, with `--dry-run` and progress |
//! | [`table`] | plain aligned tables for people (`--json` for machines) |
//!
//! Never here: a decision of its own. Replays go through `payments_core::decide` and
//! `PaymentStore::finalize_from`, retries through `checkout_saga::runner::Runner::resume`, so an operator's
//! action obeys the same version token, lease and dedup as the functions.

pub mod breaker;
pub mod deliveries;
pub mod escalations;
pub mod parked;
pub mod replay;
pub mod settings;
pub mod table;
pub mod timeline;
pub mod when;

/// Errors at the command's edge: printed once with their cause chain.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
