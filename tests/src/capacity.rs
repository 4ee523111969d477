//! Capacity units as DynamoDB Local reports them: an interceptor that asks every call for its
//! `ConsumedCapacity` (`ReturnConsumedCapacity = INDEXES`, set on the typed input before it is serialized)
//! and adds up what the answers say: the table's units apart from the global secondary indexes'. DynamoDB
//! Local answers with `CapacityUnits` only (no read/write split), so a unit is a read or a write by its
//! operation; it counts a transaction at the transactional rate (a one-item `TransactWriteItems` reports 2).
//! A call that fails (a conditional check) returns no figure and is not counted here.

use aws_sdk_dynamodb::operation::{
    delete_item::{DeleteItemInput, DeleteItemOutput},
    get_item::{GetItemInput, GetItemOutput},
    put_item::{PutItemInput, PutItemOutput},
    query::{QueryInput, QueryOutput},
    transact_write_items::{TransactWriteItemsInput, TransactWriteItemsOutput},
    update_item::{UpdateItemInput, UpdateItemOutput},
};
use aws_sdk_dynamodb::types::{ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::sync::{Arc, Mutex};

/// Read and write units consumed on the table, and the units of its index writes, as DynamoDB reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    pub read: f64,
    pub write: f64,
    /// Units the global secondary indexes consumed (writes of their entries, reads of a query on one).
    pub index: f64,
    /// Of those, the `open-items` index's: its partition keys are few (a shard per kind), so its partitions
    /// are the ones a peak can heat (the capacity model, `bench capacity`).
    pub open_items: f64,
}

/// Adds up the `ConsumedCapacity` of every call its client makes (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct CapacityMeter {
    units: Arc<Mutex<Units>>,
}

impl CapacityMeter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The units since the last [`CapacityMeter::reset`].
    pub fn units(&self) -> Units {
        *self.units.lock().expect("units lock")
    }

    pub fn reset(&self) {
        *self.units.lock().expect("units lock") = Units::default();
    }

    /// Adds `consumed`, the answer of a read (`read`) or a write (see the module doc).
    fn add(&self, consumed: &[ConsumedCapacity], read: bool) {
        let mut units = self.units.lock().expect("units lock");
        for c in consumed {
            let indexes: f64 = c
                .global_secondary_indexes()
                .map(|gsi| gsi.values().filter_map(|i| i.capacity_units).sum())
                .unwrap_or(0.0);
            units.open_items += c
                .global_secondary_indexes()
                .and_then(|gsi| gsi.get(shared::store::open_index::OPEN_INDEX))
                .and_then(|i| i.capacity_units)
                .unwrap_or(0.0);
            let total = c.capacity_units.unwrap_or(0.0);
            let table = c.table().and_then(|t| t.capacity_units).unwrap_or(total - indexes);
            units.index += indexes;
            if read {
                units.read += table;
            } else {
                units.write += table;
            }
        }
    }
}

/// Sets `ReturnConsumedCapacity = TOTAL` on whichever input type `input` is.
macro_rules! ask_total {
    ($input:expr, $($ty:ty),+) => {
        $(if let Some(i) = $input.downcast_mut::<$ty>() {
            i.return_consumed_capacity = Some(ReturnConsumedCapacity::Indexes);
        })+
    };
}

impl Intercept for CapacityMeter {
    fn name(&self) -> &'static str {
        "CapacityMeter"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        ask_total!(
            input,
            GetItemInput,
            PutItemInput,
            DeleteItemInput,
            UpdateItemInput,
            QueryInput,
            TransactWriteItemsInput
        );
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Ok(output) = context.output_or_error() else {
            return Ok(());
        };
        let one = |c: Option<&ConsumedCapacity>| c.cloned().into_iter().collect::<Vec<_>>();
        let (consumed, read) = if let Some(o) = output.downcast_ref::<GetItemOutput>() {
            (one(o.consumed_capacity()), true)
        } else if let Some(o) = output.downcast_ref::<QueryOutput>() {
            (one(o.consumed_capacity()), true)
        } else if let Some(o) = output.downcast_ref::<PutItemOutput>() {
            (one(o.consumed_capacity()), false)
        } else if let Some(o) = output.downcast_ref::<DeleteItemOutput>() {
            (one(o.consumed_capacity()), false)
        } else if let Some(o) = output.downcast_ref::<UpdateItemOutput>() {
            (one(o.consumed_capacity()), false)
        } else if let Some(o) = output.downcast_ref::<TransactWriteItemsOutput>() {
            (o.consumed_capacity().to_vec(), false)
        } else {
            (Vec::new(), false)
        };
        self.add(&consumed, read);
        Ok(())
    }
}
