//! The AWS account and region the local world stands in: moto's default account (the account of every queue
//! ARN moto gives) in `us-east-1`. Every ARN and envelope the local Lambda writes names them.

/// The local world's AWS account id.
pub const LOCAL_ACCOUNT: &str = "123456789012";
/// The local world's region.
pub const LOCAL_REGION: &str = "us-east-1";
