//! What recovery does with one open payment before any I/O: ask the payment's own PSP, or, when there is
//! nothing to ask, wait (backed off) and past a configured age expire it. Pure, so the shell
//! (`reconciler`) and the protocol model make the same choice.
//!
//! Invariant 13: a payment is asked about only at its own PSP, through the client recovery holds for it. A
//! payment of a PSP recovery has no client for (a Standard Webhooks provider only sends webhooks), one without
//! a PSP reference (created through `POST /payments` and abandoned), and one whose reference its PSP does not
//! know, have nothing to ask: asking Stripe about them answered 404 on every run, forever. Invariant 12: such a
//! wait has an end. Past the configured age the payment is recorded failed with an `expired: ...` reason,
//! through the one finalize (a `PaymentFailed` event, counted and alarmed); late news that money moved after
//! all is then the finalize's stray-capture anomaly, as for any failed payment. A payment whose status is
//! already terminal (it is open for a refund question) never expires: that money question waits for an
//! operator, and the oldest-open-payment alarm shows it.
//!
//! A payment its PSP still holds open ends there first, so that the PSP cannot take money for a payment we
//! call failed: past the age, a Stripe PaymentIntent still waiting for the customer ([`IntentState::Open`]:
//! an action, a new card after a decline) is canceled ([`after_read`]), and the canceled PaymentIntent is what
//! is recorded. One that is `processing` waits on: Stripe cannot cancel it and settles it itself (a bank debit
//! takes days, and ends `succeeded` or back in `requires_payment_method`, which then expires). A PSP without a
//! status read (Adyen, [`PspReach`]) is not asked at all: past the age the payment is canceled or reversed by
//! reference ([`RecoveryStep::EndAtPsp`]), whose outcome arrives as a notification; if none has ended it
//! [`END_ANSWER_WAIT_MS`] later, it expires here as well.
//!
//! An authorization the PSP still holds for us is never released for its age: a payments-API merchant may
//! capture days later, and an extended authorization holds for up to 30 days. Its end is the PSP's
//! `capture_before` (the read's, else the one the payment recorded, whichever PSP): before it, neither the
//! cancel after a read ([`after_read`], [`Held`]) nor an end at a PSP without a status read nor an expiry
//! here touches it; at it, the authorization has lapsed and is released and recorded. One whose deadline no
//! read tells waits for the PSP, which releases it itself at the lapse and then reads `canceled`.

use crate::ids::{CorrelationId, PspReference};
use crate::observation::{Channel, Observation, Outcome};
use crate::payment::Payment;
use crate::provider::PspName;
use crate::saga::IntentState;
use crate::status::PaymentStatus;

/// How long after the age an end requested at a PSP without a status read (its cancel or reversal) is given
/// for the PSP's notification, before the payment expires here: a day. Adyen notifies within seconds; a day
/// covers an intake outage of hours, and the cancel is sent again (same key, backed off) meanwhile.
pub const END_ANSWER_WAIT_MS: i64 = 24 * 3600 * 1000;

/// What recovery can do at a PSP about one of its payments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PspReach {
    /// Read its status by reference (Stripe's PaymentIntent), and cancel it.
    Read,
    /// No status read (Adyen): only end it by reference, the outcome coming as a notification.
    EndOnly,
    /// Nothing (a Standard Webhooks provider only sends webhooks).
    Nothing,
}

impl PspReach {
    /// What recovery can do at `psp`.
    pub fn of(psp: &PspName) -> Self {
        match psp {
            PspName::Stripe => Self::Read,
            PspName::Adyen => Self::EndOnly,
            PspName::Standard(_) => Self::Nothing,
        }
    }
}

/// Why recovery has nothing to ask a payment's PSP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NothingToAsk {
    /// The payment was never bound to a PSP reference.
    NoReference,
    /// Recovery holds no client of the payment's PSP.
    NoClient,
    /// The PSP refused the question for good (it does not know the reference).
    UnknownToPsp,
    /// The PSP has no status to read (Adyen): its notifications tell.
    NoStatusRead,
    /// The end requested at a PSP without a status read was never notified.
    EndUnanswered,
}

