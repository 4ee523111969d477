//! Recovery's give-backs at Adyen, which has no refund to read back: money Adyen took on a payment we had
//! failed, and what refunds Adyen reported failed (`REFUND success=false`, `REFUND_FAILED`,
//! `REFUNDED_REVERSED`) left with us, are refunded through `/payments/{pspReference}/refunds` under the same
//! keys as Stripe's ([`payments_core::give_back_key`], [`payments_core::stray_refund_key`]: one per failure,
//! Adyen replays a key's answer). Adyen answers `received`; the refund is recorded `pending` under the
//! modification's pspReference, answering the give-back, and its `REFUND` (then perhaps `REFUND_FAILED`)
//! notification records how it ended through the intake: a failure is the next give-back, up to
//! [`payments_core::refund::MAX_GIVE_BACKS`], then alarmed only, as for Stripe.

use crate::{reconciled, Reconciled, Recovery, RecoveryError};
use payments_core::{give_back_refund, GiveBackRefund};
use psp::{GuardedAdyen, PspError, Psps};
use shared::lease::Lease;
use shared::telemetry::ErrorChain;
use shared::{Channel, CorrelationId, Money, Observation, Outcome, Payment, RefundEntry, RefundReport, RefundStatus};
use tracing::warn;

impl<P: Psps> Recovery<P> {
    /// Gives back at Adyen what `current` owes (see the module doc). `None` when it owes nothing to refund
    /// now (the look goes on as for any Adyen payment: it waits for its notifications).
    pub(super) async fn adyen_give_back(
        &self,
        current: &Payment,
        adyen: &GuardedAdyen,
        lease: &Lease,
        correlation: CorrelationId,
        open_since: &mut Option<i64>,
    ) -> Result<Option<(Reconciled, bool)>, RecoveryError> {
        let (Some(reference), Some(refund)) = (&current.psp_reference, give_back_refund(current)) else {
            return Ok(None);
        };
        let money = Money::new(refund.amount_minor, current.money.currency())
            .map_err(|e| PspError::BadAnswer(e.to_string().into()))?;
        let report = match adyen.refund(&refund.key, reference, &money).await {
            Ok(received) => report(&refund, received.psp_reference.to_string(), RefundStatus::Pending),
            Err(e) if e.is_deferred() => return Ok(Some((Reconciled::Deferred, false))),
            // A give-back refused for good (a validation error): its attempt is spent, recorded failed under
            // `refused:<key>` (as Stripe's), so the next failure's key follows and, past MAX_GIVE_BACKS, a
            // person; never the same refused call on every look.
            Err(e @ PspError::Refused { .. }) if refund.answers_give_back.is_some() => {
                warn!(payment_id = %current.id, key = %refund.key, error = %ErrorChain(&e),
                      "Adyen refused the give-back: recorded as its failed attempt");
                report(&refund, format!("refused:{}", refund.key), RefundStatus::Failed)
            }
            // A stray capture's refund refused: not retried sooner than the back-off; the payment stays open,
            // and its age alarms, for an operator.
            Err(e @ PspError::Refused { .. }) => {
                warn!(payment_id = %current.id, key = %refund.key, error = %ErrorChain(&e),
                      "Adyen refused the refund of a stray capture; an operator decides");
                self.back_off(&current.id, current.created_at_ms).await;
                return Ok(Some((Reconciled::Refused, false)));
            }
            Err(e) => return Err(e.into()),
        };
        let observation_refund = report.refund.refund_id.clone();
        let mut observation = Observation::new(Channel::Recovery, Outcome::Refund(report), correlation);
        observation.psp_reference = Some(reference.clone());
        let outcome = self
            .store
            .finalize_from(current.clone(), &observation, Some(lease))
            .await?;
        warn!(payment_id = %current.id, refund = %observation_refund, amount_minor = refund.amount_minor,
              key = %refund.key, result = ?outcome.result, "give-back at Adyen recorded; its REFUND notification tells how it ends");
        if outcome.payment.is_open() {
            self.back_off(&outcome.payment.id, outcome.payment.created_at_ms).await;
        } else {
            *open_since = None;
        }
        Ok(Some((reconciled(&outcome), outcome.lease_released)))
    }
}

/// Adyen's answer to `refund` as its refund report, answering its give-back: `received` is `pending` under the
/// modification's pspReference (`refund_id`), a refusal `failed` under `refused:<key>`.
fn report(refund: &GiveBackRefund, refund_id: String, status: RefundStatus) -> RefundReport {
    RefundReport {
        refund: RefundEntry {
            refund_id,
            amount_minor: refund.amount_minor,
            status,
        },
        failure_reason: None,
        answers_give_back: refund.answers_give_back,
    }
}
