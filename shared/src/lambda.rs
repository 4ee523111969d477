//! What every Lambda's `main` does around its handler: the cold start (telemetry, the environment, the shared
//! settings and the AWS SDK's configuration, once) and, for the HTTP APIs, serving behind the caller guard.
//! Each function's `main` then only builds its own state and names its handler.
//!
//! Every function runs on tokio's current-thread runtime. Lambda hands a process one invocation at a time,
//! so worker threads have nothing to run side by side: they only pass each I/O wake-up from the thread that
//! polls the sockets to the one that runs the handler. The intake measured both (`bench intake-cpu`,
//! `benchmarks/RESULTS.md`, Experiments): four times fewer context switches and about a quarter less CPU
//! per webhook on one thread. Calls made side by side (`tokio::join!`) still overlap their
//! waits; nothing in a function blocks its thread or spawns CPU-bound work.

use crate::http::CallerGuard;
use crate::{aws, telemetry, Config, ConfigError, Env};
use lambda_http::{service_fn, Body, Request, Response};
use std::future::Future;

/// What a function starts from, read once per cold start.
pub struct ColdStart {
    /// The process environment, for the function's own settings.
    pub env: Env,
    /// The settings every function shares (`TABLE_NAME`, leases).
    pub config: Config,
    /// The AWS SDK's configuration (region, credentials), for the clients.
    pub sdk: aws_config::SdkConfig,
}

impl ColdStart {
    /// Turns telemetry on, then reads the environment, the stage every metric carries
    /// ([`crate::metrics::init_stage`]) and the shared settings (a missing or malformed one fails the start,
    /// not the first request) and loads the SDK's configuration.
    pub async fn begin() -> Result<Self, ConfigError> {
        telemetry::init();
        let env = Env::process();
        crate::metrics::init_stage(&env)?;
        let config = Config::from(&env)?;
        let sdk = aws::sdk_config().await;
        Ok(Self { env, config, sdk })
    }

    /// A DynamoDB client on the SDK's configuration.
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws::dynamodb_client(&self.sdk)
    }
}

/// Serves an HTTP API that only the orchestrator's role may call (an HTTP API has no resource policy):
/// `guard` answers a refused caller, `handler` every other request. Each invocation's spans are exported
/// before the answer, because Lambda freezes the process after it.
pub async fn serve_guarded<H, F>(guard: CallerGuard, handler: H) -> Result<(), lambda_http::Error>
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
