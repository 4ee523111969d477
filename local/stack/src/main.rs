//! The whole system on one machine: every HTTP route of the API Gateway served on 127.0.0.1 by one host
//! process that calls the same handlers the Lambda functions run, against DynamoDB Local.
//!
//! Why one process rather than `cargo lambda watch`: API Gateway's path routing (`/payments/...` to
//! payments-api, `/webhooks/{provider}` to webhook-intake) is reproduced here on one port, it starts in a
//! second with no per-function emulator, and the handlers are exactly the library code the binaries wrap.
//!
//! With `AWS_ENDPOINT_URL_SQS` set it also runs the outbox: the stream pump (the local stand-in for the
//! DynamoDB Streams event source mapping) feeds the relay handler, which publishes to the FIFO queue, and an
//! SQS poller (the stand-in for the SQS event source mapping) feeds the order projection consumer.
//!
//! With `STRIPE_EVENT_SOURCE` as well it runs the EventBridge way in: the Stripe events queue (created from the
//! template, fed by the simulator through the local stand-in for the partner bus) polled into
//! `webhook-eventbridge`'s handler.
//!
//! With `PSP_BASE_URL` as well (the PSP simulator) it serves the checkout saga's API on `/checkouts`, feeds
//! the saga's inbox from the queue, and runs the saga sweeper, the reconciler and the webhook catch-up every
//! few seconds (the local stand-ins for their schedules).
//!
//! Configuration by convention: `TABLE_NAME`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`,
//! `PSP_BASE_URL`, `WEBHOOK_SECRETS`, `WEBHOOK_PROVIDERS`, `STRIPE_EVENT_SOURCE`, `STRIPE_EVENT_AWS_ACCOUNT`,
//! `LOCAL_API_PORT` (default 3000),
//! `AWS_ENDPOINT_URL_SECRETS_MANAGER` (set: the secrets given by value are stored there and read by ARN),
//! `SAGA_PAYMENT_TIMEOUT_SECONDS`, `RECOVERY_STALE_AFTER_SECONDS` (default 10 here), `CATCHUP_SETTLE_SECONDS`
//! (default 5 here), `SAGA_STUCK_AFTER_SECONDS` (default 10 here). Each function reads its own settings from
//! these (its `Settings::from_env`) and is built with its own constructor on its own clients, as its `main`
//! builds it in AWS. The table and the queues are created from `infra/template.yaml` when they do not exist.

use bytes::Bytes;
use checkout_saga::{CheckoutApi, CheckoutEvents, CheckoutSweeper};
use clients::FunctionClients;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use lambda_http::Body;
use outbox_relay::Publisher;
use psp::PspSet;
use reconciler::Recovery;
use shared::http::ApiError;
use shared::router::{RouteTableError, Router};
use shared::telemetry::ErrorChain;
use shared::{aws, telemetry, Config, Env};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tracing::{error, info};
use webhook_intake::catchup::CatchUp;

mod clients;
mod eventbridge;
mod outbox;

struct Apps {
    routes: Router<Function>,
    sync: payments_api::App,
    intake: webhook_intake::App,
    checkout: Option<CheckoutApi>,
}

/// The function API Gateway sends a path to; each function then routes by method and path itself.
#[derive(Debug, Clone, Copy)]
enum Function {
    PaymentsApi,
    WebhookIntake,
    CheckoutApi,
}

/// API Gateway's path routing (`infra/template.yaml`), on the functions' own router.
fn routes() -> Result<Router<Function>, RouteTableError> {
    Router::builder()
        .any("/payments", Function::PaymentsApi)
        .any("/payments/{*rest}", Function::PaymentsApi)
        .any("/webhooks/{*rest}", Function::WebhookIntake)
        .any("/checkouts", Function::CheckoutApi)
        .any("/checkouts/{*rest}", Function::CheckoutApi)
        .any("/inventory/{*rest}", Function::CheckoutApi)
        .build()
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A worker thread's stack: what Lambda gives the main thread every handler runs on there (8 MiB), not
/// tokio's 2 MiB. An unoptimised build's checkout request (hyper, the API, the saga's steps, recovery, the
/// SDK) came within a few frames of 2 MiB and overflowed in a local run.
const WORKER_STACK: usize = 8 * 1024 * 1024;

fn main() -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK)
        .build()?;
    runtime.block_on(run())
}

