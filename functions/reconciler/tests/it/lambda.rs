//! The reconciler run as its Lambda binary (the Lambda Runtime API served on 127.0.0.1, one scheduled event)
//! against DynamoDB Local and the Stripe-speaking simulator, with one open payment for each PaymentIntent
//! status Stripe can report. Each payment ends in the status Stripe's documentation implies, a customer's
//! action survives while Stripe still asks for it, a PaymentIntent of another amount captures nothing, and
//! every request carries the API key as a Bearer token.

use integration_tests::http_stub::{self, StubResponse};
use integration_tests::TestContext;
use psp::{IntentStatus, PaymentIntent, StripeApi, StripeClient, StripeSettings};
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use shared::{
    Channel, ClientView, CorrelationId, EventKind, Money, NewPayment, OrderId, Payment, PaymentId, PaymentStatus,
    PspReference, SigningSecret,
};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub(crate) const KEY: &str = "sk_test_reconciler";

/// Serves the Lambda Runtime API: hands out one scheduled event, then holds every further `next`; reports
/// the function's answer (`Ok`) or its error (`Err`).
async fn runtime_api() -> (String, mpsc::UnboundedReceiver<Result<String, String>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handed_out = Arc::new(Mutex::new(false));
    let url = http_stub::serve(move |request| {
        let (tx, handed_out) = (tx.clone(), handed_out.clone());
        async move {
            let line = request.request_line().to_owned();
            if line.starts_with("GET /2018-06-01/runtime/invocation/next") {
                if std::mem::replace(&mut *handed_out.lock().unwrap(), true) {
                    std::future::pending::<()>().await;
                }
                let deadline = shared::clock::now_ms() + 60_000;
                let event = r#"{"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}"#;
                return Some(
                    StubResponse::json(200, event)
                        .header("lambda-runtime-aws-request-id", "req-1")
                        .header("lambda-runtime-deadline-ms", deadline.to_string())
                        .header(
                            "lambda-runtime-invoked-function-arn",
                            "arn:aws:lambda:us-east-1:123456789012:function:reconciler",
                        ),
                );
            }
            let outcome = if line.contains("/response ") {
                Ok(request.body.clone())
            } else {
                Err(format!("{line}: {}", request.body))
            };
            let _ = tx.send(outcome);
            Some(StubResponse::json(202, "{}"))
        }
    })
    .await;
    (url, rx)
}

pub(crate) struct World {
    pub(crate) ctx: TestContext,
    pub(crate) sim: Arc<Simulator>,
    pub(crate) psp_url: String,
}

impl World {
    pub(crate) async fn new() -> Self {
        // The slow scenarios stay where they are for the whole test.
        Self::with_slow(Duration::from_secs(3600)).await
    }

