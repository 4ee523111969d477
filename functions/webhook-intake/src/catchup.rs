//! The webhook catch-up (binary `webhook-catchup`, on a schedule): reads Stripe's Events API and applies
//! each event exactly as the intake applies its webhook, so an event whose webhook was lost (an outage of
//! ours longer than Stripe's retries, a disabled endpoint, a refund made in the Dashboard while the endpoint
//! was down) is applied anyway. Dedup by event id makes every event the webhook already applied a
//! `duplicate` answered from one read.
//!
//! **What it reads.** `GET /v1/events` with `types[]` = [`SUBSCRIBED_TYPES`], `created[gte]` = the cursor
//! less [`CatchUpSettings::overlap`] (events appear in the list a little after their `created`), and
//! `created[lte]` = now less [`CatchUpSettings::settle`] (a young event is left to its webhook). Stripe lists
//! newest first, so a pass reads from its upper bound down to the cursor, page after page with
//! `starting_after` = the last event of the page before; the events read are then applied oldest first, as
//! they were sent. When the last page is read and applied, the cursor moves to the pass's upper bound.
//!
//! **Bounded.** At most [`CatchUpSettings::max_pages`] pages per run, and no new page or event once the
//! invocation's deadline is near. A pass cut by the page bound saves where it stopped (its upper bound and
//! the oldest event read) and the next run goes on from there, older, so a backlog of any size is read in
//! bounded runs (across runs a backlog is applied newest part first: the decision takes events in any
//! order, as it takes reordered webhooks). An event the intake would answer 503 (its payment's lease held,
//! its payment not written yet, storage down) does not stop the run: the later events are applied, and a
//! complete pass saves its place before the oldest deferred event (its `created`), so the next run reads it
//! again (the events after it are duplicates then); a pass cut by its bound with a deferred event, or a run
//! cut by its deadline, saves nothing: the next run reads the same events again.
//!
//! **Adyen's parked items.** Each run then retries the Adyen items the intake accepted but could not apply
//! yet (`crate::adyen::retry`): Adyen has no events API to catch up from, so what its webhooks bring is kept
//! until applied or, after its deadline, quarantined.
//!
//! **Without Stripe.** A deployment whose `WEBHOOK_PROVIDERS` names no Stripe provider (only Adyen, or only
//! Standard Webhooks endpoints) runs the job all the same, with no PSP setting: it reads no events list
//! ([`CatchUp::stripe`] is `None`) and only retries the parked Adyen items, if there is an Adyen provider.
//!
//! **The EventBridge way in.** With `STRIPE_EVENT_SOURCE` set, each run first reports whether the partner
//! event source is active (`source`: `EventSourceActive`, alarmed); a failed question never stops the run.
//!
//! **What it cannot see.** Stripe keeps events for 30 days: a cursor older than that starts at the oldest
//! event Stripe still lists, and what was older is gone (recovery still asks about open payments).

mod cursor;
pub mod source;

pub use cursor::{Cursor, CursorStore, Pass, NAME as CURSOR_NAME};
pub use source::SourceWatch;

use crate::metrics::RequestMetrics;
use crate::providers::{Provider, ProviderSpec, Scheme};
use crate::stripe::SUBSCRIBED_TYPES;
use crate::{apply_fetched, Answer, App, IntakeSettings};
use psp::pace::ScanRates;
use psp::stripe::EventQuery;
use psp::{GuardedStripe, PspError, StripeSettings};
use serde::Serialize;
use shared::lambda::{BuildError, Clients};
use shared::telemetry::ErrorChain;
use shared::{clock, Config, ConfigError, Env, StoreError};
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;
use tracing::{info, warn};

