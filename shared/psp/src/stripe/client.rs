//! [`StripeClient`]: Stripe's PaymentIntents and Refunds API over HTTPS (`reqwest` with rustls).
//!
//! - Requests are `application/x-www-form-urlencoded` (`metadata[payment_id]=...`), authenticated with
//!   `Authorization: Bearer <secret key>`, pinned to [`STRIPE_API_VERSION`]; every POST carries the caller's
//!   `Idempotency-Key`.
//! - Each attempt has a connect and a request timeout. Connection errors, timeouts, 409 (a concurrent request
//!   with the same key), 429 and 5xx are retried with exponential backoff and full jitter, unless Stripe's
//!   `Stripe-Should-Retry` header says otherwise (it wins either way, as in Stripe's own libraries).
//! - Each failed attempt (no answer, a 5xx) is reported as it happens to the circuit breaker the call runs
//!   in ([`crate::breaker::attempt_failed`]), marked when Stripe replayed it for the key
//!   (`Idempotent-Replayed: true`): the breaker counts attempts, so a PSP that hangs opens it. A 429
//!   (`rate_limit`, or `lock_timeout` when a webhook and our call touch one object) is Stripe asking us to
//!   slow down, not failing: retried as above, as Stripe's libraries retry it, and never counted.
//! - Stripe's error object is mapped to [`PspError`]: `card_error` is a decline; 401/403 (a key Stripe refuses)
//!   is [`PspError::AuthFailed`], a deployment fault the callers defer on; `invalid_request_error`,
//!   `idempotency_error` and other 4xx are permanent; `api_error`, 429, 5xx and timeouts are transient.
//! - A refusal (permanent or of our key) is logged here, in one place, with Stripe's error type, code, param
//!   and message (a key-like word in the message redacted), and counted: `PspRefusals` or `PspAuthFailed`
//!   (`Payments/Psp`, by stage and by stage and operation), both alarmed. Without that line a refused charge
//!   would only show as a compensated checkout.
//! - The API key comes from Secrets Manager (`PSP_API_KEY_ARN`) in AWS or `PSP_API_KEY` locally. It is an
//!   [`ApiKey`], whose `Debug` is redacted, and it is never logged; neither are request bodies. After a 401/403
//!   the key is read again (see [`crate::key`]) and, if it changed, the call is made once more with it.
//! - A charge sends `return_url` or `automatic_payment_methods[allow_redirects]=never`, as the settings say
//!   ([`Redirects`]): Stripe refuses a confirm with neither.
//! - With manual capture ([`CaptureMethod::Manual`], the checkout functions' `STRIPE_CAPTURE_METHOD`) a charge
//!   sends `capture_method=manual` and asks for its charge expanded (its `capture_before`); `capture` takes
//!   the money of an authorized PaymentIntent.

use super::objects::{
    Dispute, ErrorBody, ErrorObject, ErrorType, EventList, EventQuery, GenerationFailure, PaymentIntent, Refund,
    SearchResult,
};
use super::settings::{CaptureMethod, Redirects, StripeSettings};
use super::StripeApi;
use crate::breaker::attempt_failed;
use crate::error::PspError;
use crate::http::{self, header, AttemptFailure, Unreadable};
use crate::key::CurrentKey;
use crate::pace::Pace;
use crate::settings::ApiKey;
use crate::ChargeRequest;
use payments_core::breaker::Attempt;
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;
use shared::retry::Backoff;
use shared::{PaymentId, PspEventId, PspReference};
use std::fmt;

/// The Stripe API version every request is pinned to (the one the pinned official library speaks).
pub const STRIPE_API_VERSION: &str = "2026-10-28.endive";

/// Stripe's API over HTTPS. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct StripeClient {
    http: reqwest::Client,
    base_url: String,
    key: CurrentKey,
    redirects: Redirects,
    capture: CaptureMethod,
    retries: Backoff,
    pace: Option<Pace>,
}

