//! The local Lambda (`function_pool` over `runtime_api`) against a real process speaking the Runtime API
//! (`runtime-probe`): the function's `Timeout` kills the invocation and answers as Lambda does, the
//! reservation throttles, environments are reused warm and cold-started when none is idle, a failed init is
//! reported with the function's own error; the HTTP API front routes, refuses and answers as API Gateway;
//! an asynchronous event is retried and sent to its on-failure destination (a queue in moto) as Lambda does;
//! the queue mapping's loop and the stream mapping (on DynamoDB Local's stream) deliver, retry, bisect and drop
//! as Lambda's event source mappings do.

use local_lambda::async_invoke::{AsyncInvoker, Delivery, Waits};
use local_lambda::console::{Console, FunctionLog};
use local_lambda::event_pattern::EventPattern;
use local_lambda::function_pool::{FunctionPool, FunctionSpec, Outcome};
use local_lambda::http_api::Route;
use local_lambda::sqs_poller::{invoke_batch, start_mapping, SqsPoller};
use local_lambda::stream_mapping::{StreamConsumer, Waits as StreamWaits};
use local_lambda::triggers::mapping::StreamMapping;
use local_lambda::triggers::route::{RouteAuth, Throttle};
use local_lambda::triggers::AsyncConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn probe(timeout: Duration, reserved: Option<usize>, init: &str) -> FunctionPool {
    FunctionPool::new(probe_spec(timeout, reserved, init))
}

fn probe_spec(timeout: Duration, reserved: Option<usize>, init: &str) -> FunctionSpec {
    FunctionSpec {
        name: "Probe".into(),
        command: vec![env!("CARGO_BIN_EXE_runtime-probe").into()],
        environment: vec![("PROBE_INIT".into(), init.into())],
        timeout,
        reserved,
        log: None,
    }
}