impl NothingToAsk {
    fn says(self) -> &'static str {
        match self {
            NothingToAsk::NoReference => "no PSP reference",
            NothingToAsk::NoClient => "no client of its PSP to ask",
            NothingToAsk::UnknownToPsp => "its PSP does not know its reference",
            NothingToAsk::NoStatusRead => "no status to read at its PSP",
            NothingToAsk::EndUnanswered => "no notification of the cancel requested at its PSP",
        }
    }
}

/// Recovery's next step for one open payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryStep {
    /// Ask the payment's PSP (through `client`, which is the payment's) about `reference`.
    Ask(PspReference),
    /// Past the age at a PSP without a status read: end the payment there under the key `<payment>:expire`,
    /// by reversing `Some(reference)` (cancel, or refund what was captured), or for `None` by canceling the
    /// payment known by our id. The PSP's notification records the end; until it comes the payment stays
    /// open, and the request is sent again (same key, backed off) until [`END_ANSWER_WAIT_MS`] later it
    /// expires here ([`NothingToAsk::EndUnanswered`]).
    EndAtPsp(Option<PspReference>),
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
    match (PspReach::of(&payment.provider), &payment.psp_reference) {
        (PspReach::Read, Some(reference)) => RecoveryStep::Ask(reference.clone()),
        (PspReach::Read, None) => {
            RecoveryStep::Unasked(unanswered(payment, NothingToAsk::NoReference, now_ms, expire_after_ms))
        }
        (PspReach::EndOnly, reference) => end_at_psp(payment, reference.as_ref(), now_ms, expire_after_ms),
        (PspReach::Nothing, _) => {
            RecoveryStep::Unasked(unanswered(payment, NothingToAsk::NoClient, now_ms, expire_after_ms))
        }
    }
}

/// A payment of a PSP without a status read: it waits for its notifications until the age, is then ended at
/// the PSP (by `reference`, else by our id) for [`END_ANSWER_WAIT_MS`], and expires here after that.
fn end_at_psp(payment: &Payment, reference: Option<&PspReference>, now_ms: i64, expire_after_ms: i64) -> RecoveryStep {
    let answer_by = expire_after_ms.saturating_add(END_ANSWER_WAIT_MS);
    if !expires(payment, now_ms, expire_after_ms) {
        RecoveryStep::Unasked(Unasked::Wait(NothingToAsk::NoStatusRead))
    } else if !expires(payment, now_ms, answer_by) {
        RecoveryStep::EndAtPsp(reference.cloned())
    } else {
        RecoveryStep::Unasked(Unasked::Expire(NothingToAsk::EndUnanswered))
    }
}

/// What recovery does with the PaymentIntent it read for `payment`, in `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRead {
    /// Record what it says (or back off when it says nothing new).
    Apply,
    /// Past the age and still open at the PSP: cancel it there (key `<payment>:expire`) and record the
    /// canceled PaymentIntent (or, if the cancel is refused because it moved meanwhile, the one the refusal
    /// carries), counted as expired.
    CancelExpired,
}

/// An authorization the PSP holds for us (a `requires_capture` PaymentIntent), as a read says it: capturable
/// until `until_ms` (Stripe's `capture_before`), when the read says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub until_ms: Option<i64>,
}

/// The step after reading `payment`'s PaymentIntent in `state` (`held`: an authorization, with its deadline)
/// at `now_ms`. Only an open one past the age is canceled, and an authorization only once it lapsed: a
/// processing one is Stripe's to settle, an ended one is recorded, an authorization with time left (or no
/// deadline known: Stripe releases it at its lapse) is recorded and waits, and a payment whose status is
/// terminal (open for a refund question) never expires.
pub fn after_read(
    payment: &Payment,
    state: IntentState,
    held: Option<Held>,
    now_ms: i64,
    expire_after_ms: i64,
) -> AfterRead {
    if state != IntentState::Open || !expires(payment, now_ms, expire_after_ms) {
        return AfterRead::Apply;
    }
    let Some(held) = held else {
        return AfterRead::CancelExpired;
    };
    match held.until_ms.or(payment.capture_before_ms) {
        Some(until) if now_ms >= until => AfterRead::CancelExpired,
        _ => AfterRead::Apply,
    }
}

