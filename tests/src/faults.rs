//! Fault injection in front of the real DynamoDB Local, through an SDK interceptor.
//!
//! DynamoDB Local never throttles and never answers `TransactionConflict`. This interceptor makes chosen calls
//! fail the way AWS does. For a fault that happens *before* DynamoDB acts (throttling, a 500, a transaction
//! conflict), the request is diverted to a harmless `ListTables` call, so nothing is written, and its answer is
//! replaced with the error. For `ResponseLostAfterCommit`, the real request goes through and commits, and only
//! the answer is replaced with a 500, as when a response is lost on the network.

use crate::intercept::{operation_name, NextCalls};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::{Response, StatusCode};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// An answer DynamoDB gives under load or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 400 `ThrottlingException`: nothing written; the SDK retries with backoff.
    Throttling,
    /// 400 `ProvisionedThroughputExceededException`: nothing written; the SDK retries with backoff.
    ProvisionedThroughputExceeded,
    /// 500 `InternalServerError`: nothing written; the SDK retries.
    InternalServerError,
    /// `TransactionCanceledException` with reason `TransactionConflict` on the first item: nothing written;
    /// the SDK does not retry it, the store does (with jitter and a fresh read).
    TransactionConflict,
    /// `TransactionConflictException` on a single-item write (the item is in another's transaction): nothing
    /// written.
    ItemTransactionConflict,
    /// The request commits but its answer is lost (500): the SDK retries the same request.
    ResponseLostAfterCommit,
}

impl Fault {
    fn writes_nothing(self) -> bool {
        self != Fault::ResponseLostAfterCommit
    }

    fn response(self) -> Response<SdkBody> {
        let (status, kind, extra) = match self {
            Fault::Throttling => (400, "com.amazonaws.dynamodb.v20120810#ThrottlingException", ""),
            Fault::ProvisionedThroughputExceeded => (
                400,
                "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                "",
            ),
            Fault::InternalServerError | Fault::ResponseLostAfterCommit => {
                (500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "")
            }
            Fault::ItemTransactionConflict => {
                (400, "com.amazonaws.dynamodb.v20120810#TransactionConflictException", "")
            }
            Fault::TransactionConflict => (
                400,
                "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                r#","CancellationReasons":[{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"},{"Code":"None"},{"Code":"None"}]"#,
            ),
        };
        let body = format!(r#"{{"__type":"{kind}","message":"injected {self:?}"{extra}}}"#);
        let mut response = Response::new(StatusCode::try_from(status).expect("status"), SdkBody::from(body));
        response
            .headers_mut()
            .insert("content-type", "application/x-amz-json-1.0");
        response.headers_mut().insert("x-amzn-requestid", "injected");
        response
    }
}

/// The fault chosen for the current attempt, carried from signing to deserialization.
#[derive(Debug, Clone)]
struct AttemptFault(Option<Fault>);

impl Storable for AttemptFault {
    type Storer = StoreReplace<Self>;
}

/// A queue of faults, each for the next call of one operation (`TransactWriteItems`, `GetItem`, ...).
#[derive(Debug, Clone, Default)]
pub struct FaultInjector {
    plan: NextCalls<Fault>,
    injected: Arc<AtomicU32>,
}

impl FaultInjector {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next `times` calls of `operation` fail with `fault`.
    pub fn fail_next(&self, operation: &str, fault: Fault, times: usize) -> &Self {
        for _ in 0..times {
            self.plan.push(operation, fault);
        }
        self
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u32 {
        self.injected.load(Ordering::SeqCst)
    }

    /// Faults still waiting for their call.
    pub fn pending(&self) -> usize {
        self.plan.len()
    }
}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "FaultInjector"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let fault = self.plan.take(&operation_name(cfg));
        if let Some(fault) = fault {
            let request = context.request_mut();
            self.injected.fetch_add(1, Ordering::SeqCst);
            if fault.writes_nothing() {
                request
                    .headers_mut()
                    .insert("x-amz-target", "DynamoDB_20120810.ListTables");
                *request.body_mut() = SdkBody::from(r#"{"Limit":1}"#);
                request.headers_mut().insert("content-length", "11");
            }
        }
        cfg.interceptor_state().store_put(AttemptFault(fault));
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(AttemptFault(Some(fault))) = cfg.load::<AttemptFault>().cloned() {
            *context.response_mut() = fault.response();
            cfg.interceptor_state().store_put(AttemptFault(None));
        }
        Ok(())
    }
}
