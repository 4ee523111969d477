//! Recovery (reconciliation), a library the reconciler runs and the checkout functions ask: payments that stayed open longer than a threshold are
//! asked about at the PSP and the answer is applied through the same finalize as the sync and webhook paths.
//!
//! Only a payment's own PSP is asked (invariant 13): [`Recovery::psp`] holds a client per configured PSP
//! ([`Psps`]), a payment's calls go to the one its recorded provider routes to, and the core's
//! [`recovery_step`](payments_core::recovery::recovery_step) sends every other payment (a Standard Webhooks provider's, a PSP not configured here,
//! one without a PSP reference, one whose reference the PSP does not know) to a back-off and,
//! past [`RecoverySettings::expire_after`], to an expiry recorded through the finalize (`PaymentFailed`,
//! `expired: ...`; the `Expired` metric alarms). A payment whose PaymentIntent is still open at Stripe past
//! that age (waiting for the customer's action, or for another card after a decline) is canceled there
//! first, key `<payment>:expire` (the core's [`after_read`](payments_core::recovery::after_read)), and the canceled PaymentIntent is recorded (a
//! cancel refused because it succeeded meanwhile records the success); a `processing` one is left for Stripe
//! to settle. Adyen has no status read: its payments wait for their notifications, and past the age are
//! ended there by reference (a reversal, or a cancel by our id; [`RecoveryStep::EndAtPsp`](payments_core::recovery::RecoveryStep::EndAtPsp), counted
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
//! the payment in the index until recovery has refunded it (`money`'s `give_back`, key from the payment and
//! the anomaly) and read the refund back from the PSP: the `PaymentRefunded` event records it, with the
//! reason, and the payment leaves the index.
//!
//! A refund the PSP reports failed or canceled leaves money with us ([`shared::GiveBack`]): recovery refunds it
//! again with the key `<payment>:refund-failure-<n>`, one key per failure, so a retry after a lost answer
//! never refunds twice and a new failure gets a new attempt. The PSP's answer is recorded as a refund report
//! answering give-back `n`: `pending` or `succeeded` ends the give-back (a later failure is failure `n+1`), a
//! `failed` answer does not count as given back; the core stops giving back after
//! [`payments_core::refund::MAX_GIVE_BACKS`] failures. The payment then stays open with the money still ours
//! ([`Payment::refund_for_operator`](shared::Payment::refund_for_operator)): recovery asks no PSP about it, counts it every half hour
//! (`RefundsForOperator`, whose alarm so keeps firing) and `paymentsctl doctor` lists it, until a person's
//! refund at the PSP is reported succeeded and the payment is `refunded`.
//!
//! At Adyen, which has no refund or payment to read back, the same money is given back under the same keys
//! and bound, the outcome read from Adyen's notification (`adyen`).
//!
//! A refund the payment last heard was `pending` (a give-back's or any other) may end without a webhook we
//! receive, so each look reads it back by id first (`money`'s `read_back_pending_refund`) and records the
//! answer as the webhook's refund report would be: `failed` is a new failure (given back under the next key
//! on the next look), `succeeded` ends the question.
//!
//! Each run first reads the objects of events Stripe never made (`recheck`: a
//! `v2.core.health.event_generation_failure.resolved` the intake recorded), open payment or not, once each,
//! and applies what they say through the same finalize.

//!
//! ## The crate's map
//!
//! [`Recovery`] holds what every step uses (the payment store, the payment leases, the PSPs' clients, the
//! settings); each step is a plain function over it, in its own module:
//!
//! | module | step |
//! |---|---|
//! | `run` | one scheduled run: the due payments from the index, each reconciled until the deadline |
//! | `reconcile` | one payment: read, leased, read again, routed to its PSP's step by the core's `recovery_step` |
//! | `money` | Stripe's money questions first: a stray capture refunded, a pending refund read back, a failed one given back |
//! | `ask` | Stripe's status read (or the expiring cancel) recorded through the finalize |
//! | `adyen` | Adyen's give-backs and its end of an expired payment |
//! | `unasked` | a payment with nothing to ask: backed off, or expired |
//! | `back_off` | when a payment is due again |
//! | `recheck` | the objects of events Stripe never made |
//! | `report` | what recovery did, per payment and per run (its EMF record) |
//! | `settings` | `RECOVERY_*` and the reconciler function's settings |
//!
//! The checkout saga uses one step of it: [`Recovery::reconcile`], for a payment past its deadline.

mod adyen;
mod ask;
mod back_off;
mod money;
mod recheck;
mod reconcile;
mod report;
mod run;
mod settings;
mod unasked;

pub use back_off::OPERATOR_RECHECK;
pub use report::{emf, Reconciled, RecoveryReport, NAMESPACE};
pub use settings::{RecoverySettings, Settings, DEFAULT_EXPIRE_AFTER};

use psp::{PspError, PspSet, Psps};
use shared::clock;
use shared::lambda::{BuildError, Clients};
use shared::lease::Leases;
use shared::store::{PaymentStore, StoreError};
use shared::{Config, CorrelationId, PaymentId};
use thiserror::Error;

/// Why recovery of one payment failed: the store's or the PSP's error, kept as the cause.
#[derive(Debug, Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Psp(#[from] PspError),
}

/// What recovery works with, built in one place ([`Recovery::new`]): by the reconciler ([`Recovery::build`]),
/// the checkout functions (which hand it the payments their sagas give up on, on the same PSP clients as
/// their own: a [`PspSet`]'s clones share its breakers and paces) and the local stack.
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
        run::run(self, deadline).await
    }

    /// Asks the PSP about one payment and applies the answer, under the payment's lease (what the checkout
    /// saga asks of recovery for a payment past its deadline). A failed payment whose money the PSP took
    /// anyway gets it back first.
    pub async fn reconcile(&self, id: &PaymentId, correlation: CorrelationId) -> Result<Reconciled, RecoveryError> {
        reconcile::reconcile(self, id, correlation).await
    }
}
