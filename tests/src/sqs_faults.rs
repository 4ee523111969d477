//! Per-entry failures of `SendMessageBatch`, injected in front of the SQS emulator by an SDK interceptor:
//! the chosen entry is taken out of the request (so it is really not enqueued) and added to the answer's
//! `Failed` list, exactly what SQS answers when one entry of a batch fails.

use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::BatchResultErrorEntry;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeTransmitInterceptorContextMut, FinalizerInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use serde_json::Value;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Default)]
pub struct SqsEntryFaults {
    /// Entry positions (within a batch) to fail, one batch each.
    plan: Arc<Mutex<Vec<usize>>>,
    injected: Arc<Mutex<u32>>,
}

#[derive(Debug, Clone)]
struct Removed(Option<String>);

impl Storable for Removed {
    type Storer = StoreReplace<Self>;
}

impl SqsEntryFaults {
    pub fn new() -> Self {
        Self::default()
    }

    /// In the next `SendMessageBatch`, the entry at `position` fails.
    pub fn fail_entry_once(&self, position: usize) {
        self.plan.lock().expect("lock").push(position);
    }

    pub fn injected(&self) -> u32 {
        *self.injected.lock().expect("lock")
    }
}

impl Intercept for SqsEntryFaults {
    fn name(&self) -> &'static str {
        "SqsEntryFaults"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let is_batch = crate::intercept::operation_name(cfg) == "SendMessageBatch";
        let mut removed = None;
        if is_batch {
            let position = {
                let mut plan = self.plan.lock().expect("lock");
                (!plan.is_empty()).then(|| plan.remove(0))
            };
            if let Some(position) = position {
                let bytes = request.body().bytes().ok_or("streaming body")?.to_vec();
                let mut body: Value = serde_json::from_slice(&bytes)?;
                if let Some(entries) = body["Entries"].as_array_mut() {
                    if position < entries.len() {
                        let entry = entries.remove(position);
                        removed = entry["Id"].as_str().map(str::to_owned);
                    }
                }
                let new_body = serde_json::to_vec(&body)?;
                request
                    .headers_mut()
                    .insert("content-length", new_body.len().to_string());
                *request.body_mut() = SdkBody::from(new_body);
                *self.injected.lock().expect("lock") += u32::from(removed.is_some());
            }
        }
        cfg.interceptor_state().store_put(Removed(removed));
        Ok(())
    }

    fn modify_before_attempt_completion(
        &self,
        context: &mut FinalizerInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Removed(Some(id))) = cfg.load::<Removed>().cloned() else {
            return Ok(());
        };
        if let Some(Ok(output)) = context.output_or_error_mut() {
            if let Some(out) = output.downcast_mut::<SendMessageBatchOutput>() {
                let failed = BatchResultErrorEntry::builder()
                    .id(id)
                    .sender_fault(false)
                    .code("InternalError")
                    .message("injected")
                    .build()?;
                let mut failures = out.failed().to_vec();
                failures.push(failed);
                *out = SendMessageBatchOutput::builder()
                    .set_successful(Some(out.successful().to_vec()))
                    .set_failed(Some(failures))
                    .build()?;
            }
        }
        cfg.interceptor_state().store_put(Removed(None));
        Ok(())
    }
}
