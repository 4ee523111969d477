//! What the intake answers. A delivery that ends well ends in one [`Answer`], turned into the HTTP answer in
//! one place ([`Answer::into_response`]); one that ends badly is an [`ApiError`] (a 4xx that wrote nothing,
//! or a 503 the PSP retries: [`retry_later`]), turned into its JSON error by `shared::http`. A step that ends
//! the delivery early says so with [`Flow::Answered`].

use lambda_http::http::StatusCode;
use lambda_http::{Body, Response};
use serde_json::json;
use shared::http::{self, ApiError};
use shared::{FinalizeResult, IgnoreReason};

/// How a delivery ended, as the PSP is told (`{"result": ...}`, or Adyen's `[accepted]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The event changed the payment (or recorded an anomaly on it).
    Applied,
    /// The payment holds the event already, or is in the state it reports ([`IgnoreReason::answer`]).
    Duplicate,
    /// Older news than what the payment holds.
    Stale,
    /// Not ours (another stage's, another product's) or a type the intake does not act on: acknowledged.
    Ignored,
    /// Signed but unusable, or inconsistent with its payment: parked for an operator.
    Quarantined,
    /// Its payment never appeared within the window: parked.
    UnknownPayment,
    /// A Stripe event-generation failure handed to recovery.
    Queued,
    /// Adyen's batch: every item applied or parked for the intake's own retry.
    Accepted,
}

impl Answer {
    /// The answer of a finalize that ended without an error: applied, or ignored for `reason`.
    pub fn ignored_for(reason: IgnoreReason) -> Self {
        match reason {
            IgnoreReason::Duplicate | IgnoreReason::NoOp => Self::Duplicate,
            IgnoreReason::Stale => Self::Stale,
        }
    }

    /// What a finalize's result is answered: a deferral is a 503 the PSP retries.
    pub fn of(result: FinalizeResult) -> Result<Self, ApiError> {
        match result {
            FinalizeResult::Applied(_) => Ok(Self::Applied),
            FinalizeResult::Ignored(reason) => Ok(Self::ignored_for(reason)),
            FinalizeResult::Deferred(reason) => {
                Err(retry_later(&format!("cannot apply yet ({reason:?}); retry later")))
            }
        }
    }

    /// The answer's word: the `result` of the JSON answer and of the request's metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Duplicate => IgnoreReason::Duplicate.answer(),
            Self::Stale => IgnoreReason::Stale.answer(),
            Self::Ignored => "ignored",
            Self::Quarantined => "quarantined",
            Self::UnknownPayment => "unknown_payment",
            Self::Queued => "queued",
            Self::Accepted => "[accepted]",
        }
    }

    /// The HTTP answer: 200 `{"result": ...}`, or for Adyen 200 `[accepted]` as text (a 2xx with this body
    /// satisfies Adyen's old and new rules).
    pub fn into_response(self) -> Response<Body> {
        if self != Self::Accepted {
            return http::json(StatusCode::OK, &json!({ "result": self.as_str() }));
        }
        let mut response = Response::new(Body::from(self.as_str()));
        if let Ok(text) = "text/plain".parse() {
            response.headers_mut().insert("content-type", text);
        }
        response
    }
}

/// Where a step leaves the delivery: on to the next step with `T`, or answered.
pub(crate) enum Flow<T> {
    Go(T),
    Answered(Answer),
}

/// A 503 with `Retry-After`: the PSP delivers again later.
pub(crate) fn retry_later(message: &str) -> ApiError {
    ApiError::unavailable(message, 5)
}

/// A 404: the path names no configured provider.
pub(crate) fn unknown_provider(name: &str) -> ApiError {
    ApiError::not_found(format!("unknown provider {name}"))
}
