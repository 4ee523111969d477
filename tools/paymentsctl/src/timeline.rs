//! `paymentsctl timeline <payment id | order id | PSP reference | PSP event id>`: one time-ordered story of
//! everything the table and queues know about a payment and its order, with the gaps and anomalies called out.
//!
//! Sources (each line of the output says which one it comes from):
//!
//! | source | items | cost |
//! |---|---|---|
//! | `payment` | the payment (`PAYMENT#<id>` / `PAYMENT`) and its events (`EVENT#<version>`): every accepted transition, with path, correlation id, trace context, PSP event id and reason | one Query |
//! | `saga` | the order's saga (`SAGA#<order>` / `SAGA`) and its log (`EVENT#<version>`): steps and compensations | one GetItem, one Query |
//! | `cursor` | each consumer's cursor (the last version it applied: the order item that carries it, `applied_by`, else `CONSUMER#<name>#<payment id>` / `CURSOR`) and the order projection (`ORDER#<order>` / `PAYMENT#<payment id>`) | one or two GetItem each |
//! | `lease` | the payment's lease (`LEASE#<id>` / `LEASE`), live or expired-not-yet-deleted | one GetItem |
//! | `parked` | webhooks parked under `PARKED#quarantined` / `PARKED#unknown_payment` whose body names the payment, its PSP reference or one of its PSP event ids | one Query per kind (all parked items, kept 30 days) |
//! | `escalation` | messages of the saga escalation queue for the order | receives every message and gives it back (see `escalations`) |
//! | `logs` | the intake's log lines naming the payment (see `deliveries`): duplicates, stale events, 503 deferrals | one Logs Insights query per payment (billed per GB scanned), or the local stack's log file |
//!
//! **Not on record as items**: a webhook delivery that changed nothing (duplicate, stale, deferred with 503,
//! a 401) writes no item, by design: recording it would add a write to every webhook. Those are in the
//! intake's logs only; with the intake's log group configured the command runs the Logs Insights query that
//! finds them and merges its rows, else it prints the query. An order's every payment (a retry after a
//! decline is a new payment) is shown in the one time-ordered table.
//!
//! Here: the timeline's model and [`build`]; the submodules hold its [`Options`] (`options`), what the query
//! names (`resolve`), the table reads (`read`), the sources (`sources`), the findings (`checks`) and the text
//! output ([`render`]).

mod checks;
mod options;
mod read;
mod render;
mod resolve;
mod sources;

pub use options::Options;
pub use read::{parked_items, ParkedItem};
pub use render::render;

use crate::deliveries::Delivery;
use crate::escalations::EscalationMessage;
use crate::settings::Ctx;
use crate::when::format_ms;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use shared::{Payment, PaymentId};

use checks::check_payment;
use read::all_parked;
use resolve::{resolve, Resolved};
use sources::{cursors, deliveries_of, escalations, lease, parked_for, payment_events, projection, saga};

