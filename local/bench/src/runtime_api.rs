//! A stand-in for the Lambda runtime API, enough to run a release function binary here: it hands out one
//! invocation at a time (as Lambda does), collects each answer, and can spawn the function against itself
//! with the environment a deployed function has.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
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
    invocations: mpsc::Sender<Value>,
    answers: mpsc::Receiver<Answer>,
    server: tokio::task::JoinHandle<()>,
}

struct Shared {
    invocations: Mutex<mpsc::Receiver<Value>>,
    answers: mpsc::Sender<Answer>,
    polls: mpsc::Sender<Instant>,
    next_id: std::sync::atomic::AtomicU64,
}

impl RuntimeApi {
    /// Listens on 127.0.0.1 (a free port).
    pub async fn start() -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (invocations, pending) = mpsc::channel(1);
        let (answered, answers) = mpsc::channel(1);
        let (polls, first_poll) = mpsc::channel(1);
        let shared = Arc::new(Shared {
            invocations: Mutex::new(pending),
            answers: answered,
            polls,
            next_id: 0.into(),
        });
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| serve(shared.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            first_poll,
            invocations,
            answers,
            server,
        })
    }

    /// Invokes the function with `event` and waits for its answer.
    pub async fn invoke(&mut self, event: Value) -> Result<Answer, BoxError> {
        self.invocations.send(event).await.map_err(|_| "runtime API stopped")?;
        let answer = tokio::time::timeout(Duration::from_secs(30), self.answers.recv()).await?;
        answer.ok_or_else(|| "runtime API stopped".into())
    }

    /// Spawns `binary` as a deployed function would run, against this runtime API and `table`; its output
    /// goes to `log` (the function's own log lines, as CloudWatch would get them) or nowhere.
    pub fn spawn(&self, binary: &Path, table: &str, log: Option<&Path>) -> Result<tokio::process::Child, BoxError> {
        let stdout = match log {
            Some(path) => std::process::Stdio::from(std::fs::File::create(path)?),
            None => std::process::Stdio::null(),
        };
        let mut command = tokio::process::Command::new(binary);
        // Only what a deployed function gets (nothing of the bench's own settings, such as `RUST_LOG`), and
        // the DynamoDB Local and SQS endpoints the bench was started with.
        command.env_clear();
        for endpoint in [
            "AWS_ENDPOINT_URL_DYNAMODB",
            "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
            "AWS_ENDPOINT_URL_SQS",
        ] {
            if let Ok(url) = std::env::var(endpoint) {
                command.env(endpoint, url);
            }
        }
        command
            .env("AWS_LAMBDA_RUNTIME_API", self.addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
            // Every function refuses to start in Lambda without the stage its metrics carry.
            .env("STAGE", "bench")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "bench")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "local")
            .env("AWS_SECRET_ACCESS_KEY", "local")
            .env("TABLE_NAME", table)
            .env("QUEUE_URL", "http://127.0.0.1:9/queue.fifo")
            .env("ESCALATION_QUEUE_URL", "http://127.0.0.1:9/escalations")
            .env("PSP_BASE_URL", "https://psp.example")
            // The checkout functions and the reconciler refuse to start without a PSP key and a redirect choice;
            // neither is used here.
            .env("PSP_API_KEY", "sk_test_bench")
            .env("PSP_REDIRECTS", "never")
            .env(
                "WEBHOOK_SECRETS",
                r#"{"stripe":["whsec_local_dev_stripe_signing_secret"],"standard":["whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA=="]}"#,
            )
            .stdout(stdout)
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        Ok(command.spawn()?)
    }
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
        let Some(event) = shared.invocations.lock().await.recv().await else {
            // No more invocations: hold the poll open, the function stays idle as between invocations.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return Ok(Response::new(Full::new(Bytes::new())));
        };
        let id = shared.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let deadline = shared::clock::now_ms().saturating_add(30_000);
        let response = Response::builder()
            .header("lambda-runtime-aws-request-id", format!("bench-{id}"))
            .header("lambda-runtime-deadline-ms", deadline.to_string())
            .header(
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:us-east-1:000000000000:function:bench",
            )
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(event.to_string())));
        return Ok(response.unwrap_or_default());
    }
    let is_error = path.ends_with("/error");
    let body = req.into_body().collect().await?.to_bytes();
    if path.contains("/invocation/") {
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let _ = shared.answers.send(Answer { body, is_error }).await;
    }
    let mut accepted = Response::new(Full::new(Bytes::new()));
    *accepted.status_mut() = hyper::StatusCode::ACCEPTED;
    Ok(accepted)
}
