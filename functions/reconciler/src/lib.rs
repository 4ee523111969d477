//! Recovery (reconciliation), the reconciler's library: payments that stayed open longer than a threshold are
//! asked about at the PSP and the answer is applied through the same finalize as the sync and webhook paths.
//!
//! Only a payment's own PSP is asked (invariant 13): [`Recovery::psp`] holds a client per configured PSP
//! ([`Psps`]), a payment's calls go to the one its recorded provider routes to, and the core's
//! [`recovery_step`] sends every other payment (a Standard Webhooks provider's, a PSP not configured here,
//! one without a PSP reference, one whose reference the PSP does not know) to a back-off and,
//! past [`RecoverySettings::expire_after`], to an expiry recorded through the finalize (`PaymentFailed`,
//! `expired: ...`; the `Expired` metric alarms). A payment whose PaymentIntent is still open at Stripe past
//! that age (waiting for the customer's action, or for another card after a decline) is canceled there
//! first, key `<payment>:expire` (the core's [`after_read`]), and the canceled PaymentIntent is recorded (a
//! cancel refused because it succeeded meanwhile records the success); a `processing` one is left for Stripe
//! to settle. Adyen has no status read: its payments wait for their notifications, and past the age are
//! ended there by reference (a reversal, or a cancel by our id; [`RecoveryStep::EndAtPsp`], counted
//! `EndRequested`) whose notification records the end; one never notified expires here a day later. A
//! reconcile that fails is backed off like one that learned nothing, also when it failed before
//! the payment was read, so no payment is asked about every run forever. A deferral (the PSP's breaker open,
//! its key refused) stops only that PSP's calls in the run: its payment backs off, later payments of that PSP
//! are not asked (counted deferred, backed off), and the other PSPs' payments are reconciled.
//!
//! Open payments are found through the sparse `open-items` index (no Scan). Each one is worked on under
//! the payment's lease, the same lease webhook intake takes, so recovery and intake never work on one payment
//! at once: a payment whose lease is held is skipped this round ([`Reconciled::Busy`]) and found again on
//! the next. The payment is read before the lease is taken (the lease is taken at the version read, see
//! [`shared::lease`]), and read again under it; a write frees the lease by moving the version.
//!
//! The PSP's answer is its status at the time of the query. What each PaymentIntent status means is in
//! [`psp::stripe`]; the decision ([`shared::decide`]) checks the PaymentIntent's id, amount and currency
//! against the payment like any webhook's (a mismatch is an anomaly, never applied), never moves a payment
//! backward and never takes away an action the PSP still asks the customer for. The observation is stamped
//! with the query's time (to the second, Stripe's resolution), so a webhook about an older state that
//! arrives afterwards is stale.
//!
//! Money the PSP took on a payment we had already failed (a success after the failure, from any path) keeps
//! the payment in the index until recovery has refunded it ([`Recovery::give_back`], key from the payment and
//! the anomaly) and read the refund back from the PSP: the `PaymentRefunded` event records it, with the
//! reason, and the payment leaves the index.
//!
//! A refund the PSP reports failed or canceled leaves money with us ([`shared::GiveBack`]): recovery refunds it
//! again with the key `<payment>:refund-failure-<n>`, one key per failure, so a retry after a lost answer
//! never refunds twice and a new failure gets a new attempt. The PSP's answer is recorded as a refund report
//! answering give-back `n`: `pending` or `succeeded` ends the give-back (a later failure is failure `n+1`), a
//! `failed` answer does not count as given back; the core stops giving back after
//! [`payments_core::refund::MAX_GIVE_BACKS`] failures. The payment then stays open with the money still ours
//! ([`Payment::refund_for_operator`]): recovery asks no PSP about it, counts it every half hour
//! (`RefundsForOperator`, whose alarm so keeps firing) and `paymentsctl doctor` lists it, until a person's
//! refund at the PSP is reported succeeded and the payment is `refunded`.
//!
//! At Adyen, which has no refund or payment to read back, the same money is given back under the same keys
//! and bound, the outcome read from Adyen's notification (`adyen`).
//!
//! A refund the payment last heard was `pending` (a give-back's or any other) may end without a webhook we
//! receive, so each look reads it back by id first ([`Recovery::read_back_pending_refund`]) and records the
//! answer as the webhook's refund report would be: `failed` is a new failure (given back under the next key
//! on the next look), `succeeded` ends the question.
//!
//! Each run first reads the objects of events Stripe never made (`recheck`: a
//! `v2.core.health.event_generation_failure.resolved` the intake recorded), open payment or not, once each,
//! and applies what they say through the same finalize.

mod adyen;
mod recheck;

use payments_core::recovery::{
    after_read, canceled_expiry, expiry, recovery_step, unanswered, AfterRead, Held, NothingToAsk, RecoveryStep,
    Unasked,
};
use psp::pace::ScanRates;
use psp::stripe::Refund;
use psp::{GuardedAdyen, IntentStatus, PspError, PspRoute, PspSet, PspSetSettings, Psps, StripeApi};
use shared::clock;
use shared::lambda::{BuildError, Clients};
use shared::lease::{Lease, Leases};
use shared::store::open_index::{age_seconds, defer, due_items, next_due, OpenKind, MAX_RECHECK_INTERVAL};
use shared::store::{FinalizeOutcome, FinalizeResult, PaymentStore, StoreError};
use shared::telemetry::ErrorChain;
use shared::{
    Channel, Claims, Config, ConfigError, CorrelationId, Currency, Env, GiveBack, Observation, Outcome, Payment,
    PaymentId, PspName, PspReference, RefundEntry, RefundReport, RefundStatus,
};
use std::time::Duration;
use thiserror::Error;
use tracing::{info, warn};

#[derive(Debug, Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Psp(#[from] PspError),
}