/// The payment as the timeline shows it: no secret, only whether one is held.
#[derive(Debug, Clone, Serialize)]
pub struct PaymentSummary {
    pub payment_id: String,
    pub order_id: String,
    pub status: String,
    pub version: u64,
    pub amount_minor: u64,
    pub currency: String,
    pub refunded_minor: u64,
    pub psp_reference: Option<String>,
    pub reason: Option<String>,
    pub customer_action_held: bool,
    pub anomalies: u32,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<&Payment> for PaymentSummary {
    fn from(p: &Payment) -> Self {
        Self {
            payment_id: p.id.to_string(),
            order_id: p.order_id.to_string(),
            status: p.status.as_str().to_owned(),
            version: p.version,
            amount_minor: p.money.amount_minor(),
            currency: p.money.currency().to_string(),
            refunded_minor: p.refunded_minor,
            psp_reference: p.psp_reference.as_ref().map(ToString::to_string),
            reason: p.reason.clone(),
            customer_action_held: p.action.is_some() || p.retry_token.is_some(),
            anomalies: p.anomalies,
            created_at_ms: p.created_at_ms,
            updated_at_ms: p.updated_at_ms,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SagaSummary {
    pub order_id: String,
    pub status: String,
    pub version: u64,
    pub payment_id: Option<String>,
    pub captured: bool,
    pub refunded_minor: u64,
    pub failure: Option<String>,
    pub next: String,
    pub started_at_ms: i64,
    pub updated_at_ms: i64,
}

/// Where a line of the timeline comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Payment,
    Saga,
    Cursor,
    Parked,
    Escalation,
    Logs,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Payment => "payment",
            Source::Saga => "saga",
            Source::Cursor => "cursor",
            Source::Parked => "parked",
            Source::Escalation => "escalation",
            Source::Logs => "logs",
        }
    }
}

/// One line of the story.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub at_ms: i64,
    pub at: String,
    pub source: Source,
    /// The payment the line is about (`None` for the saga's and escalations' lines).
    pub payment_id: Option<String>,
    /// The payment's or saga's version the line belongs to.
    pub version: Option<u64>,
    /// Event type, saga event, `applied`, `quarantined`, ...
    pub what: String,
    /// `previous -> status` for payments, the saga state for sagas.
    pub status: String,
    pub path: Option<String>,
    pub correlation_id: Option<String>,
    pub trace_context: Option<String>,
    pub psp_event_id: Option<String>,
    /// Reason, saga step and detail, parked reason, escalation error.
    pub detail: Option<String>,
    /// A saga compensation (refund, cancel, stock release).
    pub compensation: bool,
}

impl Entry {
    fn new(at_ms: i64, source: Source, what: impl Into<String>) -> Self {
        Self {
            at_ms,
            at: format_ms(at_ms),
            source,
            payment_id: None,
            version: None,
            what: what.into(),
            status: String::new(),
            path: None,
            correlation_id: None,
            trace_context: None,
            psp_event_id: None,
            detail: None,
            compensation: false,
        }
    }
}

/// What one consumer has applied of one payment.
#[derive(Debug, Clone, Serialize)]
pub struct Cursor {
    pub payment_id: String,
    pub consumer: String,
    /// `None`: the consumer has applied nothing of this payment.
    pub applied_version: Option<u64>,
    pub applied_event_id: Option<String>,
    pub updated_at_ms: Option<i64>,
}

/// The order projection's view of one payment.
#[derive(Debug, Clone, Serialize)]
pub struct Projection {
    pub payment_id: String,
    pub payment_status: String,
    pub payment_version: u64,
    pub last_event: String,
}

/// A payment's lease item, live or expired.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseView {
    pub payment_id: String,
    pub owner: String,
    pub expires_at_ms: i64,
    pub live: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// A missing version or event: something was lost or not yet delivered.
    Gap,
    /// Something no correct run produces, or money that needs a person.
    Anomaly,
    /// Work in flight or overdue: someone (sweeper, recovery, a consumer) should act.
    Warning,
    Note,
}

impl Level {
    fn marker(self) -> &'static str {
        match self {
            Level::Gap => "GAP",
            Level::Anomaly => "ANOMALY",
            Level::Warning => "WARNING",
            Level::Note => "note",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub level: Level,
    pub message: String,
}

/// Everything known about one payment and its order.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub query: String,
    /// How the query was understood: `payment id`, `order id`, `PSP reference`, `PSP event id`.
    pub resolved_as: String,
    /// The payment the saga holds (else the first found).
    pub payment: Option<PaymentSummary>,
    /// Every payment shown: one, or each payment of the order (a retry after a decline is a new payment).
    pub payments: Vec<PaymentSummary>,
    pub saga: Option<SagaSummary>,
    pub entries: Vec<Entry>,
    pub cursors: Vec<Cursor>,
    pub projections: Vec<Projection>,
    pub leases: Vec<LeaseView>,
    pub escalations: Vec<EscalationMessage>,
    pub findings: Vec<Finding>,
    /// Per payment, the `aws logs start-query` command for what left no item (duplicates, stale, 503s).
    pub logs_queries: Vec<String>,
    /// The intake's log lines about the payments' deliveries (those with a time are also entries).
    pub deliveries: Vec<Delivery>,
    /// Prefixes findings with the payment they are about when there are several.
    #[serde(skip)]
    subject: Option<String>,
}

