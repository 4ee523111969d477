//! How the saga's three functions are built, once per cold start: one [`Settings`] read from the
//! environment, the runner on the function's clients ([`build_runner`]), and each function's state
//! ([`CheckoutApi`], [`CheckoutEvents`], [`CheckoutSweeper`]) for its `main`, the local stack and the tests.

use crate::resume::{ResumeError, Resumed, SweeperRequest};
use crate::runner::Runner;
use crate::saga::{Escalation, Loaded};
use crate::sweeper::{sweep, SweepReport};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use order_projection::OrderProjection;
use psp::{CaptureMethod, PspSet, PspSetSettings};
use recovery::RecoverySettings;
use shared::consumer::Consumer;
use shared::http::CallerGuard;
use shared::lambda::{BuildError, Clients};
use shared::store::StoreError;
use shared::{Config, ConfigError, Env, OrderId};
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Sagas resumed per sweep at most.
const SWEEP_LIMIT: usize = 100;

/// The saga functions' settings, read once per cold start (the three read the same variables; each uses
/// what it needs).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `TABLE_NAME` and the lease settings.
    pub config: Config,
    /// Every configured PSP's settings (Stripe's `PSP_BASE_URL`, `PSP_API_KEY_ARN` or `PSP_API_KEY`, ...,
    /// and `STRIPE_CAPTURE_METHOD`, how its charges are captured; Adyen's `ADYEN_BASE_URL`, ...).
    pub psps: PspSetSettings,
    /// `RECOVERY_*`: the recovery a payment that does not resolve in time is handed to.
    pub recovery: RecoverySettings,
    /// `ESCALATION_QUEUE_URL` (required).
    pub escalation_queue_url: String,
    /// `SAGA_PAYMENT_TIMEOUT_SECONDS` (default 120), `CHECKOUT_ABANDON_AFTER_SECONDS` (default 900),
    /// `SAGA_PSP` (default `stripe`), the rest the runner's defaults.
    pub runner: crate::runner::Settings,
    /// `SAGA_STUCK_AFTER_SECONDS` (default 60): the sweeper resumes sagas open for longer.
    pub stuck_after: Duration,
    /// `ORCHESTRATOR_ROLE_ARN`: the only caller of the checkout API (unset: every caller the API let through).
    pub guard: CallerGuard,
}

impl Settings {
    /// Reads the settings from `env` (see the type). A missing or malformed one fails the start, as does a
    /// `SAGA_PSP` whose PSP has no settings: new checkouts must go to a PSP this deployment can call.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let psps = PspSetSettings::from_env(env)?.capturing(CaptureMethod::from_env(env)?);
        let runner = crate::runner::Settings::from_env(env)?;
        if !psps.providers().contains(&runner.new_checkouts.name()) {
            return Err(ConfigError::Missing(
                "the settings of SAGA_PSP's PSP (PSP_BASE_URL for stripe, ADYEN_BASE_URL for adyen)",
            ));
        }
        let guard = CallerGuard::from_env(env)?;
        Ok(Self {
            config: Config::from_env(env)?,
            psps,
            recovery: RecoverySettings::from_env(env)?,
            escalation_queue_url: env.required("ESCALATION_QUEUE_URL")?,
            runner,
            stuck_after: env.seconds("SAGA_STUCK_AFTER_SECONDS", Duration::from_secs(60))?,
            guard,
        })
    }
}

/// The runner on `clients` (the PSPs' keys read here): its sagas and payments, its PSP clients, the
/// recovery it hands payments to, its escalation queue ([`Runner::new`]); what each of the three functions
/// builds once per cold start.
pub async fn build_runner(settings: &Settings, clients: Clients) -> Result<Runner<PspSet>, BuildError> {
    let table = &settings.config.table_name;
    let psps = settings
        .psps
        .build(&clients.sdk, clients.dynamodb.clone(), table)
        .await?;
    let escalation = Escalation::new(clients.sqs, &settings.escalation_queue_url);
    Ok(Runner::new(
        &clients.dynamodb,
        &settings.config,
        psps,
        settings.recovery,
        escalation,
        settings.runner,
    ))
}

/// The checkout API function (`checkout-api`): the runner, behind the caller guard.
pub struct CheckoutApi {
    /// Starts and reads the sagas.
    pub runner: Runner<PspSet>,
    /// Who may call ([`Settings::guard`]).
    pub guard: CallerGuard,
}

impl CheckoutApi {
    /// Built once per cold start from the settings on `clients`.
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        Ok(Self {
            runner: build_runner(settings, clients).await?,
            guard: settings.guard.clone(),
        })
    }
}

