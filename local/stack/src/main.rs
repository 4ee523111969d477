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
//! With `PSP_BASE_URL` as well (the PSP simulator) it serves the checkout saga's API on `/checkouts`, feeds
//! the saga's inbox from the queue, and runs the saga sweeper, the reconciler and the webhook catch-up every
//! few seconds (the local stand-ins for their schedules).
//!
//! Configuration by convention: `TABLE_NAME`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`,
//! `PSP_BASE_URL`, `WEBHOOK_SECRETS`, `WEBHOOK_PROVIDERS`, `LOCAL_API_PORT` (default 3000),
//! `SAGA_PAYMENT_TIMEOUT_SECONDS`, `RECOVERY_STALE_AFTER_SECONDS` (default 10 here), `CATCHUP_SETTLE_SECONDS`
//! (default 5 here). The table and the queues are created from `infra/template.yaml` when they do not exist.

use bytes::Bytes;
use checkout_saga::runner::Runner;
use clients::FunctionClients;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use lambda_http::Body;
use shared::http::ApiError;
use shared::lease::Leases;
use shared::psp::PspSet;
use shared::recovery::{Recovery, RecoverySettings};
use shared::router::{RouteTableError, Router};
use shared::saga::Escalation;
use shared::telemetry::ErrorChain;
use shared::{aws, telemetry, Config, Env, PaymentStore};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tracing::{error, info};

mod clients;
mod outbox;

struct Apps {
    routes: Router<Function>,
    sync: payments_api::App,
    intake: webhook_intake::App,
    checkout: Option<Arc<Runner<PspSet>>>,
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

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let mut env = Env::process();
    if env.optional("RECOVERY_STALE_AFTER_SECONDS").is_none() {
        // Locally, recovery looks at payments open for 10 s rather than the deployed 5 minutes.
        env = env.with("RECOVERY_STALE_AFTER_SECONDS", "10");
    }
    if env.optional("CATCHUP_SETTLE_SECONDS").is_none() {
        // Locally, the catch-up leaves events to their webhooks for 5 s rather than the deployed minute.
        env = env.with("CATCHUP_SETTLE_SECONDS", "5");
    }
    let config = Config::from(&env)?;
    let sdk = aws::sdk_config().await;
    // The stack's own client (the table, the stream's ARN); each function gets its own clients.
    let client = aws::dynamodb_client(&sdk);
    let clients = FunctionClients::new(&sdk);
    ensure_table(&client, &config.table_name).await?;
    let mut checkout = None;
    if env.optional("AWS_ENDPOINT_URL_SQS").is_some() {
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let queues = local_dev::queues::create(&sqs, &config.table_name).await;
        let mut events = None;
        if env.optional("PSP_BASE_URL").is_some() {
            let env = env.clone().with("ESCALATION_QUEUE_URL", queues.escalation_url.clone());
            let functions = checkout_functions(&clients, &sdk, &config, &env).await?;
            tokio::spawn(outbox::schedules(
                functions.sweeper,
                functions.reconciler,
                functions.catchup,
            ));
            events = Some(functions.events);
            checkout = Some(functions.api);
        }
        let outbox = outbox::run(clients.clone(), client, config.table_name.clone(), queues, events);
        tokio::spawn(outbox);
    }
    let apps = Arc::new(Apps {
        routes: routes()?,
        sync: payments_api::App::from_env(
            PaymentStore::new(clients.dynamodb("payments-api"), &config.table_name),
            &env,
        )?,
        intake: webhook_intake::App::from_env(&sdk, clients.dynamodb("webhook-intake"), &config, &env).await?,
        checkout,
    });

    let port: u16 = env.number("LOCAL_API_PORT", 3000)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = TcpListener::bind(addr).await?;
    info!(%addr, table = %config.table_name, "local API listening");
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

/// The checkout saga's three functions and the reconciler, each built as its binary builds it, on its own
/// clients.
struct CheckoutFunctions {
    api: Arc<Runner<PspSet>>,
    events: Arc<Runner<PspSet>>,
    sweeper: Arc<Runner<PspSet>>,
    reconciler: Recovery<PspSet>,
    catchup: webhook_intake::catchup::CatchUp,
}

async fn checkout_functions(
    clients: &FunctionClients,
    sdk: &aws_config::SdkConfig,
    config: &Config,
    env: &Env,
) -> Result<CheckoutFunctions, Error> {
    let runner = |function: &'static str| async move {
        let mut runner = checkout_saga::runner_from_env(sdk, clients.dynamodb(function), config, env).await?;
        // `runner_from_env` makes its SQS client from the SDK configuration: this one is the function's own.
        runner.escalation = Escalation::new(clients.sqs(function), env.required("ESCALATION_QUEUE_URL")?);
        Ok::<_, Error>(Arc::new(runner))
    };
    // As functions/reconciler/src/main.rs builds it.
    let dynamodb = clients.dynamodb("reconciler");
    let reconciler = Recovery {
        store: PaymentStore::new(dynamodb.clone(), &config.table_name),
        leases: Leases::new(dynamodb.clone(), &config.table_name, config.lease),
        psp: shared::psp::set::from_env(sdk, dynamodb, &config.table_name, env).await?,
        settings: RecoverySettings::from(env)?,
    };
    // As functions/webhook-intake/src/bin/webhook-catchup.rs builds it.
    let catchup =
        webhook_intake::catchup::CatchUp::from_env(sdk, clients.dynamodb("webhook-catchup"), config, env).await?;
    Ok(CheckoutFunctions {
        catchup,
        api: runner("checkout-api").await?,
        events: runner("checkout-events").await?,
        sweeper: runner("checkout-sweeper").await?,
        reconciler,
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
            Some(runner) => checkout_saga::api::handle(runner, request).await,
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