    /// A world whose slow scenarios (`slow_action`, `slow_processing`, ...) take their next step after `slow`.
    pub(crate) async fn with_slow(slow: Duration) -> Self {
        let sim = Arc::new(Simulator {
            ledger: Ledger::new(KEY, Timings { slow }, None),
            webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
            secret: SigningSecret::parse("whsec_test").unwrap(),
            delivery: DeliveryOptions {
                max_attempts: 1,
                ..DeliveryOptions::default()
            },
            client: HttpClient::default(),
            storm_rate: 0.0,
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let psp_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(sim.clone().serve(listener));
        Self {
            ctx: TestContext::new().await,
            sim,
            psp_url,
        }
    }

    pub(crate) fn psp(&self) -> StripeClient {
        StripeClient::new(
            &StripeSettings::local(&self.psp_url, KEY).expect("PSP settings"),
            psp::ApiKey::parse(KEY).unwrap(),
        )
        .unwrap()
    }

    /// A PaymentIntent at the PSP, created the way the saga creates one, for `amount` (minor units of EUR).
    pub(crate) async fn intent(&self, name: &str, scenario: &str, amount: u64) -> PaymentIntent {
        let (payment, order) = (
            PaymentId::parse(format!("pay_{scenario}")).unwrap(),
            OrderId::parse("o-1").unwrap(),
        );
        let money = Money::new(amount, shared::Currency::parse("EUR").unwrap()).unwrap();
        let request = psp::ChargeRequest {
            payment_id: &payment,
            order_id: &order,
            money: &money,
            payment_method: &format!("pm_{scenario}"),
        };
        match self.psp().charge(&format!("{name}:charge"), &request).await {
            Ok(pi) => pi,
            Err(e) => *e
                .payment_intent()
                .cloned()
                .map(Box::new)
                .expect("a decline carries its PaymentIntent"),
        }
    }

    /// Our payment of 10.00 EUR bound to `intent`, brought to `status` through the one finalize.
    async fn payment(&self, name: &str, intent: &PaymentIntent, status: PaymentStatus) -> PaymentId {
        let id = PaymentId::parse(format!("pay_{name}_{}", uuid::Uuid::new_v4().simple())).unwrap();
        let new = NewPayment {
            id: id.clone(),
            order_id: OrderId::parse(format!("order-{name}")).unwrap(),
            money: Money::new(1000, shared::Currency::parse("EUR").unwrap()).unwrap(),
            provider: shared::PspName::Stripe,
            psp_reference: Some(PspReference::parse(intent.id.as_str()).unwrap()),
            metadata: Default::default(),
            correlation_id: CorrelationId::parse("corr-setup").unwrap(),
            trace_context: None,
            now_ms: shared::clock::now_ms(),
        };
        self.ctx.store.create(new).await.expect("create");
        let outcome = match status {
            PaymentStatus::Pending => None,
            PaymentStatus::Processing => Some(shared::Outcome::Processing),
            PaymentStatus::RequiresAction => Some(shared::Outcome::RequiresAction(intent.action().unwrap())),
            other => panic!("setup for {other} not needed"),
        };
        if let Some(outcome) = outcome {
            let observation = shared::Observation::new(Channel::Sync, outcome, CorrelationId::parse("c").unwrap());
            self.ctx.store.finalize(&id, &observation, None).await.expect("setup");
        }
        id
    }

    pub(crate) async fn get(&self, id: &PaymentId) -> Payment {
        self.ctx.store.get(id).await.unwrap().unwrap()
    }
}

/// The release reconciler binary as Lambda runs it, against `runtime` (the stub Runtime API) and `w`'s
/// table and simulator, deployed to the stage `it-stage`, every open payment due at once; its stdout piped
/// (its EMF records).
fn reconciler_process(w: &World, runtime: &str) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_reconciler"))
        .env("AWS_LAMBDA_RUNTIME_API", runtime.trim_start_matches("http://"))
        .env("AWS_LAMBDA_FUNCTION_NAME", "reconciler")
        .env("STAGE", "it-stage")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "test")
        .env(
            "AWS_ENDPOINT_URL_DYNAMODB",
            integration_tests::dynamodb_local::endpoint(),
        )
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("TABLE_NAME", &w.ctx.table)
        .env("PSP_BASE_URL", &w.psp_url)
        .env("PSP_API_KEY", KEY)
        .env("PSP_REDIRECTS", "never")
        .env_remove("PSP_API_KEY_ARN")
        .env("RECOVERY_STALE_AFTER_SECONDS", "0")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the reconciler binary starts")
}

