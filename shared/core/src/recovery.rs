//! What recovery does with one open payment before any I/O: ask the payment's own PSP, or, when there is
//! nothing to ask, wait (backed off) and past a configured age expire it. Pure, so the shell
//! (`shared::recovery`) and the protocol model make the same choice.
//!
//! Invariant 13: a payment is asked about only at its own PSP, through the client recovery holds for it. A
//! payment of a PSP recovery has no client for (a Standard Webhooks provider only sends webhooks; Adyen until
//! its client exists), one without a PSP reference (created through `POST /payments` and abandoned), and one
//! whose reference its PSP does not know, have nothing to ask: asking Stripe about them answered 404 on
//! every run, forever. Invariant 12: such a wait has an end. Past the configured age the payment is recorded
//! failed with an `expired: ...` reason, through the one finalize (a `PaymentFailed` event, counted and
//! alarmed); late news that money moved after all is then the finalize's stray-capture anomaly, as for any
//! failed payment. A payment whose status is already terminal (it is open for a refund question) never
//! expires: that money question waits for an operator, and the oldest-open-payment alarm shows it.

use crate::ids::{CorrelationId, PspReference};
use crate::observation::{Observation, Outcome, Path};
use crate::payment::Payment;
use crate::provider::PspName;

/// Why recovery has nothing to ask a payment's PSP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NothingToAsk {
    /// The payment was never bound to a PSP reference.
    NoReference,
    /// Recovery holds no client of the payment's PSP.
    NoClient,
    /// The PSP refused the question for good (it does not know the reference).
    UnknownToPsp,
}

impl NothingToAsk {
    fn says(self) -> &'static str {
        match self {
            NothingToAsk::NoReference => "no PSP reference",
            NothingToAsk::NoClient => "no client of its PSP to ask",
            NothingToAsk::UnknownToPsp => "its PSP does not know its reference",
        }
    }
}

/// Recovery's next step for one open payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryStep {
    /// Ask the payment's PSP (through `client`, which is the payment's) about `reference`.
    Ask(PspReference),
    /// Nothing to ask.
    Unasked(Unasked),
}

/// What becomes of a payment recovery has nothing to ask about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unasked {
    /// Not old enough to expire: look again later (backed off).
    Wait(NothingToAsk),
    /// Past the age: record it failed as expired.
    Expire(NothingToAsk),
}

/// The step for `payment`, open, when recovery's client speaks to `client` (`None`: it holds none).
/// `expire_after_ms` is counted from the payment's creation.
pub fn recovery_step(payment: &Payment, client: Option<&PspName>, now_ms: i64, expire_after_ms: i64) -> RecoveryStep {
    if client != Some(&payment.provider) {
        return RecoveryStep::Unasked(unanswered(payment, NothingToAsk::NoClient, now_ms, expire_after_ms));
    }
    match &payment.psp_reference {
        Some(reference) => RecoveryStep::Ask(reference.clone()),
        None => RecoveryStep::Unasked(unanswered(payment, NothingToAsk::NoReference, now_ms, expire_after_ms)),
    }
}

/// What becomes of a payment recovery cannot ask about (`why`): expired once it is older than
/// `expire_after_ms` and its status is not terminal, else it waits.
pub fn unanswered(payment: &Payment, why: NothingToAsk, now_ms: i64, expire_after_ms: i64) -> Unasked {
    let age = now_ms.saturating_sub(payment.created_at_ms);
    if age >= expire_after_ms && !payment.status.is_terminal() {
        Unasked::Expire(why)
    } else {
        Unasked::Wait(why)
    }
}

