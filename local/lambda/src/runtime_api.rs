//! A stand-in for the Lambda runtime API of one execution environment, enough to run a release function
//! binary here: it hands out one invocation at a time (as Lambda does), with the function's own deadline,
//! collects each answer or the error the function reports from its init (`/init/error`), and can spawn the
//! function against itself with what Lambda gives every function plus the function's own settings (the
//! bench's, the template's in CI's cold start of the packaged arm64 binary under qemu: `cold-start`, and
//! each environment of `function_pool`).

use crate::account::LOCAL_ACCOUNT;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Mutex};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the function did with one invocation: its answer (the API Gateway response) or its error report.
#[derive(Debug)]
pub struct Answer {
    pub body: Value,
    pub is_error: bool,
}

/// The runtime API's address and its two ends: invocations in, answers out.
pub struct RuntimeApi {
    pub addr: SocketAddr,
    /// The first `invocation/next` poll (the end of the function's cold init).
    pub first_poll: mpsc::Receiver<Instant>,
    /// What the function reported to `/init/error` (its `errorType` and `errorMessage`) before it exits.
    init_errors: mpsc::Receiver<Value>,
    /// The function's `Timeout`: each invocation's deadline.
    timeout: Duration,
    invocations: mpsc::Sender<(String, Value)>,
    answers: mpsc::Receiver<Answer>,
    server: tokio::task::JoinHandle<()>,
}

struct Shared {
    invocations: Mutex<mpsc::Receiver<(String, Value)>>,
    answers: mpsc::Sender<Answer>,
    polls: mpsc::Sender<Instant>,
    init_errors: mpsc::Sender<Value>,
    timeout: Duration,
}

/// Why an execution environment did not become ready: Lambda's answer to the invocation that cold-started
/// it (`X-Amz-Function-Error: Unhandled`), with what the function said where it said something.
#[derive(Debug)]
pub struct ColdStartFailure {
    /// The payload Lambda returns: the function's own `/init/error` report, or Lambda's
    /// `Runtime.ExitError` / `Sandbox.Timedout`.
    pub payload: Value,
}

/// Where a spawned function's output (stdout and stderr alike) goes.
#[derive(Debug, Clone, Copy)]
pub enum Output<'a> {
    /// This process's own output.
    Inherit,
    /// A file of its own, started anew: its log lines as CloudWatch would get them.
    File(&'a Path),
    /// Pipes, for the caller to read (`console::FunctionLog::capture`).
    Piped,
}

/// How long Lambda lets a function's init run before it counts as failed.
pub const INIT_DEADLINE: Duration = Duration::from_secs(10);