impl fmt::Debug for StripeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeClient")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl StripeClient {
    /// A client with `key` (already resolved), fixed for the process.
    pub fn new(settings: &StripeSettings, key: ApiKey) -> Result<Self, PspError> {
        Self::with_key(settings, CurrentKey::fixed(key))
    }

    /// A client with `key`, which may be read again after a 401/403 ([`CurrentKey::refreshable`]).
    pub fn with_key(settings: &StripeSettings, key: CurrentKey) -> Result<Self, PspError> {
        let http = http::client(settings.connect_timeout, settings.request_timeout)?;
        Ok(Self {
            http,
            base_url: settings.base_url.clone(),
            key,
            redirects: settings.redirects.clone(),
            capture: settings.capture,
            retries: settings.retries,
            pace: settings
                .scan_rate
                .map(Pace::per_second)
                .or_else(|| settings.budget.map(Pace::share)),
        })
    }

    /// Resolves the key (Secrets Manager when `PSP_API_KEY_ARN` is set, then read again from there after a
    /// 401/403: [`CurrentKey::resolve`]) and builds the client.
    pub async fn from_settings(
        settings: &StripeSettings,
        sdk: &aws_config::SdkConfig,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let key = CurrentKey::resolve(&settings.key, sdk).await?;
        Ok(Self::with_key(settings, key)?)
    }

    /// One API call with retries, in a span named `step` (`psp.charge`, ...). `form` is the request body
    /// (POST) or query (GET). A key Stripe refuses is read again and, if it changed, the call made once more
    /// with the new one (same idempotency key: a call refused for its key did nothing).
    async fn call<T: DeserializeOwned>(
        &self,
        step: &'static str,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        form: &[(&str, String)],
    ) -> Result<T, PspError> {
        http::call(&self.key, &self.retries, step, path, |api_key, attempt| {
            self.attempt(api_key, method.clone(), path, key, form, attempt)
        })
        .await
    }

    /// One attempt of a call with `api_key`: the request, paced to the function's budget, and its answer read.
    async fn attempt<T: DeserializeOwned>(
        &self,
        api_key: ApiKey,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        form: &[(&str, String)],
        attempt: u32,
    ) -> Result<T, AttemptFailure> {
        let url = format!("{}{path}", self.base_url);
        let mut request = self
            .http
            .request(method.clone(), url)
            .bearer_auth(api_key.expose())
            .header("Stripe-Version", STRIPE_API_VERSION);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request = if method == reqwest::Method::GET {
            request.query(form)
        } else {
            request.form(form)
        };
        if let Some(pace) = &self.pace {
            pace.ready().await;
        }
        let failed = match http::attempt(request, path, attempt, "request-id").await? {
            Ok(answer) => return Ok(answer),
            Err(failed) => failed,
        };
        let (status, headers) = (failed.status, &failed.headers);
        if status == 429 && !is_lock_timeout(&failed.body) {
            http::count_rate_limited("stripe", path);
        }
        if let Some(attempt) = breaker_attempt(status, headers) {
            attempt_failed(attempt);
        }
        Err(classify(status, headers, &failed.body))
    }
}

/// How the breaker sees a failed answer: a 5xx is the PSP failing now, unless Stripe replayed it for the
/// idempotency key (`Idempotent-Replayed: true`: a 500 saved when the key was first used, replayed for 24
/// hours). Other statuses (429: throttling, `rate_limit` or `lock_timeout`, retried with back-off but no
/// outage; 409: our own concurrent request with the key; refusals; declines) are about the request or its
/// rate, not the PSP.
fn breaker_attempt(status: u16, headers: &HeaderMap) -> Option<Attempt> {
    if status < 500 {
        return None;
    }
    Some(match header(headers, "idempotent-replayed") {
        Some("true") => Attempt::Replayed,
        _ => Attempt::PspFailed,
    })
}

/// Stripe's message with every run that looks like a key (`sk_live_...`, `rk_test_****1234`) redacted: its
/// answer to a wrong key quotes part of it. A run is cut at any character a key cannot hold, so a key glued
/// to punctuation (`key:sk_live_...`, `'rk_...'`) is found as well as one between spaces.
fn redact_keys(message: &str) -> String {
    fn flush(out: &mut String, run: &str) {
        let key = ["sk_", "rk_", "pk_"].iter().any(|p| run.starts_with(p));
        out.push_str(if key { "[redacted]" } else { run });
    }
    let mut out = String::with_capacity(message.len());
    let mut run = String::new();
    for c in message.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '*' {
            run.push(c);
        } else {
            flush(&mut out, &run);
            run.clear();
            out.push(c);
        }
    }
    flush(&mut out, &run);
    out
}

/// Stripe's 429 for an object another request holds (`lock_timeout`), not its rate limit (`rate_limit`).
fn is_lock_timeout(body: &[u8]) -> bool {
    serde_json::from_slice::<ErrorBody>(body).is_ok_and(|b| b.error.code.as_deref() == Some("lock_timeout"))
}

