//! Objects Stripe failed to generate an event about (`store::recheck`, recorded by the webhook intake from
//! Stripe's `v2.core.health.event_generation_failure.resolved`): each run reads every one once, first
//! Stripe's failure event (`GET /v2/core/events/{id}`: the object it names) and then the object itself, and
//! applies what it says through the same finalize as every path, open payment or not (a captured payment's
//! refund is asked about nowhere else).
//!
//! A PaymentIntent, a refund or a dispute is read and applied, its payment located as the webhook's is
//! (`shared::payment_ref`: our payment id in the PaymentIntent's metadata first, then the bound reference;
//! a refund or a dispute by its PaymentIntent; a dispute reports the fact of the event type never made).
//! An object of ours no longer matters once applied, one of another stage is left alone: either way the item
//! is deleted. What cannot be read now (Stripe unavailable, its breaker open, the payment's lease held) stays
//! due, and the next run reads it again: how long the oldest has waited is `RecoveryLagSeconds` (alarmed).
//! An object whose payment is not found waits the same way (the payment may not be written yet) until it is
//! `stale_after` old. A "no" for good (Stripe does not know the event or the object, an object type recovery
//! does not read: a charge, a payout, ...; a payment still not found after that wait) is logged with the
//! object, counted `RechecksUnread` (alarmed) and deleted, once: never dropped as "not ours" in silence,
//! since recovery would later expire a payment whose money Stripe holds.

use crate::{reconcile, Reconciled, Recovery, RecoveryError, RecoveryReport};
use psp::stripe::{GenerationFailureImpact, RelatedObject};
use psp::{PspError, Psps, StripeApi};
use shared::payment_ref::{Ownership, PaymentRef};
use shared::store::open_index::age_seconds;
use shared::store::recheck::{self, DueRecheck};
use shared::store::StoreError;
use shared::telemetry::ErrorChain;
use shared::{clock, Channel, CorrelationId, DisputeFact, Observation, Payment, PspEventId, PspName, PspReference};
use std::collections::HashSet;
use tracing::{error, info, warn};

/// What became of one object to read again.
enum Rechecked {
    /// Read and applied, or another stage's: the item is deleted.
    Done,
    /// Not readable now (Stripe unavailable or deferred, the lease held, its payment not found yet): read
    /// again next run.
    Later,
    /// Refused for good, of a type recovery does not read, or its payment never found: escalated once, the
    /// item deleted.
    Unread,
}

/// One object read and applied in a run: its type, its id and, for a dispute, the event type never made
/// (each reports its own fact: `created` and `funds_withdrawn` of one dispute are two facts to keep).
type ReadKey = (String, String, Option<String>);

/// Reads every object due to be read again, each once, until `deadline`; counted in `report`.
pub(crate) async fn recheck_all<P: Psps>(
    r: &Recovery<P>,
    deadline: tokio::time::Instant,
    report: &mut RecoveryReport,
) -> Result<(), StoreError> {
    let (client, table) = (r.store.client(), r.store.table());
    let now_ms = clock::now_ms();
    let (due, items) = recheck::due(client, table, r.store.open_shards(), now_ms, r.settings.batch_limit).await?;
    report.lag_seconds = report.lag_seconds.max(items.lag_seconds(now_ms));
    // Objects read and applied in this run: Stripe sends one failure per event it did not make, so one
    // refund whose `refund.created`, `.updated` and `.failed` were all lost is named three times; it is
    // read once.
    let mut read = HashSet::new();
    for item in due {
        let event = &item.event;
        let correlation = CorrelationId::derived("recheck", event.as_str());
        let rechecked = recheck(r, &item, correlation, &mut read);
        let Ok(rechecked) = tokio::time::timeout_at(deadline, rechecked).await else {
            report.left = report.left.saturating_add(1);
            return Ok(());
        };
        if !counted(rechecked, event, report) {
            continue;
        }
        if let Err(e) = recheck::done(client, table, event).await {
            warn!(event_id = %event, error = %ErrorChain(&e), "could not delete the object read; read again");
        }
    }
    Ok(())
}