/// How long Stripe keeps events listed.
pub const RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How far back, how much and how young.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpSettings {
    /// `CATCHUP_OVERLAP_SECONDS` (600): each pass reads this much before the cursor again.
    pub overlap: Duration,
    /// `CATCHUP_SETTLE_SECONDS` (60): events younger than this are left to their webhooks.
    pub settle: Duration,
    /// `CATCHUP_MAX_PAGES` (10): pages of 100 events per run.
    pub max_pages: u32,
    /// `CATCHUP_FIRST_LOOK_BACK_SECONDS` (3 days, Stripe's retry window): the first run's reach.
    pub first_look_back: Duration,
    /// No new page with less than this left before the deadline (a page can take the PSP client's retries).
    pub page_budget: Duration,
    /// Events per page (Stripe's most: 100).
    pub page_size: u8,
}

impl Default for CatchUpSettings {
    fn default() -> Self {
        Self {
            overlap: Duration::from_secs(600),
            settle: Duration::from_secs(60),
            max_pages: 10,
            first_look_back: Duration::from_secs(3 * 24 * 3600),
            page_budget: Duration::from_secs(8),
            page_size: 100,
        }
    }
}

impl CatchUpSettings {
    /// From the environment (names above); a malformed value fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            overlap: env.seconds("CATCHUP_OVERLAP_SECONDS", d.overlap)?,
            settle: env.seconds("CATCHUP_SETTLE_SECONDS", d.settle)?,
            max_pages: env.number("CATCHUP_MAX_PAGES", d.max_pages)?,
            first_look_back: env.seconds("CATCHUP_FIRST_LOOK_BACK_SECONDS", d.first_look_back)?,
            page_budget: d.page_budget,
            page_size: d.page_size,
        })
    }
}

/// The catch-up function's settings, read once per cold start: `TABLE_NAME` and the lease settings, the
/// providers of `WEBHOOK_PROVIDERS` (no secret needed), with a Stripe provider the PSP's settings (`PSP_*`),
/// the intake's and the catch-up's own settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The table and the leases.
    pub config: Config,
    /// The Stripe provider (its endpoint checks) and the PSP's settings, paced at `PSP_SCAN_RATE_PER_SECOND`
    /// ([`ScanRates`]); `None` without a Stripe provider.
    pub stripe: Option<(Provider, StripeSettings)>,
    /// The Adyen provider whose parked items each run retries, if one is configured.
    pub adyen: Option<Provider>,
    /// The intake's settings, which its steps read.
    pub intake: IntakeSettings,
    /// The catch-up's own bounds.
    pub catch_up: CatchUpSettings,
    /// `STRIPE_EVENT_SOURCE`, when Stripe's events also come through EventBridge: the partner event source
    /// whose state each run reports ([`SourceWatch`]).
    pub event_source: Option<String>,
}

impl Settings {
    /// Reads the settings from `env` (see the type); a missing or malformed one fails the start.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let specs = ProviderSpec::from_env(env).map_err(|e| ConfigError::Invalid {
            name: "WEBHOOK_PROVIDERS",
            expected: "JSON list of providers",
            value: e.to_string(),
        })?;
        let find = |scheme| {
            specs
                .iter()
                .find(|spec| spec.scheme == scheme)
                .map(ProviderSpec::unsigned)
        };
        let stripe = match find(Scheme::Stripe) {
            Some(provider) => {
                // A scanner: the events list and the reads it leads to keep to the scan rate.
                let mut psp = StripeSettings::from_env(env)?;
                psp.scan_rate = Some(ScanRates::stripe_from(env)?);
                Some((provider, psp))
            }
            None => {
                info!("WEBHOOK_PROVIDERS names no Stripe provider: no events list to catch up");
                None
            }
        };
        Ok(Self {
            config: Config::from_env(env)?,
            stripe,
            adyen: find(Scheme::Adyen),
            intake: IntakeSettings::from_env(env)?,
            catch_up: CatchUpSettings::from_env(env)?,
            event_source: env.optional("STRIPE_EVENT_SOURCE"),
        })
    }
}

