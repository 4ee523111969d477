//! Stripe's error answers (a missing parameter, an unknown object or path, a 429/5xx storm) and the effects
//! of an answer alone.

use super::{Answer, Effects, WebhookEvent};
use serde_json::json;

pub(super) fn answer(answer: Answer) -> Effects {
    Effects {
        answer: Some(answer),
        ..Effects::default()
    }
}

pub(super) fn storm_answer(status: u16) -> Answer {
    if status == 429 {
        Answer::error(
            429,
            "invalid_request_error",
            Some("rate_limit"),
            // docs.stripe.com/error-codes#rate-limit: the code's documented message and its doc_url (Stripe's
            // libraries read type invalid_request_error with code rate_limit on a 429 as the rate limit).
            "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests.",
            json!({ "doc_url": "https://stripe.com/docs/error-codes/rate-limit" }),
        )
    } else {
        Answer::error(status, "api_error", None, "An unknown error occurred.", json!({}))
    }
}

/// Stripe's answer to a request on an object another request or a Stripe process holds (a webhook's handler
/// and our own call on one PaymentIntent): 429, `invalid_request_error`, code `lock_timeout`, its documented
/// message. The server sends it with `Stripe-Should-Retry: true`, as Stripe advises a retry of lock timeouts
/// ([`LOCK_TIMEOUT`] marks it).
pub(super) fn lock_timeout() -> Answer {
    Answer::error(
        429,
        "invalid_request_error",
        Some(LOCK_TIMEOUT),
        "This object cannot be accessed right now because another API request or Stripe process is currently \
         accessing it. If you see this error intermittently, retry the request. If you see this error frequently \
         and are making multiple concurrent requests to a single object, make your requests serially or at a \
         lower rate.",
        json!({ "doc_url": "https://stripe.com/docs/error-codes/lock-timeout" }),
    )
}

/// The error code of Stripe's lock timeouts.
pub const LOCK_TIMEOUT: &str = "lock_timeout";

pub(super) fn missing(param: &str) -> Answer {
    Answer::error(
        400,
        "invalid_request_error",
        Some("parameter_missing"),
        &format!("Missing or invalid required param: {param}."),
        json!({ "param": param }),
    )
}

pub(super) fn no_such(object: &str, id: &str) -> Answer {
    Answer::error(
        404,
        "invalid_request_error",
        Some("resource_missing"),
        &format!("No such {object}: '{id}'"),
        json!({ "param": "id" }),
    )
}

pub(super) fn not_found(path: &str) -> Answer {
    Answer::error(
        404,
        "invalid_request_error",
        None,
        &format!("Unrecognized request URL ({path})."),
        json!({}),
    )
}

/// The effects of `answer` with the webhooks of the steps that fell due before it.
pub(super) fn answer_with(answer: Answer, webhooks: Vec<WebhookEvent>) -> Effects {
    Effects {
        answer: Some(answer),
        webhooks,
        ..Effects::default()
    }
}
