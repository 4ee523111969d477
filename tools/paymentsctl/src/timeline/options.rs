//! What the timeline looks for besides the payment itself, and the defaults it takes from the functions'
//! own variables, so its findings use the thresholds the functions run with.

use shared::{ConfigError, Env};

/// What the timeline looks for besides the payment itself.
#[derive(Debug, Clone)]
pub struct Options {
    /// Consumers whose cursors to show (default: the order projection).
    pub consumers: Vec<String>,
    /// The escalation queue, if known; `None` skips escalations (and says so).
    pub escalation_queue: Option<String>,
    /// A saga open longer than this is called stuck (the sweeper's threshold).
    pub saga_stuck_after_ms: i64,
    /// A payment open longer than this is one recovery should have asked the PSP about.
    pub payment_stale_after_ms: i64,
    /// The intake's log group: its Logs Insights query is run (`None`: the query is only printed).
    pub log_group: Option<String>,
    /// How long the Logs Insights query may run before it is stopped.
    pub logs_deadline: std::time::Duration,
    pub now_ms: i64,
    /// Show a spinner on stderr during scans.
    pub progress: bool,
    /// The local stack's log file: its webhook lines for the payment are shown (there is no Logs Insights
    /// locally).
    pub local_log: Option<std::path::PathBuf>,
}

impl Options {
    /// From the functions' own variables (`SAGA_STUCK_AFTER_SECONDS`, `RECOVERY_STALE_AFTER_SECONDS`,
    /// `INTAKE_LOG_GROUP`), with their documented defaults; a malformed value is an error.
    pub fn from_env(env: &Env, now_ms: i64) -> Result<Self, ConfigError> {
        let millis = |name: &'static str, default: u64| -> Result<i64, ConfigError> {
            let seconds = env.seconds(name, std::time::Duration::from_secs(default))?;
            Ok(i64::try_from(seconds.as_millis()).unwrap_or(i64::MAX))
        };
        Ok(Self {
            consumers: vec![order_projection::NAME.to_owned()],
            escalation_queue: None,
            saga_stuck_after_ms: millis("SAGA_STUCK_AFTER_SECONDS", 60)?,
            payment_stale_after_ms: millis("RECOVERY_STALE_AFTER_SECONDS", 300)?,
            log_group: env.optional("INTAKE_LOG_GROUP"),
            logs_deadline: std::time::Duration::from_secs(30),
            now_ms,
            progress: false,
            local_log: None,
        })
    }
}