/// A terminal the test reads: what a `Console` wrote to it.
#[derive(Clone, Default)]
struct Screen(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Screen {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Screen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A fresh directory for one test's log files.
fn log_dir(test: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("local-lambda-{test}-{}", uuid::Uuid::new_v4().simple()))
}

/// The probe with its log in its own file and its errors on `screen`: the pool and the file.
fn logged_probe(test: &str, timeout: Duration, init: &str, screen: &Screen) -> (FunctionPool, std::path::PathBuf) {
    let log = FunctionLog::create(&log_dir(test), "Probe", Console::new(screen.clone())).expect("log");
    let path = log.path().to_owned();
    let mut spec = probe_spec(timeout, None, init);
    spec.log = Some(log);
    (FunctionPool::new(spec), path)
}

/// What the file at `path` holds once `expected` is in it `times` times (the log is written by tasks of its
/// own, one for each of the process's streams).
async fn file_with(path: &std::path::Path, expected: &str, times: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.matches(expected).count() >= times || Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_functions_log_lines_go_to_its_file_and_only_its_errors_to_the_console() {
    let screen = Screen::default();
    let (pool, path) = logged_probe("lines", Duration::from_secs(3), "ok", &screen);
    let info = r#"{"timestamp":"t","level":"INFO","message":"sweep done","spans":[]}"#;
    let metric = r#"{"_aws":{"CloudWatchMetrics":[]},"SweeperLagSeconds":0}"#;
    let error = r#"{"timestamp":"t","level":"ERROR","message":"the store failed","payment_id":"pay_1"}"#;
    let order = json!({"stdout": [info, metric, error], "stderr": ["thread 'main' panicked at the probe"]});
    for _ in 0..3 {
        pid(&pool.invoke(order.clone()).await.expect("invoke"));
    }
    file_with(&path, "the store failed", 3).await;
    let file = file_with(&path, "panicked", 3).await;
    assert_eq!(file.matches("sweep done").count(), 3, "{file}");
    assert_eq!(file.matches("SweeperLagSeconds").count(), 3, "{file}");
    assert_eq!(file.matches("the store failed").count(), 3, "{file}");
    let shown = screen.text();
    assert!(
        !shown.contains("sweep done") && !shown.contains("SweeperLagSeconds"),
        "{shown}"
    );
    assert_eq!(
        shown
            .matches("Probe: ERROR the store failed payment_id=pay_1\n")
            .count(),
        3,
        "{shown}"
    );
    assert_eq!(
        shown.matches("Probe: thread 'main' panicked at the probe\n").count(),
        3,
        "{shown}"
    );
    assert_eq!(shown.lines().count(), 6, "nothing else: {shown}");
}

#[tokio::test]
async fn lambdas_own_reports_reach_the_log_and_the_console() {
    let screen = Screen::default();
    let (pool, path) = logged_probe("reports", Duration::from_secs(1), "ok", &screen);
    error_of(pool.invoke(json!({"sleep_ms": 3000})).await.expect("invoke"));
    let timed_out = "Sandbox.Timedout: RequestId: ";
    assert!(file_with(&path, timed_out, 1)
        .await
        .contains("Task timed out after 1.00 seconds"));
    assert!(
        screen.text().starts_with(&format!("Probe: {timed_out}")),
        "{}",
        screen.text()
    );
    // A function that refuses to start: its own words, then Lambda's report, on the console.
    let screen = Screen::default();
    let (pool, path) = logged_probe("init", Duration::from_secs(1), "exit", &screen);
    error_of(pool.invoke(json!({})).await.expect("invoke"));
    assert!(file_with(&path, "Runtime.ExitError", 1)
        .await
        .contains("exit status: 3"));
    assert!(
        screen.text().contains("Probe: Runtime.ExitError: "),
        "{}",
        screen.text()
    );
}

/// The answering process's id, or the outcome when it is not an answer.
fn pid(outcome: &Outcome) -> u64 {
    match outcome {
        Outcome::Response(body) => body["pid"].as_u64().unwrap_or_default(),
        other => panic!("expected an answer, got {other:?}"),
    }
}

fn error_of(outcome: Outcome) -> Value {
    match outcome {
        Outcome::FunctionError(payload) => payload,
        other => panic!("expected a function error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_warm_environment_answers_again_without_a_cold_start() {
    let pool = probe(Duration::from_secs(3), None, "ok");
    let first = pool.invoke(json!({"n": 1})).await.expect("invoke");
    let second = pool.invoke(json!({"n": 2})).await.expect("invoke");
    assert_eq!(pid(&first), pid(&second));
    assert_eq!(pool.cold_starts(), 1);
    let Outcome::Response(body) = second else {
        unreachable!()
    };
    assert_eq!(body["event"], json!({"n": 2}));
}

#[tokio::test]
async fn an_invocation_past_the_timeout_is_killed_and_answered_as_lambda_does() {
    let pool = probe(Duration::from_secs(1), None, "ok");
    let warm = pid(&pool.invoke(json!({})).await.expect("invoke"));
    let started = Instant::now();
    let payload = error_of(pool.invoke(json!({"sleep_ms": 5000})).await.expect("invoke"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(payload["errorType"], "Sandbox.Timedout");
    let message = payload["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.ends_with("Error: Task timed out after 1.00 seconds"),
        "{message}"
    );
    // The environment that timed out is gone: the next invocation is a cold start in a new process.
    let next = pid(&pool.invoke(json!({})).await.expect("invoke"));
    assert_ne!(next, warm);
    assert_eq!(pool.cold_starts(), 2);
}

#[tokio::test]
async fn the_reservation_bounds_the_environments_and_throttles_beyond_it() {
    let pool = probe(Duration::from_secs(5), Some(2), "ok");
    let slow = || pool.invoke(json!({"sleep_ms": 1500}));
    let (a, b, c) = tokio::join!(slow(), slow(), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        pool.invoke(json!({})).await
    });
    let (a, b) = (a.expect("invoke"), b.expect("invoke"));
    assert_ne!(pid(&a), pid(&b), "two at once run in two environments");
    assert!(matches!(c.expect("invoke"), Outcome::Throttled));
    // Once they are done, an invocation takes one of the two warm environments.
    let after = pid(&pool.invoke(json!({})).await.expect("invoke"));
    assert!([pid(&a), pid(&b)].contains(&after));
    assert_eq!(pool.cold_starts(), 2);
}

#[tokio::test]
async fn a_reservation_of_zero_throttles_every_invocation() {
    let pool = probe(Duration::from_secs(1), Some(0), "ok");
    assert!(matches!(
        pool.invoke(json!({})).await.expect("invoke"),
        Outcome::Throttled
    ));
    assert_eq!(pool.cold_starts(), 0);
}

#[tokio::test]
async fn a_reported_error_is_the_function_error_and_the_environment_stays() {
    let pool = probe(Duration::from_secs(3), None, "ok");
    let payload = error_of(pool.invoke(json!({"fail": true})).await.expect("invoke"));
    assert_eq!(payload["errorType"], "Probe.Failed");
    pid(&pool.invoke(json!({})).await.expect("invoke"));
    assert_eq!(pool.cold_starts(), 1);
}

#[tokio::test]
async fn an_init_error_is_answered_with_the_functions_own_report() {
    let pool = probe(Duration::from_secs(3), None, "error");
    let payload = error_of(pool.invoke(json!({})).await.expect("invoke"));
    assert_eq!(
        payload,
        json!({"errorType": "Probe.InitRefused", "errorMessage": "PROBE_INIT says no"})
    );
}

#[tokio::test]
async fn a_runtime_that_exits_in_its_init_is_a_runtime_exit_error() {
    let pool = probe(Duration::from_secs(3), None, "exit");
    let payload = error_of(pool.invoke(json!({})).await.expect("invoke"));
    assert_eq!(payload["errorType"], "Runtime.ExitError");
    let message = payload["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("Runtime exited with error: exit status: 3"),
        "{message}"
    );
}

/// The HTTP API front on a free port with `routes`: its address.
async fn http_api(routes: Vec<Route>) -> std::net::SocketAddr {
    http_api_on(routes, &Screen::default()).await
}

/// The HTTP API front on a free port with `routes`, its request lines on `screen`: its address.
async fn http_api_on(routes: Vec<Route>, screen: &Screen) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let console = Console::new(screen.clone());
    tokio::spawn(local_lambda::http_api::serve(listener, routes, console));
    addr
}

#[tokio::test]
async fn each_request_is_one_line_on_the_console() {
    let function = Arc::new(probe(Duration::from_secs(3), None, "ok"));
    let screen = Screen::default();
    let routes = vec![
        route("POST", "/things/{id}", RouteAuth::None, &function),
        route("GET", "/payments/{id}", RouteAuth::Iam, &function),
    ];
    let addr = http_api_on(routes, &screen).await;
    request(addr, "POST /things/42?mode=fast HTTP/1.1", "{}").await;
    request(addr, "GET /payments/p1 HTTP/1.1", "").await;
    request(addr, "GET /nowhere HTTP/1.1", "").await;
    let shown = screen.text();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown}");
    let shape = |line: &str, start: &str| line.starts_with(start) && line.split_whitespace().nth(4) == Some("ms");
    assert!(shape(lines[0], "POST /things/42 200 "), "{shown}");
    assert!(shape(lines[1], "GET /payments/p1 403 "), "{shown}");
    assert!(
        lines[1].ends_with("(no SigV4 Authorization for execute-api)"),
        "{shown}"
    );
    assert!(shape(lines[2], "GET /nowhere 404 "), "{shown}");
}

fn route(method: &str, path: &str, auth: RouteAuth, function: &Arc<FunctionPool>) -> Route {
    Route {
        method: method.into(),
        path: path.into(),
        auth,
        throttle: None,
        function: function.clone(),
        caller: None,
    }
}

/// One HTTP/1.1 request: the answer's status, headers and body.
async fn request(addr: std::net::SocketAddr, head: &str, body: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let text = format!(
        "{head}\r\nHost: local\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(text.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, head.to_owned(), body.to_owned())
}

#[tokio::test]
async fn a_public_route_hands_its_function_api_gateways_event() {
    let function = Arc::new(probe(Duration::from_secs(3), None, "ok"));
    let addr = http_api(vec![route("POST", "/things/{id}", RouteAuth::None, &function)]).await;
    let (status, _, body) = request(addr, "POST /things/42?mode=fast HTTP/1.1\r\nX-Trace: t1", r#"{"n":1}"#).await;
    assert_eq!(status, 200, "{body}");
    let event = serde_json::from_str::<Value>(&body).expect("the probe's answer")["event"].clone();
    assert_eq!(event["routeKey"], "POST /things/{id}");
    assert_eq!(
        (event["body"].as_str(), event["headers"]["x-trace"].as_str()),
        (Some(r#"{"n":1}"#), Some("t1"))
    );
    // What the functions' runtime (lambda_http) reads it as.
    let parsed: aws_lambda_events::apigw::ApiGatewayV2httpRequest = serde_json::from_value(event).expect("2.0 event");
    assert_eq!(parsed.path_parameters.get("id").map(String::as_str), Some("42"));
    assert_eq!(parsed.query_string_parameters.first("mode"), Some("fast"));
    assert_eq!(parsed.request_context.http.method, hyper::Method::POST);
}

#[tokio::test]
async fn a_body_over_api_gateways_quota_is_refused_413_before_the_function() {
    let function = Arc::new(probe(Duration::from_secs(3), None, "ok"));
    let addr = http_api(vec![route("POST", "/things", RouteAuth::None, &function)]).await;
    let over = "x".repeat(local_lambda::http_api::MAX_PAYLOAD_BYTES + 1);
    let (status, _, body) = request(addr, "POST /things HTTP/1.1", &over).await;
    assert_eq!(
        (status, body.as_str()),
        (413, r#"{"message":"Request Entity Too Large"}"#)
    );
    assert_eq!(function.cold_starts(), 0, "the function never ran");
    let at_quota = "x".repeat(local_lambda::http_api::MAX_PAYLOAD_BYTES);
    let (status, _, body) = request(addr, "POST /things HTTP/1.1", &at_quota).await;
    assert_eq!(status, 200, "{}", &body[..body.len().min(200)]);
}

#[tokio::test]
async fn an_iam_route_refuses_an_unsigned_caller_before_the_function() {
    let function = Arc::new(probe(Duration::from_secs(3), None, "ok"));
    let addr = http_api(vec![route("GET", "/payments/{id}", RouteAuth::Iam, &function)]).await;
    let (status, _, body) = request(addr, "GET /payments/p1 HTTP/1.1", "").await;
    assert_eq!((status, body.as_str()), (403, r#"{"message":"Forbidden"}"#));
    assert_eq!(
        function.cold_starts(),
        0,
        "API Gateway refused it: the function never ran"
    );
    let local = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "local".into());
    let (status, _, body) = request(addr, &signed_head("GET", "/payments/p1", &local), "").await;
    assert_eq!(status, 200, "signed with the local world's credentials: {body}");
    let (status, _, body) = request(addr, &signed_head("GET", "/payments/p1", "another secret"), "").await;
    assert_eq!(
        (status, body.as_str()),
        (403, r#"{"message":"Forbidden"}"#),
        "another secret"
    );
    let bogus = "GET /payments/p1 HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=local/20261204/us-east-1/execute-api/aws4_request, SignedHeaders=host, Signature=00";
    assert_eq!(
        request(addr, bogus, "").await.0,
        403,
        "a header that only looks like SigV4"
    );
    let elsewhere = signed_head("GET", "/payments/p2", &local).replacen("/payments/p2", "/payments/p1", 1);
    assert_eq!(request(addr, &elsewhere, "").await.0, 403, "signed for another path");
}

/// A request head for `method` `path` (host `local`, as [`request`] sends it) signed as the SDK signs for
/// API Gateway (`execute-api`) with the local world's key id and `secret`.
fn signed_head(method: &str, path: &str, secret: &str) -> String {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    let key = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "local".into());
    let identity = aws_sdk_sqs::config::Credentials::new(key, secret, None, None, "test").into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("execute-api")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .expect("signing parameters")
        .into();
    let request = SignableRequest::new(method, path, [("host", "local")].into_iter(), SignableBody::Bytes(b""))
        .expect("a signable request");
    let (instructions, _) = sign(request, &params).expect("signed").into_parts();
    let mut head = format!("{method} {path} HTTP/1.1");
    for (name, value) in instructions.headers() {
        head.push_str(&format!("\r\n{name}: {value}"));
    }
    head
}

#[tokio::test]
async fn no_route_is_404_and_the_functions_answer_is_the_response() {
    let function = Arc::new(probe(Duration::from_secs(3), None, "ok"));
    let addr = http_api(vec![route("POST", "/things/{id}", RouteAuth::None, &function)]).await;
    for head in [
        "GET /things/1 HTTP/1.1",
        "POST /things HTTP/1.1",
        "POST /things/1/more HTTP/1.1",
    ] {
        let (status, _, body) = request(addr, head, "").await;
        assert_eq!((status, body.as_str()), (404, r#"{"message":"Not Found"}"#), "{head}");
    }
    let order = json!({"answer": {"statusCode": 409, "headers": {"x-why": "taken"}, "body": "{\"error\":\"x\"}"}});
    let (status, head, body) = request(addr, "POST /things/1 HTTP/1.1", &order.to_string()).await;
    assert_eq!((status, body.as_str()), (409, r#"{"error":"x"}"#));
    assert!(head.to_ascii_lowercase().contains("x-why: taken"), "{head}");
}

#[tokio::test]
async fn a_function_error_is_502_and_a_throttle_500_as_api_gateway_answers() {
    let failing = Arc::new(probe(Duration::from_secs(3), None, "ok"));
    let none_reserved = Arc::new(probe(Duration::from_secs(3), Some(0), "ok"));
    let addr = http_api(vec![
        route("POST", "/fail", RouteAuth::None, &failing),
        route("POST", "/throttled", RouteAuth::None, &none_reserved),
    ])
    .await;
    let internal = r#"{"message":"Internal Server Error"}"#;
    let (status, _, body) = request(addr, "POST /fail HTTP/1.1", r#"{"fail":true}"#).await;
    assert_eq!((status, body.as_str()), (502, internal));
    let (status, _, body) = request(addr, "POST /throttled HTTP/1.1", "{}").await;
    assert_eq!((status, body.as_str()), (500, internal));
}

/// The SDK's configuration for a local service.
fn sdk(service: &'static local_testkit::service::Service) -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new("local", "local", None, None, "lambda-tests"),
        ))
        .endpoint_url(service.endpoint())
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build()
}

/// A queue in moto standing in for an on-failure destination: its client and URL.
async fn destination() -> (aws_sdk_sqs::Client, String) {
    let sqs = aws_sdk_sqs::Client::new(&sdk(&local_testkit::service::SQS));
    let name = format!("on-failure-{}", uuid::Uuid::new_v4());
    let created = sqs.create_queue().queue_name(name).send().await.expect("create queue");
    let url = created.queue_url().expect("a queue URL").to_owned();
    (sqs, url)
}

/// The records on the destination queue.
async fn records(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<Value> {
    let received = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receive");
    received
        .messages()
        .iter()
        .map(|m| serde_json::from_str(m.body().unwrap_or_default()).expect("a JSON record"))
        .collect()
}

fn asynchronous(
    function: FunctionPool,
    max_retries: u64,
    max_age_ms: u64,
    to: Option<(aws_sdk_sqs::Client, String)>,
) -> AsyncInvoker {
    AsyncInvoker {
        function: Arc::new(function),
        name: "Probe".into(),
        config: AsyncConfig {
            max_retries,
            max_event_age: Duration::from_millis(max_age_ms),
            on_failure: None,
        },
        destination: to,
        waits: Waits {
            after_error: [Duration::from_millis(50), Duration::from_millis(100)],
            throttle_first: Duration::from_millis(20),
            throttle_max: Duration::from_millis(80),
        },
    }
}

#[tokio::test]
async fn an_asynchronous_event_that_keeps_failing_is_retried_then_sent_to_the_destination() {
    let (sqs, url) = destination().await;
    let invoker = asynchronous(
        probe(Duration::from_secs(3), None, "ok"),
        2,
        60_000,
        Some((sqs.clone(), url.clone())),
    );
    let event = json!({"fail": true, "run": "r1"});
    let delivery = invoker.deliver(event.clone()).await.expect("delivered");
    assert_eq!(
        delivery,
        Delivery::Failed {
            condition: "RetriesExhausted",
            invocations: 3
        },
        "Lambda's default: 2 retries"
    );
    let records = records(&sqs, &url).await;
    let [record] = records.as_slice() else {
        panic!("one record: {records:?}")
    };
    assert_eq!(record["requestContext"]["condition"], "RetriesExhausted");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 3);
    assert_eq!(record["requestPayload"], event);
    assert_eq!(record["responsePayload"]["errorType"], "Probe.Failed");
}

#[tokio::test]
async fn no_retry_runs_once_and_a_success_is_done() {
    let failing = asynchronous(probe(Duration::from_secs(3), None, "ok"), 0, 60_000, None);
    let delivery = failing.deliver(json!({"fail": true})).await.expect("delivered");
    assert_eq!(
        delivery,
        Delivery::Failed {
            condition: "RetriesExhausted",
            invocations: 1
        }
    );
    let answering = Arc::new(asynchronous(probe(Duration::from_secs(3), None, "ok"), 0, 60_000, None));
    let delivery = answering.invoke(json!({})).await.expect("joined").expect("delivered");
    assert_eq!(delivery, Delivery::Done { invocations: 1 });
}

#[tokio::test]
async fn a_throttled_event_waits_until_its_age_runs_out_then_goes_to_the_destination() {
    let (sqs, url) = destination().await;
    let invoker = asynchronous(
        probe(Duration::from_secs(3), Some(0), "ok"),
        2,
        400,
        Some((sqs.clone(), url.clone())),
    );
    let started = Instant::now();
    let delivery = invoker.deliver(json!({"run": "r2"})).await.expect("delivered");
    assert_eq!(
        delivery,
        Delivery::Failed {
            condition: "EventAgeExceeded",
            invocations: 0
        }
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "it waited: {:?}",
        started.elapsed()
    );
    let records = records(&sqs, &url).await;
    let [record] = records.as_slice() else {
        panic!("one record: {records:?}")
    };
    assert_eq!(record["requestContext"]["condition"], "EventAgeExceeded");
    assert!(record.get("responsePayload").is_none(), "{record}");
}

/// A FIFO queue in moto holding `bodies` (one message group), and its client.
async fn fifo_with(bodies: &[&str]) -> (aws_sdk_sqs::Client, String) {
    fifo_hiding_for(bodies, "30").await
}

/// [`fifo_with`], the queue's `VisibilityTimeout` `seconds`.
async fn fifo_hiding_for(bodies: &[&str], seconds: &str) -> (aws_sdk_sqs::Client, String) {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let (sqs, _) = destination().await;
    let name = format!("mapping-{}.fifo", uuid::Uuid::new_v4());
    let created = sqs
        .create_queue()
        .queue_name(name)
        .attributes(A::FifoQueue, "true")
        .attributes(A::VisibilityTimeout, seconds)
        .send()
        .await
        .expect("create FIFO queue");
    let url = created.queue_url().expect("a queue URL").to_owned();
    for (n, body) in bodies.iter().enumerate() {
        sqs.send_message()
            .queue_url(&url)
            .message_body(*body)
            .message_group_id("pay_1")
            .message_deduplication_id(n.to_string())
            .send()
            .await
            .expect("send");
    }
    (sqs, url)
}

/// The messages on `url`, visible or in flight.
async fn left_on(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("attributes");
    let count = |a: A| {
        attributes
            .attributes()
            .and_then(|m| m.get(&a))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    count(A::ApproximateNumberOfMessages) + count(A::ApproximateNumberOfMessagesNotVisible)
}

#[tokio::test]
async fn the_queue_mapping_deletes_what_the_function_handled_and_keeps_its_failed_items() {
    let (sqs, url) = fifo_with(&[r#"{"n":1}"#, r#"{"n":2,"fail":true}"#, r#"{"n":3}"#]).await;
    let function = probe(Duration::from_secs(3), None, "ok");
    let mut poller = SqsPoller::new(sqs.clone(), &url);
    let received = poller
        .poll_once(|event| invoke_batch(&function, event))
        .await
        .expect("polled");
    assert_eq!(received, 3);
    assert_eq!(left_on(&sqs, &url).await, 1, "the reported item failure stays");
}

#[tokio::test]
async fn a_function_error_leaves_the_whole_batch() {
    let (sqs, url) = fifo_with(&[r#"{"n":1}"#, r#"{"n":2,"crash":true}"#]).await;
    let function = probe(Duration::from_secs(3), None, "ok");
    let mut poller = SqsPoller::new(sqs.clone(), &url);
    let received = poller
        .poll_once(|event| invoke_batch(&function, event))
        .await
        .expect("polled");
    assert_eq!((received, left_on(&sqs, &url).await), (2, 2));
}

#[tokio::test]
async fn a_throttled_batch_is_left_whole_and_batch_size_bounds_it() {
    let (sqs, url) = fifo_with(&[r#"{"n":1}"#, r#"{"n":2}"#, r#"{"n":3}"#]).await;
    let throttled = probe(Duration::from_secs(3), Some(0), "ok");
    let mut poller = SqsPoller::new(sqs.clone(), &url);
    poller.batch_size = 2;
    let received = poller
        .poll_once(|event| invoke_batch(&throttled, event))
        .await
        .expect("polled");
    assert_eq!((received, left_on(&sqs, &url).await), (2, 3));
}

#[tokio::test]
async fn a_schedule_runs_every_period_into_the_asynchronous_invocation() {
    let (sqs, url) = destination().await;
    // Every run fails (the function exits in its init) and is not retried: each leaves one record.
    let invoker = Arc::new(asynchronous(
        probe(Duration::from_secs(3), None, "exit"),
        0,
        60_000,
        Some((sqs.clone(), url.clone())),
    ));
    let timer = local_lambda::schedule::start("payments-local-probe".into(), Duration::from_millis(200), invoker);
    tokio::time::sleep(Duration::from_millis(700)).await;
    timer.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let records = records(&sqs, &url).await;
    assert!(
        (2..=4).contains(&records.len()),
        "runs at 200, 400, 600 ms: {}",
        records.len()
    );
    let payload = &records[0]["requestPayload"];
    assert_eq!(
        (payload["source"].as_str(), payload["detail-type"].as_str()),
        (Some("aws.scheduler"), Some("Scheduled Event"))
    );
    assert!(payload["resources"][0]
        .as_str()
        .unwrap_or_default()
        .ends_with("schedule/default/payments-local-probe"));
}

#[tokio::test]
async fn a_throttled_route_answers_429_past_its_burst() {
    let function = Arc::new(probe(Duration::from_secs(3), None, "ok"));
    let mut limited = route("POST", "/webhooks/{provider}", RouteAuth::None, &function);
    limited.throttle = Some(Throttle { rate: 0.5, burst: 2 });
    let addr = http_api(vec![limited]).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(request(addr, "POST /webhooks/stripe HTTP/1.1", "{}").await);
    }
    let codes: Vec<u16> = statuses.iter().map(|(status, _, _)| *status).collect();
    assert_eq!(codes, [200, 200, 429]);
    assert_eq!(statuses[2].2, r#"{"message":"Too Many Requests"}"#);
}

// ---- the DynamoDB Streams event source mapping, on DynamoDB Local's stream ----

/// A fresh table with the template's stream, holding items `n` = 1, 2, ... each with its `probe` marker
/// (`ok`, `fail`, `crash`) and `kind`; the stream's client and ARN.
async fn stream_with(items: &[(&str, &str)]) -> (aws_sdk_dynamodbstreams::Client, String) {
    let (dynamodb, table, stream) = stream_table().await;
    for (n, (probe, kind)) in items.iter().enumerate() {
        put(&dynamodb, &table, n + 1, probe, kind).await;
    }
    stream
}

/// A fresh table with the template's stream: its client and name, the stream's client and ARN.
async fn stream_table() -> (
    aws_sdk_dynamodb::Client,
    String,
    (aws_sdk_dynamodbstreams::Client, String),
) {
    let config = sdk(&local_testkit::service::DYNAMODB);
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let table = local_testkit::table::create_fresh_table(&dynamodb).await;
    let streams = aws_sdk_dynamodbstreams::Client::new(&config);
    let reader = local_lambda::stream_reader::StreamReader::for_table(&dynamodb, streams.clone(), &table)
        .await
        .expect("the table's stream");
    let arn = reader.stream_arn().to_owned();
    (dynamodb, table, (streams, arn))
}

async fn put(dynamodb: &aws_sdk_dynamodb::Client, table: &str, n: usize, probe: &str, kind: &str) {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    dynamodb
        .put_item()
        .table_name(table)
        .item("pk", A::S(format!("item#{n:02}")))
        .item("sk", A::S("v".into()))
        .item("n", A::N(n.to_string()))
        .item("probe", A::S(probe.into()))
        .item("kind", A::S(kind.into()))
        .send()
        .await
        .expect("put");
}

/// A stream mapping as the template's reader gives it, from the start of the stream, no window.
fn stream_mapping(batch_size: u64, max_retries: Option<u64>, filters: &[&str]) -> StreamMapping {
    StreamMapping {
        table: "PaymentsTable".into(),
        starting_position: "TRIM_HORIZON".into(),
        batch_size,
        batching_window: Duration::ZERO,
        bisect: false,
        max_retries,
        max_record_age: None,
        item_failures: true,
        on_failure: None,
        filters: filters
            .iter()
            .map(|f| EventPattern::parse(f).expect("a pattern"))
            .collect(),
    }
}

/// `runtime-probe` writing each event it gets to a file of its own: the function and the file.
fn recording_probe(reserved: Option<usize>) -> (Arc<FunctionPool>, std::path::PathBuf) {
    let file = std::env::temp_dir().join(format!("probe-{}.jsonl", uuid::Uuid::new_v4()));
    let pool = FunctionPool::new(FunctionSpec {
        name: "Probe".into(),
        command: vec![env!("CARGO_BIN_EXE_runtime-probe").into()],
        environment: vec![("PROBE_RECORD".into(), file.display().to_string())],
        timeout: Duration::from_secs(3),
        reserved,
        log: None,
    });
    (Arc::new(pool), file)
}

/// The batches the probe got, each as its records' `n` and sequence numbers.
fn batches(file: &std::path::Path) -> Vec<Vec<(u64, String)>> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    // Complete lines only: the probe may be writing the next one.
    text.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .map(|line| {
            let event: Value = serde_json::from_str(line).expect("a JSON event");
            let records = event["Records"].as_array().cloned().unwrap_or_default();
            records
                .iter()
                .map(|r| {
                    let n = r["dynamodb"]["NewImage"]["n"]["N"].as_str().expect("n");
                    let seq = r["dynamodb"]["SequenceNumber"].as_str().expect("a sequence number");
                    (n.parse().expect("a number"), seq.to_owned())
                })
                .collect()
        })
        .collect()
}

fn numbers(batches: &[Vec<(u64, String)>]) -> Vec<Vec<u64>> {
    batches.iter().map(|b| b.iter().map(|(n, _)| *n).collect()).collect()
}

/// Runs `mapping` on the stream until `done` holds of the probe's batches and the destination's records
/// (20 s at most), then a little longer to see nothing more comes; returns both.
async fn run_stream_mapping(
    (streams, stream_arn): (aws_sdk_dynamodbstreams::Client, String),
    mapping: StreamMapping,
    (function, file): (Arc<FunctionPool>, std::path::PathBuf),
    done: impl Fn(&[Vec<(u64, String)>], &[Value]) -> bool,
) -> (Vec<Vec<(u64, String)>>, Vec<Value>) {
    let (sqs, url) = destination().await;
    let consumer = StreamConsumer {
        reader: local_lambda::stream_reader::StreamReader::new(streams, stream_arn),
        mapping,
        function,
        on_failure: Some((sqs.clone(), url.clone())),
        waits: StreamWaits {
            poll: Duration::from_millis(50),
            retry: Duration::from_millis(10),
            throttle: Duration::from_millis(50),
            read_error: Duration::from_millis(100),
        },
    };
    let running = consumer.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut dropped = Vec::new();
    while !done(&batches(&file), &dropped) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        dropped.extend(records(&sqs, &url).await);
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    running.abort();
    dropped.extend(records(&sqs, &url).await);
    (batches(&file), dropped)
}

fn delivered(batches: &[Vec<(u64, String)>]) -> usize {
    batches.iter().map(Vec::len).sum()
}

#[tokio::test]
async fn the_stream_mapping_skips_what_no_filter_matches_and_delivers_batches_in_order() {
    let items = [
        ("ok", "event"),
        ("ok", "event"),
        ("ok", "other"),
        ("ok", "event"),
        ("ok", "event"),
        ("ok", "event"),
    ];
    let filter = r#"{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"kind": {"S": ["event"]}}}}"#;
    let (got, dropped) = run_stream_mapping(
        stream_with(&items).await,
        stream_mapping(2, None, &[filter]),
        recording_probe(None),
        |b, _| delivered(b) >= 5,
    )
    .await;
    assert_eq!(numbers(&got), [vec![1, 2], vec![4, 5], vec![6]]);
    assert!(dropped.is_empty(), "{dropped:?}");
}

#[tokio::test]
async fn item_failures_retry_from_the_failed_record_then_go_to_the_destination_and_the_shard_moves_on() {
    let items = [
        ("ok", "event"),
        ("fail", "event"),
        ("ok", "event"),
        ("ok", "event"),
        ("ok", "event"),
    ];
    let (got, dropped) = run_stream_mapping(
        stream_with(&items).await,
        stream_mapping(4, Some(1), &[]),
        recording_probe(None),
        |b, _| numbers(b).last() == Some(&vec![5]),
    )
    .await;
    assert_eq!(numbers(&got), [vec![1, 2, 3, 4], vec![2, 3, 4], vec![5]]);
    let [record] = dropped.as_slice() else {
        panic!("one failure record: {dropped:?}")
    };
    let info = &record["DDBStreamBatchInfo"];
    assert_eq!(info["startSequenceNumber"].as_str(), Some(got[0][1].1.as_str()));
    assert_eq!(info["endSequenceNumber"].as_str(), Some(got[0][3].1.as_str()));
    assert_eq!(info["batchSize"], 3);
    assert!(
        info["streamArn"].as_str().is_some_and(|a| a.contains("/stream/")),
        "{info}"
    );
    assert_eq!(record["requestContext"]["condition"], "RetryAttemptsExhausted");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 2);
    assert_eq!(
        record["responseContext"]["functionError"],
        Value::Null,
        "item failures are no function error"
    );
    assert_eq!(record["version"], "1.0");
}

#[tokio::test]
async fn bisect_narrows_a_failed_batch_to_its_poison_record() {
    let items = [("ok", "event"), ("ok", "event"), ("crash", "event"), ("ok", "event")];
    let mut mapping = stream_mapping(4, Some(0), &[]);
    mapping.bisect = true;
    let (got, dropped) = run_stream_mapping(stream_with(&items).await, mapping, recording_probe(None), |b, _| {
        numbers(b).last() == Some(&vec![4])
    })
    .await;
    assert_eq!(
        numbers(&got),
        [vec![1, 2, 3, 4], vec![1, 2], vec![3, 4], vec![3], vec![4]]
    );
    let [record] = dropped.as_slice() else {
        panic!("one failure record: {dropped:?}")
    };
    let poison = &got[3][0].1;
    let info = &record["DDBStreamBatchInfo"];
    assert_eq!(
        (info["startSequenceNumber"].as_str(), info["endSequenceNumber"].as_str()),
        (Some(poison.as_str()), Some(poison.as_str()))
    );
    assert_eq!(info["batchSize"], 1);
    assert_eq!(
        record["requestContext"]["approximateInvokeCount"], 3,
        "the batch, its half, the record"
    );
    assert_eq!(record["responseContext"]["functionError"], "Unhandled");
}

#[tokio::test]
async fn a_record_failing_without_a_retry_limit_is_dropped_past_its_age() {
    let mut mapping = stream_mapping(10, None, &[]);
    mapping.max_record_age = Some(Duration::from_secs(2));
    let (got, dropped) = run_stream_mapping(
        stream_with(&[("crash", "event")]).await,
        mapping,
        recording_probe(None),
        |_, dropped| !dropped.is_empty(),
    )
    .await;
    assert!(got.len() > 3, "retried until its age ran out: {} runs", got.len());
    let [record] = dropped.as_slice() else {
        panic!("one failure record: {dropped:?}")
    };
    assert_eq!(record["requestContext"]["condition"], "RecordAgeExceeded");
    assert_eq!(
        record["DDBStreamBatchInfo"]["startSequenceNumber"].as_str(),
        Some(got[0][0].1.as_str())
    );
}

#[tokio::test]
async fn a_throttled_batch_uses_no_retry_and_waits_until_its_age_runs_out() {
    let mut mapping = stream_mapping(10, Some(0), &[]);
    mapping.max_record_age = Some(Duration::from_secs(2));
    let started = Instant::now();
    let (got, dropped) = run_stream_mapping(
        stream_with(&[("ok", "event")]).await,
        mapping,
        recording_probe(Some(0)),
        |_, dropped| !dropped.is_empty(),
    )
    .await;
    assert!(got.is_empty(), "never ran: {got:?}");
    assert!(
        started.elapsed() > Duration::from_secs(2),
        "waited: {:?}",
        started.elapsed()
    );
    let [record] = dropped.as_slice() else {
        panic!("one failure record: {dropped:?}")
    };
    assert_eq!(
        record["requestContext"]["condition"], "RecordAgeExceeded",
        "not RetryAttemptsExhausted: a throttle is no retry"
    );
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 0);
    assert!(record.get("responseContext").is_none(), "{record}");
}

// ---- the SQS event source mapping's loop, on moto's queues ----

/// The messages' `n` in the order the probe got them (its recorded SQS events).
fn messages_seen(file: &std::path::Path) -> Vec<u64> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let events = text.split_inclusive('\n').filter(|line| line.ends_with('\n'));
    let mut seen = Vec::new();
    for line in events {
        let event: Value = serde_json::from_str(line).expect("a JSON event");
        for record in event["Records"].as_array().into_iter().flatten() {
            let body: Value = serde_json::from_str(record["body"].as_str().expect("a body")).expect("JSON");
            seen.push(body["n"].as_u64().expect("n"));
        }
    }
    seen
}

/// Waits (20 s at most) until `done` holds of what the probe has seen.
async fn until_seen(file: &std::path::Path, done: impl Fn(&[u64]) -> bool) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&messages_seen(file)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    messages_seen(file)
}

#[tokio::test]
async fn a_message_groups_later_messages_wait_while_an_earlier_one_fails() {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let first = json!({"n": 1, "fail_until_ms": now_ms + 2500}).to_string();
    let (sqs, url) = fifo_hiding_for(&[&first, r#"{"n":2}"#, r#"{"n":3}"#], "1").await;
    let (function, file) = recording_probe(None);
    let mapping = start_mapping(sqs.clone(), url.clone(), 1, function);
    let seen = until_seen(&file, |seen| seen.contains(&3)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while left_on(&sqs, &url).await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    mapping.abort();
    let failing = seen.iter().take_while(|n| **n == 1).count();
    assert!(
        failing >= 2,
        "the first message came back after its visibility timeout: {seen:?}"
    );
    assert_eq!(
        seen.get(failing..),
        Some(&[2, 3][..]),
        "2 and 3 only after 1 succeeded: {seen:?}"
    );
    assert_eq!(left_on(&sqs, &url).await, 0, "all delivered and deleted");
}

#[tokio::test]
async fn the_queue_mapping_outlives_a_missing_queue() {
    let (sqs, _) = destination().await;
    let name = format!("mapping-{}", uuid::Uuid::new_v4());
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .expect("create")
        .queue_url()
        .expect("a URL")
        .to_owned();
    sqs.delete_queue().queue_url(&url).send().await.expect("delete");
    let (function, file) = recording_probe(None);
    let mapping = start_mapping(sqs.clone(), url.clone(), 10, function);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!mapping.is_finished(), "an error is no end of the mapping");
    let again = sqs.create_queue().queue_name(&name).send().await.expect("create again");
    assert_eq!(again.queue_url(), Some(url.as_str()));
    sqs.send_message()
        .queue_url(&url)
        .message_body(r#"{"n":7}"#)
        .send()
        .await
        .expect("send");
    let seen = until_seen(&file, |seen| !seen.is_empty()).await;
    mapping.abort();
    assert_eq!(seen, [7]);
}

#[tokio::test]
async fn latest_starts_at_the_end_of_the_stream() {
    let (dynamodb, table, stream) = stream_table().await;
    put(&dynamodb, &table, 1, "ok", "event").await;
    let mut mapping = stream_mapping(10, None, &[]);
    mapping.starting_position = "LATEST".into();
    // After the mapping's first pass (it polls every 50 ms here).
    let later = put_later(dynamodb, table, 2, Duration::from_millis(800));
    let (got, _) = run_stream_mapping(stream, mapping, recording_probe(None), |b, _| delivered(b) >= 1).await;
    later.await.expect("written");
    assert_eq!(numbers(&got), [vec![2]], "only what was written after the start");
}

/// Writes item `n` after `wait`, while a mapping runs.
fn put_later(
    dynamodb: aws_sdk_dynamodb::Client,
    table: String,
    n: usize,
    wait: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        put(&dynamodb, &table, n, "ok", "event").await;
    })
}

#[tokio::test]
async fn the_batching_window_gathers_what_comes_within_it() {
    let (dynamodb, table, stream) = stream_table().await;
    put(&dynamodb, &table, 1, "ok", "event").await;
    let mut mapping = stream_mapping(10, None, &[]);
    mapping.batching_window = Duration::from_millis(1500);
    let later = put_later(dynamodb, table, 2, Duration::from_millis(400));
    let started = Instant::now();
    let (got, _) = run_stream_mapping(stream, mapping, recording_probe(None), |b, _| delivered(b) >= 2).await;
    later.await.expect("written");
    assert_eq!(
        numbers(&got),
        [vec![1, 2]],
        "one batch: the second came within the window"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}
