//! Counting DynamoDB calls by operation, through an SDK interceptor (one count per call, not per attempt).

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    calls: Arc<Mutex<Vec<String>>>,
}

impl CallCounter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Operation names in call order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("calls lock").clone()
    }

    /// Calls per operation.
    pub fn by_operation(&self) -> BTreeMap<String, usize> {
        let mut map = BTreeMap::new();
        for call in self.calls() {
            *map.entry(call).or_default() += 1;
        }
        map
    }

    pub fn reset(&self) {
        self.calls.lock().expect("calls lock").clear();
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    fn read_before_serialization(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = cfg.load::<Metadata>().map(|m| m.name().to_owned()).unwrap_or_default();
        self.calls.lock().expect("calls lock").push(name);
        Ok(())
    }
}
