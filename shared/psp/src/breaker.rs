//! A circuit breaker in front of the PSP, so a PSP outage does not turn into a pile of retries from every
//! saga and recovery run at once, and one request that keeps failing does not stop everyone's.
//!
//! - **Closed**: calls go through. Each instance counts, in memory, the PSP's failed *attempts* as they
//!   happen (the client's retry loop reports each one through [`attempt_failed`]; a PSP that reports none
//!   counts as one failure when its call fails): a timeout, a connection failure, a fresh 5xx (not a 429). One request
//!   (an idempotency key, or one call without a key) counts at most twice; an answer the PSP replays for a key
//!   counts not at all. `failure_threshold` counted failures within `window`, with no success in between,
//!   open it. The rule is [`payments_core::breaker`]'s, which the protocol model runs too.
//! - **Open**: calls are not made ([`PspError::CircuitOpen`]): the saga defers to its sweeper, recovery ends
//!   its run. After `cool_down`, one instance wins a conditional write and makes one **probe** call; its
//!   success closes the breaker, its failure opens it for another cool-down, and a probe that got only a
//!   replayed answer gives the probe up for another call. An open state always ends: an end time that is
//!   missing or unreadable, or further than ten cool-downs from the change, is read as the rule says
//!   ([`payments_core::breaker::open_end`]).
//!
//! The state is one DynamoDB item ([`item`]) shared by every instance, read through a cache of `cache_ttl`
//! and written only when the state changes, each write conditioned on what its writer saw; a breaker whose
//! item cannot be read lets calls through (the PSP's availability must not hinge on the breaker's). Opening
//! writes one EMF line (`Payments/Psp`, `BreakerOpened`), which is alarmed. `paymentsctl breaker show` and
//! `reset` read and reset the item.
//!
//! The breaker never changes what a call does: a money-moving call stopped by it is retried later with the
//! same idempotency key, so an unknown outcome (a timed-out charge) is settled by the key, never charged
//! twice.

pub mod item;

use super::error::PspError;
use aws_sdk_dynamodb::Client;
use item::{BreakerItem, BreakerRecord, Written};
use payments_core::breaker::{Attempt, BreakerRule, Failures, Opening, Request};
use shared::clock;
use shared::telemetry::ErrorChain;
use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, info, warn};

/// How quickly the breaker opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Counted failures within `window` (no success in between) that open the breaker.
    pub failure_threshold: u32,
    /// Long enough for a hanging PSP: one attempt fails per request timeout (5 s), so 60 s holds the failed
    /// attempts of three calls made one after another by one instance.
    pub window: Duration,
    /// How long calls stop before one probe is let through.
    pub cool_down: Duration,
    /// How long an instance trusts the state it read.
    pub cache_ttl: Duration,
    /// How long a probe may take before another instance may probe.
    pub probe_timeout: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            window: Duration::from_secs(60),
            cool_down: Duration::from_secs(30),
            cache_ttl: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(30),
        }
    }
}

impl BreakerSettings {
    /// The rule these settings give ([`payments_core::breaker`]).
    pub fn rule(&self) -> BreakerRule {
        BreakerRule {
            failure_threshold: self.failure_threshold,
            window_ms: millis(self.window),
            cool_down_ms: millis(self.cool_down),
        }
    }
}

/// The breaker's state as the shared item holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// Calls stop until `until_ms` (epoch ms); then one probe.
    Open {
        until_ms: i64,
    },
}

/// What the gate let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Normal,
    Probe,
}

tokio::task_local! {
    /// The failed attempts of the call running in this task, as its PSP client reports them.
    static ATTEMPTS: RefCell<Vec<(i64, Attempt)>>;
}

/// Reports one failed attempt of the PSP call running now, as it happens: called from a PSP client's retry
/// loop. Inside a breaker's call the breaker counts it; elsewhere it is dropped.
pub fn attempt_failed(attempt: Attempt) {
    // Not inside a breaker's call (a client used directly): nothing counts, by design.
    let _ = ATTEMPTS.try_with(|a| a.borrow_mut().push((clock::now_ms(), attempt)));
}

/// Runs `call` and collects the attempts its client reported.
async fn observed<T>(call: impl Future<Output = T>) -> (T, Vec<(i64, Attempt)>) {
    ATTEMPTS
        .scope(RefCell::new(Vec::new()), async {
            let result = call.await;
            let attempts = ATTEMPTS.with(RefCell::take);
            (result, attempts)
        })
        .await
}

/// The times of a call's failures that count: `None` when the call did not fail transiently (a success for
/// the breaker); the reported attempts that count; or, from a PSP that reported none, the call's end.
fn counted<T>(result: &Result<T, PspError>, attempts: &[(i64, Attempt)], now_ms: i64) -> Option<Vec<i64>> {
    if !matches!(result, Err(e) if e.is_transient()) {
        return None;
    }
    if attempts.is_empty() {
        return Some(vec![now_ms]);
    }
    Some(
        attempts
            .iter()
            .filter(|(_, a)| *a == Attempt::PspFailed)
            .map(|(at, _)| *at)
            .collect(),
    )
}

#[derive(Debug, Default)]
struct Local {
    /// This instance's counted failures since the last success.
    failures: Failures,
    /// The item read last, and when.
    cached: Option<(i64, BreakerRecord)>,
}

#[derive(Debug)]
struct Shared {
    item: BreakerItem,
    settings: BreakerSettings,
    local: Mutex<Local>,
}

