//! The clients of the event source mappings and destinations, each recording its calls under the function
//! it serves.
//!
//! Why: with `AWS_CALL_RECORD` set, `scripts/check_permissions.py` compares each function's calls with its
//! role in the template; in AWS a mapping reads the stream or the queue, and a destination is sent to, with
//! the function's execution role, so those calls are the function's.

use local_testkit::aws_calls::CallRecorder;

/// Builds the mappings' clients from the process's SDK configuration.
#[derive(Debug, Clone)]
pub struct MappingClients {
    sdk: aws_config::SdkConfig,
}

impl MappingClients {
    /// The mappings' clients on `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self { sdk: sdk.clone() }
    }

    /// The SQS client of the mapping or destination of `function` (its binary's name).
    pub fn sqs(&self, function: &str) -> aws_sdk_sqs::Client {
        let mut config = aws_sdk_sqs::config::Builder::from(&self.sdk);
        if let Some(recorder) = CallRecorder::from_env(function) {
            config = config.interceptor(recorder);
        }
        aws_sdk_sqs::Client::from_conf(config.build())
    }

    /// The DynamoDB Streams client of the mapping that feeds `function`.
    pub fn streams(&self, function: &str) -> aws_sdk_dynamodbstreams::Client {
        let mut config = aws_sdk_dynamodbstreams::config::Builder::from(&self.sdk);
        if let Some(recorder) = CallRecorder::from_env(function) {
            config = config.interceptor(recorder);
        }
        aws_sdk_dynamodbstreams::Client::from_conf(config.build())
    }
}
