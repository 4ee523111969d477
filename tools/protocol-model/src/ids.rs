//! The one checkout the model runs: its order, SKU, amount and ids, built with the real parsers.

use payments_core::saga::Checkout;
use payments_core::{ClientSecret, Currency, Money, OrderId, PaymentId, Sku};
use std::fmt::Debug;

/// The amount of the one order, in minor units.
pub const AMOUNT: u64 = 1000;
/// Units of the SKU on the shelf at the start, and units the order buys.
pub const INITIAL_STOCK: u32 = 1;
/// Units the order buys.
pub const QUANTITY: u32 = 1;
/// The saga's payment timeout: past it (model time 1) the payment is read from its item and handed to
/// recovery.
pub const PAYMENT_TIMEOUT_MS: i64 = 1000;
/// The checkout's abandonment deadline (model time 2): a payment still waiting for the customer is canceled.
pub const ABANDON_AFTER_MS: i64 = 2000;

/// A day, in ms: the model's "a day later" is this long after the start.
pub const DAY_MS: i64 = 24 * 3600 * 1000;
/// `PSP_KEY_TRUSTED_FOR` (`functions/checkout-saga/src/runner.rs`): a charge whose payment was created longer
/// ago than this searches the PSP for its first PaymentIntent before it charges again.
pub const PSP_KEY_TRUSTED_FOR_MS: i64 = 23 * 3600 * 1000;

/// A value the model builds from constants: parsing cannot fail.
pub fn valid<T, E: Debug>(parsed: Result<T, E>) -> T {
    parsed.unwrap_or_else(|e| unreachable!("model constants are valid: {e:?}"))
}

/// The order (and saga) id.
pub fn order() -> OrderId {
    valid(OrderId::parse("o-1"))
}

/// The `n`th payment id the charge step creates (`pay-1`, `pay-2`, ...).
pub fn payment(n: usize) -> PaymentId {
    valid(PaymentId::parse(format!("pay-{n}")))
}

/// EUR.
pub fn currency() -> Currency {
    valid(Currency::parse("EUR"))
}

/// What the order buys.
pub fn checkout() -> Checkout {
    Checkout {
        sku: valid(Sku::parse("sku-1")),
        quantity: QUANTITY,
        money: valid(Money::new(AMOUNT, currency())),
        payment_method: "pm_model".into(),
        psp: None,
    }
}

/// The client secret of PaymentIntent `index`.
pub fn secret(index: u8) -> ClientSecret {
    valid(ClientSecret::parse(format!("pi_{}_secret_model", u32::from(index) + 1)))
}
