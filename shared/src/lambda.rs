//! What every Lambda's `main` does around its handler: the cold start (telemetry, the environment and the AWS
//! SDK's configuration, once; [`ColdStart`]), the clients a function is built on ([`Clients`]), and serving:
//! an HTTP API behind the caller guard ([`serve_guarded`]) or any other event ([`serve_event`]: the
//! invocation's deadline, telemetry flushed before the answer, an error's whole chain for the runtime).
//!
//! Every function is built the same way, so its `main` is three lines: the cold start, its settings read once
//! (`Settings::from_env(&start.env)`, in its crate) and its state built from them and the clients
//! (`<Function>::build(&settings, clients)`, also what the local stack and the tests call, with each
//! function's own recorded clients), then serve.
//!
//! Every function runs on tokio's current-thread runtime. Lambda hands a process one invocation at a time,
//! so worker threads have nothing to run side by side: they only pass each I/O wake-up from the thread that
//! polls the sockets to the one that runs the handler. The intake measured both (`bench intake-cpu`,
//! `benchmarks/RESULTS.md`, Experiments): four times fewer context switches and about a quarter less CPU
//! per webhook on one thread. Calls made side by side (`tokio::join!`) still overlap their
//! waits; nothing in a function blocks its thread or spawns CPU-bound work.

use crate::http::CallerGuard;
use crate::telemetry::ErrorChain;
use crate::{aws, clock, telemetry, ConfigError, Env};
use lambda_http::lambda_runtime::{self, LambdaEvent};
use lambda_http::{service_fn, Body, Request, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use tokio::time::Instant;

/// Why a function could not be built at its cold start (a setting, a secret that could not be read, ...):
/// the start fails with it, before the first invocation.
pub type BuildError = Box<dyn std::error::Error + Send + Sync>;

/// What a function starts from, read once per cold start. Nothing here needs a setting of the function's
/// own: each function reads its settings (its table among them, if it has one) from `env`.
pub struct ColdStart {
    /// The process environment, for the function's own settings.
    pub env: Env,
    /// The AWS SDK's configuration (region, credentials), for the clients.
    pub sdk: aws_config::SdkConfig,
}

impl ColdStart {
    /// Turns telemetry on, then reads the environment, the stage every metric carries
    /// ([`crate::metrics::init_stage`]; missing, it fails the start, not the first request) and the function's
    /// version ([`crate::metrics::init_version`]), and loads the SDK's configuration.
    pub async fn begin() -> Result<Self, ConfigError> {
        telemetry::init();
        let env = Env::process();
        crate::metrics::init_stage(&env)?;
        crate::metrics::init_version(&env);
        let sdk = aws::sdk_config().await;
        Ok(Self { env, sdk })
    }

    /// The function's clients on the SDK's configuration.
    pub fn clients(&self) -> Clients {
        Clients::from_sdk(&self.sdk)
    }
}

/// The AWS clients a function's state is built on. In AWS one set per cold start ([`ColdStart::clients`]);
/// the local stack hands each function its own, recorded under the function's name, so that
/// `scripts/check_permissions.py` can hold each function's calls against its role.
#[derive(Debug, Clone)]
pub struct Clients {
    /// The SDK's configuration, for what a function reads once at its start (Secrets Manager).
    pub sdk: aws_config::SdkConfig,
    /// DynamoDB, with the functions' retry and timeout settings.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// SQS (the relay's queue, the saga's escalations).
    pub sqs: aws_sdk_sqs::Client,
}

impl Clients {
    /// The clients on `sdk`, as a function makes them at its cold start.
    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            sdk: sdk.clone(),
            dynamodb: aws::dynamodb_client(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
        }
    }
}

/// Serves an HTTP API that only the orchestrator's role may call (an HTTP API has no resource policy):
/// `guard` answers a refused caller, `handler` every other request. Each invocation's spans are exported
/// before the answer, because Lambda freezes the process after it.
pub async fn serve_guarded<H, F>(guard: &CallerGuard, handler: H) -> Result<(), lambda_http::Error>
where
    H: Fn(Request) -> F + Sync,
    F: Future<Output = Result<Response<Body>, lambda_http::Error>> + Send,
{
    lambda_http::run(service_fn(|req| async {
        let answer = match guard.check(&req) {
            Ok(()) => handler(req).await,
            Err(refused) => Ok(refused.into_response()),
        };
        telemetry::flush();
        answer
    }))
    .await
}

/// Serves a function invoked with events of type `E` (a stream batch, a queue batch, a schedule's tick): for
/// each one, `handler` gets the event and the invocation's deadline (Lambda's, less
/// [`clock::ANSWER_MARGIN`] to answer in), its spans are exported before the answer (Lambda freezes the
/// process after it), and an error is handed to the runtime as its whole chain (the runtime records only
/// the error's own text).
pub async fn serve_event<E, R, H, F, X>(handler: H) -> Result<(), lambda_runtime::Error>
where
    E: DeserializeOwned + Send,
    R: Serialize,
    H: Fn(E, Instant) -> F,
    F: Future<Output = Result<R, X>>,
    X: std::error::Error + Send + Sync + 'static,
{
    lambda_runtime::run(lambda_runtime::service_fn(|event: LambdaEvent<E>| {
        let deadline = clock::invocation_deadline(event.context.deadline, clock::ANSWER_MARGIN);
        // Boxed: a handler's future nested in the runtime's is deep enough to overflow the compiler's layout
        // queries (the relay's did); one allocation per invocation.
        let answer = Box::pin(handler(event.payload, deadline));
        async move {
            let answer = answer.await;
            telemetry::flush();
            answer.map_err(|e| lambda_runtime::Error::from(ErrorChain(&e).to_string()))
        }
    }))
    .await
}