impl Timeline {
    /// Whether a finding needs a person: a gap or an anomaly (the command then exits 3, [`crate::Exit::Findings`]).
    pub fn needs_attention(&self) -> bool {
        self.findings
            .iter()
            .any(|f| matches!(f.level, Level::Gap | Level::Anomaly))
    }
}

impl Timeline {
    fn new(query: &str, resolved_as: &str) -> Self {
        Self {
            query: query.to_owned(),
            resolved_as: resolved_as.to_owned(),
            payment: None,
            payments: Vec::new(),
            saga: None,
            entries: Vec::new(),
            cursors: Vec::new(),
            projections: Vec::new(),
            leases: Vec::new(),
            escalations: Vec::new(),
            findings: Vec::new(),
            logs_queries: Vec::new(),
            deliveries: Vec::new(),
            subject: None,
        }
    }

    fn find(&mut self, level: Level, message: impl Into<String>) {
        let message = message.into();
        self.findings.push(Finding {
            level,
            message: match &self.subject {
                Some(subject) => format!("{subject}: {message}"),
                None => message,
            },
        });
    }
}

/// A spinner on stderr counting scanned items, or a hidden one.
pub fn spinner(visible: bool, message: &'static str) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}: {pos} items scanned ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// Builds the timeline of whatever `q` names.
pub async fn build(ctx: &Ctx, q: &str, opts: &Options) -> Result<Timeline, crate::Error> {
    let (resolved, resolved_as) = resolve(ctx, q, opts).await?;
    let mut t = Timeline::new(q, resolved_as);
    let (ids, order_id) = match resolved {
        Resolved::Payment(id) => (vec![id], None),
        Resolved::Order(order, ids) => (ids, Some(order)),
    };
    let mut payments = load_payments(ctx, &mut t, &ids).await?;
    let primary = payments.first().cloned();
    payments.sort_by_key(|p| p.created_at_ms);
    let parked = if payments.is_empty() {
        Vec::new()
    } else {
        all_parked(ctx).await?
    };
    for p in &payments {
        t.subject = (payments.len() > 1).then(|| p.id.to_string());
        payment_section(ctx, &mut t, p, &parked, opts).await?;
    }
    t.subject = None;
    t.payment = primary.as_ref().map(PaymentSummary::from);
    if let Some(order) = order_id.or_else(|| primary.as_ref().map(|p| p.order_id.clone())) {
        saga(ctx, &mut t, &order, primary.as_ref(), opts).await?;
        escalations(ctx, &mut t, &order, opts).await;
    }
    t.entries.sort_by_key(|e| e.at_ms);
    Ok(t)
}

/// The payments `ids` names, in that order; one named but missing is an anomaly.
async fn load_payments(ctx: &Ctx, t: &mut Timeline, ids: &[PaymentId]) -> Result<Vec<Payment>, crate::Error> {
    let mut payments = Vec::new();
    for id in ids {
        match ctx.store().get(id).await? {
            Some(p) => payments.push(p),
            None => t.find(
                Level::Anomaly,
                format!("payment {id} is named by the order but has no payment item"),
            ),
        }
    }
    Ok(payments)
}

/// Everything about one payment: its events, cursors, projection, lease, parked webhooks and deliveries.
async fn payment_section(
    ctx: &Ctx,
    t: &mut Timeline,
    p: &Payment,
    parked: &[ParkedItem],
    opts: &Options,
) -> Result<(), crate::Error> {
    t.payments.push(PaymentSummary::from(p));
    let first = t.entries.len();
    let events = payment_events(ctx, t, p).await?;
    check_payment(t, p, &events, opts);
    cursors(ctx, t, p, opts).await?;
    projection(ctx, t, p).await?;
    lease(ctx, t, &p.id, opts.now_ms).await?;
    parked_for(t, p, &events, parked);
    deliveries_of(ctx, t, p, opts).await?;
    for entry in &mut t.entries[first..] {
        entry.payment_id = Some(p.id.to_string());
    }
    Ok(())
}
