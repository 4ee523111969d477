//! One payment reconciled: read, its lease taken at the version read (the intake's lease: the two never work
//! on one payment at once), read again under it, and handed to the step its PSP and the core's
//! [`recovery_step`] choose (`money` and `ask` at Stripe, `adyen`, `unasked`).

use crate::ask::Asked;
use crate::{adyen, ask, money, unasked, Reconciled, Recovery, RecoveryError};
use payments_core::recovery::{recovery_step, unanswered, NothingToAsk, RecoveryStep};
use psp::{PspRoute, Psps};
use shared::clock;
use shared::lease::Lease;
use shared::store::StoreError;
use shared::telemetry::ErrorChain;
use shared::{CorrelationId, Payment, PaymentId, PspName};
use tracing::{info, warn};

/// Asks the PSP about one payment and applies the answer, under the payment's lease. A failed payment
/// whose money the PSP took anyway gets it back first (`money`).
pub(crate) async fn reconcile<P: Psps>(
    r: &Recovery<P>,
    id: &PaymentId,
    correlation: CorrelationId,
) -> Result<Reconciled, RecoveryError> {
    reconcile_seen(r, id, correlation, &mut Seen::default()).await
}

/// [`Recovery::reconcile`], which also sets `seen`'s `open_since` to the payment's creation time when it
/// read the payment and left it open (for `OldestOpenPaymentAgeSeconds`), also when it then fails or is
/// cut, and its `provider`; a payment of a PSP in `seen.deferred` is not asked (deferred).
pub(crate) async fn reconcile_seen<P: Psps>(
    r: &Recovery<P>,
    id: &PaymentId,
    correlation: CorrelationId,
    seen: &mut Seen,
) -> Result<Reconciled, RecoveryError> {
    let Some(current) = read_open(r, id).await? else {
        return Ok(Reconciled::NotOpen);
    };
    // Boxed: the reconcile's future is deep (finalize, refunds, expiry), and every caller's async state
    // machine nests it; on the heap it is one pointer in theirs (the sweeper's would pass rustc's limit).
    let done = leased(r, &current, async |lease| {
        Box::pin(reconcile_leased(r, id, lease, correlation, seen)).await
    })
    .await?;
    Ok(done.unwrap_or(Reconciled::Busy))
}

/// `work` under `current`'s lease, taken at the version read; `None` when another worker holds it
/// (skipped this round). `work` says whether its write freed the lease (the version moved past it); every
/// other ending releases it here (and one cut at the run's deadline, when the held lease is dropped).
pub(crate) async fn leased<P: Psps, T>(
    r: &Recovery<P>,
    current: &Payment,
    work: impl AsyncFnOnce(&Lease) -> Result<(T, bool), RecoveryError>,
) -> Result<Option<T>, RecoveryError> {
    let id = &current.id;
    let Some(lease) = r.leases.acquire(current).await? else {
        info!(payment_id = %id, "payment's lease is held (webhook intake at work); skipped this round");
        return Ok(None);
    };
    let held = r.leases.hold(lease);
    let done = work(held.lease()).await;
    if matches!(done, Ok((_, true))) {
        held.released_by_write();
    } else if let Err(e) = held.release().await {
        warn!(payment_id = %id, error = %ErrorChain(&e), "lease release failed; it will expire");
    }
    done.map(|(value, _)| Some(value))
}

/// The payment as stored now, `None` once it is no longer open (nothing left to reconcile); a payment
/// that is not there is an error (its open-items entry outlived it).
async fn read_open<P: Psps>(r: &Recovery<P>, id: &PaymentId) -> Result<Option<Payment>, RecoveryError> {
    let current = r
        .store
        .get(id)
        .await?
        .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
    Ok(current.is_open().then_some(current))
}