/// `observation` (of the PaymentIntent recovery canceled for `payment` at `now_ms`) with its failure's reason
/// saying the payment expired, so operators and the `PaymentFailed` event tell an expiry from a customer's
/// cancel. Any other outcome (the cancel lost a race to a success) is left as the PSP said.
pub fn canceled_expiry(payment: &Payment, mut observation: Observation, now_ms: i64) -> Observation {
    if let Outcome::Failed { reason } = &mut observation.outcome {
        let hours = now_ms.saturating_sub(payment.created_at_ms) / 3_600_000;
        let said = format!(
            "expired: open at its PSP ({}) after {hours} h; {reason}",
            payment.provider
        );
        *reason = crate::text::sanitized(&said, crate::text::MAX_REASON_CHARS);
    }
    observation
}

/// What becomes of a payment recovery cannot ask about (`why`): expired once it is older than
/// `expire_after_ms` and its status is not terminal, else it waits.
pub fn unanswered(payment: &Payment, why: NothingToAsk, now_ms: i64, expire_after_ms: i64) -> Unasked {
    if expires(payment, now_ms, expire_after_ms) {
        Unasked::Expire(why)
    } else {
        Unasked::Wait(why)
    }
}

/// Whether `payment` is at least `expire_after_ms` old at `now_ms`, its status is not terminal, and it is not
/// an authorization recorded as capturable past `now_ms` (whichever PSP holds it).
fn expires(payment: &Payment, now_ms: i64, expire_after_ms: i64) -> bool {
    let capturable =
        payment.status == PaymentStatus::Authorized && payment.capture_before_ms.is_some_and(|until| now_ms < until);
    now_ms.saturating_sub(payment.created_at_ms) >= expire_after_ms && !payment.status.is_terminal() && !capturable
}

