//! A circuit breaker in front of the PSP, so a PSP outage does not turn into a pile of retries from every
//! saga and recovery run at once.
//!
//! - **Closed**: calls go through. Each instance counts the PSP's transient failures (after the client's own
//!   retries) in memory; `failure_threshold` of them within `window`, with no success in between, open it.
//! - **Open**: calls are not made ([`PspError::CircuitOpen`]): the saga defers to its sweeper, recovery ends
//!   its run. After `cool_down`, one instance wins a conditional write and makes one **probe** call; its
//!   success closes the breaker, its failure opens it for another cool-down.
//!
//! The state is one DynamoDB item (`pk = BREAKER#<name>`, `sk = BREAKER`) shared by every instance, read
//! through a cache of `cache_ttl` and written only when the state changes; a breaker whose item cannot be
//! read lets calls through (the PSP's availability must not hinge on the breaker's). Opening writes one EMF
//! line (`Payments/Psp`, `BreakerOpened`), which is alarmed.
//!
//! The breaker never changes what a call does: a money-moving call stopped by it is retried later with the
//! same idempotency key, so an unknown outcome (a timed-out charge) is settled by the key, never charged
//! twice.

use super::{ChargeRequest, PaymentIntent, Psp, PspError, Refund};
use crate::store::item::Item;
use crate::store::{read_item, StoreError};
use crate::telemetry::ErrorChain;
use crate::{clock, PaymentId, PspReference};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, info, warn};

/// How quickly the breaker opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Transient failures within `window` (no success in between) that open the breaker.
    pub failure_threshold: u32,
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
            window: Duration::from_secs(30),
            cool_down: Duration::from_secs(30),
            cache_ttl: Duration::from_secs(2),
            probe_timeout: Duration::from_secs(30),
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

#[derive(Debug, Default)]
struct Local {
    /// Times (epoch ms) of this instance's transient failures since the last success.
    failures: VecDeque<i64>,
    /// The state read last, and when.
    cached: Option<(i64, BreakerState)>,
}

#[derive(Debug)]
struct Shared {
    client: Client,
    table: String,
    key: Item,
    settings: BreakerSettings,
    local: Mutex<Local>,
}

/// Wraps a [`Psp`]; every call passes the breaker.
#[derive(Debug, Clone)]
pub struct CircuitBreaker<P> {
    inner: P,
    shared: Arc<Shared>,
}