/// A non-2xx answer in our terms, and whether to retry it.
fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> AttemptFailure {
    let should_retry = match header(headers, "stripe-should-retry") {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    let retry = should_retry.unwrap_or(matches!(status, 409 | 429 | 500..=599));
    let parsed = serde_json::from_slice::<ErrorBody>(body).map(|ErrorBody { mut error }| {
        error.message = error.message.as_deref().map(redact_keys);
        error
    });
    // Our key refused (Stripe answers a wrong key with 401 `invalid_request_error`): not retried as it is.
    let auth = matches!(status, 401 | 403)
        || matches!(&parsed, Ok(e) if matches!(e.kind, ErrorType::AuthenticationError | ErrorType::PermissionError));
    if auth {
        let error = parsed.unwrap_or_else(|_| ErrorObject {
            kind: ErrorType::AuthenticationError,
            code: None,
            decline_code: None,
            message: Some(format!("HTTP {status} without a Stripe error object")),
            param: None,
            payment_intent: None,
        });
        return AttemptFailure {
            error: PspError::AuthFailed {
                status,
                error: Box::new(error),
            },
            retry: false,
        };
    }
    let error = match parsed {
        Ok(error) => match error.kind {
            _ if status == 429 || status >= 500 => {
                PspError::Unavailable(format!("HTTP {status}: {}", error.summary()).into())
            }
            ErrorType::ApiError => PspError::Unavailable(format!("HTTP {status}: {}", error.summary()).into()),
            ErrorType::CardError => PspError::Declined(Box::new(error)),
            _ if retry => PspError::Unavailable(format!("HTTP {status}: {}", error.summary()).into()),
            _ => PspError::Refused {
                status,
                error: Box::new(error),
            },
        },
        Err(_) if status == 429 || status >= 500 || retry => {
            PspError::Unavailable(format!("HTTP {status} without a Stripe error object").into())
        }
        Err(e) => PspError::BadAnswer(Box::new(Unreadable {
            status,
            path: "error object".to_owned(),
            source: e,
        })),
    };
    AttemptFailure { error, retry }
}

impl StripeClient {
    /// One page of `GET /v1/events` (newest first): how the catch-up job finds events whose webhooks were
    /// lost. Not part of [`StripeApi`]: only the catch-up reads events, through
    /// [`CircuitBreaker::list_events`](crate::CircuitBreaker::list_events).
    pub async fn list_events(&self, query: &EventQuery<'_>) -> Result<EventList, PspError> {
        let mut form = vec![
            ("created[gte]", query.created_gte.to_string()),
            ("created[lte]", query.created_lte.to_string()),
            ("limit", query.limit.to_string()),
        ];
        // Indexed (`types[0]`, `types[1]`, ...), as Stripe's own libraries send arrays.
        let names: Vec<String> = (0..query.types.len()).map(|i| format!("types[{i}]")).collect();
        form.extend(
            names
                .iter()
                .zip(query.types)
                .map(|(name, kind)| (name.as_str(), (*kind).to_owned())),
        );
        if let Some(after) = query.starting_after {
            form.push(("starting_after", after.to_owned()));
        }
        self.call("psp.list_events", reqwest::Method::GET, "/v1/events", None, &form)
            .await
    }
}

/// Refunds asked per page of `GET /v1/refunds` (Stripe's most), and the pages read at most.
const REFUND_PAGE: usize = 100;
const REFUND_PAGES: usize = 3;

/// A `what` id (a refund's, a dispute's) as a path segment: it comes from the PSP's answers, so it is checked
/// like a [`PspReference`] (ASCII letters, digits, `_-.:`) before it goes into a URL.
fn id_segment<'a>(what: &str, id: &'a str) -> Result<&'a str, PspError> {
    PspReference::parse(id)
        .map(|_| id)
        .map_err(|e| PspError::BadAnswer(format!("{what} id {id:?} is not an id: {e}").into()))
}

fn path_segment(reference: &PspReference) -> &str {
    // PSP references are validated ids (ASCII letters, digits, `_-.:`): safe in a path as they are.
    reference.as_str()
}

impl StripeApi for StripeClient {
    async fn charge(&self, key: &str, request: &ChargeRequest<'_>) -> Result<PaymentIntent, PspError> {
        let mut form = vec![
            ("amount", request.money.amount_minor().to_string()),
            ("currency", request.money.currency().as_str().to_ascii_lowercase()),
            ("payment_method", request.payment_method.to_owned()),
            ("confirm", "true".to_owned()),
            ("metadata[payment_id]", request.payment_id.to_string()),
            ("metadata[order_id]", request.order_id.to_string()),
            ("metadata[payments_stage]", shared::metrics::stage().to_owned()),
        ];
        match &self.redirects {
            Redirects::ReturnTo(url) => form.push(("return_url", url.clone())),
            Redirects::Never => {
                form.push(("automatic_payment_methods[enabled]", "true".to_owned()));
                form.push(("automatic_payment_methods[allow_redirects]", "never".to_owned()));
            }
        }
        if self.capture == CaptureMethod::Manual {
            form.push(("capture_method", "manual".to_owned()));
            // The charge says until when the authorization holds (`capture_before`): recorded from the answer.
            form.push(("expand[]", "latest_charge".to_owned()));
        }
        self.call(
            "psp.charge",
            reqwest::Method::POST,
            "/v1/payment_intents",
            Some(key),
            &form,
        )
        .await
    }

