//! Objects Stripe failed to generate an event about (`store::recheck`, recorded by the webhook intake from
//! Stripe's `v2.core.health.event_generation_failure.resolved`): each run reads every one once, first
//! Stripe's failure event (`GET /v2/core/events/{id}`: the object it names) and then the object itself, and
//! applies what it says through the same finalize as every path, open payment or not (a captured payment's
//! refund is asked about nowhere else).
//!
//! A PaymentIntent, a refund or a dispute is read and applied (a refund or a dispute found by its
//! PaymentIntent, like its webhook; a dispute reports the fact of the event type never made); an
//! object of ours no longer matters once applied, one that is not ours is left alone. Either way the item is
//! deleted. What cannot be read now (Stripe unavailable, its breaker open, the payment's lease held) stays
//! due, and the next run reads it again: how long the oldest has waited is `RecoveryLagSeconds` (alarmed).
//! A "no" for good (Stripe does not know the event or the object, an object type recovery does not read:
//! a charge, a payout, ...) is logged with the object, counted `RechecksUnread` (alarmed) and deleted, once.

use crate::{read_observation, reconciled, refund_observation, Reconciled, Recovery, RecoveryError, RecoveryReport};
use psp::stripe::{Dispute, GenerationFailureImpact, RelatedObject};
use psp::{PspError, Psps, StripeApi};
use shared::store::{recheck, StoreError};
use shared::telemetry::ErrorChain;
use shared::{
    clock, Channel, CorrelationId, DisputeFact, Observation, Outcome, PaymentId, PspEventId, PspName, PspReference,
};
use std::collections::HashSet;
use tracing::{error, info, warn};

/// What became of one object to read again.
enum Rechecked {
    /// Read and applied, or not ours: the item is deleted.
    Done,
    /// Not readable now (Stripe unavailable or deferred, the lease held): read again next run.
    Later,
    /// Refused for good, or of a type recovery does not read: escalated once, the item deleted.
    Unread,
}

impl<P: Psps> Recovery<P> {
    /// Reads every object due to be read again, each once, until `deadline`; counted in `report`.
    pub(super) async fn recheck_all(
        &self,
        deadline: tokio::time::Instant,
        report: &mut RecoveryReport,
    ) -> Result<(), StoreError> {
        let (client, table) = (self.store.client(), self.store.table());
        let now_ms = clock::now_ms();
        let (events, due) = recheck::due(client, table, now_ms, self.settings.batch_limit).await?;
        report.lag_seconds = report.lag_seconds.max(due.lag_seconds(now_ms));
        // Objects read and applied in this run: Stripe sends one failure per event it did not make, so one
        // refund whose `refund.created`, `.updated` and `.failed` were all lost is named three times; it is
        // read once.
        let mut read = HashSet::new();
        for event in events {
            let correlation = CorrelationId::derived("recheck", event.as_str());
            let rechecked = self.recheck(&event, correlation, &mut read);
            let Ok(rechecked) = tokio::time::timeout_at(deadline, rechecked).await else {
                report.left = report.left.saturating_add(1);
                return Ok(());
            };
            let done = match rechecked {
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
            };
            if done {
                if let Err(e) = recheck::done(client, table, &event).await {
                    warn!(event_id = %event, error = %ErrorChain(&e), "could not delete the object read; read again");
                }
            }
        }
        Ok(())
    }

    /// Reads Stripe's failure `event`, then the object it names, and applies it.
    async fn recheck(
        &self,
        event: &PspEventId,
        correlation: CorrelationId,
        read: &mut HashSet<(String, String)>,
    ) -> Result<Rechecked, RecoveryError> {
        let Some(psp) = self.psp.stripe() else {
            error!(event_id = %event, "no Stripe client configured: the object Stripe failed to tell about is unread");
            return Ok(Rechecked::Later);
        };
        let impact = match psp.retrieve_generation_failure(event).await {
            Ok(failure) => failure.data.impact,
            Err(e) => return unread_or_later(event, None, e),
        };
        let object = &impact.related_object;
        if read.contains(&(object.kind.clone(), object.id.clone())) {
            return Ok(Rechecked::Done);
        }
        let observation = match object_observation(psp, &impact, correlation).await {
            Ok(ObjectRead::Observed(observation)) => *observation,
            Ok(ObjectRead::NothingNew) => return Ok(Rechecked::Done),
            Ok(ObjectRead::NotRead) => {
                error!(event_id = %event, object_type = %object.kind, object_id = %object.id,
                       "Stripe failed to generate an event about an object recovery does not read: an operator reads it");
                return Ok(Rechecked::Unread);
            }
            Err(e) => return unread_or_later(event, Some(object), e),
        };
        let Some(id) = self.payment_of(&observation).await? else {
            info!(event_id = %event, object_id = %object.id, "the object Stripe names is not ours; left alone");
            return Ok(Rechecked::Done);
        };
        let applied = self.apply_read(&id, &psp.provider(), &observation).await?;
        if applied.is_some() {
            read.insert((object.kind.clone(), object.id.clone()));
        }
        info!(event_id = %event, payment_id = %id, object_type = %object.kind, object_id = %object.id,
              result = ?applied, "object of an event Stripe never made read and applied");
        Ok(applied.map_or(Rechecked::Later, |_| Rechecked::Done))
    }

