//! DynamoDB Local for tests: see [`crate::service`].

/// The endpoint of a running DynamoDB Local, starting one if the environment names none.
pub fn endpoint() -> String {
    crate::service::DYNAMODB.endpoint()
}