/// What recovery did with one payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// The PSP's answer changed the payment.
    Applied(shared::EventKind),
    /// The PSP's answer is what we know already (still processing, or a duplicate).
    Unchanged,
    /// Another worker (webhook intake) holds the payment's lease: skipped this round.
    Busy,
    /// The payment has no PSP reference yet: nothing to ask the PSP about (backed off).
    NoReference,
    /// The payment belongs to a PSP recovery holds no client of, or its PSP does not know its reference:
    /// nothing to ask (backed off).
    NoClient,
    /// Nothing to ask past [`RecoverySettings::expire_after`]: recorded failed as expired.
    Expired,
    /// Already terminal (the index is eventually consistent): nothing to do.
    NotOpen,
    /// The PSP's answer was not about this payment (another PaymentIntent, amount or currency): an anomaly
    /// was recorded, nothing applied.
    Refused,
    /// The payment's PSP is deferred (its circuit breaker open, its key refused), now or earlier in the run:
    /// not asked this round, and backed off; the run goes on with the other PSPs' payments.
    Deferred,
    /// Past the age at a PSP without a status read (Adyen): its end (a cancel or reversal) was requested; the
    /// PSP's notification records it (backed off meanwhile).
    EndRequested,
    /// More refunds failed than recovery gives back ([`Payment::refund_for_operator`]): the PSP is not asked
    /// (nothing recovery may do moves the money), the payment is counted (`RefundsForOperator`, alarmed) and
    /// looked at again after [`OPERATOR_RECHECK`], until a person's refund makes it `refunded`.
    ForOperator,
    /// A `captured` payment whose capture failed at the card scheme ([`Payment::capture_lost`]): the money will
    /// not arrive unless the PSP captures again. Not asked (Adyen's notification tells the re-capture), counted
    /// (`CapturesFailed`, alarmed) and looked at again after [`OPERATOR_RECHECK`] while it lasts.
    CaptureLost,
}

/// How often recovery counts a payment that waits for a person ([`Reconciled::ForOperator`]): every half
/// hour, so each hour of `RefundsForOperator` (its alarm's period) has a datapoint while the payment waits,
/// and the alarm does not go quiet before someone acts.
pub const OPERATOR_RECHECK: Duration = Duration::from_secs(30 * 60);

/// Counts of one recovery run (also an EMF record).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub found: u32,
    pub applied: u32,
    pub unchanged: u32,
    pub busy: u32,
    pub no_reference: u32,
    /// Payments of a PSP recovery has no client of (or whose reference it does not know): not asked.
    pub no_client: u32,
    /// Payments with nothing to ask past the expiry age, recorded failed (`Expired`, alarmed).
    pub expired: u32,
    pub refused: u32,
    pub deferred: u32,
    /// Expired payments whose end was requested at a PSP without a status read (Adyen), awaiting its
    /// notification.
    pub end_requested: u32,
    /// Payments whose money only a person can return now ([`Reconciled::ForOperator`]): `RefundsForOperator`.
    pub for_operator: u32,
    /// Captured payments whose capture failed at the card scheme ([`Reconciled::CaptureLost`]): `CapturesFailed`.
    pub captures_lost: u32,
    pub errors: u32,
    /// Cut by the run's deadline (it and the payments not reached are the next run's).
    pub left: u32,
    /// `RecoveryLagSeconds`: how long the oldest due payment the run found has been due, in seconds (0 when
    /// none is due), from the index query the run makes anyway. Due is `RECOVERY_STALE_AFTER_SECONDS` after
    /// its opening or after its last back-off, which moves its sort key ahead (`open_index`); so it grows
    /// exactly when recovery stops getting through (a run that keeps failing, a back-off that does not
    /// persist, a backlog), which is what it is alarmed for. It says nothing of how long a payment is open:
    /// one the PSP keeps answering `processing` is backed off every run and is never due for long.
    pub lag_seconds: u64,
    /// `OldestOpenPaymentAgeSeconds`: the largest `now - created_at` over the payments the run read and left
    /// open, in seconds (0 when it read none). Every open payment is read at least every
    /// `MAX_RECHECK_INTERVAL` (6 h) plus one run while recovery gets through (else the lag alarms), so the
    /// maximum over any 6-hour window covers every open payment: what the open-payment alarm reads.
    pub oldest_open_age_seconds: u64,
    /// Objects Stripe failed to generate an event about, read once and applied (or found not ours).
    pub rechecked: u32,
    /// Objects Stripe failed to generate an event about that recovery could not read for good (Stripe does
    /// not know them, or their type is not one it reads): logged with the object for an operator, alarmed.
    pub rechecks_unread: u32,
}

impl RecoveryReport {
    /// Counts a payment created at `created_ms` that the run read and left open.
    fn saw_open(&mut self, created_ms: Option<i64>, now_ms: i64) {
        if let Some(created) = created_ms {
            self.oldest_open_age_seconds = self.oldest_open_age_seconds.max(age_seconds(created, now_ms));
        }
    }

    /// Counts one payment's outcome.
    fn count(&mut self, id: &PaymentId, reconciled: Result<Reconciled, RecoveryError>) {
        match reconciled {
            Ok(Reconciled::Applied(_)) => self.applied = self.applied.saturating_add(1),
            Ok(Reconciled::Unchanged | Reconciled::NotOpen) => self.unchanged = self.unchanged.saturating_add(1),
            Ok(Reconciled::Busy) => self.busy = self.busy.saturating_add(1),
            Ok(Reconciled::NoReference) => self.no_reference = self.no_reference.saturating_add(1),
            Ok(Reconciled::NoClient) => self.no_client = self.no_client.saturating_add(1),
            Ok(Reconciled::Expired) => self.expired = self.expired.saturating_add(1),
            Ok(Reconciled::Refused) => self.refused = self.refused.saturating_add(1),
            Ok(Reconciled::Deferred) => self.deferred = self.deferred.saturating_add(1),
            Ok(Reconciled::EndRequested) => self.end_requested = self.end_requested.saturating_add(1),
            Ok(Reconciled::ForOperator) => self.for_operator = self.for_operator.saturating_add(1),
            Ok(Reconciled::CaptureLost) => self.captures_lost = self.captures_lost.saturating_add(1),
            Err(e) => {
                self.errors = self.errors.saturating_add(1);
                warn!(payment_id = %id, error = %ErrorChain(&e), "recovery of one payment failed; retried after its back-off");
            }
        }
    }
}

/// Recovery's own settings (`RECOVERY_*`).
#[derive(Debug, Clone, Copy)]
pub struct RecoverySettings {
    /// A payment open for longer than this is asked about.
    pub stale_after: Duration,
    /// At most this many payments per run.
    pub batch_limit: usize,
    /// A payment recovery has nothing to ask about (see [`NothingToAsk`]) and open this long since its
    /// creation is recorded failed as expired.
    pub expire_after: Duration,
}

