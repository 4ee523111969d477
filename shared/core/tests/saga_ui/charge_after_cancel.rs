//! A saga that is cancelling its payment cannot charge again.
use payments_core::saga::{CancellingPayment, Saga};
use payments_core::PaymentId;

fn charge_again(saga: Saga<CancellingPayment>) {
    let _ = saga.payment_requested(PaymentId::parse("pay_1").unwrap(), None, false, 0);
}

fn main() {}
