//! What the harness's SDK interceptors share: the name of the operation a call is for, and a plan of things
//! to do at the next call of one operation.

use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::ConfigBag;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The name of the operation a call is for (`GetItem`, `TransactWriteItems`, `SendMessageBatch`, ...).
pub fn operation_name(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>().map(|m| m.name().to_owned()).unwrap_or_default()
}

/// Items planned for calls to come, each for the next call of one operation, taken in the order planned.
pub struct NextCalls<T> {
    plan: Arc<Mutex<VecDeque<(String, T)>>>,
}

impl<T> NextCalls<T> {
    /// `item` is for the next call of `operation` not planned for yet.
    pub fn push(&self, operation: &str, item: T) {
        self.lock().push_back((operation.to_owned(), item));
    }

    /// The first item planned for a call of `operation`, if any, taken out of the plan.
    pub fn take(&self, operation: &str) -> Option<T> {
        let mut plan = self.lock();
        let index = plan.iter().position(|(op, _)| op == operation)?;
        plan.remove(index).map(|(_, item)| item)
    }

    /// How many items wait for their call.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, T)>> {
        self.plan.lock().expect("plan lock")
    }
}

// By hand: the plan is shared between clones, and an item need not be `Clone`, `Default` or `Debug`.
impl<T> Clone for NextCalls<T> {
    fn clone(&self) -> Self {
        Self {
            plan: Arc::clone(&self.plan),
        }
    }
}

impl<T> Default for NextCalls<T> {
    fn default() -> Self {
        Self { plan: Arc::default() }
    }
}

impl<T> std::fmt::Debug for NextCalls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let operations: Vec<String> = self.lock().iter().map(|(op, _)| op.clone()).collect();
        f.debug_struct("NextCalls").field("operations", &operations).finish()
    }
}
