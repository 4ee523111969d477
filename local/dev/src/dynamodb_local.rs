//! DynamoDB Local for tests: see [`crate::service`].

pub use crate::service::repo_root;

pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL_DYNAMODB";

/// The endpoint of a running DynamoDB Local, starting one if the environment names none.
pub fn endpoint() -> String {
    crate::service::DYNAMODB.endpoint()
}