/// Reads Stripe's failure event of `due`, then the object it names, and applies it.
async fn recheck<P: Psps>(
    r: &Recovery<P>,
    due: &DueRecheck,
    correlation: CorrelationId,
    read: &mut HashSet<ReadKey>,
) -> Result<Rechecked, RecoveryError> {
    let event = &due.event;
    let Some(psp) = r.psp.stripe() else {
        error!(event_id = %event, "no Stripe client configured: the object Stripe failed to tell about is unread");
        return Ok(Rechecked::Later);
    };
    let impact = match psp.retrieve_generation_failure(event).await {
        Ok(failure) => failure.data.impact,
        Err(e) => return unread_or_later(event, None, e),
    };
    let object = &impact.related_object;
    let key = read_key(&impact);
    if read.contains(&key) {
        return Ok(Rechecked::Done);
    }
    let (observation, target) = match object_observation(psp, &impact, correlation).await {
        Ok(ObjectRead::Observed(observation, target)) => (*observation, target),
        Ok(ObjectRead::NothingNew) => return Ok(Rechecked::Done),
        Ok(ObjectRead::NotRead) => {
            error!(event_id = %event, object_type = %object.kind, object_id = %object.id,
                   "Stripe failed to generate an event about an object recovery does not read: an operator reads it");
            return Ok(Rechecked::Unread);
        }
        Err(e) => return unread_or_later(event, Some(object), e),
    };
    if let Ownership::OtherStage(stage) = target.ownership(shared::metrics::stage()) {
        info!(event_id = %event, object_id = %object.id, stage, "the object Stripe names is another stage's; left alone");
        return Ok(Rechecked::Done);
    }
    // Located as the webhook's payment is: our payment id first, then the bound reference.
    let found = match target.locate(&r.store).await? {
        Some(id) => r.store.get(&id).await?,
        None => None,
    };
    let Some(current) = found else {
        return Ok(unfound(r, due, object, &target));
    };
    let id = current.id.clone();
    let applied = apply_read(r, current, &psp.provider(), &observation).await?;
    if applied.is_some() {
        read.insert(key);
    }
    info!(event_id = %event, payment_id = %id, object_type = %object.kind, object_id = %object.id,
          result = ?applied, "object of an event Stripe never made read and applied");
    Ok(applied.map_or(Rechecked::Later, |_| Rechecked::Done))
}

/// An object of no payment found: it waits (its payment may not be written yet, or its reference not
/// bound in the index yet) until the item is `stale_after` old, then is escalated once.
fn unfound<P: Psps>(r: &Recovery<P>, due: &DueRecheck, object: &RelatedObject, target: &PaymentRef) -> Rechecked {
    let waited = age_seconds(due.received_at_ms, clock::now_ms());
    if waited < r.settings.stale_after.as_secs() {
        info!(event_id = %due.event, object_id = %object.id, waited,
              "no payment found for the object Stripe names yet; read again next run");
        return Rechecked::Later;
    }
    error!(event_id = %due.event, object_type = %object.kind, object_id = %object.id, waited, target = ?target,
           "no payment found for an object Stripe failed to tell about: an operator reads it");
    Rechecked::Unread
}

