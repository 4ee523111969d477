//! A process killed at an exact point: after `n` DynamoDB calls, every further call of this client fails
//! before it is sent (nothing reaches DynamoDB), as if the process had died there. A second client without
//! the switch plays the restarted process.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct KillSwitch {
    remaining: Arc<AtomicI64>,
}

impl KillSwitch {
    /// Lets `calls` calls through, then kills.
    pub fn after(calls: usize) -> Self {
        Self {
            remaining: Arc::new(AtomicI64::new(i64::try_from(calls).unwrap_or(i64::MAX))),
        }
    }

    /// True once a call was refused.
    pub fn fired(&self) -> bool {
        self.remaining.load(Ordering::SeqCst) < 0
    }
}

impl Intercept for KillSwitch {
    fn name(&self) -> &'static str {
        "KillSwitch"
    }

    fn read_before_serialization(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.remaining.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Err("process killed".into());
        }
        Ok(())
    }
}

/// A DynamoDB client for DynamoDB Local that dies after `calls` calls.
pub fn dying_client(calls: usize) -> (aws_sdk_dynamodb::Client, KillSwitch) {
    let switch = KillSwitch::after(calls);
    let with = crate::Interceptors {
        kill: Some(switch.clone()),
        ..crate::Interceptors::default()
    };
    (crate::client(&crate::dynamodb_local::endpoint(), with), switch)
}