impl RecoverySettings {
    /// `RECOVERY_STALE_AFTER_SECONDS`, `RECOVERY_BATCH_LIMIT` and `RECOVERY_EXPIRE_AFTER_SECONDS`, else the
    /// defaults: the one reader of recovery's own settings, the reconciler's ([`Settings::from_env`]) and the
    /// checkout functions' alike.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let default = Self::default();
        Ok(Self {
            stale_after: env.seconds("RECOVERY_STALE_AFTER_SECONDS", default.stale_after)?,
            batch_limit: env.number("RECOVERY_BATCH_LIMIT", default.batch_limit)?,
            expire_after: env.seconds("RECOVERY_EXPIRE_AFTER_SECONDS", default.expire_after)?,
        })
    }
}

impl Default for RecoverySettings {
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(300),
            batch_limit: 200,
            expire_after: DEFAULT_EXPIRE_AFTER,
        }
    }
}

/// `RECOVERY_EXPIRE_AFTER_SECONDS`' default, 7 days: longer than any asynchronous payment method keeps a
/// payment open before its PSP reports the end (bank debits take days), short enough that an abandoned
/// payment does not hold its order for weeks.
pub const DEFAULT_EXPIRE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Recovery's state: built in one place ([`Recovery::new`]), by the reconciler ([`Recovery::build`]), the
/// checkout saga (which hands it the payments it gives up on) and the local stack.
pub struct Recovery<P> {
    /// The payments it finds and finalizes.
    pub store: PaymentStore,
    /// The payment leases it works under (the intake's too).
    pub leases: Leases,
    /// The PSPs' clients ([`Psps`]: a `PspSet`, or one Stripe client alone).
    pub psp: P,
    /// When a payment is due, how many per run, when one expires.
    pub settings: RecoverySettings,
}

/// The reconciler function's settings, read once per cold start: `TABLE_NAME` and the lease settings
/// ([`Config`]), each configured PSP's settings ([`PspSetSettings`]: Stripe's `PSP_BASE_URL`,
/// `PSP_API_KEY_ARN` or `PSP_API_KEY`, ...; Adyen's `ADYEN_BASE_URL`, `ADYEN_API_KEY_ARN` or
/// `ADYEN_API_KEY`, ...) paced for a scan ([`ScanRates`]: `PSP_SCAN_RATE_PER_SECOND`,
/// `ADYEN_SCAN_RATE_PER_SECOND`), and recovery's own ([`RecoverySettings`]: `RECOVERY_STALE_AFTER_SECONDS`,
/// `RECOVERY_BATCH_LIMIT`, `RECOVERY_EXPIRE_AFTER_SECONDS`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The table and the leases.
    pub config: Config,
    /// The PSPs recovery asks, each about its own payments only, each at most at its scan rate.
    pub psps: PspSetSettings,
    /// When a payment is due, how many per run, when one expires.
    pub recovery: RecoverySettings,
}

impl Settings {
    /// Reads the settings from `env` (see the type); a missing or malformed one fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            config: Config::from_env(env)?,
            psps: PspSetSettings::from_env(env)?.paced(&ScanRates::from_env(env)?),
            recovery: RecoverySettings::from_env(env)?,
        })
    }
}

impl<P> Recovery<P> {
    /// Recovery over `config`'s table (store and leases on `dynamodb`) asking `psp`: the one place it is put
    /// together.
    pub fn new(dynamodb: &aws_sdk_dynamodb::Client, config: &Config, psp: P, settings: RecoverySettings) -> Self {
        Self {
            store: PaymentStore::new(dynamodb.clone(), &config.table_name, config.open_shards),
            leases: Leases::new(dynamodb.clone(), &config.table_name, config.lease),
            psp,
            settings,
        }
    }
}

impl Recovery<PspSet> {
    /// The reconciler, built once per cold start from its settings on `clients` (the PSPs' keys read here).
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        let table = &settings.config.table_name;
        let psp = settings
            .psps
            .build(&clients.sdk, clients.dynamodb.clone(), table)
            .await?;
        Ok(Self::new(&clients.dynamodb, &settings.config, psp, settings.recovery))
    }

    /// One scheduled invocation: a run ([`Recovery::run`]), its counts written as metrics (EMF), and the
    /// answer the schedule's invocation records.
    pub async fn invoke(&self, deadline: tokio::time::Instant) -> Result<serde_json::Value, StoreError> {
        let report = self.run(deadline).await?;
        shared::metrics::emit(&emf(&report, clock::now_ms()));
        Ok(serde_json::json!({ "found": report.found, "applied": report.applied, "busy": report.busy }))
    }
}

impl<P: Psps> Recovery<P> {
    /// One scheduled run: every payment open for longer than `stale_after`, reconciled one by one until
    /// `deadline` (the invocation's): a reconciliation is cut there wherever it is (safe as after a crash: the
    /// lease expires, nothing half-written stays), and the payments not reached are the next run's.
    pub async fn run(&self, deadline: tokio::time::Instant) -> Result<RecoveryReport, StoreError> {
        let due_before = clock::now_ms().saturating_sub(millis(self.settings.stale_after));
        let due = due_items(
            self.store.client(),
            self.store.table(),
            self.store.open_shards(),
            OpenKind::Payment,
            due_before,
            self.settings.batch_limit,
        )
        .await?;
        let mut report = RecoveryReport {
            lag_seconds: due.lag_seconds(due_before),
            ..RecoveryReport::default()
        };
        let ids = due.keys.iter().filter_map(|key| {
            key.strip_prefix(shared::keys::PAYMENT_PK_PREFIX)
                .and_then(|id| PaymentId::parse(id).ok())
        });
        // Objects Stripe never told us about first: they are due at once, open payment or not.
        self.recheck_all(deadline, &mut report).await?;
        let mut seen = Seen::default();
        for id in ids {
            report.found = report.found.saturating_add(1);
            match self.reconcile_due(&id, deadline, &mut report, &mut seen).await {
                Turn::Next => {}
                Turn::Stop => break,
            }
        }
        Ok(report)
    }

