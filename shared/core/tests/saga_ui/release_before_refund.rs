//! After a capture, the stock cannot be released before the money is refunded.
use payments_core::saga::{RefundingPayment, Saga};

fn release(saga: Saga<RefundingPayment>) {
    let _ = saga.stock_released(0);
}

fn main() {}
