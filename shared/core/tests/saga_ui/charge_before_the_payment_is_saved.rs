//! The PSP is asked only once the saga has saved its payment: a saga that has just reserved stock cannot
//! record a charge (every retry must reuse the one saved payment and its key).
use payments_core::saga::{Saga, StockReserved};

fn charge_unsaved(saga: Saga<StockReserved>) {
    let _ = saga.payment_requested(None, false, 0);
}

fn main() {}