/// A payment whose money only a person can move now (refunds failed past the give-back bound, a capture
/// lost at the card scheme): its PSP is not asked.
fn waits_for_a_person(current: &Payment) -> Option<Reconciled> {
    let id = &current.id;
    if current.refund_for_operator() {
        warn!(payment_id = %id, refunds_failed = current.refund_failures,
              "refunds failed past the give-back bound: the money waits for a person's refund at the PSP");
        return Some(Reconciled::ForOperator);
    }
    if current.capture_lost() {
        warn!(payment_id = %id, reason = current.capture_failed.as_deref(),
              "the capture failed at the card scheme: the money will not arrive unless the PSP captures again");
        return Some(Reconciled::CaptureLost);
    }
    None
}

/// [`Recovery::reconcile`]'s work once the lease is held, on a fresh read (the one before the lease may
/// predate a holder's write; the PSP is asked from what the payment is now); also says whether the lease
/// was released.
async fn reconcile_leased<P: Psps>(
    r: &Recovery<P>,
    id: &PaymentId,
    lease: &Lease,
    correlation: CorrelationId,
    seen: &mut Seen,
) -> Result<(Reconciled, bool), RecoveryError> {
    let Some(current) = read_open(r, id).await? else {
        return Ok((Reconciled::NotOpen, false));
    };
    seen.open_since = Some(current.created_at_ms);
    seen.provider = Some(current.provider.clone());
    if let Some(waiting) = waits_for_a_person(&current) {
        return Ok((waiting, false));
    }
    if seen.deferred.contains(&current.provider) {
        return Ok((Reconciled::Deferred, false));
    }
    let open_since = &mut seen.open_since;
    // Only the payment's own PSP, through the client recovery holds of it (invariant 13).
    let route = r.psp.route(&current.provider);
    // Adyen has no refund to read back: what it owes is refunded there, its notification tells the end.
    // Boxed, like the whole reconcile: inline, its future would grow every caller's stack frame.
    if let PspRoute::Adyen(adyen) = route {
        let given = Box::pin(adyen::give_back(
            r,
            &current,
            adyen,
            lease,
            correlation.clone(),
            open_since,
        ));
        if let Some(done) = given.await? {
            return Ok(done);
        }
    }
    let client = match route {
        PspRoute::Missing(_) => None,
        PspRoute::Stripe(_) | PspRoute::Adyen(_) => Some(current.provider.clone()),
    };
    let (now, expire_after) = (clock::now_ms(), r.settings.expire_after_ms());
    let step = recovery_step(&current, client.as_ref(), now, expire_after);
    let (psp, reference) = match (step, route) {
        (RecoveryStep::Ask(reference), PspRoute::Stripe(psp)) => (psp, reference),
        (RecoveryStep::EndAtPsp(reference), PspRoute::Adyen(adyen)) => {
            return adyen::end_at_psp(r, &current, reference, adyen).await;
        }
        (RecoveryStep::Unasked(step), _) => {
            return unasked::unasked(r, current, step, lease, correlation, open_since).await
        }
        // The core asks a Stripe client and ends at an Adyen one only: a client speaking another PSP's API
        // than its name says has nothing to ask.
        (RecoveryStep::Ask(_) | RecoveryStep::EndAtPsp(_), _) => {
            let step = unanswered(&current, NothingToAsk::NoClient, now, expire_after);
            return unasked::unasked(r, current, step, lease, correlation, open_since).await;
        }
    };
    let asked = Asked {
        psp,
        current,
        reference,
        lease,
        correlation,
    };
    if let Some(done) = money::settle_money(r, &asked, open_since).await? {
        return Ok(done);
    }
    ask::ask(r, asked, open_since).await
}

/// What a run learnt of the payment it reconciles now, and the PSPs it stopped calling.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// The payment's creation time, when it was read and left open.
    pub(crate) open_since: Option<i64>,
    /// The payment's PSP, once read.
    pub(crate) provider: Option<PspName>,
    /// The PSPs a deferral (breaker open, key refused) stopped in this run: their payments are not asked.
    pub(crate) deferred: std::collections::HashSet<PspName>,
}
