//! The order cannot be confirmed while the stock is reserved but nothing is charged.
use payments_core::saga::{Saga, StockReserved};

fn confirm(saga: Saga<StockReserved>) {
    let _ = saga.order_confirmed(0);
}

fn main() {}