/// The saga's inbox function (`checkout-events`): the order projection's consumer, then the waiting sagas
/// resumed ([`crate::events::handle`]).
pub struct CheckoutEvents {
    /// Applies each payment event to the order projection exactly once.
    pub consumer: Consumer<OrderProjection>,
    /// Resumes the sagas the events may move.
    pub runner: Runner<PspSet>,
}

impl CheckoutEvents {
    /// Built once per cold start from the settings on `clients`.
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        let table = &settings.config.table_name;
        Ok(Self {
            consumer: Consumer::new(clients.dynamodb.clone(), table, OrderProjection),
            runner: build_runner(settings, clients).await?,
        })
    }

    /// One queue batch: never fails the invocation, what was not applied is in the answer (partial batch
    /// failure).
    pub async fn invoke(&self, batch: SqsEvent, deadline: Instant) -> Result<SqsBatchResponse, Infallible> {
        Ok(crate::events::handle(&self.consumer, &self.runner, batch, deadline).await)
    }
}

/// The saga sweeper function (`checkout-sweeper`, on a schedule): the runner and how long a saga may stay
/// open before it is resumed.
pub struct CheckoutSweeper {
    /// Resumes the sagas found.
    pub runner: Runner<PspSet>,
    /// [`Settings::stuck_after`].
    pub stuck_after: Duration,
}

impl CheckoutSweeper {
    /// Built once per cold start from the settings on `clients`.
    pub async fn build(settings: &Settings, clients: Clients) -> Result<Self, BuildError> {
        Ok(Self {
            runner: build_runner(settings, clients).await?,
            stuck_after: settings.stuck_after,
        })
    }

    /// One sweep ([`sweep`]) of the sagas open for longer than `stuck_after`, until `deadline`. Its future is
    /// `sweep`'s own, not wrapped in another: a sweep's is large (the saga's steps, recovery's).
    pub fn sweep(&self, deadline: Instant) -> impl Future<Output = Result<SweepReport, StoreError>> + '_ {
        sweep(&self.runner, self.stuck_after, SWEEP_LIMIT, deadline)
    }

    /// One invocation. The schedule's: a sweep, logged and written as metrics (`SweeperLagSeconds`,
    /// `OldestOpenSagaAgeSeconds`, EMF), its counts the answer. An operator's `{"resume": {"order_id": ..}}`
    /// ([`crate::resume`]): that saga resumed, `{"resumed": {order_id, status, version, next}}` the answer.
    pub async fn invoke(&self, event: serde_json::Value, deadline: Instant) -> Result<serde_json::Value, SweeperError> {
        if let SweeperRequest::Resume(order) = SweeperRequest::of(&event)? {
            let resumed = self.resume_one(&order, deadline).await?;
            tracing::info!(?resumed, "resumed on request");
            return Ok(serde_json::json!({ "resumed": resumed }));
        }
        let report = self.sweep(deadline).await?;
        tracing::info!(?report, "sweep done");
        shared::metrics::emit(&report.to_emf());
        Ok(serde_json::json!({ "found": report.found, "resumed": report.resumed, "errors": report.errors }))
    }
}

/// Why a sweeper invocation failed (the function's error answer).
#[derive(Debug, thiserror::Error)]
pub enum SweeperError {
    #[error("the sweep")]
    Sweep(#[from] StoreError),
    #[error("the resume")]
    Resume(#[from] ResumeError),
}

impl CheckoutSweeper {
    /// Resumes `order`'s saga through the runner, cut at `deadline` (what is left is the next sweep's).
    pub async fn resume_one(&self, order: &OrderId, deadline: Instant) -> Result<Resumed, ResumeError> {
        // Boxed, as the sweep's resume is: the saga's future (its steps, recovery's) is deep, and on the stack
        // of a test's thread (2 MiB) the invocation's state machine around it overflowed.
        let after = Box::pin(self.runner.resume_within(order, deadline))
            .await
            .map_err(ResumeError::FailedAgain)?
            .ok_or_else(|| ResumeError::Unknown(order.clone()))?;
        let next = Loaded::from_record(after.clone()).map_or_else(
            |e| e.to_string(),
            |l| {
                let step = self.runner.settings.next_step(&l);
                format!("{}: {}", step.name(), step.describe())
            },
        );
        Ok(Resumed {
            order_id: order.as_str().to_owned(),
            status: after.status.to_string(),
            version: after.version,
            next,
        })
    }
}