impl RuntimeApi {
    /// Listens on 127.0.0.1 (a free port), for a function whose `Timeout` is `timeout`.
    pub async fn start(timeout: Duration) -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (invocations, pending) = mpsc::channel(1);
        let (answered, answers) = mpsc::channel(1);
        let (polls, first_poll) = mpsc::channel(1);
        let (reported, init_errors) = mpsc::channel(1);
        let shared = Arc::new(Shared {
            invocations: Mutex::new(pending),
            answers: answered,
            polls,
            init_errors: reported,
            timeout,
        });
        let server = tokio::spawn(serve_connections(listener, move |req| serve(shared.clone(), req)));
        Ok(Self {
            addr,
            first_poll,
            init_errors,
            timeout,
            invocations,
            answers,
            server,
        })
    }

    /// Invokes the function with `event` and waits for its answer; an error once its `Timeout` passed.
    pub async fn invoke(&mut self, event: Value) -> Result<Answer, BoxError> {
        let id = uuid::Uuid::new_v4().to_string();
        let answer = self.invoke_as(&id, event).await?;
        answer.ok_or_else(|| timed_out(&id, self.timeout).to_string().into())
    }

    /// Invokes the function with `event` as request `id`; `None` when its `Timeout` passed first (Lambda
    /// then stops the environment: the caller kills the process, see [`timed_out`]).
    pub async fn invoke_as(&mut self, id: &str, event: Value) -> Result<Option<Answer>, BoxError> {
        self.invocations
            .send((id.to_owned(), event))
            .await
            .map_err(|_| "runtime API stopped")?;
        match tokio::time::timeout(self.timeout, self.answers.recv()).await {
            Ok(answer) => Ok(Some(answer.ok_or("runtime API stopped")?)),
            Err(_) => Ok(None),
        }
    }

    /// Waits for the end of `child`'s cold init: its first poll. A function that reports an init error,
    /// exits first or polls not within `deadline` has failed its cold start, answered as Lambda answers
    /// the invocation that waited for it (request `id`).
    pub async fn ready(
        &mut self,
        child: &mut tokio::process::Child,
        id: &str,
        deadline: Duration,
    ) -> Result<Instant, ColdStartFailure> {
        // Biased: a function that reports its init error then exits is answered with its own report.
        let payload = tokio::select! {
            biased;
            poll = tokio::time::timeout(deadline, self.first_poll.recv()) => match poll {
                Ok(Some(at)) => return Ok(at),
                _ => lambda_error("Sandbox.Timedout", id, &format!("Init timed out after {:.2} seconds", deadline.as_secs_f64())),
            },
            Some(reported) = self.init_errors.recv() => reported,
            exited = child.wait() => {
                let status = exited.map_or_else(|e| e.to_string(), |s| s.to_string());
                lambda_error("Runtime.ExitError", id, &format!("Runtime exited with error: {status}"))
            }
        };
        child.kill().await.ok();
        Err(ColdStartFailure { payload })
    }

    /// Spawns `command` (the binary, or an emulator and its arguments then the binary) as a deployed function
    /// runs: nothing of this process's environment but the DynamoDB and SQS endpoints, what Lambda sets for
    /// every function (this runtime API, the name `function`, memory, version, log names, region, dummy
    /// credentials), then the function's own `settings`. Its output goes where `output` says.
    pub fn spawn(
        &self,
        command: &[&OsStr],
        function: &str,
        settings: &[(String, String)],
        output: Output<'_>,
    ) -> Result<tokio::process::Child, BoxError> {
        let (program, args) = command.split_first().ok_or("no command to spawn")?;
        // Both streams into one log, as CloudWatch gets both: a function that refuses its configuration
        // says why on either.
        let (stdout, stderr) = match output {
            Output::File(path) => {
                let file = std::fs::File::create(path)?;
                (
                    std::process::Stdio::from(file.try_clone()?),
                    std::process::Stdio::from(file),
                )
            }
            Output::Piped => (std::process::Stdio::piped(), std::process::Stdio::piped()),
            Output::Inherit => (std::process::Stdio::inherit(), std::process::Stdio::inherit()),
        };
        let mut spawned = tokio::process::Command::new(program);
        spawned.args(args).env_clear();
        // The local endpoints (nothing Lambda sets; a function in AWS reaches the real services), and the
        // catch-all one that keeps any other service's call on this machine.
        for endpoint in [
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_DYNAMODB",
            "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
            "AWS_ENDPOINT_URL_SQS",
            "AWS_ENDPOINT_URL_SECRETS_MANAGER",
        ] {
            if let Ok(url) = std::env::var(endpoint) {
                spawned.env(endpoint, url);
            }
        }
        spawned
            .env("AWS_LAMBDA_RUNTIME_API", self.addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", function)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", function)
            .env("AWS_LAMBDA_LOG_GROUP_NAME", function)
            // The caller's region and key where it has them: DynamoDB Local keeps one database per key and
            // region, so a function with other credentials would not see the tables its caller made.
            .env("AWS_REGION", inherited("AWS_REGION", "us-east-1"))
            .env("AWS_ACCESS_KEY_ID", inherited("AWS_ACCESS_KEY_ID", "local"))
            .env("AWS_SECRET_ACCESS_KEY", inherited("AWS_SECRET_ACCESS_KEY", "local"))
            .envs(settings.iter().map(|(k, v)| (k, v)))
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true);
        Ok(spawned.spawn()?)
    }
}

/// Serves every connection `listener` accepts (HTTP/1.1) with `handle`, until the task is dropped: the
/// runtime API's server and the HTTP API front's.
pub(crate) async fn serve_connections<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, hyper::Error>> + Send + 'static,
{
    while let Ok((stream, _)) = listener.accept().await {
        let handle = handle.clone();
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
}

/// Lambda's payload for an invocation that ran past the function's `Timeout` (`X-Amz-Function-Error:
/// Unhandled`).
pub fn timed_out(id: &str, timeout: Duration) -> Value {
    let after = format!("Task timed out after {:.2} seconds", timeout.as_secs_f64());
    lambda_error("Sandbox.Timedout", id, &after)
}

/// An error Lambda itself reports for request `id` (not the function): `RequestId: <id> Error: <what>`.
pub fn lambda_error(error_type: &str, id: &str, what: &str) -> Value {
    serde_json::json!({"errorType": error_type, "errorMessage": format!("RequestId: {id} Error: {what}")})
}

/// This process's `name`, or `default` when unset.
pub(crate) fn inherited(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// `GET invocation/next` waits for the next event; `POST invocation/{id}/response|error` is its answer.
async fn serve(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_owned();
    if req.method() == Method::GET && path.ends_with("/invocation/next") {
        let _ = shared.polls.try_send(Instant::now());
        let Some((id, event)) = shared.invocations.lock().await.recv().await else {
            // No more invocations: hold the poll open, the function stays idle as between invocations.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return Ok(Response::new(Full::new(Bytes::new())));
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let deadline = now_ms.saturating_add(shared.timeout.as_millis());
        let response = Response::builder()
            .header("lambda-runtime-aws-request-id", id)
            .header("lambda-runtime-deadline-ms", deadline.to_string())
            .header(
                "lambda-runtime-invoked-function-arn",
                format!("arn:aws:lambda:us-east-1:{LOCAL_ACCOUNT}:function:local"),
            )
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(event.to_string())));
        return Ok(response.unwrap_or_default());
    }
    let is_error = path.ends_with("/error");
    let body = req.into_body().collect().await?.to_bytes();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if path.contains("/invocation/") {
        let _ = shared.answers.send(Answer { body, is_error }).await;
    } else if path.ends_with("/init/error") {
        let _ = shared.init_errors.try_send(body);
    }
    let mut accepted = Response::new(Full::new(Bytes::new()));
    *accepted.status_mut() = hyper::StatusCode::ACCEPTED;
    Ok(accepted)
}
