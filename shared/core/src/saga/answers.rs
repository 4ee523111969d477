//! What the compensating steps decide from what they read: how the cancel of a charge that must take no
//! money starts (the payment's PaymentIntent, or a search for one the failed charge may have made), and what
//! a refund's answer and its read-back lead to.
//!
//! The runner (`functions/checkout-saga/src/runner/stripe.rs`) only makes the calls and the writes these name,
//! and the protocol model (`tools/protocol-model`) calls the same functions at its steps: one rule, checked
//! where it runs.

use super::{RefundImpossible, SagaRecord, Step};
use crate::ids::PspReference;
use crate::payment::Payment;
use crate::refund::RefundStep;
use crate::status::PaymentStatus;

/// How the cancel step (`cancelling_payment`) goes on from the saga and its payment as read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CancelStart {
    /// The payment has ended: the saga goes on from this status (captured: from the capture; otherwise no
    /// money was taken).
    Ended(PaymentStatus),
    /// Read the PaymentIntent, cancel it if it can still be canceled, and go on with what it then says.
    Cancel(PspReference),
    /// The payment names no PaymentIntent, but the charge failed and may have made one (its answer was a
    /// refusal, or never came, and no webhook bound it yet): search the PSP by the payment's id (and go on
    /// with [`after_search`]), so a charge given up is never taken later.
    Search,
    /// No PaymentIntent can exist for the payment: fail it (what that write leaves decides).
    Fail,
}

/// How the cancel step starts for `saga` whose payment reads `payment`.
pub fn cancel_start(saga: &SagaRecord, payment: &Payment) -> CancelStart {
    if payment.status.is_terminal() {
        return CancelStart::Ended(payment.status);
    }
    match &payment.psp_reference {
        Some(reference) => CancelStart::Cancel(reference.clone()),
        None if saga.failure.as_ref().map(|f| f.step) == Some(Step::Charge) => CancelStart::Search,
        None => CancelStart::Fail,
    }
}

/// The cancel step after [`CancelStart::Search`] found the PaymentIntent `found` (or none).
pub fn after_search(found: Option<PspReference>) -> CancelStart {
    match found {
        Some(reference) => CancelStart::Cancel(reference),
        None => CancelStart::Fail,
    }
}

/// The PSP's answer to the refund step's call (key `<order>:refund`), as far as the step reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundCalled<'a> {
    /// A refund was made (or replayed): what the payment's refunds then say ([`crate::refund`]).
    Made(RefundStep),
    /// Refused (an error no retry turns) with the PSP's error `code`.
    Refused { code: Option<&'a str> },
}

/// What the refund step does after its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfterRefund {
    /// Read the PaymentIntent back, record what it says on the payment, and decide with [`read_back`];
    /// `refused`: the call was refused.
    ReadBack { refused: bool },
    /// The refund is on its way: the saga waits for its webhook (each resume asks again under the same key).
    Wait,
    /// The refund failed and nothing gave the money back yet: an error (retried, then escalated) while
    /// recovery gives it back.
    Undone,
    /// Refused for good: the compensation goes on without it, with one escalation.
    Impossible(RefundImpossible),
}

/// What the refund step does with the PSP's `answer`. A refusal that does not make the refund impossible
/// by its code is read back: the money may be back already (our earlier attempt, whose answer was lost,
/// after the PSP forgot its key; or a refund made at the PSP).
pub fn after_refund(answer: RefundCalled<'_>) -> AfterRefund {
    match answer {
        RefundCalled::Made(RefundStep::Done) => AfterRefund::ReadBack { refused: false },
        RefundCalled::Made(RefundStep::Waiting) => AfterRefund::Wait,
        RefundCalled::Made(RefundStep::Undone) => AfterRefund::Undone,
        RefundCalled::Refused { code } => match RefundImpossible::from_psp_code(code) {
            Some(why) => AfterRefund::Impossible(why),
            None => AfterRefund::ReadBack { refused: true },
        },
    }
}

/// What the refund step does once the PaymentIntent was read back and what it says recorded on the payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadBack {
    /// The money is back: `refunded` (then the stock is released).
    Refunded,
    /// Refused and the charge does not show the money back: no retry turns that (invariant 12).
    Impossible(RefundImpossible),
}