    async fn retrieve(&self, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        let path = format!("/v1/payment_intents/{}", path_segment(reference));
        let form = [("expand[]", "latest_charge".to_owned())];
        self.call("psp.retrieve", reqwest::Method::GET, &path, None, &form)
            .await
    }

    async fn cancel(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        let path = format!("/v1/payment_intents/{}/cancel", path_segment(reference));
        let form = [("cancellation_reason", "abandoned".to_owned())];
        self.call("psp.cancel", reqwest::Method::POST, &path, Some(key), &form)
            .await
    }

    async fn capture(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        let path = format!("/v1/payment_intents/{}/capture", path_segment(reference));
        self.call("psp.capture", reqwest::Method::POST, &path, Some(key), &[])
            .await
    }

    async fn refund(&self, key: &str, reference: &PspReference, amount_minor: Option<u64>) -> Result<Refund, PspError> {
        let mut form = vec![("payment_intent", reference.to_string())];
        if let Some(amount) = amount_minor {
            form.push(("amount", amount.to_string()));
        }
        self.call("psp.refund", reqwest::Method::POST, "/v1/refunds", Some(key), &form)
            .await
    }

    async fn retrieve_refund(&self, refund: &str) -> Result<Refund, PspError> {
        let path = format!("/v1/refunds/{}", id_segment("refund", refund)?);
        self.call("psp.retrieve_refund", reqwest::Method::GET, &path, None, &[])
            .await
    }

    async fn retrieve_dispute(&self, dispute: &str) -> Result<Dispute, PspError> {
        let path = format!("/v1/disputes/{}", id_segment("dispute", dispute)?);
        self.call("psp.retrieve_dispute", reqwest::Method::GET, &path, None, &[])
            .await
    }

    async fn retrieve_generation_failure(&self, event: &PspEventId) -> Result<GenerationFailure, PspError> {
        // Event ids are validated ids (ASCII letters, digits, `_-.:`): safe in a path as they are. A v2 read
        // takes the same Bearer key and `Stripe-Version`; v2 answers errors in the same `{"error": ...}` shape.
        let path = format!("/v2/core/events/{event}");
        self.call("psp.retrieve_event", reqwest::Method::GET, &path, None, &[])
            .await
    }

    async fn list_refunds(&self, reference: &PspReference) -> Result<Vec<Refund>, PspError> {
        let mut refunds: Vec<Refund> = Vec::new();
        // Page by page (newest first), each after the last one read, while Stripe says there are more; a
        // payment has a few refunds (the saga's and at most MAX_GIVE_BACKS give-backs), so one page is usual
        // and more than REFUND_PAGES is an answer we do not act on.
        for _ in 0..REFUND_PAGES {
            let mut form = vec![
                ("payment_intent", reference.to_string()),
                ("limit", REFUND_PAGE.to_string()),
            ];
            if let Some(last) = refunds.last() {
                form.push(("starting_after", last.id.clone()));
            }
            let page: SearchResult<Refund> = self
                .call("psp.list_refunds", reqwest::Method::GET, "/v1/refunds", None, &form)
                .await?;
            let more = page.has_more && !page.data.is_empty();
            refunds.extend(page.data);
            if !more {
                return Ok(refunds);
            }
        }
        Err(PspError::BadAnswer(
            format!(
                "PaymentIntent {reference} has more than {} refunds",
                REFUND_PAGES * REFUND_PAGE
            )
            .into(),
        ))
    }

    async fn find_for_payment(&self, payment: &PaymentId) -> Result<Option<PaymentIntent>, PspError> {
        // Payment ids are validated ids (no quote can close the search string).
        let form = [("query", format!("metadata['payment_id']:'{payment}'"))];
        let found: SearchResult<PaymentIntent> = self
            .call(
                "psp.search",
                reqwest::Method::GET,
                "/v1/payment_intents/search",
                None,
                &form,
            )
            .await?;
        // Oldest first: a second one would itself be the double charge this search prevents.
        Ok(found.data.into_iter().min_by_key(|pi| pi.created))
    }
}

#[cfg(test)]
mod tests;