/// What stopped a run that could not go on.
#[derive(Debug, Error)]
pub enum CatchUpError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stripe refused the list (a key or parameter problem): a deployment fault, alarmed by the Errors alarm.
    #[error("the PSP refused the events list")]
    Psp(#[source] PspError),
    /// An event the intake could not apply for a reason a retry does not fix.
    #[error("event {event}: {message}")]
    Event { event: String, message: String },
}

/// What one run did (its answer and its log line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CatchUpReport {
    pub pages: u32,
    pub events: u32,
    /// Events applied now: their webhooks were lost (or are late).
    pub applied: u32,
    /// Already applied (by their webhook), stale, ignored, quarantined or parked: the intake's other answers.
    pub unchanged: u32,
    /// The intake would answer 503 (lease held, payment not written yet, storage down): left to a later run,
    /// the run went on with the next events.
    pub deferred: u32,
    /// The pass read its last page: the cursor moved to its upper bound.
    pub pass_complete: bool,
    /// The PSP was unavailable (or the breaker open): the run stopped early.
    pub psp_unavailable: bool,
    /// Another run saved the cursor first: this run's position was not saved.
    pub cursor_lost: bool,
    /// The Adyen items parked for the retry, retried after the catch-up (when an Adyen provider is configured).
    pub adyen_retry: Option<crate::adyen::retry::RetryReport>,
    /// The Stripe partner event source's state (`ACTIVE`, `PENDING`, `DELETED`, `UNKNOWN` when the question
    /// failed), when the EventBridge way in is configured.
    pub event_source_state: Option<String>,
}

/// Stripe's part of the job: its provider as the intake knows it (its endpoint checks), the PSP behind the
/// breaker, the cursor.
#[derive(Debug, Clone)]
pub struct StripeEvents {
    pub provider: Provider,
    pub psp: GuardedStripe,
    pub cursor: CursorStore,
}

/// The job: the intake's app (store, leases, settings), Stripe's events when a Stripe provider is
/// configured, and the Adyen provider whose parked items it retries.
#[derive(Debug, Clone)]
pub struct CatchUp {
    pub app: App,
    /// The catch-up of Stripe's Events API; `None` in a deployment without a Stripe provider.
    pub stripe: Option<StripeEvents>,
    pub settings: CatchUpSettings,
    /// The Adyen provider whose parked items each run retries (`crate::adyen::retry`), if one is configured.
    pub adyen: Option<Provider>,
    /// The partner event source whose state each run reports, when the EventBridge way in is configured.
    pub source: Option<SourceWatch>,
}

