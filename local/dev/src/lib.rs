//! What the tests and the local stack share: the local stand-ins for AWS (DynamoDB Local and moto's SQS on
//! 127.0.0.1), tables and queues created from the one definition in `infra/template.yaml`, and the stream
//! pump that plays the event source mapping locally.

pub mod aws_calls;
pub mod dynamodb_local;
pub mod eventbridge;
pub mod queues;
pub mod service;
pub mod sqs_poller;
pub mod stream_pump;
pub mod table;
