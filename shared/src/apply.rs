//! Applying an observation under the payment's lease: the one sequence every writer outside a saga step
//! follows (the webhook intake, `paymentsctl parked replay`): read the payment, take its lease at the version
//! read, waiting a bounded time (a fresh read each try) for another worker to finish, finalize through the
//! one decision and versioned write (which frees the lease), and release the lease on every other way out.
//!
//! It lives here, beside the store and the leases, so that the operator CLI runs the intake's own sequence
//! without depending on a Lambda crate, and so that a failed release is handled once: it travels with the
//! error it followed ([`ApplyError::Store`]) or is logged when the write itself succeeded, never dropped.
//! The intake reads first and may stop there (a redelivery of an event applied), then takes the lease from
//! that read ([`Leases::hold_waiting`] and [`finalize_leased`] separately); a caller without that need takes
//! the whole of [`apply_under_lease`].

use crate::lease::{HeldLease, Leases};
use crate::store::{FinalizeOutcome, PaymentStore, StoreError};
use crate::telemetry::ErrorChain;
use crate::{clock, Observation, Payment, PaymentId};
use std::fmt;
use std::time::{Duration, Instant};
use tracing::warn;

/// How long a writer waits for a payment's lease that another worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseWait {
    /// Tries at most this many times (a request path: the PSP retries the 503 that follows).
    pub attempts: u32,
    /// Stops trying once this much time has passed since the first try (an operator waiting at a prompt).
    pub deadline: Duration,
    /// The longest pause between two tries (each a random time up to it, never past the deadline).
    pub max_pause: Duration,
}

impl LeaseWait {
    /// A few tries, pauses up to `max_pause`: bounded by the count (at most `attempts - 1` pauses).
    pub const fn attempts(attempts: u32, max_pause: Duration) -> Self {
        Self {
            attempts,
            deadline: Duration::MAX,
            max_pause,
        }
    }

    /// Tries until `deadline` has passed, pausing up to `max_pause` between tries.
    pub const fn within(deadline: Duration, max_pause: Duration) -> Self {
        Self {
            attempts: u32::MAX,
            deadline,
            max_pause,
        }
    }
}

impl Leases {
    /// The lease of `current` (the payment as the caller just read it), held (see [`HeldLease`]), tried as
    /// `wait` says, each try after the first on a fresh read from `store` (the holder's write moves the
    /// version, which frees the lease). Returns the lease with the payment read last, the one it was taken
    /// at; `Ok(None)` when another worker still holds it at the end of the wait.
    pub async fn hold_waiting(
        &self,
        store: &PaymentStore,
        mut current: Payment,
        wait: LeaseWait,
    ) -> Result<Option<(HeldLease, Payment)>, StoreError> {
        let started = Instant::now();
        for attempt in 1..=wait.attempts.max(1) {
            if let Some(lease) = self.acquire(&current).await? {
                return Ok(Some((self.hold(lease), current)));
            }
            let left = wait.deadline.saturating_sub(started.elapsed());
            if attempt == wait.attempts || left.is_zero() {
                break;
            }
            tokio::time::sleep(clock::full_jitter(wait.max_pause).min(left)).await;
            current = store
                .get(&current.id)
                .await?
                .ok_or_else(|| StoreError::NotFound(current.id.to_string()))?;
        }
        Ok(None)
    }
}

/// Why an observation was not applied under the payment's lease.
#[derive(Debug)]
pub enum ApplyError {
    /// Another worker (the intake, recovery) still held the payment's lease when the wait ended: nothing was
    /// written; the same call later may succeed.
    LeaseHeld { payment: PaymentId, waited: Duration },
    /// A store call failed (the cause); the lease was released, or `release` says why it could not be (it
    /// then expires by itself).
    Store {
        source: StoreError,
        release: Option<StoreError>,
    },
}

impl ApplyError {
    /// True when the same call later may succeed (a 503 with Retry-After for the intake).
    pub fn is_transient(&self) -> bool {
        match self {
            ApplyError::LeaseHeld { .. } => true,
            ApplyError::Store { source, .. } => source.is_transient(),
        }
    }
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::LeaseHeld { payment, waited } => write!(
                f,
                "payment {payment}'s lease is still held by another worker (the intake or recovery at work) after \
                 waiting {} ms; nothing written, try again",
                waited.as_millis()
            ),
            ApplyError::Store { source, release: None } => write!(f, "{source}"),
            ApplyError::Store {
                source,
                release: Some(release),
            } => write!(
                f,
                "{source}; releasing the payment's lease failed too ({}), it expires by itself",
                ErrorChain(release)
            ),
        }
    }
}