impl CatchUp {
    /// The job, built once per cold start from its settings on `clients` (the PSP's key read here when a
    /// Stripe provider is configured).
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        let table = &settings.config.table_name;
        let stripe = match &settings.stripe {
            Some((provider, psp)) => Some(StripeEvents {
                provider: provider.clone(),
                psp: psp::guarded_stripe(psp, &clients.sdk, clients.dynamodb.clone(), table).await?,
                cursor: CursorStore {
                    client: clients.dynamodb.clone(),
                    table: table.clone(),
                },
            }),
            None => None,
        };
        let providers = crate::providers::Providers::default().into();
        Ok(Self {
            app: App::new(clients.dynamodb, &settings.config, providers, settings.intake.clone()),
            stripe,
            settings: settings.catch_up,
            adyen: settings.adyen.clone(),
            source: settings.event_source.as_ref().map(|name| SourceWatch {
                client: aws_sdk_eventbridge::Client::new(&clients.sdk),
                name: name.clone(),
            }),
        })
    }

    /// One scheduled invocation: a run ([`CatchUp::run`]), logged, its report the answer.
    pub async fn invoke(&self, deadline: Instant) -> Result<CatchUpReport, CatchUpError> {
        // Before the run, so that a run that fails still reports the source (its alarm must not go silent).
        let source = match &self.source {
            Some(watch) => {
                let found = watch.check().await;
                shared::metrics::emit(&found.to_emf(clock::now_ms()));
                Some(found.state)
            }
            None => None,
        };
        let mut report = self.run(deadline).await?;
        report.event_source_state = source;
        info!(?report, "catch-up run");
        Ok(report)
    }

    /// One run: the catch-up of Stripe's events ([`CatchUp::catch_up`], when a Stripe provider is configured),
    /// then the retry of the Adyen items the intake parked, within what the deadline leaves; the retry runs
    /// even when the catch-up failed.
    pub async fn run(&self, deadline: Instant) -> Result<CatchUpReport, CatchUpError> {
        let caught_up = match &self.stripe {
            Some(stripe) => self.catch_up(stripe, deadline).await,
            None => Ok(CatchUpReport::default()),
        };
        let retried = match &self.adyen {
            Some(adyen) => {
                let wait = self.app.settings.adyen_retry_deadline;
                Some(crate::adyen::retry::run(&self.app, adyen, wait, deadline).await)
            }
            None => None,
        };
        let mut report = caught_up?;
        report.adyen_retry = retried.transpose()?;
        Ok(report)
    }

    /// The catch-up: resume the pass in progress or start one, read its pages (newest first) up to the run's
    /// bound, apply what was read oldest first, and save the cursor if every event read was handled.
    pub async fn catch_up(&self, stripe: &StripeEvents, deadline: Instant) -> Result<CatchUpReport, CatchUpError> {
        let now = clock::now_ms() / 1000;
        let saved = stripe.cursor.load().await?;
        let read_version = saved.as_ref().map_or(0, |c| c.version);
        let oldest = now.saturating_sub(secs(RETENTION));
        let start = saved.unwrap_or_else(|| Cursor {
            created_gte: now.saturating_sub(secs(self.settings.first_look_back)),
            pass: None,
            version: 0,
        });
        if start.created_gte < oldest {
            warn!(
                cursor = start.created_gte,
                "catch-up cursor older than Stripe's 30 days: older events are gone"
            );
        }
        let lower = start
            .created_gte
            .saturating_sub(secs(self.settings.overlap))
            .max(oldest);
        let (upper, resume) = match &start.pass {
            Some(pass) => (pass.upper, Some(pass.starting_after.clone())),
            None => (now.saturating_sub(secs(self.settings.settle)), None),
        };
        let mut report = CatchUpReport::default();
        let read = self.read(stripe, lower, upper, resume, deadline, &mut report).await?;
        // Oldest first, as the webhooks were sent. One the intake would answer 503 does not stop the run:
        // the later events (other payments') are applied now, and the cursor stops before the oldest deferred.
        let mut deferred_from: Option<i64> = None;
        for event in read.events.iter().rev() {
            if left(deadline) < MIN_EVENT_TIME {
                // Not all handled: the cursor stays, and the next run reads this part again (what was
                // applied now is a duplicate then).
                return Ok(report);
            }
            if !self.apply(&stripe.provider, event, &mut report).await? {
                let created = event.get("created").and_then(serde_json::Value::as_i64);
                let at = created.unwrap_or(start.created_gte);
                deferred_from = Some(deferred_from.map_or(at, |d| d.min(at)));
            }
        }
        let Some(next) = next_cursor(&start, read, &report, upper, deferred_from) else {
            return Ok(report);
        };
        if next.created_gte != start.created_gte || next.pass != start.pass || read_version == 0 {
            report.cursor_lost = !stripe.cursor.save(&next, read_version).await?;
        }
        Ok(report)
    }

    /// Reads the pass's pages from `after` (newest first) down to `lower`, within the run's bound.
    async fn read(
        &self,
        stripe: &StripeEvents,
        lower: i64,
        upper: i64,
        mut after: Option<String>,
        deadline: Instant,
        report: &mut CatchUpReport,
    ) -> Result<Read, CatchUpError> {
        let mut read = Read::default();
        while report.pages < self.settings.max_pages && left(deadline) > self.settings.page_budget {
            let query = EventQuery {
                created_gte: lower,
                created_lte: upper,
                types: SUBSCRIBED_TYPES,
                starting_after: after.as_deref(),
                limit: self.settings.page_size,
            };
            let page = match stripe.psp.list_events(&query).await {
                Ok(page) => page,
                Err(e) if e.is_transient() || e.is_deferred() => {
                    warn!(error = %ErrorChain(&e), "catch-up: the PSP is unavailable; the next run goes on");
                    report.psp_unavailable = true;
                    break;
                }
                Err(e) => return Err(CatchUpError::Psp(e)),
            };
            report.pages = report.pages.saturating_add(1);
            after = page.data.last().and_then(|e| e.get("id")?.as_str().map(str::to_owned));
            read.events.extend(page.data);
            if !page.has_more || after.is_none() {
                report.pass_complete = true;
                break;
            }
            read.oldest_id.clone_from(&after);
        }
        Ok(read)
    }

    /// One event through the intake's steps; `false` when it is deferred (the intake would answer 503: a later
    /// run reads it again).
    async fn apply(
        &self,
        provider: &Provider,
        event: &serde_json::Value,
        report: &mut CatchUpReport,
    ) -> Result<bool, CatchUpError> {
        let id = event.get("id").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let body = serde_json::to_vec(event).map_err(|e| CatchUpError::Event {
            event: id.clone(),
            message: e.to_string(),
        })?;
        let mut metrics = RequestMetrics::default();
        report.events = report.events.saturating_add(1);
        match apply_fetched(&self.app, provider, &body, &mut metrics).await {
            Ok(answer) => {
                if answer == Answer::Applied {
                    report.applied = report.applied.saturating_add(1);
                    warn!(psp_event_id = %id, "catch-up applied an event its webhook did not bring");
                } else {
                    report.unchanged = report.unchanged.saturating_add(1);
                }
                Ok(true)
            }
            Err(e) if e.status.as_u16() == 503 => {
                report.deferred = report.deferred.saturating_add(1);
                info!(psp_event_id = %id, reason = %e.message, "catch-up defers an event to a later run");
                Ok(false)
            }
            Err(e) => Err(CatchUpError::Event {
                event: id,
                message: e.message,
            }),
        }
    }
}

