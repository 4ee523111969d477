//! Running code at an exact point between a handler's calls: before its next call of one operation.
//!
//! This makes a stale read deterministic: the hook commits a competing write after the handler has read
//! the payment and before its transaction goes out. The hook runs on its own thread and runtime, so it
//! can use async clients while the intercepted call waits.

use crate::intercept::{operation_name, NextCalls};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::future::Future;
use std::pin::Pin;

type Action = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

#[derive(Debug, Clone, Default)]
pub struct BeforeCall {
    pending: NextCalls<Action>,
}

impl BeforeCall {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `action` to completion before the next call of `operation` is sent.
    pub fn before_next<F, Fut>(&self, operation: &str, action: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.pending.push(operation, Box::new(move || Box::pin(action())));
    }

    /// True when every planned action has run.
    pub fn done(&self) -> bool {
        self.pending.is_empty()
    }
}

impl Intercept for BeforeCall {
    fn name(&self) -> &'static str {
        "BeforeCall"
    }

    fn read_before_serialization(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(action) = self.pending.take(&operation_name(cfg)) {
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(action());
            })
            .join()
            .map_err(|_| "hook action panicked")?;
        }
        Ok(())
    }
}