/// Builds each function with its constructor on its own clients, then serves.
async fn run() -> Result<(), Error> {
    telemetry::init();
    let sdk = aws::sdk_config().await;
    let env = local_secrets(local_env(Env::process()), &sdk).await?;
    let config = Config::from(&env)?;
    // The stack's own client (the table, the stream's ARN); each function gets its own clients.
    let client = aws::dynamodb_client(&sdk);
    let clients = FunctionClients::new(&sdk);
    ensure_table(&client, &config.table_name).await?;
    let checkout = match env.optional("AWS_ENDPOINT_URL_SQS") {
        Some(_) => start_outbox(&clients, client, &config, &env).await?,
        None => None,
    };
    let apps = Apps::build(&clients, &env, checkout).await?;
    listen(Arc::new(apps), env.number("LOCAL_API_PORT", 3000)?, &config.table_name).await
}

impl Apps {
    /// The HTTP functions, each built with its constructor on its own clients.
    async fn build(clients: &FunctionClients, env: &Env, checkout: Option<CheckoutApi>) -> Result<Self, Error> {
        let payments = payments_api::Settings::from_env(env)?;
        let intake = webhook_intake::Settings::from_env(env)?;
        Ok(Self {
            routes: routes()?,
            sync: payments_api::App::build(&payments, clients.function("payments-api")).await?,
            intake: webhook_intake::App::build(&intake, clients.function("webhook-intake")).await?,
            checkout,
        })
    }
}

/// The process environment with the local defaults of what is deployed slower.
fn local_env(mut env: Env) -> Env {
    let local = [
        // Recovery looks at payments open for 10 s rather than the deployed 5 minutes.
        ("RECOVERY_STALE_AFTER_SECONDS", "10"),
        // The catch-up leaves events to their webhooks for 5 s rather than the deployed minute.
        ("CATCHUP_SETTLE_SECONDS", "5"),
        // The sweeper resumes sagas open for 10 s rather than the deployed minute.
        ("SAGA_STUCK_AFTER_SECONDS", "10"),
    ];
    for (name, value) in local {
        if env.optional(name).is_none() {
            env = env.with(name, value);
        }
    }
    env
}

/// The secrets each function reads by ARN in AWS, as in AWS: with a local Secrets Manager
/// (`AWS_ENDPOINT_URL_SECRETS_MANAGER`, moto's), each secret given by value (`WEBHOOK_SECRETS`, `PSP_API_KEY`,
/// `ADYEN_API_KEY`) and not by ARN is stored there, and the functions get its ARN instead (which their settings
/// prefer), so the intake and the PSP clients read, cache and re-read it as they do in AWS.
async fn local_secrets(mut env: Env, sdk: &aws_config::SdkConfig) -> Result<Env, Error> {
    if env.optional("AWS_ENDPOINT_URL_SECRETS_MANAGER").is_none() {
        return Ok(env);
    }
    let secrets = [
        ("WEBHOOK_SECRETS", "WEBHOOK_SECRETS_ARN", "webhook-secrets"),
        ("PSP_API_KEY", "PSP_API_KEY_ARN", "psp-api-key"),
        ("ADYEN_API_KEY", "ADYEN_API_KEY_ARN", "adyen-api-key"),
    ];
    for (by_value, by_arn, name) in secrets {
        let Some(value) = env.optional(by_value).filter(|_| env.optional(by_arn).is_none()) else {
            continue;
        };
        // One name per process: the e2e runs start two stacks on one moto.
        let name = format!("local-stack-{}-{name}", std::process::id());
        let arn = local_dev::world::store_secret(sdk, &name, &value).await?;
        info!(secret = %name, variable = by_arn, "secret stored in the local Secrets Manager");
        env = env.with(by_arn, arn);
    }
    Ok(env)
}

