//! The local Lambda: a function's binary run as Lambda runs it, with the settings and triggers
//! `infra/template.yaml` gives it, on DynamoDB Local and moto (their fixtures are `local-testkit`'s). What it
//! will not emulate, and the rule for adding to it, open docs/LOCAL.md.
//!
//! From the bottom up:
//!
//! | module | what it is |
//! | --- | --- |
//! | `account` | the account and region the local world stands in |
//! | `template` | the template read: a function's environment as CloudFormation gives it, resolved against a [`template::Stack`] of parameters and local resources |
//! | `world` | the local counterparts of the stack's resources (the table, the queues, the secrets), created and returned as that `Stack` |
//! | `event_pattern` | Lambda's event filtering grammar (`FilterCriteria`) |
//! | `triggers` | what starts a function and how Lambda runs it (`Timeout`, reserved concurrency, `EventInvokeConfig`, `Events`), one reader per kind: `route`, `mapping`, `scheduler` |
//! | `console` | where a function's output goes: its own log file, and the terminal only for requests, errors and Lambda's own reports |
//! | `runtime_api` | one execution environment's Lambda Runtime API, and the spawn of a function's process against it |
//! | `function_pool` | one function as Lambda runs it: its environments, cold starts, `Timeout`, reserved concurrency |
//! | `http_api` | API Gateway's HTTP API in front of the routes (`sigv4` checks an `AWS_IAM` caller) |
//! | `async_invoke` | Lambda's asynchronous invocation: retries, event age, the on-failure destination |
//! | `schedule` | EventBridge Scheduler's `rate(...)` runs, into `async_invoke` |
//! | `stream_reader` | a DynamoDB stream read as Lambda's mapping reads it |
//! | `stream_mapping` | the DynamoDB Streams event source mapping on a function |
//! | `stream_pump` | the same records handed to a handler in the test's own process |
//! | `sqs_poller` | the SQS event source mapping, on a function (`start_mapping`) or a handler in process |
//! | `eventbridge` | Stripe's partner event bus and its rule, into the rule's queue |
//!
//! The binaries: `cold-start` (CI's cold start of each packaged arm64 `bootstrap` under qemu, with the
//! template's environment) and `runtime-probe` (the smallest function speaking the Runtime API, for this
//! crate's tests). `local/stack` puts the pieces together into the whole system.

pub mod account;
pub mod async_invoke;
pub mod console;
pub mod event_pattern;
pub mod eventbridge;
pub mod function_pool;
pub mod http_api;
pub mod runtime_api;
pub mod schedule;
pub mod sigv4;
pub mod sqs_poller;
pub mod stream_mapping;
pub mod stream_pump;
pub mod stream_reader;
pub mod template;
pub mod triggers;
pub mod world;