fn number(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The `BreakerOpened` EMF record. No dimension but the stage: one breaker per deployment, and the alarm
/// watches the stage's metric. The breaker's name rides along as a property for Logs Insights.
pub fn emf(name: &str, now_ms: i64) -> serde_json::Value {
    crate::metrics::counts(
        "Payments/Psp",
        &[&[]],
        &["BreakerOpened"],
        serde_json::json!({ "Breaker": name, "BreakerOpened": 1 }),
        now_ms,
    )
}

impl<P: Psp> CircuitBreaker<P> {
    /// A breaker named `name` (one per PSP account) over `inner`, its state in `table`.
    pub fn new(inner: P, client: Client, table: impl Into<String>, name: &str, settings: BreakerSettings) -> Self {
        let key = crate::keys::breaker(name);
        Self {
            inner,
            shared: Arc::new(Shared {
                client,
                table: table.into(),
                key,
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
    pub async fn state(&self) -> Result<BreakerState, StoreError> {
        let now = clock::now_ms();
        if let Some((read_at, state)) = self.local().cached {
            if now.saturating_sub(read_at) < millis(self.shared.settings.cache_ttl) {
                return Ok(state);
            }
        }
        let s = &self.shared;
        let item = read_item(&s.client, &s.table, s.key.clone(), "read PSP breaker").await?;
        let state = match item {
            Some(item) if item.get("state").and_then(|v| v.as_s().ok()).map(String::as_str) == Some("open") => {
                let until_ms = item
                    .get("open_until_ms")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                BreakerState::Open { until_ms }
            }
            _ => BreakerState::Closed,
        };
        self.remember(state);
        Ok(state)
    }

    fn remember(&self, state: BreakerState) {
        self.local().cached = Some((clock::now_ms(), state));
    }

    /// Lets a call through, as a normal call or as the probe, or refuses it.
    async fn gate(&self) -> Result<Pass, PspError> {
        let state = match self.state().await {
            Ok(state) => state,
            Err(e) => {
                warn!(error = %ErrorChain(&e), "PSP breaker state unreadable; letting the call through");
                return Ok(Pass::Normal);
            }
        };
        let now = clock::now_ms();
        match state {
            BreakerState::Closed => Ok(Pass::Normal),
            BreakerState::Open { until_ms } if now < until_ms => Err(PspError::CircuitOpen { until_ms }),
            BreakerState::Open { until_ms } => {
                if self.claim_probe(now).await {
                    info!("PSP breaker cool-down over; this call is the probe");
                    Ok(Pass::Probe)
                } else {
                    // Another instance probes (or closed it meanwhile: the next read sees that).
                    self.local().cached = None;
                    Err(PspError::CircuitOpen { until_ms })
                }
            }
        }
    }

    /// One instance wins the probe: the item is open, its cool-down over, and no probe is running.
    async fn claim_probe(&self, now: i64) -> bool {
        let s = &self.shared;
        let claimed = s
            .client
            .update_item()
            .table_name(&s.table)
            .set_key(Some(s.key.clone()))
            .update_expression("SET probe_until_ms = :probe_until")
            .condition_expression(
                "#state = :open AND open_until_ms <= :now AND \
                 (attribute_not_exists(probe_until_ms) OR probe_until_ms < :now)",
            )
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":open", AttributeValue::S("open".into()))
            .expression_attribute_values(":now", number(now))
            .expression_attribute_values(
                ":probe_until",
                number(now.saturating_add(millis(s.settings.probe_timeout))),
            )
            .send()
            .await;
        match claimed {
            Ok(_) => true,
            Err(e) => {
                if !e
                    .as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception())
                {
                    warn!(error = %ErrorChain(&StoreError::from_sdk("claim PSP breaker probe", e)), "probe claim failed");
                }
                false
            }
        }
    }

    /// Opens the breaker (from closed, or again after a failed probe). True when this write opened it.
    async fn open(&self, reopen: bool) -> bool {
        let s = &self.shared;
        let now = clock::now_ms();
        let until_ms = now.saturating_add(millis(s.settings.cool_down));
        let mut update = s
            .client
            .update_item()
            .table_name(&s.table)
            .set_key(Some(s.key.clone()))
            .update_expression("SET #state = :open, open_until_ms = :until, changed_at_ms = :now REMOVE probe_until_ms")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":open", AttributeValue::S("open".into()))
            .expression_attribute_values(":until", number(until_ms))
            .expression_attribute_values(":now", number(now));
        if !reopen {
            update = update
                .condition_expression("attribute_not_exists(#state) OR #state = :closed")
                .expression_attribute_values(":closed", AttributeValue::S("closed".into()));
        }
        match update.send().await {
            Ok(_) => {
                self.remember(BreakerState::Open { until_ms });
                true
            }
            Err(e) => {
                if !e
                    .as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception())
                {
                    warn!(error = %ErrorChain(&StoreError::from_sdk("open PSP breaker", e)), "breaker could not be opened");
                }
                // Opened by another instance already (or unwritable): read it again next time.
                self.local().cached = None;
                false
            }
        }
    }

    async fn close(&self) {
        let s = &self.shared;
        let closed = s
            .client
            .update_item()
            .table_name(&s.table)
            .set_key(Some(s.key.clone()))
            .update_expression("SET #state = :closed, changed_at_ms = :now REMOVE probe_until_ms, open_until_ms")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":closed", AttributeValue::S("closed".into()))
            .expression_attribute_values(":now", number(clock::now_ms()))
            .send()
            .await;
        match closed {
            Ok(_) => {
                info!("PSP answered the probe; breaker closed");
                self.remember(BreakerState::Closed);
            }
            Err(e) => {
                warn!(error = %ErrorChain(&StoreError::from_sdk("close PSP breaker", e)), "breaker could not be closed")
            }
        }
    }

    /// Counts a transient failure of a normal call; true when the threshold is reached.
    fn count_failure(&self) -> bool {
        let settings = self.shared.settings;
        let now = clock::now_ms();
        let mut local = self.local();
        local.failures.push_back(now);
        while local
            .failures
            .front()
            .is_some_and(|t| now.saturating_sub(*t) > millis(settings.window))
        {
            local.failures.pop_front();
        }
        let reached = local.failures.len() >= settings.failure_threshold as usize;
        if reached {
            local.failures.clear();
        }
        reached
    }

    /// Runs `call` through the breaker.
    async fn guarded<T>(&self, call: impl Future<Output = Result<T, PspError>>) -> Result<T, PspError> {
        let pass = self.gate().await?;
        let result = call.await;
        let failed = matches!(&result, Err(e) if e.is_transient());
        match (pass, failed) {
            (Pass::Probe, false) => self.close().await,
            (Pass::Probe, true) => {
                warn!("PSP probe failed; breaker open for another cool-down");
                self.open(true).await;
            }
            (Pass::Normal, false) => self.local().failures.clear(),
            (Pass::Normal, true) => {
                if self.count_failure() && self.open(false).await {
                    error!(
                        threshold = self.shared.settings.failure_threshold,
                        "PSP keeps failing; breaker opened, calls paused"
                    );
                    let name = self
                        .shared
                        .key
                        .get("pk")
                        .and_then(|v| v.as_s().ok())
                        .cloned()
                        .unwrap_or_default();
                    crate::metrics::emit(&emf(name.trim_start_matches("BREAKER#"), clock::now_ms()));
                }
            }
        }
        result
    }
}

impl<P: Psp> Psp for CircuitBreaker<P> {
    async fn charge(&self, key: &str, request: &ChargeRequest<'_>) -> Result<PaymentIntent, PspError> {
        self.guarded(self.inner.charge(key, request)).await
    }

    async fn retrieve(&self, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.guarded(self.inner.retrieve(reference)).await
    }

    async fn cancel(&self, key: &str, reference: &PspReference) -> Result<PaymentIntent, PspError> {
        self.guarded(self.inner.cancel(key, reference)).await
    }

    async fn refund(&self, key: &str, reference: &PspReference, amount_minor: Option<u64>) -> Result<Refund, PspError> {
        self.guarded(self.inner.refund(key, reference, amount_minor)).await
    }

    async fn retrieve_refund(&self, refund: &str) -> Result<Refund, PspError> {
        self.guarded(self.inner.retrieve_refund(refund)).await
    }

    async fn find_for_payment(&self, payment: &PaymentId) -> Result<Option<PaymentIntent>, PspError> {
        self.guarded(self.inner.find_for_payment(payment)).await
    }
}

impl CircuitBreaker<super::StripeClient> {
    /// [`StripeClient::list_events`](super::StripeClient::list_events) through the breaker: the catch-up job
    /// stops when Stripe keeps failing, as every other caller does.
    pub async fn list_events(
        &self,
        query: &super::stripe::EventQuery<'_>,
    ) -> Result<super::stripe::EventList, PspError> {
        self.guarded(self.inner.list_events(query)).await
    }
}