    /// The payment the observation's PaymentIntent is bound to (`by-psp-reference`), if any.
    async fn payment_of(&self, observation: &Observation) -> Result<Option<PaymentId>, StoreError> {
        match &observation.psp_reference {
            Some(reference) => self.store.find_by_psp_reference(reference).await,
            None => Ok(None),
        }
    }

    /// Applies `observation`, read at `provider`, to payment `id` under its lease, whatever its status (the
    /// decision keeps a terminal payment from going back); `None` when the lease is held (read again next run).
    /// A payment of another PSP is left alone (invariant 13).
    async fn apply_read(
        &self,
        id: &PaymentId,
        provider: &PspName,
        observation: &Observation,
    ) -> Result<Option<Reconciled>, RecoveryError> {
        let Some(current) = self.store.get(id).await?.filter(|p| p.provider == *provider) else {
            return Ok(Some(Reconciled::NotOpen));
        };
        self.leased(&current, async |lease| {
            // Read again under the lease: a holder may have written since the read the lease was taken at.
            let current = self
                .store
                .get(id)
                .await?
                .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
            let outcome = self.store.finalize_from(current, observation, Some(lease)).await?;
            if let Some(reason) = &outcome.refused {
                warn!(payment_id = %id, reason, "object read is not about this payment: anomaly recorded, not applied");
            }
            Ok((reconciled(&outcome), outcome.lease_released))
        })
        .await
    }
}

/// What a read of the object a failure names says.
enum ObjectRead {
    /// Its news, to apply (boxed: an observation is large, the other answers are empty).
    Observed(Box<Observation>),
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
    let observation = match object.kind.as_str() {
        "payment_intent" => {
            let reference = PspReference::parse(object.id.as_str()).map_err(|e| bad(e.to_string()))?;
            let intent = psp.retrieve(&reference).await?;
            let Some(mut observation) = intent.observation(Channel::Recovery, correlation).map_err(bad)? else {
                return Ok(ObjectRead::NothingNew);
            };
            // Stamped with the query's time (to the second, Stripe's), as recovery's reads are.
            observation.occurred_at_ms = Some(clock::now_ms().div_euclid(1000).saturating_mul(1000));
            observation
        }
        "refund" => {
            let refund = psp.retrieve_refund(&object.id).await?;
            refund_observation(&refund, Channel::Recovery, None, correlation).map_err(bad)?
        }
        "dispute" => {
            let dispute = psp.retrieve_dispute(&object.id).await?;
            // The fact is the never-made event's (`charge.dispute.funds_withdrawn`, ...); the dispute read
            // says where it stands now.
            let fact = DisputeFact::of_stripe_event(&impact.event_type).unwrap_or(DisputeFact::Updated);
            dispute_observation(&dispute, fact, correlation).map_err(bad)?
        }
        _ => return Ok(ObjectRead::NotRead),
    };
    Ok(ObjectRead::Observed(Box::new(observation)))
}

/// A dispute as read, reporting `fact`, found by its PaymentIntent (none: not ours, nothing to find).
fn dispute_observation(
    dispute: &Dispute,
    fact: DisputeFact,
    correlation: CorrelationId,
) -> Result<Observation, String> {
    read_observation(
        Channel::Recovery,
        Outcome::Dispute(dispute.report(fact)?),
        dispute.payment_intent.as_deref(),
        &dispute.currency,
        correlation,
    )
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