/// The read-back's decision for `saga`, whose refund call was `refused` or not, when the charge shows
/// `refunded_minor` refunded in all (`None`: the answer carries no charge). The read-back is recorded on the
/// payment whatever this decides (the finalize keeps the PSP's truth, a partial refund made at the PSP
/// included, for the person the impossibility is escalated to); a refund the PSP accepted is done.
pub fn read_back(saga: &SagaRecord, refused: bool, refunded_minor: Option<u64>) -> ReadBack {
    let owed = saga.checkout.money.amount_minor();
    if refused && refunded_minor.unwrap_or(0) < owed {
        ReadBack::Impossible(RefundImpossible::Refused)
    } else {
        ReadBack::Refunded
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::ids::{OrderId, PaymentId, Sku};
    use crate::money::{Currency, Money};
    use crate::saga::{Checkout, Saga, Started};

    fn started() -> Saga<Started> {
        let checkout = Checkout {
            sku: Sku::parse("sku-1").unwrap(),
            quantity: 1,
            money: Money::new(2500, Currency::parse("EUR").unwrap()).unwrap(),
            payment_method: "pm_x".into(),
            psp: None,
        };
        Saga::begin(OrderId::parse("order-1").unwrap(), checkout, 0, 120_000).0
    }

    fn charging() -> Saga<super::super::Charging> {
        let (s, _) = started().stock_reserved(1);
        s.payment_created(PaymentId::parse("pay_1").unwrap(), 2).0
    }

    fn pi() -> PspReference {
        PspReference::parse("pi_1").unwrap()
    }

    fn payment(status: PaymentStatus, reference: Option<PspReference>) -> Payment {
        let mut p = fixtures::payment("pay_1");
        p.status = status;
        p.psp_reference = reference;
        p
    }

    #[test]
    fn the_cancel_searches_only_after_a_failed_charge_whose_payment_names_no_payment_intent() {
        let (refused, _) = charging().charge_failed("charge refused".into(), 3);
        let open = payment(PaymentStatus::Pending, None);
        assert_eq!(cancel_start(refused.record(), &open), CancelStart::Search);
        let bound = payment(PaymentStatus::Pending, Some(pi()));
        assert_eq!(cancel_start(refused.record(), &bound), CancelStart::Cancel(pi()));
        let captured = payment(PaymentStatus::Captured, Some(pi()));
        assert_eq!(
            cancel_start(refused.record(), &captured),
            CancelStart::Ended(PaymentStatus::Captured)
        );
        assert_eq!(after_search(Some(pi())), CancelStart::Cancel(pi()));
        assert_eq!(after_search(None), CancelStart::Fail);

        // Abandoned while waiting: the charge answered, so no PaymentIntent is unknown to the payment.
        let (pending, _) = charging().payment_requested(None, false, 3);
        let (abandoned, _) = pending.payment_failed("abandoned".into(), 4);
        assert_eq!(cancel_start(abandoned.record(), &open), CancelStart::Fail);
    }

    #[test]
    fn a_refused_refund_is_read_back_and_impossible_only_if_the_money_is_not_back() {
        assert_eq!(
            after_refund(RefundCalled::Refused {
                code: Some("charge_disputed")
            }),
            AfterRefund::Impossible(RefundImpossible::Disputed)
        );
        for code in [Some("charge_already_refunded"), Some("charge_not_refundable"), None] {
            assert_eq!(
                after_refund(RefundCalled::Refused { code }),
                AfterRefund::ReadBack { refused: true }
            );
        }
        assert_eq!(
            after_refund(RefundCalled::Made(RefundStep::Done)),
            AfterRefund::ReadBack { refused: false }
        );
        assert_eq!(after_refund(RefundCalled::Made(RefundStep::Waiting)), AfterRefund::Wait);
        assert_eq!(
            after_refund(RefundCalled::Made(RefundStep::Undone)),
            AfterRefund::Undone
        );

        let saga = charging();
        let saga = saga.record();
        assert_eq!(read_back(saga, true, Some(2500)), ReadBack::Refunded);
        assert_eq!(
            read_back(saga, true, Some(2499)),
            ReadBack::Impossible(RefundImpossible::Refused),
            "part of it back is not all of it"
        );
        assert_eq!(
            read_back(saga, true, None),
            ReadBack::Impossible(RefundImpossible::Refused)
        );
        assert_eq!(read_back(saga, false, None), ReadBack::Refunded, "accepted: done");
    }
}
