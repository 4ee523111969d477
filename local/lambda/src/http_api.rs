//! The HTTP API's front as API Gateway runs it for the template's `HttpApi` routes: a request matched on
//! method and path (`{name}` one segment), refused 403 on an `AWS_IAM` route unless its SigV4 signature is
//! the local world's credentials' (`sigv4`), 404 where no route matches, else handed
//! to the route's function (`function_pool`) as a payload format 2.0 event (past the route's throttling, a
//! token bucket as API Gateway's: 429 `{"message":"Too Many Requests"}`); its answer becomes the response,
//! a function error 502 and a throttled invocation 500, both `{"message":"Internal Server Error"}`, as API
//! Gateway answers them. Each request is one line on the console: method, path, status, milliseconds (and why
//! a caller was refused 403).

use crate::account::LOCAL_ACCOUNT;
use crate::console::Console;
use crate::function_pool::{FunctionPool, Outcome};
use crate::runtime_api::{inherited, serve_connections};
use crate::triggers::route::{RouteAuth, Throttle};
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::net::TcpListener;

/// API Gateway's largest request payload (a hard quota): past it the request is refused 413 before any
/// function runs.
pub const MAX_PAYLOAD_BYTES: usize = 10 * 1024 * 1024;

/// One route of the API and the function behind it.
pub struct Route {
    /// `POST`, `GET`, ... or `ANY`.
    pub method: String,
    /// As the template writes it: `/payments/{id}`.
    pub path: String,
    pub auth: RouteAuth,
    /// API Gateway's throttling of the route (`triggers::route::ApiSettings::throttle`); `None`: unthrottled.
    pub throttle: Option<Throttle>,
    pub function: Arc<FunctionPool>,
    /// Who a signed request to an `AWS_IAM` route is (`requestContext.authorizer.iam.userArn`): the local
    /// world has one set of credentials, which stand for a session of the role its callers assume in AWS (the
    /// checkout orchestrator's).
    pub caller: Option<String>,
}

/// A route's token bucket: `burst` requests at once, refilled at `rate` a second.
struct Bucket {
    tokens: f64,
    filled: Instant,
}

