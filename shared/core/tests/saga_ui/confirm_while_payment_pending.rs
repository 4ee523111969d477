//! The order cannot be confirmed before the payment's outcome says the money was taken.
use payments_core::saga::{PaymentPending, Saga};

fn confirm(saga: Saga<PaymentPending>) {
    let _ = saga.order_confirmed(0);
}

fn main() {}