/// Applies `observation`, read at `provider`, to payment `current` (as read) under its lease, whatever its status (the
/// decision keeps a terminal payment from going back); `None` when the lease is held (read again next run).
/// A payment of another PSP is left alone (invariant 13).
async fn apply_read<P: Psps>(
    r: &Recovery<P>,
    current: Payment,
    provider: &PspName,
    observation: &Observation,
) -> Result<Option<Reconciled>, RecoveryError> {
    if current.provider != *provider {
        return Ok(Some(Reconciled::NotOpen));
    }
    let id = &current.id;
    reconcile::leased(r, &current, async |lease| {
        // Read again under the lease: a holder may have written since the read the lease was taken at.
        let current = r
            .store
            .get(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        let outcome = r.store.finalize_from(current, observation, Some(lease)).await?;
        if let Some(reason) = &outcome.refused {
            warn!(payment_id = %id, reason, "object read is not about this payment: anomaly recorded, not applied");
        }
        Ok((Reconciled::of(&outcome), outcome.lease_released))
    })
    .await
}

/// What a read of the object a failure names says.
enum ObjectRead {
    /// Its news, to apply (boxed: an observation is large, the other answers are empty), and how to find
    /// its payment.
    Observed(Box<Observation>, PaymentRef),
    /// A PaymentIntent whose status says nothing in our terms (`requires_payment_method`, ...): nothing to apply.
    NothingNew,
    /// A type recovery does not read (a charge, a payout, ...).
    NotRead,
}

/// Reads the object a failure names, as it stands now.
async fn object_observation(
    psp: &impl StripeApi,
    impact: &GenerationFailureImpact,
    correlation: CorrelationId,
) -> Result<ObjectRead, PspError> {
    let bad = |e: String| PspError::BadAnswer(e.into());
    let object = &impact.related_object;
    let (observation, target) = match object.kind.as_str() {
        "payment_intent" => {
            let reference = PspReference::parse(object.id.as_str()).map_err(|e| bad(e.to_string()))?;
            let intent = psp.retrieve(&reference).await?;
            // Our payment id in its metadata first, as the webhook's lookup: a payment created before its
            // PaymentIntent was bound to it is found only so.
            let target =
                PaymentRef::of_metadata(&intent.metadata, Some(intent.id.as_str())).map_err(|e| bad(e.to_string()))?;
            let Some(mut observation) = intent.observation(Channel::Recovery, correlation).map_err(bad)? else {
                return Ok(ObjectRead::NothingNew);
            };
            // Stamped with the query's time (to the second, Stripe's), as recovery's reads are.
            observation.occurred_at_ms = Some(clock::now_ms().div_euclid(1000).saturating_mul(1000));
            (observation, target)
        }
        "refund" => {
            let refund = psp.retrieve_refund(&object.id).await?;
            let observation = refund.observation(Channel::Recovery, None, correlation).map_err(bad)?;
            let target = PaymentRef::by_reference(observation.psp_reference.clone());
            (observation, target)
        }
        "dispute" => {
            let dispute = psp.retrieve_dispute(&object.id).await?;
            // The fact is the never-made event's (`charge.dispute.funds_withdrawn`, ...); the dispute read
            // says where it stands now.
            let fact = DisputeFact::of_stripe_event(&impact.event_type).unwrap_or(DisputeFact::Updated);
            let observation = dispute.observation(Channel::Recovery, fact, correlation).map_err(bad)?;
            let target = PaymentRef::by_reference(observation.psp_reference.clone());
            (observation, target)
        }
        _ => return Ok(ObjectRead::NotRead),
    };
    Ok(ObjectRead::Observed(Box::new(observation), target))
}

/// What one run reads once: an object (a refund named by its `created`, `updated` and `failed` is one
/// read), but a dispute once per event type, since each reports its own fact.
fn read_key(impact: &GenerationFailureImpact) -> ReadKey {
    let object = &impact.related_object;
    let fact = (object.kind == "dispute").then(|| impact.event_type.clone());
    (object.kind.clone(), object.id.clone(), fact)
}

/// Counts what became of one recheck into `report`; `true` when its item is done with (deleted).
fn counted(rechecked: Result<Rechecked, RecoveryError>, event: &PspEventId, report: &mut RecoveryReport) -> bool {
    match rechecked {
        Ok(Rechecked::Done) => {
            report.rechecked = report.rechecked.saturating_add(1);
            true
        }
        Ok(Rechecked::Unread) => {
            report.rechecks_unread = report.rechecks_unread.saturating_add(1);
            true
        }
        Ok(Rechecked::Later) => false,
        Err(e) => {
            report.errors = report.errors.saturating_add(1);
            warn!(event_id = %event, error = %ErrorChain(&e), "reading an object again failed; next run");
            false
        }
    }
}

/// A failed read: Stripe's "no" for good (it does not know the event or the object) is unread, escalated
/// once; anything else (unavailable, breaker open, key refused) is read again next run.
fn unread_or_later(
    event: &PspEventId,
    object: Option<&RelatedObject>,
    e: PspError,
) -> Result<Rechecked, RecoveryError> {
    match e {
        PspError::Refused { .. } | PspError::BadAnswer(_) => {
            error!(event_id = %event, object_id = object.map(|o| o.id.as_str()), error = %ErrorChain(&e),
                   "Stripe refused to tell about an event it failed to generate: an operator reads it");
            Ok(Rechecked::Unread)
        }
        e if e.is_deferred() => Ok(Rechecked::Later),
        e => Err(e.into()),
    }
}