/// Where the next run starts after a run that handled every event it read, but those the intake deferred, the
/// oldest of them created at `deferred_from`: a complete pass moves to its upper bound, or, with a deferred
/// event, to that event's `created` (read again, with what follows, by the next run: duplicates but for it);
/// a pass cut by its bound moves on from the oldest event read. `None`: nothing to save (a pass cut by its
/// bound with a deferred event is read again whole by the next run, its events then duplicates).
fn next_cursor(
    start: &Cursor,
    read: Read,
    report: &CatchUpReport,
    upper: i64,
    deferred_from: Option<i64>,
) -> Option<Cursor> {
    match (report.pass_complete, deferred_from) {
        (true, Some(created)) => Some(Cursor {
            created_gte: created,
            pass: None,
            version: start.version,
        }),
        (false, Some(_)) => None,
        (complete, None) => Some(Cursor {
            created_gte: if complete { upper } else { start.created_gte },
            pass: match (
                complete,
                read.oldest_id
                    .or_else(|| start.pass.as_ref().map(|p| p.starting_after.clone())),
            ) {
                (false, Some(starting_after)) => Some(Pass { upper, starting_after }),
                _ => None,
            },
            version: start.version,
        }),
    }
}

/// What a run read of its pass: the events, newest first, and the id to resume after when the pass goes on.
#[derive(Default)]
struct Read {
    events: Vec<serde_json::Value>,
    oldest_id: Option<String>,
}

/// Time one event needs at most (a read, a lease's short wait, a transaction).
const MIN_EVENT_TIME: Duration = Duration::from_secs(2);

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}
