//! The check of a stored saga: a record read back is typed only if the transitions can produce it, so no
//! stored saga runs a step out of order.

use super::{SagaRecord, SagaStatus, Step};
use thiserror::Error;

/// A stored saga that no transition could have produced.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("stored saga {order_id} (version {version}, {status}) is inconsistent: {reason}")]
pub struct InconsistentSaga {
    pub order_id: String,
    pub version: u64,
    pub status: SagaStatus,
    pub reason: &'static str,
}

fn inconsistent(r: &SagaRecord, reason: &'static str) -> InconsistentSaga {
    InconsistentSaga {
        order_id: r.order_id.to_string(),
        version: r.version,
        status: r.status,
        reason,
    }
}

/// Is `record` one the transitions can produce? Checked on every load:
/// - version at least the number of transitions that lead to the status;
/// - a payment exists once charged (pending, captured, completed, refunding) and not before;
/// - `captured` exactly where money was taken (never in a state that cancels without refunding);
/// - a refund only after a capture, and before the stock is released after a capture, unless the refund was
///   found impossible (`refund_impossible`: only then, and only with nothing refunded, is captured money kept);
/// - a failure (with the step it happened in) exactly in the compensating states, the step matching the state;
/// - captured money with the PSP reference a refund needs; a set-aside mark only on an open saga.
pub fn check(r: &SagaRecord) -> Result<(), InconsistentSaga> {
    // The order of the checks decides which reason a record with several faults is reported with.
    check_counts(r)?;
    check_payment(r)?;
    check_money(r)?;
    if (r.recovery_requested || r.captured || r.psp_reference.is_some()) && r.payment_id.is_none() {
        return Err(inconsistent(r, "payment facts without a payment"));
    }
    // Captured money must be refundable: a refund is made on the PSP's reference.
    if r.captured && r.psp_reference.is_none() {
        return Err(inconsistent(r, "captured without a PSP reference"));
    }
    if r.set_aside.is_some() && r.status.is_terminal() {
        return Err(inconsistent(r, "set aside after its end"));
    }
    if !failure_matches(r) {
        return Err(inconsistent(r, "failure does not match the status"));
    }
    Ok(())
}

/// The version a record in `status` has at least: one per transition on the shortest way there.
fn min_version(status: SagaStatus) -> u64 {
    use SagaStatus as S;
    match status {
        S::Started => 1,
        S::StockReserved | S::Compensated => 2,
        // Released without a payment: the payment was not created before the step's deadline.
        S::Charging | S::ReleasingStock => 3,
        S::PaymentPending | S::CancellingPayment => 4,
        S::PaymentCaptured => 5,
        S::Completed | S::RefundingPayment => 6,
    }
}

/// The version and the quantity.
fn check_counts(r: &SagaRecord) -> Result<(), InconsistentSaga> {
    if r.version < min_version(r.status) {
        return Err(inconsistent(r, "version lower than the steps behind this status"));
    }
    if r.checkout.quantity == 0 {
        return Err(inconsistent(r, "quantity is zero"));
    }
    Ok(())
}

/// A payment from the charge step on, none before it, and no PSP reference before the PSP answered.
fn check_payment(r: &SagaRecord) -> Result<(), InconsistentSaga> {
    use SagaStatus as S;
    let needs_payment = matches!(
        r.status,
        S::Charging
            | S::PaymentPending
            | S::PaymentCaptured
            | S::Completed
            | S::RefundingPayment
            | S::CancellingPayment
    );
    let no_payment_yet = matches!(r.status, S::Started | S::StockReserved);
    if needs_payment && r.payment_id.is_none() {
        return Err(inconsistent(r, "charged without a payment"));
    }
    if no_payment_yet && (r.payment_id.is_some() || r.psp_reference.is_some()) {
        return Err(inconsistent(r, "a payment before the charge step"));
    }
    if r.status == S::Charging && r.psp_reference.is_some() {
        return Err(inconsistent(r, "a PSP reference before the PSP answered the charge"));
    }
    Ok(())
}

/// The capture flag where money was taken, and a refund of all of it (only) before the stock is released.
fn check_money(r: &SagaRecord) -> Result<(), InconsistentSaga> {
    use SagaStatus as S;
    let must_be_captured = matches!(r.status, S::PaymentCaptured | S::Completed | S::RefundingPayment);
    let never_captured = matches!(
        r.status,
        S::Started | S::StockReserved | S::Charging | S::PaymentPending | S::CancellingPayment
    );
    if (must_be_captured && !r.captured) || (never_captured && r.captured) {
        return Err(inconsistent(r, "capture flag does not match the status"));
    }
    let refund_done = matches!(r.status, S::ReleasingStock | S::Compensated);
    if r.refunded_minor > 0 && !(refund_done && r.captured) {
        return Err(inconsistent(r, "a refund outside the refunded states"));
    }
    if r.refund_impossible.is_some() && !(refund_done && r.captured && r.refunded_minor == 0) {
        return Err(inconsistent(r, "a refund impossible outside a refused refund"));
    }
    if r.captured && refund_done && r.refund_impossible.is_none() && r.refunded_minor != r.checkout.money.amount_minor()
    {
        return Err(inconsistent(r, "captured money not refunded before releasing stock"));
    }
    Ok(())
}

/// A failure exactly in the compensating states, in a step that leads to that compensation.
fn failure_matches(r: &SagaRecord) -> bool {
    use SagaStatus as S;
    let failed_step = r.failure.as_ref().map(|f| f.step);
    match r.status {
        S::Started | S::StockReserved | S::Charging | S::PaymentPending | S::PaymentCaptured | S::Completed => {
            failed_step.is_none()
        }
        S::CancellingPayment => matches!(failed_step, Some(Step::Charge | Step::AwaitPayment)),
        S::RefundingPayment => failed_step == Some(Step::ConfirmOrder),
        S::ReleasingStock => match failed_step {
            Some(Step::ConfirmOrder) => r.captured,
            Some(Step::Charge | Step::AwaitPayment) => !r.captured,
            _ => false,
        },
        S::Compensated => match failed_step {
            Some(Step::ReserveStock) => !r.captured && r.payment_id.is_none(),
            Some(Step::ConfirmOrder) => r.captured,
            Some(Step::Charge | Step::AwaitPayment) => !r.captured,
            None => false,
        },
    }
}
