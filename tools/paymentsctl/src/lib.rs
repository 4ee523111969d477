//! `paymentsctl`: the on-call engineer's one command. It reads (and, for replays and retries, writes) the same
//! table and queues as the functions, from the same settings (`TABLE_NAME`, `QUEUE_URL`,
//! `ESCALATION_QUEUE_URL`, the SDK's endpoint variables) or from the stack's outputs (`--stack`), and writes
//! only through the functions' own code.
//!
//! | module | owns |
//! |---|---|
//! | [`cli`] | the command line, what each command runs, the exit codes ([`Exit`]), the `--yes` confirmation |
//! | [`stack`] | `--stack`: the CloudFormation outputs that become the settings, over the environment |
//! | [`target`] | where a run points (account, region, stack, table), said before it acts; conflicts refuse writes |
//! | [`settings`] | the table and queue URLs (locally found by the local stack's queue names) |
//! | [`when`] | human times: `2026-12-01T10:00Z`, `--last 2h`, epoch milliseconds |
//! | [`deliveries`] | the intake's log lines about a payment's deliveries: a Logs Insights query, or the local log |
//! | [`timeline`] | one time-ordered story of a payment or order from every item that mentions it, with gaps and anomalies |
//! | [`parked`] | parked webhooks: list, and replay through the intake's parser, check and the one finalize |
//! | [`escalations`] | the saga escalation queue: list (without consuming), retry by invoking the sweeper function (or `--local`) |
//! | [`breaker`] | the PSP circuit breaker's item: show, and reset conditioned on what was shown |
//! | [`doctor`] | one health check of a stack or the local world: alarms, queues, parked, breakers, oldest open items, the webhook endpoint |
//! | [`stripe`] | Stripe's API with the operator's key: webhook endpoints listed (`doctor`) and created with the pinned version (`stripe setup`) |
//! | [`replay`] | republishing events to the queue, DLQ redrive, with `--dry-run` and progress |
//! | [`table`] | plain aligned tables for people (`--json` for machines) |
//!
//! Never here: a decision of its own. Replays go through `payments_core::decide` and
//! `PaymentStore::finalize_from`, retries through the sweeper function's `checkout_saga::resume`, so an
//! operator's action obeys the same version token, lease and dedup as the functions.

pub mod breaker;
pub mod cli;
pub mod deliveries;
pub mod doctor;
pub mod escalations;
pub mod parked;
pub mod replay;
pub mod settings;
pub mod stack;
pub mod stripe;
pub mod table;
pub mod target;
pub mod timeline;
pub mod when;

/// Errors at the command's edge: printed once with their cause chain.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How a run ended: the process's exit code, the same for every command (documented in `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done, nothing to report.
    Fine = 0,
    /// 1: an error (AWS, a refused write, a confirmation answered no); nothing more was done.
    Error = 1,
    /// 2: the command line is wrong, a change without a terminal to ask and without `--yes`, or a write with a
    /// variable that disagrees with `--stack`.
    Usage = 2,
    /// 3: done, and it found something to look at (`timeline`: a gap or an anomaly; `doctor`: something
    /// needs a person).
    Findings = 3,
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit as u8)
    }
}

/// A command line that cannot run as given (exit 2), e.g. a bulk change with no one to ask and no `--yes`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// An AWS call that failed, named, with the service's code and message as its cause (the SDK's own `Display`
/// says only "service error"). Never the SDK error's `Debug`: it holds the raw response, items included.
#[derive(Debug, thiserror::Error)]
#[error("{call}")]
pub struct AwsError {
    call: String,
    #[source]
    source: shared::store::SdkFailure,
}

/// `err` of the call named `call` as an [`AwsError`].
pub fn aws_error<E, R>(call: impl Into<String>, err: aws_sdk_dynamodb::error::SdkError<E, R>) -> Error
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    Box::new(AwsError {
        call: call.into(),
        source: err.into(),
    })
}
