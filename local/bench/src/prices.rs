//! The list prices the bill ([`crate::bill`]) uses: the one place they are written, with their date and
//! source. AWS us-east-1, on-demand, no free tier, the first pricing tier of each service.
//!
//! Read on 2026-12-04 from the AWS pricing pages:
//! - DynamoDB on-demand: <https://aws.amazon.com/dynamodb/pricing/on-demand/> ($0.625 per million write
//!   request units, $0.125 per million read request units, Standard table class; a transactional write
//!   consumes two units per KB, which the measured units already include).
//! - API Gateway HTTP APIs: <https://aws.amazon.com/api-gateway/pricing/> ($1.00 per million requests, first
//!   300 million a month; requests metered in 512 KB increments).
//! - Lambda: <https://aws.amazon.com/lambda/pricing/> (Arm: $0.0000133334 per GB-second, first 7.5 billion
//!   GB-seconds a month; $0.20 per million requests; duration billed per 1 ms).
//! - SQS: <https://aws.amazon.com/sqs/pricing/> (FIFO: $0.50 per million requests, each 64 KB chunk of a
//!   request one request).
//! - CloudWatch Logs: <https://aws.amazon.com/cloudwatch/pricing/> (Standard log class ingestion, Lambda's
//!   vended logs' first tier: $0.50 per GB).
//!
//! The stored copies of the AWS pages searched that day show the terms but not every figure; each figure
//! was cross-checked on a dated secondary page: DynamoDB (the 2024-11-01 on-demand cut to $0.625 / $0.125,
//! airbyte.com/data-engineering-resources/dynamodb-pricing), Lambda Arm (cloudchipr.com/blog/aws-lambda-pricing),
//! SQS FIFO (cloudburn.io/blog/amazon-sqs-pricing, March 2026), HTTP APIs and Logs ingestion
//! (go-cloud.io/aws-api-gateway-pricing, 2026).

/// The date the prices below were read.
pub const READ_ON: &str = "2026-12-04";
/// Dollars per DynamoDB on-demand write request unit.
pub const DYNAMODB_WRITE_UNIT: f64 = 0.625 / 1e6;
/// Dollars per DynamoDB on-demand read request unit.
pub const DYNAMODB_READ_UNIT: f64 = 0.125 / 1e6;
/// Dollars per API Gateway HTTP API request.
pub const HTTP_API_REQUEST: f64 = 1.00 / 1e6;
/// Dollars per Lambda (arm64) GB-second.
pub const LAMBDA_ARM_GB_SECOND: f64 = 0.000_013_333_4;
/// Dollars per Lambda request.
pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// Dollars per SQS FIFO request.
pub const SQS_FIFO_REQUEST: f64 = 0.50 / 1e6;
/// Dollars per byte of CloudWatch Logs ingestion (per GB: 2^30 bytes).
pub const LOGS_INGESTED_BYTE: f64 = 0.50 / 1_073_741_824.0;
