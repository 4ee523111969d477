//! A saga that is cancelling its payment cannot charge again.
use payments_core::saga::{CancellingPayment, Saga};

fn charge_again(saga: Saga<CancellingPayment>) {
    let _ = saga.payment_requested(None, false, 0);
}

fn main() {}
