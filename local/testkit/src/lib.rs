//! Test fixtures against the real local stand-ins for AWS, never hand-written fakes of them: what every test
//! crate, and the local Lambda's world, builds its data services from.
//!
//! | module | what it is |
//! | --- | --- |
//! | `service` | DynamoDB Local and moto (SQS, Secrets Manager) on 127.0.0.1: the endpoint `scripts/test` started, or one the test process starts and takes down with it; the repository's root |
//! | `dynamodb_local` | DynamoDB Local's endpoint, in one call |
//! | `table` | a fresh table from the one definition of `PaymentsTable` in `infra/template.yaml` (keys, indexes, stream, TTL) |
//! | `queues` | the template's queues (the event FIFO and its DLQ, the escalation, relay failures, Stripe events and schedule DLQs) created in moto from their definitions |
//! | `aws_calls` | an SDK interceptor that records every AWS call a function's clients make (`AWS_CALL_RECORD`), for `scripts/check_permissions.py` |
//!
//! The local Lambda (`local-lambda`) builds its world's table and queues from `table` and `queues`; nothing here
//! knows about running a function.

pub mod aws_calls;
pub mod dynamodb_local;
pub mod queues;
pub mod service;
pub mod table;