impl std::error::Error for ApplyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ApplyError::LeaseHeld { .. } => None,
            ApplyError::Store { source, .. } => Some(source),
        }
    }
}

impl From<StoreError> for ApplyError {
    fn from(source: StoreError) -> Self {
        ApplyError::Store { source, release: None }
    }
}

/// Releases `lease` after `source` failed the step, keeping a failed release with the failure.
async fn released_after(lease: HeldLease, source: StoreError) -> ApplyError {
    ApplyError::Store {
        source,
        release: lease.release().await.err(),
    }
}

/// The one finalize of `observation` against `current` under `lease`, which the finalize's write frees (by
/// moving the payment's version); a lease nothing released (no write, and its delete failed) is released
/// once more here, and on a failure it is released before the error is returned (see [`ApplyError::Store`]).
pub async fn finalize_leased(
    store: &PaymentStore,
    lease: HeldLease,
    current: Payment,
    observation: &Observation,
) -> Result<FinalizeOutcome, ApplyError> {
    match store.finalize_from(current, observation, Some(lease.lease())).await {
        Ok(outcome) if outcome.lease_released => {
            lease.released_by_write();
            Ok(outcome)
        }
        Ok(outcome) => {
            // The write stands; a lease we cannot free expires by itself, so this is reported, not returned.
            if let Err(e) = lease.release().await {
                warn!(payment_id = %outcome.payment.id, error = %ErrorChain(&e), "lease release after finalize failed; it will expire");
            }
            Ok(outcome)
        }
        Err(source) => Err(released_after(lease, source).await),
    }
}

/// Applies `observation` to payment `id` under its lease: a read, the lease at the version read (waited for
/// as `wait` says), the one finalize. `Ok(None)`: no such payment (no lease taken).
pub async fn apply_under_lease(
    store: &PaymentStore,
    leases: &Leases,
    id: &PaymentId,
    observation: &Observation,
    wait: LeaseWait,
) -> Result<Option<FinalizeOutcome>, ApplyError> {
    let started = Instant::now();
    let Some(current) = store.get(id).await? else {
        return Ok(None);
    };
    let Some((lease, current)) = leases.hold_waiting(store, current, wait).await? else {
        return Err(ApplyError::LeaseHeld {
            payment: id.clone(),
            waited: started.elapsed(),
        });
    };
    finalize_leased(store, lease, current, observation).await.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_release_is_told_with_the_failure_it_followed_and_the_cause_kept() {
        let failed = ApplyError::Store {
            source: StoreError::ConflictsExhausted("pay_1".into(), 32),
            release: Some(StoreError::Unavailable {
                context: "release lease",
                source: "connection reset".into(),
            }),
        };
        let text = failed.to_string();
        assert!(text.starts_with("payment pay_1 kept changing under us"), "{text}");
        assert!(
            text.contains("releasing the payment's lease failed too") && text.contains("connection reset"),
            "{text}"
        );
        let source = std::error::Error::source(&failed).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("payment pay_1 kept changing under us; gave up after 32 version conflicts")
        );
        assert!(failed.is_transient());
        let held = ApplyError::LeaseHeld {
            payment: PaymentId::parse("pay_1").unwrap(),
            waited: Duration::from_millis(3000),
        };
        assert!(held.to_string().contains("pay_1's lease is still held") && held.to_string().contains("3000 ms"));
    }

    #[test]
    fn a_wait_by_attempts_has_no_deadline_of_its_own_and_one_by_deadline_no_count() {
        let by_count = LeaseWait::attempts(4, Duration::from_millis(100));
        assert_eq!((by_count.attempts, by_count.deadline), (4, Duration::MAX));
        let by_time = LeaseWait::within(Duration::from_secs(3), Duration::from_millis(200));
        assert_eq!((by_time.attempts, by_time.deadline), (u32::MAX, Duration::from_secs(3)));
    }
}
