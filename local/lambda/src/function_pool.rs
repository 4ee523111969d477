//! One function as Lambda runs it: a pool of execution environments, each its own process of the function's
//! binary speaking the Runtime API (`runtime_api`), cold-started when no idle one is left, at most
//! `ReservedConcurrentExecutions` at once (beyond it an invocation is throttled, as Lambda answers 429), each
//! invocation bounded by the function's `Timeout` (past it the process is killed and the invocation answered
//! with Lambda's `Sandbox.Timedout`), a cold start that fails answered with the function's own `/init/error`
//! report or Lambda's `Runtime.ExitError`. Its environments' output goes to the function's log (`console`),
//! with Lambda's own report of each of these failures, as CloudWatch gets them. What each trigger does with
//! these outcomes (API Gateway's 502/503, a poller's retry, the asynchronous queue's retries) is the trigger's:
//! see docs/LOCAL.md.

use crate::account::LOCAL_ACCOUNT;
use crate::console::FunctionLog;
use crate::runtime_api::{lambda_error, timed_out, Output, RuntimeApi, INIT_DEADLINE};
use serde_json::Value;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Child;
use tokio::sync::{Mutex, Semaphore};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a failed cold start waits for the rest of what its process wrote (a child process of the function
/// could hold the pipes open).
const DRAIN_WITHIN: Duration = Duration::from_secs(2);

/// What a function is, as far as running it goes: the template's `Timeout`, `ReservedConcurrentExecutions`
/// and environment, and the binary `sam build` packages for it (built for this host).
#[derive(Clone, Debug)]
pub struct FunctionSpec {
    /// The template's logical id (`AWS_LAMBDA_FUNCTION_NAME` and the log's name).
    pub name: String,
    /// The binary, or an emulator and its arguments then the binary.
    pub command: Vec<OsString>,
    /// Exactly the environment the template gives the function.
    pub environment: Vec<(String, String)>,
    /// The function's `Timeout`.
    pub timeout: Duration,
    /// `ReservedConcurrentExecutions`: `None` when the template sets none (the account's pool, unbounded
    /// here).
    pub reserved: Option<usize>,
    /// The function's log, which every environment's output goes to (with Lambda's reports of timeouts,
    /// exits and failed cold starts), or `None`: into this process's own output.
    pub log: Option<Arc<FunctionLog>>,
}

/// How Lambda answers one invocation.
#[derive(Debug)]
pub enum Outcome {
    /// The function's answer (status 200, no `X-Amz-Function-Error`).
    Response(Value),
    /// `X-Amz-Function-Error: Unhandled`: the error the function reported, or Lambda's own (timeout, a
    /// runtime that exited, a failed cold start), as Lambda's payload.
    FunctionError(Value),
    /// 429 `TooManyRequestsException` (`ReservedFunctionConcurrentInvocationLimitExceeded`): every
    /// environment the reservation allows is busy.
    Throttled,
}

/// One execution environment: its runtime API and the process serving it.
struct Environment {
    api: RuntimeApi,
    child: Child,
}

/// The execution environments of one function.
pub struct FunctionPool {
    spec: FunctionSpec,
    idle: Mutex<Vec<Environment>>,
    /// One permit per environment the reservation allows (busy or idle alike hold none while idle).
    slots: Arc<Semaphore>,
    started: std::sync::atomic::AtomicUsize,
}

impl FunctionPool {
    /// A pool with no environment yet: the first invocation cold-starts one.
    #[must_use]
    pub fn new(spec: FunctionSpec) -> Self {
        let slots = spec.reserved.unwrap_or(Semaphore::MAX_PERMITS);
        Self {
            spec,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(slots)),
            started: 0.into(),
        }
    }

    /// The function's logical id.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The function's (unqualified) ARN in the local world's account, as Lambda's records name it.
    #[must_use]
    pub fn arn(&self) -> String {
        format!("arn:aws:lambda:us-east-1:{LOCAL_ACCOUNT}:function:{}", self.spec.name)
    }

    /// How many environments were cold-started so far.
    pub fn cold_starts(&self) -> usize {
        self.started.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Cold-starts one environment and keeps it idle for the first invocation, as a deployed function's first
    /// request would: Lambda's payload (the function's own init error, or `Runtime.ExitError`) when it does not
    /// start.
    pub async fn start(&self) -> Result<Result<(), Value>, BoxError> {
        let id = uuid::Uuid::new_v4().to_string();
        Ok(match self.cold_start(&id).await? {
            Ok(environment) => {
                self.idle.lock().await.push(environment);
                Ok(())
            }
            Err(payload) => Err(payload),
        })
    }

    /// Invokes the function with `event` as Lambda does for a synchronous call: an idle environment, or a
    /// new one while the reservation allows it, or throttled.
    pub async fn invoke(&self, event: Value) -> Result<Outcome, BoxError> {
        let Ok(_slot) = self.slots.clone().try_acquire_owned() else {
            return Ok(Outcome::Throttled);
        };
        let id = uuid::Uuid::new_v4().to_string();
        let idle = self.idle.lock().await.pop();
        let mut environment = match idle {
            Some(environment) => environment,
            None => match self.cold_start(&id).await? {
                Ok(environment) => environment,
                Err(payload) => return Ok(Outcome::FunctionError(payload)),
            },
        };
        let Environment { api, child } = &mut environment;
        let answer = tokio::select! {
            answer = api.invoke_as(&id, event) => answer?,
            exited = child.wait() => {
                let status = exited.map_or_else(|e| e.to_string(), |s| s.to_string());
                let what = format!("Runtime exited with error: {status}");
                return Ok(Outcome::FunctionError(self.reported(lambda_error("Runtime.ExitError", &id, &what))));
            }
        };
        let Some(answer) = answer else {
            // Lambda stops the environment of an invocation that timed out: the next one cold-starts.
            environment.child.kill().await.ok();
            return Ok(Outcome::FunctionError(self.reported(timed_out(&id, self.spec.timeout))));
        };
        self.idle.lock().await.push(environment);
        Ok(if answer.is_error {
            Outcome::FunctionError(answer.body)
        } else {
            Outcome::Response(answer.body)
        })
    }

    /// A new environment, ready for its first invocation `id`; Lambda's payload when its init failed.
    async fn cold_start(&self, id: &str) -> Result<Result<Environment, Value>, BoxError> {
        self.started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut api = RuntimeApi::start(self.spec.timeout).await?;
        let command: Vec<&std::ffi::OsStr> = self.spec.command.iter().map(OsString::as_os_str).collect();
        let output = if self.spec.log.is_some() {
            Output::Piped
        } else {
            Output::Inherit
        };
        let mut child = api.spawn(&command, &self.spec.name, &self.spec.environment, output)?;
        let capture = self.spec.log.as_ref().map(|log| log.capture(&mut child));
        Ok(match api.ready(&mut child, id, INIT_DEADLINE).await {
            Ok(_) => Ok(Environment { api, child }),
            Err(failed) => {
                // What the function said before it stopped comes first, as in its log group.
                if let Some(capture) = capture {
                    capture.drained(DRAIN_WITHIN).await;
                }
                Err(self.reported(failed.payload))
            }
        })
    }

    /// `payload`, Lambda's own error for an invocation or a cold start, after writing it into the function's
    /// log as Lambda writes it there (`Task timed out after ...`).
    fn reported(&self, payload: Value) -> Value {
        if let Some(log) = &self.spec.log {
            let text = |key: &str| payload[key].as_str().unwrap_or_default().to_owned();
            log.report(&format!("{}: {}", text("errorType"), text("errorMessage")));
        }
        payload
    }
}
