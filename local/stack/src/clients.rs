//! Each Lambda function's own SDK clients, as each function builds them at its cold start in AWS.
//!
//! Why not one client for the whole process: with `AWS_CALL_RECORD` set, every call is recorded under the
//! name of the function whose code made it (`local_dev::aws_calls`), and `scripts/check_permissions.py`
//! compares those calls with that function's role in the template. The stand-ins for the event source
//! mappings (stream pump, SQS poller) read with the clients of the function they feed, because in AWS the
//! mapping reads the stream or the queue with that function's role.

use local_dev::aws_calls::CallRecorder;
use shared::aws;

/// Builds the clients of one function from the process's SDK configuration.
#[derive(Debug, Clone)]
pub struct FunctionClients {
    sdk: aws_config::SdkConfig,
}

impl FunctionClients {
    /// The clients of every function, on `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self { sdk: sdk.clone() }
    }

    /// The process's SDK configuration.
    pub fn sdk(&self) -> aws_config::SdkConfig {
        self.sdk.clone()
    }

    /// The clients `function` is built on (its `<Function>::build`): its own DynamoDB and SQS clients.
    pub fn function(&self, function: &str) -> shared::lambda::Clients {
        shared::lambda::Clients {
            sdk: self.sdk.clone(),
            dynamodb: self.dynamodb(function),
            sqs: self.sqs(function),
        }
    }

    /// `function`'s DynamoDB client, with the functions' retry and timeout settings.
    pub fn dynamodb(&self, function: &str) -> aws_sdk_dynamodb::Client {
        let mut config = aws::dynamodb_config(&self.sdk);
        if let Some(recorder) = CallRecorder::from_env(function) {
            config = config.interceptor(recorder);
        }
        aws_sdk_dynamodb::Client::from_conf(config.build())
    }

    /// `function`'s SQS client.
    pub fn sqs(&self, function: &str) -> aws_sdk_sqs::Client {
        let mut config = aws_sdk_sqs::config::Builder::from(&self.sdk);
        if let Some(recorder) = CallRecorder::from_env(function) {
            config = config.interceptor(recorder);
        }
        aws_sdk_sqs::Client::from_conf(config.build())
    }

    /// The DynamoDB Streams client of the event source mapping that feeds `function`.
    pub fn streams(&self, function: &str) -> aws_sdk_dynamodbstreams::Client {
        let mut config = aws_sdk_dynamodbstreams::config::Builder::from(&self.sdk);
        if let Some(recorder) = CallRecorder::from_env(function) {
            config = config.interceptor(recorder);
        }
        aws_sdk_dynamodbstreams::Client::from_conf(config.build())
    }
}