    /// One due payment of [`Recovery::run`], counted in `report`: whether the run goes on. `seen` carries
    /// the PSPs a deferral stopped in this run across payments.
    async fn reconcile_due(
        &self,
        id: &PaymentId,
        deadline: tokio::time::Instant,
        report: &mut RecoveryReport,
        seen: &mut Seen,
    ) -> Turn {
        let correlation = CorrelationId::derived("recovery", &uuid::Uuid::new_v4().to_string());
        seen.open_since = None;
        seen.provider = None;
        let reconciled = tokio::time::timeout_at(deadline, self.reconcile_seen(id, correlation, seen)).await;
        report.saw_open(seen.open_since, clock::now_ms());
        let Ok(reconciled) = reconciled else {
            report.left = report.left.saturating_add(1);
            return Turn::Stop;
        };
        // Its PSP is down (breaker open, key refused): that PSP is not called again in this run, and the
        // payment backs off so it does not sit first in its shard; the other PSPs' payments go on.
        if let (Ok(Reconciled::Deferred), Some(provider)) = (&reconciled, &seen.provider) {
            seen.deferred.insert(provider.clone());
        }
        // A failure (the PSP's, the store's) or a deferral is not retried every run: due again after its
        // back-off, also when it failed before the payment was read (an item no release can read would else
        // be the first of its shard on every run).
        if matches!(reconciled, Ok(Reconciled::ForOperator | Reconciled::CaptureLost)) {
            self.recheck_for_operator(id).await;
        } else if matches!(reconciled, Err(_) | Ok(Reconciled::Deferred)) {
            match seen.open_since {
                Some(created_at_ms) => self.back_off(id, created_at_ms).await,
                None => self.back_off_unread(id).await,
            }
        }
        report.count(id, reconciled);
        Turn::Next
    }

    /// Asks the PSP about one payment and applies the answer, under the payment's lease. A failed payment
    /// whose money the PSP took anyway gets it back first ([`Recovery::give_back`]).
    pub async fn reconcile(&self, id: &PaymentId, correlation: CorrelationId) -> Result<Reconciled, RecoveryError> {
        self.reconcile_seen(id, correlation, &mut Seen::default()).await
    }

    /// [`Recovery::reconcile`], which also sets `seen`'s `open_since` to the payment's creation time when it
    /// read the payment and left it open (for `OldestOpenPaymentAgeSeconds`), also when it then fails or is
    /// cut, and its `provider`; a payment of a PSP in `seen.deferred` is not asked (deferred).
    async fn reconcile_seen(
        &self,
        id: &PaymentId,
        correlation: CorrelationId,
        seen: &mut Seen,
    ) -> Result<Reconciled, RecoveryError> {
        let Some(current) = self.read_open(id).await? else {
            return Ok(Reconciled::NotOpen);
        };
        // Boxed: the reconcile's future is deep (finalize, refunds, expiry), and every caller's async state
        // machine nests it; on the heap it is one pointer in theirs (the sweeper's would pass rustc's limit).
        let done = self
            .leased(&current, async |lease| {
                Box::pin(self.reconcile_leased(id, lease, correlation, seen)).await
            })
            .await?;
        Ok(done.unwrap_or(Reconciled::Busy))
    }