/// Wraps a PSP client (Stripe's or Adyen's: each client's module has the calls through it); every call passes
/// the breaker.
#[derive(Debug, Clone)]
pub struct CircuitBreaker<P> {
    inner: P,
    shared: Arc<Shared>,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The `BreakerOpened` EMF record. No dimension but the stage: the alarm watches the stage's metric, whichever
/// PSP's breaker opened (one per PSP: `stripe`, `adyen`). The breaker's name rides along as a property for
/// Logs Insights.
pub fn emf(name: &str, now_ms: i64) -> serde_json::Value {
    shared::metrics::counts(
        "Payments/Psp",
        &[&[]],
        &["BreakerOpened"],
        serde_json::json!({ "Breaker": name, "BreakerOpened": 1 }),
        now_ms,
    )
}

fn log_write_failure(what: &str, result: Result<Written, shared::store::StoreError>) -> Option<Written> {
    match result {
        Ok(written) => Some(written),
        Err(e) => {
            warn!(error = %ErrorChain(&e), "PSP breaker: {what} failed");
            None
        }
    }
}

impl<P> CircuitBreaker<P> {
    /// A breaker named `name` (one per PSP account) over `inner`, its state in `table`.
    pub fn new(inner: P, client: Client, table: impl Into<String>, name: &str, settings: BreakerSettings) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared {
                item: BreakerItem::new(client, table, name),
                settings,
                local: Mutex::new(Local::default()),
            }),
        }
    }

    /// The wrapped PSP.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        // A poisoned lock only means a panic elsewhere while counting; the counts are still usable.
        self.shared
            .local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The shared state, from the cache while it is fresh.
    pub async fn state(&self) -> Result<BreakerState, shared::store::StoreError> {
        self.record().await.map(|r| r.state)
    }

    async fn record(&self) -> Result<BreakerRecord, shared::store::StoreError> {
        let now = clock::now_ms();
        if let Some((read_at, record)) = &self.local().cached {
            if now.saturating_sub(*read_at) < millis(self.shared.settings.cache_ttl) {
                return Ok(record.clone());
            }
        }
        let record = self.shared.item.load(&self.shared.settings.rule(), now).await?;
        self.local().cached = Some((now, record.clone()));
        Ok(record)
    }

    fn forget(&self) {
        self.local().cached = None;
    }

    /// Lets a call through, as a normal call or as the probe, or refuses it.
    async fn gate(&self) -> Result<Pass, PspError> {
        let record = match self.record().await {
            Ok(record) => record,
            Err(e) => {
                warn!(error = %ErrorChain(&e), "PSP breaker state unreadable; letting the call through");
                return Ok(Pass::Normal);
            }
        };
        let now = clock::now_ms();
        match record.state {
            BreakerState::Closed => Ok(Pass::Normal),
            BreakerState::Open { until_ms } if now < until_ms => Err(PspError::CircuitOpen { until_ms }),
            BreakerState::Open { until_ms } => {
                let probe_until = now.saturating_add(millis(self.shared.settings.probe_timeout));
                let claimed = self.shared.item.claim_probe(&record, now, probe_until).await;
                // Whoever won, the item changed: read it again next time.
                self.forget();
                if log_write_failure("claiming the probe", claimed) == Some(Written::Done) {
                    info!("PSP breaker cool-down over; this call is the probe");
                    Ok(Pass::Probe)
                } else {
                    // Another instance probes (or closed it meanwhile: the next read sees that).
                    Err(PspError::CircuitOpen {
                        until_ms: until_ms.max(now),
                    })
                }
            }
        }
    }

    /// Opens the breaker (from closed with what opened it, or again after a failed probe). True when this
    /// write opened it.
    async fn open(&self, opening: Option<Opening>) -> bool {
        let now = clock::now_ms();
        let until_ms = now.saturating_add(millis(self.shared.settings.cool_down));
        let written = self.shared.item.open(opening, now, until_ms).await;
        self.forget();
        log_write_failure("opening", written) == Some(Written::Done)
    }

    async fn close(&self) {
        let closed = self.shared.item.close(clock::now_ms()).await;
        self.forget();
        if log_write_failure("closing", closed).is_some() {
            info!("PSP answered the probe; breaker closed");
        }
    }

    /// Runs `call`, made as `request`, through the breaker.
    pub(crate) async fn guarded<T>(
        &self,
        request: Request<'_>,
        call: impl Future<Output = Result<T, PspError>>,
    ) -> Result<T, PspError> {
        let pass = self.gate().await?;
        let (result, attempts) = observed(call).await;
        let now = clock::now_ms();
        match (pass, counted(&result, &attempts, now)) {
            (Pass::Probe, None) => self.close().await,
            (Pass::Probe, Some(failures)) if failures.is_empty() => {
                info!("PSP probe got only a replayed answer; the probe is given up for another call");
                let _ = log_write_failure("releasing the probe", self.shared.item.release_probe().await);
                self.forget();
            }
            (Pass::Probe, Some(_)) => {
                warn!("PSP probe failed; breaker open for another cool-down");
                self.open(None).await;
            }
            (Pass::Normal, None) => self.local().failures.succeeded(),
            (Pass::Normal, Some(failures)) => {
                let rule = self.shared.settings.rule();
                let opening = self.local().failures.record(&rule, request, &failures, now);
                if let Some(opening) = opening {
                    if self.open(Some(opening)).await {
                        error!(
                            failures = opening.failures,
                            requests = opening.requests,
                            "PSP keeps failing; breaker opened, calls paused"
                        );
                        shared::metrics::emit(&emf(self.shared.item.name(), clock::now_ms()));
                    }
                }
            }
        }
        result
    }
}
