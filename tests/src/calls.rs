//! Counting DynamoDB calls by operation, through an SDK interceptor: one entry per call (not per attempt),
//! with its start and end, so overlapping calls (a lease acquire in parallel with a read) can be told from
//! sequential ones.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One call: operation name, start, end.
#[derive(Debug, Clone)]
pub struct Call {
    pub operation: String,
    pub start: Instant,
    pub end: Option<Instant>,
}

#[derive(Debug, Clone)]
struct CallIndex(usize);

impl Storable for CallIndex {
    type Storer = StoreReplace<Self>;
}

#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    calls: Arc<Mutex<Vec<Call>>>,
}

impl CallCounter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Operation names in call order.
    pub fn calls(&self) -> Vec<String> {
        self.calls
            .lock()
            .expect("calls lock")
            .iter()
            .map(|c| c.operation.clone())
            .collect()
    }

    /// Calls per operation.
    pub fn by_operation(&self) -> BTreeMap<String, usize> {
        let mut map = BTreeMap::new();
        for call in self.calls() {
            *map.entry(call).or_default() += 1;
        }
        map
    }

    /// How many calls happened one after another: calls that overlap in time count once.
    pub fn sequential_depth(&self) -> usize {
        let mut calls = self.calls.lock().expect("calls lock").clone();
        calls.sort_by_key(|c| c.start);
        let mut depth = 0;
        let mut stage_end: Option<Instant> = None;
        for call in calls {
            let end = call.end.unwrap_or(call.start);
            match stage_end {
                Some(e) if call.start < e => stage_end = Some(e.max(end)),
                _ => {
                    depth += 1;
                    stage_end = Some(end);
                }
            }
        }
        depth
    }

    /// How many calls of `operation` have finished (answered or failed).
    pub fn finished(&self, operation: &str) -> usize {
        let calls = self.calls.lock().expect("calls lock");
        calls
            .iter()
            .filter(|c| c.operation == operation && c.end.is_some())
            .count()
    }

    /// Waits (up to 10 s) until `count` calls of `operation` have finished: a test that must act after another
    /// task's call waits for that call, not for a fixed time a loaded machine may not keep.
    pub async fn wait_finished(&self, operation: &str, count: usize) {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while self.finished(operation) < count {
            assert!(
                Instant::now() < deadline,
                "{operation} #{count} did not finish within 10 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
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
        let operation = crate::intercept::operation_name(cfg);
        let mut calls = self.calls.lock().expect("calls lock");
        calls.push(Call {
            operation,
            start: Instant::now(),
            end: None,
        });
        cfg.interceptor_state().store_put(CallIndex(calls.len() - 1));
        Ok(())
    }

    fn read_after_execution(
        &self,
        _: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(CallIndex(i)) = cfg.load::<CallIndex>().cloned() {
            if let Some(call) = self.calls.lock().expect("calls lock").get_mut(i) {
                call.end = Some(Instant::now());
            }
        }
        Ok(())
    }
}