#[tokio::test]
async fn the_reconciler_binary_leaves_each_payment_where_stripe_says_it_is() {
    let w = World::new().await;
    let challenge = w.intent("challenge", "abandoned_action", 1000).await;
    assert_eq!(challenge.status, IntentStatus::RequiresAction);
    let succeeded = w.intent("succeeded", "succeeded", 1000).await;
    let canceled = w.intent("canceled", "failed", 1000).await;
    let declined = w.intent("declined", "decline_then_retry", 1000).await;
    assert_eq!(declined.status, IntentStatus::RequiresPaymentMethod);
    let refunded = w.refunded_in_full(w.intent("refunded", "succeeded", 1000).await).await;
    let processing = w.intent("processing", "slow_processing", 1000).await;
    let other_amount = w.intent("other_amount", "succeeded", 1200).await;

    let in_challenge = w
        .payment("in_challenge", &challenge, PaymentStatus::RequiresAction)
        .await;
    let was_processing = w.payment("was_processing", &challenge, PaymentStatus::Processing).await;
    let captured = w.payment("captured", &succeeded, PaymentStatus::Pending).await;
    let failed = w.payment("failed", &canceled, PaymentStatus::Pending).await;
    let attempt_failed = w.payment("attempt_failed", &declined, PaymentStatus::Pending).await;
    let refunded_payment = w.payment("refunded", &refunded, PaymentStatus::Pending).await;
    let still_processing = w.payment("processing", &processing, PaymentStatus::Processing).await;
    let mismatch = w.payment("mismatch", &other_amount, PaymentStatus::Pending).await;
    let (calls_before, refused_before) = w.sim.ledger.auth_counts();

    let (runtime, mut outcomes) = runtime_api().await;
    let mut lambda = reconciler_process(&w, &runtime);
    let answer = tokio::time::timeout(Duration::from_secs(60), outcomes.recv())
        .await
        .expect("the invocation ends within a minute")
        .expect("an answer");
    lambda.kill().await.ok();
    let answer: serde_json::Value = serde_json::from_str(&answer.expect("the invocation succeeded")).unwrap();
    assert_eq!(answer["found"], 8, "{answer}");
    // The run's metrics, in the stage the function was deployed to.
    let mut stdout = String::new();
    lambda.stdout.take().unwrap().read_to_string(&mut stdout).await.unwrap();
    let run = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Payments/Recovery")
        .expect("the run's EMF record");
    assert_eq!(
        run["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        serde_json::json!([["Stage"]])
    );
    assert_eq!(
        (run["Stage"].as_str(), run["Found"].as_u64()),
        (Some("it-stage"), Some(8)),
        "{run}"
    );
    // Every payment was created and due just now: no lag, and the ones left open are seconds old.
    assert!(run["RecoveryLagSeconds"].as_u64().is_some_and(|lag| lag < 60), "{run}");
    assert!(
        run["OldestOpenPaymentAgeSeconds"].as_u64().is_some_and(|age| age < 60),
        "{run}"
    );

    let status = |p: &Payment| p.status;
    let p = w.get(&in_challenge).await;
    assert_eq!(status(&p), PaymentStatus::RequiresAction);
    assert!(
        ClientView::from(&p).carries_secret(),
        "the customer keeps the challenge's secret"
    );
    let p = w.get(&was_processing).await;
    assert_eq!(
        status(&p),
        PaymentStatus::RequiresAction,
        "the action Stripe asks for is handed back"
    );
    assert_eq!(p.action, Some(challenge.action().unwrap()));
    assert_eq!(status(&w.get(&captured).await), PaymentStatus::Captured);
    assert_eq!(status(&w.get(&failed).await), PaymentStatus::Failed);
    let p = w.get(&attempt_failed).await;
    assert_eq!(
        (p.status, p.reason.as_deref()),
        (PaymentStatus::AttemptFailed, Some("insufficient_funds"))
    );
    let p = w.get(&refunded_payment).await;
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Refunded, 1000));
    assert_eq!(status(&w.get(&still_processing).await), PaymentStatus::Processing);
    let p = w.get(&mismatch).await;
    assert_eq!(p.status, PaymentStatus::Pending, "another amount captures nothing");
    let events = w.ctx.events(&mismatch).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!((last.kind, last.path), (EventKind::AnomalyRecorded, Channel::Recovery));
    assert!(
        last.reason.as_deref().unwrap_or_default().contains("amount 1200"),
        "{:?}",
        last.reason
    );

    let (calls, refused) = w.sim.ledger.auth_counts();
    assert_eq!(
        calls - calls_before,
        8,
        "one status query per payment, each with the Bearer key"
    );
    assert_eq!(refused, refused_before, "no request without the key");
    assert_eq!(refused, 0);
}

impl World {
    /// Refunds a succeeded PaymentIntent in full at the PSP.
    async fn refunded_in_full(&self, pi: PaymentIntent) -> PaymentIntent {
        let reference = PspReference::parse(pi.id.as_str()).unwrap();
        self.psp().refund("refund-all", &reference, None).await.expect("refund");
        self.psp().retrieve(&reference).await.unwrap()
    }
}

/// Issue 44: Stripe's 429 (its rate limit: `invalid_request_error`, code `rate_limit`, as the simulator
/// answers it) is counted by the deployed binary as `PspRateLimited`, by stage (what the template's
/// `PspRateLimitedAlarm` reads) and by provider; the client's retry then gets the payment through.
#[tokio::test]
async fn the_reconciler_binary_counts_stripes_429s_for_the_rate_limit_alarm() {
    let w = World::new().await;
    let succeeded = w.intent("limited", "succeeded", 1000).await;
    let id = w.payment("limited", &succeeded, PaymentStatus::Pending).await;
    // The next two requests are answered 429 rate_limit; the third attempt of the read goes through.
    w.sim.ledger.storm(429, 2);
    let (runtime, mut outcomes) = runtime_api().await;
    let mut lambda = reconciler_process(&w, &runtime);
    let answer = tokio::time::timeout(Duration::from_secs(60), outcomes.recv())
        .await
        .expect("the invocation ends within a minute")
        .expect("an answer");
    lambda.kill().await.ok();
    answer.expect("the invocation succeeded");
    let mut stdout = String::new();
    lambda.stdout.take().unwrap().read_to_string(&mut stdout).await.unwrap();
    let limited: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"] == "PspRateLimited")
        .collect();
    assert_eq!(limited.len(), 2, "one record per 429: {stdout}");
    let record = &limited[0];
    assert_eq!(record["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Payments/Psp");
    assert_eq!(
        record["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        serde_json::json!([["Stage"], ["Stage", "Provider"]])
    );
    assert_eq!(
        (
            record["Stage"].as_str(),
            record["Provider"].as_str(),
            record["PspRateLimited"].as_u64()
        ),
        (Some("it-stage"), Some("stripe"), Some(1)),
        "{record}"
    );
    assert_eq!(
        w.get(&id).await.status,
        PaymentStatus::Captured,
        "the retry got through"
    );
}