impl Route {
    /// Takes a token from the route's bucket; `false`: API Gateway's 429.
    fn admit(&self, bucket: &Mutex<Bucket>) -> bool {
        let Some(throttle) = self.throttle else { return true };
        let Ok(mut bucket) = bucket.lock() else { return true };
        let now = Instant::now();
        let refill = now.duration_since(bucket.filled).as_secs_f64() * throttle.rate;
        // Lossy only past 2^52 requests of burst: no API's limit.
        #[allow(clippy::cast_precision_loss)]
        let burst = throttle.burst as f64;
        bucket.tokens = (bucket.tokens + refill).min(burst);
        bucket.filled = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

/// Serves `routes` on `listener` until the task is dropped, each request a line on `console`.
pub async fn serve(listener: TcpListener, routes: Vec<Route>, console: Console) {
    #[allow(clippy::cast_precision_loss)]
    let buckets = routes
        .iter()
        .map(|r| {
            let tokens = r.throttle.map_or(0.0, |t| t.burst as f64);
            Mutex::new(Bucket {
                tokens,
                filled: Instant::now(),
            })
        })
        .collect();
    let credentials = aws_sdk_sqs::config::Credentials::new(
        inherited("AWS_ACCESS_KEY_ID", "local"),
        inherited("AWS_SECRET_ACCESS_KEY", "local"),
        None,
        None,
        "the local world",
    );
    let api = Arc::new(Api {
        routes,
        buckets,
        credentials,
    });
    serve_connections(listener, move |req| {
        let (api, console) = (api.clone(), console.clone());
        async move {
            let started = Instant::now();
            let (method, path) = (req.method().to_string(), req.uri().path().to_owned());
            let (response, why) = answer(api, req).await?;
            let mut line = format!(
                "{method} {path} {} {} ms",
                response.status().as_u16(),
                started.elapsed().as_millis()
            );
            if let Some(why) = why {
                line.push_str(&format!(" ({why})"));
            }
            console.line(&line);
            Ok(response)
        }
    })
    .await;
}

/// The API: its routes, each one's bucket, and the credentials an `AWS_IAM` caller must sign with (the local
/// world's, as its functions get them: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).
struct Api {
    routes: Vec<Route>,
    buckets: Vec<Mutex<Bucket>>,
    credentials: aws_sdk_sqs::config::Credentials,
}

/// Whether `head` and `body` are signed with `credentials` for API Gateway (`execute-api`); why not, if not.
fn signed(
    head: &hyper::http::request::Parts,
    body: &[u8],
    credentials: &aws_sdk_sqs::config::Credentials,
) -> Result<(), String> {
    let headers: Vec<(String, String)> = head
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .collect();
    let scope = headers
        .iter()
        .find(|(n, _)| n == "authorization")
        .and_then(|(_, v)| crate::sigv4::authorization(v));
    if scope.is_none_or(|s| s.service != crate::sigv4::SERVICE) {
        return Err(format!("no SigV4 Authorization for {}", crate::sigv4::SERVICE));
    }
    let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
    crate::sigv4::verify(
        head.method.as_str(),
        target,
        &headers,
        body,
        credentials,
        std::time::SystemTime::now(),
    )
}

/// API Gateway's own answer: `status` with `{"message": message}`.
fn gateway(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let body = json!({ "message": message }).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The response to `req`, and why it was refused when the why is not in the answer (a 403's).
async fn answer(
    api: Arc<Api>,
    req: Request<Incoming>,
) -> Result<(Response<Full<Bytes>>, Option<String>), hyper::Error> {
    let Api {
        routes,
        buckets,
        credentials,
    } = &*api;
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let found = routes
        .iter()
        .zip(buckets)
        .find_map(|(r, b)| matches(r, &method, &path).map(|p| (r, b, p)));
    let Some((route, bucket, parameters)) = found else {
        return Ok((gateway(StatusCode::NOT_FOUND, "Not Found"), None));
    };
    if !route.admit(bucket) {
        return Ok((gateway(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests"), None));
    }
    let (head, body) = req.into_parts();
    let Ok(body) = Limited::new(body, MAX_PAYLOAD_BYTES).collect().await else {
        // Over the quota, or a connection that broke mid-body: nothing reaches the function.
        return Ok((gateway(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large"), None));
    };
    let body = body.to_bytes();
    if route.auth == RouteAuth::Iam {
        if let Err(why) = signed(&head, &body, credentials) {
            return Ok((gateway(StatusCode::FORBIDDEN, "Forbidden"), Some(why)));
        }
    }
    let event = event(route, &head, &body, parameters);
    Ok((
        match route.function.invoke(event).await {
            Ok(Outcome::Response(answer)) => response(&answer),
            Ok(Outcome::FunctionError(_)) => gateway(StatusCode::BAD_GATEWAY, "Internal Server Error"),
            Ok(Outcome::Throttled) | Err(_) => gateway(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
        },
        None,
    ))
}

/// The path parameters when `route` takes `method` on `path`.
fn matches(route: &Route, method: &str, path: &str) -> Option<BTreeMap<String, String>> {
    if route.method != "ANY" && !route.method.eq_ignore_ascii_case(method) {
        return None;
    }
    let wanted: Vec<&str> = route.path.trim_matches('/').split('/').collect();
    let given: Vec<&str> = path.trim_matches('/').split('/').collect();
    if wanted.len() != given.len() {
        return None;
    }
    let mut parameters = BTreeMap::new();
    for (w, g) in wanted.iter().zip(&given) {
        match w.strip_prefix('{').and_then(|n| n.strip_suffix('}')) {
            Some(_) if g.is_empty() => return None,
            Some(name) => {
                parameters.insert(name.to_owned(), (*g).to_owned());
            }
            None if w == g => {}
            None => return None,
        }
    }
    Some(parameters)
}

/// The payload format 2.0 event API Gateway hands the function.
fn event(
    route: &Route,
    head: &hyper::http::request::Parts,
    body: &[u8],
    parameters: BTreeMap<String, String>,
) -> Value {
    let mut headers = Map::new();
    for (name, value) in &head.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let joined = match headers.get(name.as_str()).and_then(Value::as_str) {
            Some(before) => format!("{before},{value}"),
            None => value,
        };
        headers.insert(name.as_str().to_owned(), Value::String(joined));
    }
    let query = head.uri.query().unwrap_or_default();
    let mut query_parameters = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        query_parameters.insert(key.to_owned(), Value::String(value.to_owned()));
    }
    let (body, encoded) = match std::str::from_utf8(body) {
        Ok(text) => (text.to_owned(), false),
        Err(_) => (base64::engine::general_purpose::STANDARD.encode(body), true),
    };
    let route_key = format!("{} {}", route.method, route.path);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": head.uri.path(),
        "rawQueryString": query,
        "headers": headers,
        "queryStringParameters": (!query_parameters.is_empty()).then_some(query_parameters),
        "pathParameters": (!parameters.is_empty()).then_some(parameters),
        "requestContext": {
            "accountId": LOCAL_ACCOUNT,
            "apiId": "local",
            "domainName": "localhost",
            "domainPrefix": "localhost",
            "http": {
                "method": head.method.as_str(),
                "path": head.uri.path(),
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent").cloned().unwrap_or_default(),
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": route_key,
            "stage": "$default",
            "timeEpoch": now,
        },
        "body": body,
        "isBase64Encoded": encoded,
    });
    if route.auth == RouteAuth::Iam {
        event["requestContext"]["authorizer"] = iam_authorizer(route, head);
    }
    event
}

/// API Gateway's `authorizer.iam` of a signed request: its access key (from the `Authorization` header's
/// `Credential=`) and the identity the route's caller stands for.
fn iam_authorizer(route: &Route, head: &hyper::http::request::Parts) -> Value {
    let access_key = head
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("Credential=").nth(1))
        .and_then(|c| c.split('/').next())
        .unwrap_or_default();
    json!({ "iam": {
        "accessKey": access_key,
        "accountId": LOCAL_ACCOUNT,
        "callerId": access_key,
        "principalOrgId": null,
        "userArn": route.caller,
        "userId": access_key,
    }})
}

/// The function's answer as API Gateway returns it: a `statusCode` answer as it says, anything else as a
/// 200 JSON body (payload format 2.0's rule).
fn response(answer: &Value) -> Response<Full<Bytes>> {
    let Some(status) = answer.get("statusCode").and_then(Value::as_u64) else {
        let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
        response.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        return response;
    };
    let text = answer["body"].as_str().unwrap_or_default();
    let body = if answer["isBase64Encoded"].as_bool() == Some(true) {
        match base64::engine::general_purpose::STANDARD.decode(text) {
            Ok(bytes) => bytes,
            Err(_) => return gateway(StatusCode::BAD_GATEWAY, "Internal Server Error"),
        }
    } else {
        text.as_bytes().to_vec()
    };
    let mut builder = Response::builder().status(u16::try_from(status).unwrap_or(500));
    for (name, value) in answer["headers"].as_object().into_iter().flatten() {
        builder = builder.header(name.as_str(), value.as_str().unwrap_or_default());
    }
    for cookie in answer["cookies"].as_array().into_iter().flatten() {
        builder = builder.header("set-cookie", cookie.as_str().unwrap_or_default());
    }
    // A malformed answer (a status or header HTTP refuses) is API Gateway's 502.
    builder
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| gateway(StatusCode::BAD_GATEWAY, "Internal Server Error"))
}
