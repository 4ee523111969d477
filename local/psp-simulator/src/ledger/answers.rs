//! Stripe's error answers (a missing parameter, an unknown object or path, a 429/5xx storm) and the effects
//! of an answer alone.

use super::{Answer, Effects};
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
            "Too many requests hit the API too quickly.",
            json!({}),
        )
    } else {
        Answer::error(status, "api_error", None, "An unknown error occurred.", json!({}))
    }
}

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