/// Creates the queues and starts the outbox (relay and inbox); with `PSP_BASE_URL` also the saga's functions
/// and the scheduled ones. The checkout API, if it runs.
async fn start_outbox(
    clients: &FunctionClients,
    client: aws_sdk_dynamodb::Client,
    config: &Config,
    env: &Env,
) -> Result<Option<CheckoutApi>, Error> {
    let sqs = aws_sdk_sqs::Client::new(&clients.sdk());
    let queues = local_dev::queues::create(&sqs, &config.table_name).await;
    let env = env
        .clone()
        .with("ESCALATION_QUEUE_URL", queues.escalation_url.clone())
        .with("QUEUE_URL", queues.queue_url.clone())
        .with("RELAY_FAILURES_QUEUE_URL", queues.relay_failures_url.clone());
    let publisher = Publisher::build(
        &outbox_relay::Settings::from_env(&env)?,
        clients.function("outbox-relay"),
    )
    .await?;
    let mut events = None;
    let mut api = None;
    if env.optional("PSP_BASE_URL").is_some() {
        let functions = checkout_functions(clients, &env).await?;
        tokio::spawn(outbox::schedules(
            functions.sweeper,
            functions.reconciler,
            functions.catchup,
        ));
        events = Some(functions.events);
        api = Some(functions.api);
    }
    eventbridge::start(clients, &env, &config.table_name).await?;
    let outbox = outbox::run(
        clients.clone(),
        client,
        config.table_name.clone(),
        queues,
        publisher,
        events,
    );
    tokio::spawn(outbox);
    Ok(api)
}

/// Serves the HTTP API on 127.0.0.1:`port` until the process ends.
async fn listen(apps: Arc<Apps>, port: u16, table: &str) -> Result<(), Error> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = TcpListener::bind(addr).await?;
    info!(%addr, table, "local API listening");
    println!("local API on http://{addr} (payments: /payments, webhooks: /webhooks/{{provider}})");
    loop {
        let (stream, _) = listener.accept().await?;
        let apps = apps.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| serve(apps.clone(), req));
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                error!(error = %ErrorChain(&e), "connection failed");
            }
        });
    }
}

/// The checkout saga's three functions, the reconciler and the webhook catch-up, each built with its
/// function's constructor on its own clients.
struct CheckoutFunctions {
    api: CheckoutApi,
    events: CheckoutEvents,
    sweeper: CheckoutSweeper,
    reconciler: Recovery<PspSet>,
    catchup: CatchUp,
}

async fn checkout_functions(clients: &FunctionClients, env: &Env) -> Result<CheckoutFunctions, Error> {
    let saga = checkout_saga::Settings::from_env(env)?;
    let recovery = reconciler::Settings::from_env(env)?;
    let mut catchup = webhook_intake::catchup::Settings::from_env(env)?;
    // The local bus is a stand-in with no partner event source to describe (`local_dev::eventbridge`).
    catchup.event_source = None;
    Ok(CheckoutFunctions {
        api: CheckoutApi::build(&saga, clients.function("checkout-api")).await?,
        events: CheckoutEvents::build(&saga, clients.function("checkout-events")).await?,
        sweeper: CheckoutSweeper::build(&saga, clients.function("checkout-sweeper")).await?,
        reconciler: Recovery::build(&recovery, clients.function("reconciler")).await?,
        catchup: CatchUp::build(&catchup, clients.function("webhook-catchup")).await?,
    })
}

/// Routes like the HTTP API does and converts between hyper and lambda_http types.
async fn serve(apps: Arc<Apps>, req: hyper::Request<Incoming>) -> Result<hyper::Response<Full<Bytes>>, Error> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let body = if bytes.is_empty() {
        Body::Empty
    } else {
        Body::Binary(bytes.to_vec())
    };
    let request = lambda_http::Request::from_parts(parts, body);
    let function = match apps.routes.at(request.method(), request.uri().path()) {
        Ok(found) => found.route,
        Err(refused) => return Ok(hyper_response(refused.into_response())),
    };
    let response = match function {
        Function::WebhookIntake => webhook_intake::handle(&apps.intake, request).await,
        Function::CheckoutApi => match &apps.checkout {
            Some(api) => checkout_saga::api::handle(&api.runner, request).await,
            None => Ok(ApiError::not_found("checkouts need PSP_BASE_URL and SQS").into_response()),
        },
        Function::PaymentsApi => payments_api::handle(&apps.sync, request).await,
    }
    .map_err(|e| -> Error { e.to_string().into() })?;
    Ok(hyper_response(response))
}

fn hyper_response(response: lambda_http::Response<Body>) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = response.into_parts();
    let bytes = match body {
        Body::Empty => Bytes::new(),
        Body::Text(text) => Bytes::from(text),
        Body::Binary(data) => Bytes::from(data),
        _ => Bytes::new(),
    };
    hyper::Response::from_parts(parts, Full::new(bytes))
}

async fn ensure_table(client: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), Error> {
    if client.describe_table().table_name(name).send().await.is_ok() {
        return Ok(());
    }
    local_dev::table::TableDefinition::from_repo()
        .create(client, name)
        .await;
    info!(table = name, "table created from infra/template.yaml");
    Ok(())
}