    /// `work` under `current`'s lease, taken at the version read; `None` when another worker holds it
    /// (skipped this round). `work` says whether its write freed the lease (the version moved past it); every
    /// other ending releases it here (and one cut at the run's deadline, when the held lease is dropped).
    async fn leased<T>(
        &self,
        current: &Payment,
        work: impl AsyncFnOnce(&Lease) -> Result<(T, bool), RecoveryError>,
    ) -> Result<Option<T>, RecoveryError> {
        let id = &current.id;
        let Some(lease) = self.leases.acquire(current).await? else {
            info!(payment_id = %id, "payment's lease is held (webhook intake at work); skipped this round");
            return Ok(None);
        };
        let held = self.leases.hold(lease);
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
    async fn read_open(&self, id: &PaymentId) -> Result<Option<Payment>, RecoveryError> {
        let current = self
            .store
            .get(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        Ok(current.is_open().then_some(current))
    }

    /// [`Recovery::reconcile`]'s work once the lease is held, on a fresh read (the one before the lease may
    /// predate a holder's write; the PSP is asked from what the payment is now); also says whether the lease
    /// was released.
    async fn reconcile_leased(
        &self,
        id: &PaymentId,
        lease: &Lease,
        correlation: CorrelationId,
        seen: &mut Seen,
    ) -> Result<(Reconciled, bool), RecoveryError> {
        let Some(current) = self.read_open(id).await? else {
            return Ok((Reconciled::NotOpen, false));
        };
        seen.open_since = Some(current.created_at_ms);
        seen.provider = Some(current.provider.clone());
        if current.refund_for_operator() {
            warn!(payment_id = %id, refunds_failed = current.refund_failures,
                  "refunds failed past the give-back bound: the money waits for a person's refund at the PSP");
            return Ok((Reconciled::ForOperator, false));
        }
        if current.capture_lost() {
            warn!(payment_id = %id, reason = current.capture_failed.as_deref(),
                  "the capture failed at the card scheme: the money will not arrive unless the PSP captures again");
            return Ok((Reconciled::CaptureLost, false));
        }
        if seen.deferred.contains(&current.provider) {
            return Ok((Reconciled::Deferred, false));
        }
        let open_since = &mut seen.open_since;
        // Only the payment's own PSP, through the client recovery holds of it (invariant 13).
        let route = self.psp.route(&current.provider);
        // Adyen has no refund to read back: what it owes is refunded there, its notification tells the end.
        // Boxed, like the whole reconcile: inline, its future would grow every caller's stack frame.
        if let PspRoute::Adyen(adyen) = route {
            let given = Box::pin(self.adyen_give_back(&current, adyen, lease, correlation.clone(), open_since));
            if let Some(done) = given.await? {
                return Ok(done);
            }
        }
        let client = match route {
            PspRoute::Missing(_) => None,
            PspRoute::Stripe(_) | PspRoute::Adyen(_) => Some(current.provider.clone()),
        };
        let step = recovery_step(&current, client.as_ref(), clock::now_ms(), self.expire_after());
        let (psp, reference) = match (step, route) {
            (RecoveryStep::Ask(reference), PspRoute::Stripe(psp)) => (psp, reference),
            (RecoveryStep::EndAtPsp(reference), PspRoute::Adyen(adyen)) => {
                return self.end_at_psp(&current, reference, adyen).await;
            }
            (RecoveryStep::Unasked(step), _) => {
                return self.unasked(current, step, lease, correlation, open_since).await
            }
            // The core asks a Stripe client and ends at an Adyen one only: a client speaking another PSP's API
            // than its name says has nothing to ask.
            (RecoveryStep::Ask(_) | RecoveryStep::EndAtPsp(_), _) => {
                let step = unanswered(&current, NothingToAsk::NoClient, clock::now_ms(), self.expire_after());
                return self.unasked(current, step, lease, correlation, open_since).await;
            }
        };
        let asked = Asked {
            psp,
            current,
            reference,
            lease,
            correlation,
        };
        if let Some(done) = self.settle_money(&asked, open_since).await? {
            return Ok(done);
        }
        self.ask(asked, open_since).await
    }

    /// `RECOVERY_EXPIRE_AFTER_SECONDS` in milliseconds.
    fn expire_after(&self) -> i64 {
        millis(self.settings.expire_after)
    }

    /// The money questions of a payment asked about, before its status: money taken after it failed is given
    /// back, a refund last heard `pending` is read back, what failed refunds left is given back again. `Some`
    /// when one of them ended this look.
    async fn settle_money(
        &self,
        asked: &Asked<'_, P::Stripe>,
        open_since: &mut Option<i64>,
    ) -> Result<Option<(Reconciled, bool)>, RecoveryError> {
        let (psp, current, reference, lease) = (asked.psp, &asked.current, &asked.reference, asked.lease);
        if let Some(anomaly) = current.refund_due() {
            match give_back(psp, current, reference, anomaly).await {
                Ok(()) => {}
                Err(e) if e.is_deferred() => return Ok(Some((Reconciled::Deferred, false))),
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(done) = self
            .read_back_pending_refund(psp, current, lease, asked.correlation.clone(), open_since)
            .await?
        {
            return Ok(Some(done));
        }
        match current.give_back {
            Some(give_back) => self
                .give_back_failed_refund(asked, give_back, open_since)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// Reads the payment's PaymentIntent and records what it says; past the age, one still open at the PSP is
    /// canceled there first ([`after_read`]).
    async fn ask(
        &self,
        asked: Asked<'_, P::Stripe>,
        open_since: &mut Option<i64>,
    ) -> Result<(Reconciled, bool), RecoveryError> {
        let Asked {
            psp,
            current,
            reference,
            lease,
            correlation,
        } = asked;
        let intent = match psp.retrieve(&reference).await {
            Ok(intent) => intent,
            Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
            // Its PSP does not know the reference (another account's, a caller's typo): asking again tells
            // nothing, so it waits and expires like a payment with nothing to ask.
            Err(e @ PspError::Refused { .. }) => {
                warn!(payment_id = %current.id, error = %ErrorChain(&e), "the PSP does not know the payment's reference");
                let step = unanswered(
                    &current,
                    NothingToAsk::UnknownToPsp,
                    clock::now_ms(),
                    self.expire_after(),
                );
                return self.unasked(current, step, lease, correlation, open_since).await;
            }
            Err(e) => return Err(e.into()),
        };
        // An authorization is released for its lapse, never for its age (`capture_before`, the core's `Held`).
        let held = (intent.status == IntentStatus::RequiresCapture).then(|| Held {
            until_ms: intent.capture_before_ms(),
        });
        match after_read(
            &current,
            intent.status.state(),
            held,
            clock::now_ms(),
            self.expire_after(),
        ) {
            AfterRead::Apply => {
                self.record(current, &intent, Read::Asked, lease, correlation, open_since)
                    .await
            }
            AfterRead::CancelExpired => {
                let Some(canceled) = cancel_expired(psp, &current, &reference).await? else {
                    return Ok((Reconciled::Deferred, false));
                };
                self.record(current, &canceled, Read::Canceled, lease, correlation, open_since)
                    .await
            }
        }
    }

    /// Ends at Adyen, which has no status to read, a payment past the age (key `<payment>:expire`): a
    /// reversal of its pspReference (cancel, or refund what was captured), or a cancel by our own reference
    /// when its pspReference never reached us. Adyen answers `received`; the notification
    /// (`CANCELLATION`, `CANCEL_OR_REFUND`, `TECHNICAL_CANCEL`) records the end through the intake. Until it
    /// comes the payment stays open and backed off, and the request is sent again under the same key (Adyen
    /// replays its answer), until the core expires it ([`NothingToAsk::EndUnanswered`]): the loop ends.
    async fn end_at_psp(
        &self,
        current: &Payment,
        reference: Option<PspReference>,
        adyen: &GuardedAdyen,
    ) -> Result<(Reconciled, bool), RecoveryError> {
        let key = format!("{}:expire", current.id);
        let sent = match &reference {
            Some(reference) => adyen.reverse(&key, reference).await,
            None => adyen.cancel_by_reference(&key, &current.id).await,
        };
        let reconciled = match sent {
            Ok(modification) => {
                info!(payment_id = %current.id, modification = %modification.psp_reference,
                      "expired payment's end requested at Adyen; its notification records it");
                Reconciled::EndRequested
            }
            Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
            // Refused for good (no such payment, a validation error): sending it again tells nothing new, and
            // the payment expires here when the wait for a notification is over.
            Err(e @ PspError::Refused { .. }) => {
                warn!(payment_id = %current.id, error = %ErrorChain(&e), "Adyen refused to end the expired payment");
                Reconciled::Refused
            }
            Err(e) => return Err(e.into()),
        };
        self.back_off(&current.id, current.created_at_ms).await;
        Ok((reconciled, false))
    }

    /// Records `intent` (as read, or as the expiring cancel left it) through the finalize: nothing new is
    /// backed off, an answer about another PaymentIntent is an anomaly, a cancel that failed the payment is
    /// counted as expired.
    async fn record(
        &self,
        current: Payment,
        intent: &psp::PaymentIntent,
        read: Read,
        lease: &Lease,
        correlation: CorrelationId,
        open_since: &mut Option<i64>,
    ) -> Result<(Reconciled, bool), RecoveryError> {
        let id = current.id.clone();
        let Some(mut observation) = intent
            .observation(Channel::Recovery, correlation)
            .map_err(|e| PspError::BadAnswer(e.into()))?
        else {
            info!(payment_id = %id, psp_status = intent.status.as_str(), "PSP status changes nothing");
            self.back_off(&current.id, current.created_at_ms).await;
            return Ok((Reconciled::Unchanged, false));
        };
        let now_ms = clock::now_ms();
        if read == Read::Canceled {
            observation = canceled_expiry(&current, observation, now_ms);
        }
        observation.occurred_at_ms = Some(now_ms.div_euclid(1000).saturating_mul(1000));
        let outcome = self.store.finalize_from(current, &observation, Some(lease)).await?;
        if !outcome.payment.is_open() {
            *open_since = None;
        }
        if let Some(reason) = &outcome.refused {
            warn!(payment_id = %id, reason, "PSP answer is not about this payment: anomaly recorded, not applied");
            self.back_off(&outcome.payment.id, outcome.payment.created_at_ms).await;
            return Ok((Reconciled::Refused, outcome.lease_released));
        }
        if matches!(outcome.result, FinalizeResult::Ignored(_)) && outcome.payment.is_open() {
            self.back_off(&outcome.payment.id, outcome.payment.created_at_ms).await;
        }
        info!(payment_id = %id, result = ?outcome.result, psp_status = intent.status.as_str(), "payment reconciled");
        let reconciled = match (read, outcome.result) {
            (Read::Canceled, FinalizeResult::Applied(shared::EventKind::PaymentFailed)) => Reconciled::Expired,
            (_, FinalizeResult::Applied(kind)) => Reconciled::Applied(kind),
            (_, FinalizeResult::Ignored(_) | FinalizeResult::Deferred(_)) => Reconciled::Unchanged,
        };
        Ok((reconciled, outcome.lease_released))
    }

    /// The payment stays open and asking again soon would tell nothing new: it is due again later and later
    /// (see `open_index::next_due`), so it costs fewer reads and never crowds out the others. Best effort: if
    /// the write fails, the payment is simply looked at on the next run.
    async fn back_off(&self, id: &PaymentId, created_at_ms: i64) {
        let due = next_due(
            created_at_ms,
            clock::now_ms(),
            millis(self.settings.stale_after),
            millis(MAX_RECHECK_INTERVAL),
        );
        let key = shared::keys::payment(id);
        if let Err(e) = defer(self.store.client(), self.store.table(), key, due).await {
            warn!(payment_id = %id, error = %ErrorChain(&e), "could not defer the payment's next check");
        }
    }

    /// Makes a payment that waits for a person due again after [`OPERATOR_RECHECK`] (not on the doubling
    /// schedule, whose 6-hour steps would leave hours of its alarm without a datapoint).
    async fn recheck_for_operator(&self, id: &PaymentId) {
        let due = clock::now_ms()
            .saturating_add(millis(OPERATOR_RECHECK))
            .saturating_sub(millis(self.settings.stale_after));
        if let Err(e) = defer(self.store.client(), self.store.table(), shared::keys::payment(id), due).await {
            warn!(payment_id = %id, error = %ErrorChain(&e), "could not defer the payment's next check");
        }
    }

    /// [`Recovery::back_off`] for a payment whose reconcile failed before it was read: the schedule is counted
    /// from the item's `created_at_ms` as stored (read alone, so a payment that cannot be read whole is still
    /// backed off); if even that cannot be read, it is due again after the longest interval.
    async fn back_off_unread(&self, id: &PaymentId) {
        match created_at(self.store.client(), self.store.table(), id).await {
            Ok(Some(created_at_ms)) => self.back_off(id, created_at_ms).await,
            unread => {
                if let Err(e) = &unread {
                    warn!(payment_id = %id, error = %ErrorChain(e), "could not read the payment's creation time");
                }
                let due = clock::now_ms()
                    .saturating_add(millis(MAX_RECHECK_INTERVAL))
                    .saturating_sub(millis(self.settings.stale_after));
                if let Err(e) = defer(self.store.client(), self.store.table(), shared::keys::payment(id), due).await {
                    warn!(payment_id = %id, error = %ErrorChain(&e), "could not defer the payment's next check");
                }
            }
        }
    }

    /// A payment recovery asks nobody about: backed off ([`Unasked::Wait`]), or recorded failed as expired
    /// through the finalize, which frees the lease with its write ([`Unasked::Expire`]).
    async fn unasked(
        &self,
        current: Payment,
        step: Unasked,
        lease: &Lease,
        correlation: CorrelationId,
        open_since: &mut Option<i64>,
    ) -> Result<(Reconciled, bool), RecoveryError> {
        let why = match step {
            Unasked::Expire(why) => why,
            Unasked::Wait(why) => {
                self.back_off(&current.id, current.created_at_ms).await;
                return Ok((nothing_to_ask(why), false));
            }
        };
        let observation = expiry(&current, why, clock::now_ms(), correlation);
        let outcome = self.store.finalize_from(current, &observation, Some(lease)).await?;
        warn!(payment_id = %outcome.payment.id, result = ?outcome.result, provider = %outcome.payment.provider,
              reason = ?outcome.payment.reason, "payment expired: nothing to ask its PSP");
        if !outcome.payment.is_open() {
            *open_since = None;
        }
        let reconciled = match outcome.result {
            FinalizeResult::Applied(shared::EventKind::PaymentFailed) => Reconciled::Expired,
            _ => reconciled(&outcome),
        };
        Ok((reconciled, outcome.lease_released))
    }

    /// Reads back, by id, each refund `current` last heard was pending (its webhooks may be lost): the first
    /// whose status moved is recorded through finalize as that refund's report, as the webhook's would be.
    /// `None` when every one is still pending (the look goes on).
    async fn read_back_pending_refund(
        &self,
        psp: &P::Stripe,
        current: &Payment,
        lease: &Lease,
        correlation: CorrelationId,
        open_since: &mut Option<i64>,
    ) -> Result<Option<(Reconciled, bool)>, RecoveryError> {
        for entry in current.pending_refunds() {
            let refund = match psp.retrieve_refund(&entry.refund_id).await {
                Ok(refund) => refund,
                Err(e) if e.is_deferred() => return Ok(Some((Reconciled::Deferred, false))),
                // Stripe does not know it (not this account's): asking again tells nothing; the rest goes on.
                Err(e @ PspError::Refused { .. }) => {
                    warn!(payment_id = %current.id, refund_id = %entry.refund_id, error = %ErrorChain(&e),
                          "pending refund cannot be read back");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if refund.status == entry.status.as_str() {
                continue;
            }
            let observation = refund_observation(&refund, Channel::Recovery, None, correlation)
                .map_err(|e| PspError::BadAnswer(e.into()))?;
            let outcome = self
                .store
                .finalize_from(current.clone(), &observation, Some(lease))
                .await?;
            info!(payment_id = %current.id, refund_id = %refund.id, status = %refund.status,
                  result = ?outcome.result, "pending refund read back");
            if !outcome.payment.is_open() {
                *open_since = None;
            }
            return Ok(Some((reconciled(&outcome), outcome.lease_released)));
        }
        Ok(None)
    }

    /// Gives back what failed refunds left (see the module doc): a refund of the give-back's amount under its
    /// failure's key, the answer recorded through finalize as the report answering that give-back. A refusal
    /// (the charge disputed, nothing left) is not retried sooner than the back-off: the payment stays open,
    /// and its age alarms, for an operator.
    async fn give_back_failed_refund(
        &self,
        asked: &Asked<'_, P::Stripe>,
        give_back: GiveBack,
        open_since: &mut Option<i64>,
    ) -> Result<(Reconciled, bool), RecoveryError> {
        let (psp, current, reference) = (asked.psp, &asked.current, &asked.reference);
        // The PaymentIntent's refunds first: one the payment has not recorded (an earlier give-back whose
        // answer and webhooks were lost) is recorded and ends this look, so a key Stripe forgot after a day
        // never makes that give-back twice (found by the protocol model, `refund_owner`).
        let listed = match psp.list_refunds(reference).await {
            Ok(listed) => listed,
            Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
            Err(e) => return Err(e.into()),
        };
        if let Some(missed) = unrecorded(current, &listed).first() {
            warn!(payment_id = %current.id, refund_id = %missed.id, status = %missed.status,
                  "a refund Stripe made that the payment had not recorded: recorded before any give-back");
            let observation = refund_observation(missed, Channel::Recovery, None, asked.correlation.clone())
                .map_err(|e| PspError::BadAnswer(e.into()))?;
            let outcome = self
                .store
                .finalize_from(current.clone(), &observation, Some(asked.lease))
                .await?;
            return Ok(self.after_give_back(&outcome, open_since).await);
        }
        let key = payments_core::give_back_key(&current.id, give_back.failure);
        let refund = match psp.refund(&key, reference, Some(give_back.amount_minor)).await {
            Ok(refund) => refund,
            Err(e) if e.is_deferred() => return Ok((Reconciled::Deferred, false)),
            // Refused for good (nothing left on the charge: a refund made by hand whose webhook was lost; a
            // disputed charge): the give-back's attempt is spent, recorded as failed under `refused:<key>`, so
            // the next look gives back the next failure's and, past MAX_GIVE_BACKS, the payment waits for a
            // person (`Reconciled::ForOperator`): the same refused call is never made on every look.
            Err(e @ PspError::Refused { .. }) => {
                warn!(payment_id = %current.id, failure = give_back.failure, error = %ErrorChain(&e),
                      "giving back a failed refund was refused: recorded as that give-back's failed attempt");
                Refund {
                    id: format!("refused:{key}"),
                    amount: give_back.amount_minor,
                    currency: current.money.currency().as_str().to_ascii_lowercase(),
                    status: RefundStatus::Failed.as_str().to_owned(),
                    payment_intent: Some(reference.to_string()),
                    charge: None,
                }
            }
            Err(e) => return Err(e.into()),
        };
        let observation = refund_observation(
            &refund,
            Channel::Recovery,
            Some(give_back.failure),
            asked.correlation.clone(),
        )
        .map_err(|e| PspError::BadAnswer(e.into()))?;
        let outcome = self
            .store
            .finalize_from(current.clone(), &observation, Some(asked.lease))
            .await?;
        warn!(payment_id = %outcome.payment.id, refund_id = %refund.id, status = %refund.status,
              failure = give_back.failure, result = ?outcome.result, "failed refund given back again");
        Ok(self.after_give_back(&outcome, open_since).await)
    }

    /// The end of a give-back look that wrote `outcome`: a payment still open backs off, a closed one is no
    /// longer counted open.
    async fn after_give_back(&self, outcome: &FinalizeOutcome, open_since: &mut Option<i64>) -> (Reconciled, bool) {
        if outcome.payment.is_open() {
            self.back_off(&outcome.payment.id, outcome.payment.created_at_ms).await;
        } else {
            *open_since = None;
        }
        (reconciled(outcome), outcome.lease_released)
    }
}

/// The refunds of `listed` (a PaymentIntent's, as Stripe lists them) that `payment` has not recorded as they
/// stand: what a read of the PSP's refunds adds before anyone refunds again (the saga's refund step,
/// recovery's give-back), so nobody makes again a refund whose answer and webhooks were lost.
pub fn unrecorded<'a>(payment: &Payment, listed: &'a [Refund]) -> Vec<&'a Refund> {
    listed
        .iter()
        .filter(|r| {
            !payment
                .refunds
                .iter()
                .any(|k| k.refund_id == r.id && k.status.as_str() == r.status)
        })
        .collect()
}

/// The payment item's `created_at_ms` alone (`None` when it has none or it is not a number).
async fn created_at(client: &aws_sdk_dynamodb::Client, table: &str, id: &PaymentId) -> Result<Option<i64>, StoreError> {
    let item = client
        .get_item()
        .table_name(table)
        .set_key(Some(shared::keys::payment(id)))
        .projection_expression("created_at_ms")
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("read payment creation time", e))?;
    Ok(item.item.and_then(|i| {
        i.get("created_at_ms")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
    }))
}

/// Cancels at the PSP a PaymentIntent still open past the age (key `<payment>:expire`), and answers it as
/// it then stands: canceled, or as the refusal carries it when it moved meanwhile (a success is then
/// recorded, not an expiry). `None` when the call was deferred (breaker open, key refused).
async fn cancel_expired(
    psp: &impl StripeApi,
    current: &Payment,
    reference: &PspReference,
) -> Result<Option<psp::PaymentIntent>, RecoveryError> {
    let key = format!("{}:expire", current.id);
    match psp.cancel(&key, reference).await {
        Ok(intent) => Ok(Some(intent)),
        Err(e) if e.is_deferred() => Ok(None),
        Err(refused) => match refused.payment_intent().cloned() {
            Some(intent) => {
                info!(payment_id = %current.id, psp_status = intent.status.as_str(),
                      "expiring cancel refused: the PaymentIntent moved meanwhile");
                Ok(Some(intent))
            }
            None => Err(refused.into()),
        },
    }
}

/// Refunds money the PSP took on a payment we had failed: all that is left on the charge, with the key
/// `<payment>:anomaly-<n>:refund`, the same on every run, so a retry never refunds twice. The caller then
/// reads the PaymentIntent back, whose charge's refunded total records the refund on the payment.
async fn give_back(
    psp: &impl StripeApi,
    payment: &Payment,
    reference: &PspReference,
    anomaly: u32,
) -> Result<(), PspError> {
    let key = payments_core::stray_refund_key(&payment.id, anomaly);
    match psp.refund(&key, reference, None).await {
        Ok(refund) => {
            warn!(payment_id = %payment.id, refund_id = %refund.id, status = %refund.status, anomaly,
                  "money taken after the payment failed: refunded");
            Ok(())
        }
        // Nothing left to refund (the charge was refunded meanwhile): the read-back records what happened.
        Err(PspError::Refused { .. }) => {
            warn!(payment_id = %payment.id, anomaly, "refund of money taken after failure refused; reading back");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A payment recovery asks its PSP about, with what the look needs.
struct Asked<'a, S> {
    /// The payment's PSP's client (Stripe's).
    psp: &'a S,
    current: Payment,
    reference: PspReference,
    lease: &'a Lease,
    correlation: CorrelationId,
}

/// Where the PaymentIntent recorded came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Read as it stands.
    Asked,
    /// Answered by recovery's cancel of an expired payment.
    Canceled,
}

/// What a run learnt of the payment it reconciles now, and the PSPs it stopped calling.
#[derive(Debug, Default)]
struct Seen {
    /// The payment's creation time, when it was read and left open.
    open_since: Option<i64>,
    /// The payment's PSP, once read.
    provider: Option<PspName>,
    /// The PSPs a deferral (breaker open, key refused) stopped in this run: their payments are not asked.
    deferred: std::collections::HashSet<PspName>,
}

/// Whether a run goes on after a payment.
enum Turn {
    Next,
    Stop,
}

/// How a payment with nothing to ask (`why`) is counted.
fn nothing_to_ask(why: NothingToAsk) -> Reconciled {
    match why {
        NothingToAsk::NoReference => Reconciled::NoReference,
        NothingToAsk::NoClient
        | NothingToAsk::UnknownToPsp
        | NothingToAsk::NoStatusRead
        | NothingToAsk::EndUnanswered => Reconciled::NoClient,
    }
}

/// What recording a refund's answer did to the payment.
fn reconciled(outcome: &FinalizeOutcome) -> Reconciled {
    match outcome.result {
        _ if outcome.refused.is_some() => Reconciled::Refused,
        FinalizeResult::Applied(kind) => Reconciled::Applied(kind),
        FinalizeResult::Ignored(_) | FinalizeResult::Deferred(_) => Reconciled::Unchanged,
    }
}

/// A refund as the PSP answered the call that made it (recovery's give-back, the saga's compensation), as
/// `path`'s refund report (answering the give-back of failure `answers_give_back`, if it is one), stamped with
/// the query's time (to the second, as the PSP's own). Its amount is its own, not a claim on the payment's;
/// its currency and PaymentIntent are checked.
pub fn refund_observation(
    refund: &Refund,
    path: Channel,
    answers_give_back: Option<u32>,
    correlation: CorrelationId,
) -> Result<Observation, String> {
    let status =
        RefundStatus::parse(&refund.status).ok_or_else(|| format!("unknown refund status {:?}", refund.status))?;
    let report = RefundReport {
        refund: RefundEntry {
            refund_id: refund.id.clone(),
            amount_minor: refund.amount,
            status,
        },
        failure_reason: None,
        answers_give_back,
    };
    read_observation(
        path,
        Outcome::Refund(report),
        refund.payment_intent.as_deref(),
        &refund.currency,
        correlation,
    )
}

/// An object read at the PSP (a refund, a dispute) as `path`'s observation of `outcome`: found by its
/// PaymentIntent (none: not ours, nothing to find), its currency a claim on the payment's (its amount is its
/// own, no claim), stamped with the query's time (to the second, as the PSP's own).
pub(crate) fn read_observation(
    path: Channel,
    outcome: Outcome,
    payment_intent: Option<&str>,
    currency: &str,
    correlation: CorrelationId,
) -> Result<Observation, String> {
    let mut observation = Observation::new(path, outcome, correlation);
    observation.psp_reference = payment_intent
        .map(PspReference::parse)
        .transpose()
        .map_err(|e| e.to_string())?;
    observation.claims = Claims {
        amount_minor: None,
        currency: Some(Currency::parse(currency).map_err(|e| e.to_string())?),
    };
    observation.occurred_at_ms = Some(clock::now_ms().div_euclid(1000).saturating_mul(1000));
    Ok(observation)
}

/// Namespace of the reconciler's metrics.
pub const NAMESPACE: &str = "Payments/Recovery";

/// The reconciler's EMF record, one per run: its counts, `RecoveryLagSeconds`, `OldestOpenPaymentAgeSeconds`
/// and `RefundsForOperator` (alarmed; see [`RecoveryReport`]).
pub fn emf(r: &RecoveryReport, now_ms: i64) -> serde_json::Value {
    shared::metrics::emf(
        NAMESPACE,
        &[&[]],
        &[
            ("Found", "Count"),
            ("Applied", "Count"),
            ("Unchanged", "Count"),
            ("Busy", "Count"),
            ("NoReference", "Count"),
            ("NoClient", "Count"),
            ("Expired", "Count"),
            ("Refused", "Count"),
            ("Deferred", "Count"),
            ("EndRequested", "Count"),
            ("RefundsForOperator", "Count"),
            ("CapturesFailed", "Count"),
            ("Errors", "Count"),
            ("RecoveryLagSeconds", "Seconds"),
            ("OldestOpenPaymentAgeSeconds", "Seconds"),
            ("Rechecked", "Count"),
            ("RechecksUnread", "Count"),
        ],
        serde_json::json!({
            "Found": r.found, "Applied": r.applied, "Unchanged": r.unchanged, "Busy": r.busy,
            "NoReference": r.no_reference, "NoClient": r.no_client,
            "Expired": r.expired, "Refused": r.refused, "Deferred": r.deferred, "EndRequested": r.end_requested,
            "RefundsForOperator": r.for_operator, "CapturesFailed": r.captures_lost, "Errors": r.errors,
            "Left": r.left, "RecoveryLagSeconds": r.lag_seconds,
            "OldestOpenPaymentAgeSeconds": r.oldest_open_age_seconds,
            "Rechecked": r.rechecked, "RechecksUnread": r.rechecks_unread,
        }),
        now_ms,
    )
}
