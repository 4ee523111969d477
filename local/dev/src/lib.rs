//! What the tests and the local stack share: DynamoDB Local on 127.0.0.1 and tables created from the one
//! definition in `infra/template.yaml`.

pub mod dynamodb_local;
pub mod table;
