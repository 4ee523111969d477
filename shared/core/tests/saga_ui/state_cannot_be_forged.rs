//! A typed state is only reached through transitions or a checked load, never built by hand.
use payments_core::saga::{PaymentCaptured, Saga, SagaRecord};
use std::marker::PhantomData;

fn forge(record: SagaRecord) -> Saga<PaymentCaptured> {
    Saga { record, state: PhantomData }
}

fn main() {}
