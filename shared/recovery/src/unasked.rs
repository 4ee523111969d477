//! A payment recovery asks nobody about (the core's [`Unasked`]): backed off, or recorded failed as expired.

use crate::{back_off, Reconciled, Recovery, RecoveryError};
use payments_core::recovery::{expiry, Unasked};
use psp::Psps;
use shared::clock;
use shared::lease::Lease;
use shared::store::FinalizeResult;
use shared::{CorrelationId, Payment};
use tracing::warn;

/// A payment recovery asks nobody about: backed off ([`Unasked::Wait`]), or recorded failed as expired
/// through the finalize, which frees the lease with its write ([`Unasked::Expire`]).
pub(crate) async fn unasked<P: Psps>(
    r: &Recovery<P>,
    current: Payment,
    step: Unasked,
    lease: &Lease,
    correlation: CorrelationId,
    open_since: &mut Option<i64>,
) -> Result<(Reconciled, bool), RecoveryError> {
    let why = match step {
        Unasked::Expire(why) => why,
        Unasked::Wait(why) => {
            back_off::back_off(r, &current.id, current.created_at_ms).await;
            return Ok((Reconciled::nothing_to_ask(why), false));
        }
    };
    let observation = expiry(&current, why, clock::now_ms(), correlation);
    let outcome = r.store.finalize_from(current, &observation, Some(lease)).await?;
    warn!(payment_id = %outcome.payment.id, result = ?outcome.result, provider = %outcome.payment.provider,
          reason = ?outcome.payment.reason, "payment expired: nothing to ask its PSP");
    if !outcome.payment.is_open() {
        *open_since = None;
    }
    let reconciled = match outcome.result {
        FinalizeResult::Applied(shared::EventKind::PaymentFailed) => Reconciled::Expired,
        _ => Reconciled::of(&outcome),
    };
    Ok((reconciled, outcome.lease_released))
}
