//! What the tests and the local stack share: the local stand-ins for AWS (DynamoDB Local and moto's SQS on
//! 127.0.0.1), tables and queues created from the one definition in `infra/template.yaml`, and the stream
//! pump that plays the event source mapping locally. For running a function binary as Lambda runs it: the
//! Lambda Runtime API (`runtime_api`), a function's environment as the template gives it (`template`) and
//! the local counterparts of the resources it names (`world`); the `cold-start` binary puts them together,
//! `function_pool` runs a function as Lambda does (its environments, `Timeout`, reserved concurrency),
//! `triggers` reads what starts it (with `event_pattern`, the mappings' filters), `http_api` fronts its routes
//! (`sigv4` checks an `AWS_IAM` caller), `async_invoke` runs its asynchronous events (`schedule`'s runs) with
//! Lambda's retries and destination, `stream_mapping` (over `stream_reader`) and `sqs_poller::start_mapping`
//! are its event source mappings.

pub mod async_invoke;
pub mod aws_calls;
pub mod dynamodb_local;
pub mod event_pattern;
pub mod eventbridge;
pub mod function_pool;
pub mod http_api;
pub mod queues;
pub mod runtime_api;
pub mod schedule;
pub mod service;
pub mod sigv4;
pub mod sqs_poller;
pub mod stream_mapping;
pub mod stream_pump;
pub mod stream_reader;
pub mod table;
pub mod template;
pub mod triggers;
pub mod world;