/// The observation that records the expiry of `payment` (`why` it had nothing to ask), at `now_ms`:
/// failed, with a reason naming both, from the recovery path.
pub fn expiry(payment: &Payment, why: NothingToAsk, now_ms: i64, correlation: CorrelationId) -> Observation {
    let hours = now_ms.saturating_sub(payment.created_at_ms) / 3_600_000;
    let reason = format!("expired: {} ({}) after {hours} h open", why.says(), payment.provider);
    let mut observation = Observation::new(Channel::Recovery, Outcome::Failed { reason }, correlation);
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
    fn an_open_payment_intent_past_the_age_is_canceled_a_processing_one_waits() {
        let (p, now) = payment(PspName::Stripe, Some("pi_1"), WEEK);
        assert_eq!(
            after_read(&p, IntentState::Open, None, now, WEEK),
            AfterRead::CancelExpired
        );
        assert_eq!(
            after_read(&p, IntentState::Open, None, now.saturating_sub(1), WEEK),
            AfterRead::Apply,
            "not old enough"
        );
        for state in [IntentState::Processing, IntentState::Succeeded, IntentState::Canceled] {
            assert_eq!(after_read(&p, state, None, now, WEEK), AfterRead::Apply, "{state:?}");
        }
        let (mut captured, now) = payment(PspName::Stripe, Some("pi_1"), 2 * WEEK);
        captured.status = PaymentStatus::Captured;
        assert_eq!(
            after_read(&captured, IntentState::Open, None, now, WEEK),
            AfterRead::Apply,
            "a refund question never expires"
        );
    }

    #[test]
    fn an_authorization_past_the_age_is_released_only_once_it_lapsed() {
        let (mut p, now) = payment(PspName::Stripe, Some("pi_1"), WEEK);
        p.status = PaymentStatus::Authorized;
        let days_left = Held {
            until_ms: Some(now.saturating_add(3 * 24 * HOUR)),
        };
        assert_eq!(
            after_read(&p, IntentState::Open, Some(days_left), now, WEEK),
            AfterRead::Apply,
            "capturable for days: the age alone never releases it"
        );
        let lapsed = Held { until_ms: Some(now) };
        assert_eq!(
            after_read(&p, IntentState::Open, Some(lapsed), now, WEEK),
            AfterRead::CancelExpired
        );
        let unknown = Held { until_ms: None };
        assert_eq!(
            after_read(&p, IntentState::Open, Some(unknown), now, WEEK),
            AfterRead::Apply,
            "no deadline read: Stripe releases it at its lapse"
        );
        p.capture_before_ms = Some(now.saturating_sub(1));
        assert_eq!(
            after_read(&p, IntentState::Open, Some(unknown), now, WEEK),
            AfterRead::CancelExpired,
            "the deadline the payment recorded, when the read says none"
        );
        // A PSP without a status read: the recorded deadline holds its end there, and any expiry here.
        let (mut adyen, now) = payment(PspName::Adyen, Some("7914073381342284"), 2 * WEEK);
        adyen.status = PaymentStatus::Authorized;
        adyen.capture_before_ms = Some(now.saturating_add(HOUR));
        let client = Some(&PspName::Adyen);
        assert_eq!(
            recovery_step(&adyen, client, now, WEEK),
            RecoveryStep::Unasked(Unasked::Wait(NothingToAsk::NoStatusRead))
        );
        assert_eq!(
            recovery_step(&adyen, client, now.saturating_add(HOUR), WEEK),
            RecoveryStep::Unasked(Unasked::Expire(NothingToAsk::EndUnanswered)),
            "lapsed long after the age: nothing left to end there"
        );
    }

    #[test]
    fn a_psp_without_a_status_read_is_never_asked_ended_there_past_the_age_then_expired() {
        assert_eq!(
            (
                PspReach::of(&PspName::Stripe),
                PspReach::of(&PspName::Adyen),
                PspReach::of(&standard())
            ),
            (PspReach::Read, PspReach::EndOnly, PspReach::Nothing)
        );
        let adyen = Some(&PspName::Adyen);
        let reference = PspReference::parse("7914073381342284").unwrap();
        let (p, young) = payment(PspName::Adyen, Some("7914073381342284"), WEEK.saturating_sub(1));
        assert_eq!(
            recovery_step(&p, adyen, young, WEEK),
            RecoveryStep::Unasked(Unasked::Wait(NothingToAsk::NoStatusRead)),
            "its notifications tell"
        );
        let aged = young.saturating_add(1);
        assert_eq!(
            recovery_step(&p, adyen, aged, WEEK),
            RecoveryStep::EndAtPsp(Some(reference))
        );
        let (unbound, _) = payment(PspName::Adyen, None, 0);
        assert_eq!(
            recovery_step(&unbound, adyen, aged, WEEK),
            RecoveryStep::EndAtPsp(None),
            "by our id"
        );
        let last = aged.saturating_add(END_ANSWER_WAIT_MS).saturating_sub(1);
        assert!(matches!(
            recovery_step(&p, adyen, last, WEEK),
            RecoveryStep::EndAtPsp(_)
        ));
        assert_eq!(
            recovery_step(&p, adyen, last.saturating_add(1), WEEK),
            RecoveryStep::Unasked(Unasked::Expire(NothingToAsk::EndUnanswered)),
            "no notification a day after the cancel: the wait ends here"
        );
        let mut captured = p.clone();
        captured.status = PaymentStatus::Captured;
        assert_eq!(
            recovery_step(&captured, adyen, aged, WEEK),
            RecoveryStep::Unasked(Unasked::Wait(NothingToAsk::NoStatusRead)),
            "a refund question is never canceled"
        );
        assert_eq!(
            recovery_step(&p, Some(&PspName::Stripe), aged, WEEK),
            RecoveryStep::Unasked(Unasked::Expire(NothingToAsk::NoClient)),
            "without Adyen's client: nothing to ask, as before"
        );
    }

    #[test]
    fn a_canceled_expiry_says_so_a_raced_success_is_left_as_said() {
        let (p, now) = payment(PspName::Stripe, Some("pi_1"), WEEK);
        let canceled = Observation::new(
            Channel::Recovery,
            Outcome::Failed {
                reason: "canceled at the PSP: abandoned".into(),
            },
            fixtures::correlation(),
        );
        let said = canceled_expiry(&p, canceled, now);
        assert_eq!(
            said.outcome,
            Outcome::Failed {
                reason: "expired: open at its PSP (stripe) after 168 h; canceled at the PSP: abandoned".into()
            }
        );
        let succeeded = Observation::new(Channel::Recovery, Outcome::Succeeded, fixtures::correlation());
        assert_eq!(canceled_expiry(&p, succeeded, now).outcome, Outcome::Succeeded);
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
        assert_eq!(t.event.path, Channel::Recovery);
        assert_eq!(
            t.payment.reason.as_deref(),
            Some("expired: no client of its PSP to ask (standard) after 192 h open")
        );
    }
}