/// The observation that records the expiry of `payment` (`why` it had nothing to ask), at `now_ms`:
/// failed, with a reason naming both, from the recovery path.
pub fn expiry(payment: &Payment, why: NothingToAsk, now_ms: i64, correlation: CorrelationId) -> Observation {
    let hours = now_ms.saturating_sub(payment.created_at_ms) / 3_600_000;
    let reason = format!("expired: {} ({}) after {hours} h open", why.says(), payment.provider);
    let mut observation = Observation::new(Path::Recovery, Outcome::Failed { reason }, correlation);
    observation.occurred_at_ms = Some(now_ms);
    observation
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::{decide, Decision, EventKind, PaymentStatus};

    const HOUR: i64 = 3_600_000;
    const WEEK: i64 = 7 * 24 * HOUR;

    fn standard() -> PspName {
        PspName::parse("standard").unwrap()
    }

    fn payment(provider: PspName, reference: Option<&str>, age_ms: i64) -> (Payment, i64) {
        let mut p = fixtures::payment("pay_rs");
        p.provider = provider;
        p.psp_reference = reference.map(|r| PspReference::parse(r).unwrap());
        (p.clone(), p.created_at_ms.saturating_add(age_ms))
    }

    #[test]
    fn only_the_payments_own_psp_is_asked() {
        let (stripe, now) = payment(PspName::Stripe, Some("pi_1"), HOUR);
        let ask = RecoveryStep::Ask(PspReference::parse("pi_1").unwrap());
        assert_eq!(recovery_step(&stripe, Some(&PspName::Stripe), now, WEEK), ask);
        for (p, now) in [
            payment(standard(), Some("psp_1"), HOUR),
            payment(PspName::Adyen, Some("7914073381342284"), HOUR),
        ] {
            assert_eq!(
                recovery_step(&p, Some(&PspName::Stripe), now, WEEK),
                RecoveryStep::Unasked(Unasked::Wait(NothingToAsk::NoClient))
            );
        }
        assert_eq!(
            recovery_step(&stripe, None, now, WEEK),
            RecoveryStep::Unasked(Unasked::Wait(NothingToAsk::NoClient))
        );
    }

    #[test]
    fn nothing_to_ask_waits_then_expires_at_the_age_unless_terminal() {
        let (unbound, now) = payment(PspName::Stripe, None, WEEK.saturating_sub(1));
        assert_eq!(
            recovery_step(&unbound, Some(&PspName::Stripe), now, WEEK),
            RecoveryStep::Unasked(Unasked::Wait(NothingToAsk::NoReference))
        );
        assert_eq!(
            recovery_step(&unbound, Some(&PspName::Stripe), now.saturating_add(1), WEEK),
            RecoveryStep::Unasked(Unasked::Expire(NothingToAsk::NoReference))
        );
        let (mut captured, now) = payment(standard(), Some("psp_1"), WEEK.saturating_mul(2));
        captured.status = PaymentStatus::Captured;
        assert_eq!(
            unanswered(&captured, NothingToAsk::NoClient, now, WEEK),
            Unasked::Wait(NothingToAsk::NoClient),
            "a refund question never expires"
        );
        let (asked, now) = payment(PspName::Stripe, Some("pi_gone"), WEEK);
        assert_eq!(
            unanswered(&asked, NothingToAsk::UnknownToPsp, now, WEEK),
            Unasked::Expire(NothingToAsk::UnknownToPsp)
        );
    }

    #[test]
    fn an_expiry_is_a_recorded_failure_through_the_one_finalize() {
        let (p, now) = payment(standard(), Some("psp_1"), WEEK.saturating_add(24 * HOUR));
        let observation = expiry(&p, NothingToAsk::NoClient, now, fixtures::correlation());
        let Decision::Apply(t) = decide(&p, &observation, now) else {
            panic!("an expiry applies")
        };
        assert_eq!(
            (t.payment.status, t.event.kind),
            (PaymentStatus::Failed, EventKind::PaymentFailed)
        );
        assert_eq!(t.event.path, Path::Recovery);
        assert_eq!(
            t.payment.reason.as_deref(),
            Some("expired: no client of its PSP to ask (standard) after 192 h open")
        );
    }
}
