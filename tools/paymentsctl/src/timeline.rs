//! `paymentsctl timeline <payment id | order id | PSP reference | PSP event id>`: one time-ordered story of
//! everything the table and queues know about a payment and its order, with the gaps and anomalies called out.
//!
//! Sources (each line of the output says which one it comes from):
//!
//! | source | items | cost |
//! |---|---|---|
//! | `payment` | the payment (`PAYMENT#<id>` / `PAYMENT`) and its events (`EVENT#<version>`): every accepted transition, with path, correlation id, trace context, PSP event id and reason | one Query |
//! | `saga` | the order's saga (`SAGA#<order>` / `SAGA`) and its log (`EVENT#<version>`): steps and compensations | one GetItem, one Query |
//! | `cursor` | each consumer's cursor (`CONSUMER#<name>#<payment id>` / `CURSOR`: the last version it applied) and the order projection (`ORDER#<order>` / `PAYMENT#<payment id>`) | one GetItem each |
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

use crate::deliveries::{self, Delivery};
use crate::escalations::{describe_next, peek, EscalationMessage};
use crate::settings::{Ctx, QueueRole};
use crate::when::format_ms;
use aws_sdk_dynamodb::types::AttributeValue;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use shared::keys::{self, payment_pk, Item};
use shared::saga::{Loaded, SagaEvent, SagaEventKind, SagaRecord, SagaStatus, SagaStore};
use shared::store::item::event_from_item;
use shared::store::ParkedKind;
use shared::{ConfigError, Env, EventKind, OrderId, Payment, PaymentEvent, PaymentId, PspReference};

/// What the timeline looks for besides the payment itself.
#[derive(Debug, Clone)]
pub struct Options {
    /// Consumers whose cursors to show (default: the order projection).
    pub consumers: Vec<String>,
    /// The escalation queue, if known; `None` skips escalations (and says so).
    pub escalation_queue: Option<String>,
    /// A saga open longer than this is called stuck (the sweeper's threshold).
    pub saga_stuck_after_ms: i64,
    /// A payment open longer than this is one recovery should have asked the PSP about.
    pub payment_stale_after_ms: i64,
    /// The intake's log group: its Logs Insights query is run (`None`: the query is only printed).
    pub log_group: Option<String>,
    /// How long the Logs Insights query may run before it is stopped.
    pub logs_deadline: std::time::Duration,
    pub now_ms: i64,
    /// Show a spinner on stderr during scans.
    pub progress: bool,
    /// The local stack's log file: its webhook lines for the payment are shown (there is no Logs Insights
    /// locally).
    pub local_log: Option<std::path::PathBuf>,
}

impl Options {
    /// From the functions' own variables (`SAGA_STUCK_AFTER_SECONDS`, `RECOVERY_STALE_AFTER_SECONDS`,
    /// `INTAKE_LOG_GROUP`), with their documented defaults; a malformed value is an error.
    pub fn from_env(env: &Env, now_ms: i64) -> Result<Self, ConfigError> {
        let millis = |name: &'static str, default: u64| -> Result<i64, ConfigError> {
            let seconds = env.seconds(name, std::time::Duration::from_secs(default))?;
            Ok(i64::try_from(seconds.as_millis()).unwrap_or(i64::MAX))
        };
        Ok(Self {
            consumers: vec![order_projection::NAME.to_owned()],
            escalation_queue: None,
            saga_stuck_after_ms: millis("SAGA_STUCK_AFTER_SECONDS", 60)?,
            payment_stale_after_ms: millis("RECOVERY_STALE_AFTER_SECONDS", 300)?,
            log_group: env.optional("INTAKE_LOG_GROUP"),
            logs_deadline: std::time::Duration::from_secs(30),
            now_ms,
            progress: false,
            local_log: None,
        })
    }
}

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

async fn get(ctx: &Ctx, key: Item) -> Result<Option<Item>, crate::Error> {
    let out = ctx
        .dynamodb
        .get_item()
        .table_name(ctx.table())
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| format!("GetItem: {e}"))?;
    Ok(out.item)
}

async fn query(ctx: &Ctx, pk: String, sk_prefix: Option<&str>) -> Result<Vec<Item>, crate::Error> {
    let mut q = ctx
        .dynamodb
        .query()
        .table_name(ctx.table())
        .consistent_read(true)
        .expression_attribute_values(":pk", AttributeValue::S(pk));
    q = match sk_prefix {
        Some(prefix) => q
            .key_condition_expression("pk = :pk AND begins_with(sk, :p)")
            .expression_attribute_values(":p", AttributeValue::S(prefix.to_owned())),
        None => q.key_condition_expression("pk = :pk"),
    };
    q.into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| format!("Query: {e}").into())
}

fn text(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn number(item: &Item, name: &str) -> Option<i64> {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok())
}

/// A parked webhook as stored.
#[derive(Debug, Clone, Serialize)]
pub struct ParkedItem {
    pub kind: String,
    /// `<provider>#<event key>`: the argument of `parked replay`.
    pub key: String,
    pub provider: String,
    pub event_key: String,
    pub reason: String,
    pub body: String,
    pub recorded_at_ms: i64,
    pub replayed_at_ms: Option<i64>,
    pub replay_result: Option<String>,
}

/// Every parked webhook of `kind`.
pub async fn parked_items(ctx: &Ctx, kind: ParkedKind) -> Result<Vec<ParkedItem>, crate::Error> {
    let items = query(ctx, keys::parked_pk(kind.as_str()), None).await?;
    Ok(items
        .iter()
        .map(|i| ParkedItem {
            kind: kind.as_str().to_owned(),
            key: text(i, "sk").unwrap_or_default(),
            provider: text(i, "provider").unwrap_or_default(),
            event_key: text(i, "event_key").unwrap_or_default(),
            reason: text(i, "reason").unwrap_or_default(),
            body: text(i, "body").unwrap_or_default(),
            recorded_at_ms: number(i, "recorded_at_ms").unwrap_or(0),
            replayed_at_ms: number(i, "replayed_at_ms"),
            replay_result: text(i, "replay_result"),
        })
        .collect())
}

async fn all_parked(ctx: &Ctx) -> Result<Vec<ParkedItem>, crate::Error> {
    let mut all = parked_items(ctx, ParkedKind::Quarantined).await?;
    all.extend(parked_items(ctx, ParkedKind::UnknownPayment).await?);
    Ok(all)
}

/// What the query named.
enum Resolved {
    Payment(PaymentId),
    /// An order: its saga (if any) and the payments the projection knows.
    Order(OrderId, Vec<PaymentId>),
}

async fn resolve(ctx: &Ctx, q: &str, opts: &Options) -> Result<(Resolved, &'static str), crate::Error> {
    let store = ctx.store();
    if let Ok(id) = PaymentId::parse(q) {
        if store.get(&id).await?.is_some() {
            return Ok((Resolved::Payment(id), "payment id"));
        }
    }
    if let Ok(order) = OrderId::parse(q) {
        let saga = get(ctx, keys::saga(&order)).await?;
        let mut payments: Vec<PaymentId> = saga
            .as_ref()
            .and_then(|s| text(s, "payment_id"))
            .and_then(|p| PaymentId::parse(p).ok())
            .into_iter()
            .collect();
        for item in query(ctx, keys::order_pk(&order), Some(keys::ORDER_PAYMENT_SK_PREFIX)).await? {
            if let Some(p) = text(&item, "sk")
                .and_then(|sk| sk.strip_prefix(keys::ORDER_PAYMENT_SK_PREFIX).map(str::to_owned))
                .and_then(|p| PaymentId::parse(p).ok())
            {
                if !payments.contains(&p) {
                    payments.push(p);
                }
            }
        }
        if saga.is_some() || !payments.is_empty() {
            return Ok((Resolved::Order(order, payments), "order id"));
        }
    }
    if let Ok(reference) = PspReference::parse(q) {
        if let Some(id) = store.find_by_psp_reference(&reference).await? {
            return Ok((Resolved::Payment(id), "PSP reference"));
        }
    }
    // A PSP event id: parked ones are in their key (a Query), applied ones on their event item (a Scan).
    if let Some(item) = all_parked(ctx).await?.into_iter().find(|p| p.event_key == q) {
        let target = crate::parked::target(&ctx.env, &item);
        let found = match target.as_ref().map(|t| (&t.payment_id, &t.psp_reference)) {
            Some((Some(id), _)) if store.get(id).await?.is_some() => Some(id.clone()),
            Some((_, Some(reference))) => store.find_by_psp_reference(reference).await?,
            _ => None,
        };
        if let Some(id) = found {
            return Ok((Resolved::Payment(id), "parked PSP event id"));
        }
        return Err(format!(
            "{q} is a parked webhook ({}: {}) about {}, and no such payment exists; \
             `paymentsctl parked replay {} --dry-run` once it does",
            item.kind,
            item.reason,
            target.map_or("a payment its body does not name".to_owned(), |t| format!("{t:?}")),
            item.key
        )
        .into());
    }
    if let Some(id) = scan_for_psp_event(ctx, q, opts.progress).await? {
        return Ok((Resolved::Payment(id), "PSP event id"));
    }
    Err(format!(
        "nothing is known about {q:?}: not a payment id, order id, bound PSP reference, parked or applied PSP \
         event id"
    )
    .into())
}

/// Scans the table for the event item that applied PSP event `id` (an operator's tool, never a hot path).
async fn scan_for_psp_event(ctx: &Ctx, id: &str, progress: bool) -> Result<Option<PaymentId>, crate::Error> {
    let bar = spinner(progress, "scanning the table for the PSP event id");
    let mut pages = ctx
        .dynamodb
        .scan()
        .table_name(ctx.table())
        .filter_expression("entity = :e AND psp_event_id = :id")
        .expression_attribute_values(":e", AttributeValue::S("event".into()))
        .expression_attribute_values(":id", AttributeValue::S(id.to_owned()))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| format!("Scan: {e}"))?;
        bar.inc(u64::try_from(page.scanned_count()).unwrap_or(0));
        if let Some(pid) = page
            .items()
            .first()
            .and_then(|i| text(i, "payment_id"))
            .and_then(|p| PaymentId::parse(p).ok())
        {
            bar.finish_and_clear();
            return Ok(Some(pid));
        }
    }
    bar.finish_and_clear();
    Ok(None)
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

/// The intake's log lines about `p`'s deliveries: the local log with `--log`, else the Logs Insights query
/// when the log group is known (a failure is a note: the rest of the timeline stands), else the query only.
async fn deliveries_of(ctx: &Ctx, t: &mut Timeline, p: &Payment, opts: &Options) -> Result<(), crate::Error> {
    let rows = if let Some(path) = &opts.local_log {
        deliveries::from_local_log(path, &deliveries::needles(p))?
    } else if let Some(group) = &opts.log_group {
        t.logs_queries.push(deliveries::insights_command(p, group, opts.now_ms));
        match deliveries::from_insights(&ctx.logs, group, p, opts.now_ms, opts.logs_deadline).await {
            Ok(rows) => rows,
            Err(e) => {
                t.find(
                    Level::Note,
                    format!(
                        "webhook deliveries not read from the intake's logs: {}",
                        shared::telemetry::ErrorChain(&e)
                    ),
                );
                return Ok(());
            }
        }
    } else {
        t.logs_queries
            .push(deliveries::insights_command(p, "<intake log group>", opts.now_ms));
        t.find(
            Level::Note,
            "deliveries that changed nothing (duplicate, stale, 503) write no item; they are in the intake's \
             logs: set INTAKE_LOG_GROUP or --log-group to have the timeline query them (Logs Insights, billed per \
             GB scanned), or --log <file> locally",
        );
        return Ok(());
    };
    for d in &rows {
        if let Some(at_ms) = d.at_ms {
            t.entries.push(delivery_entry(d, at_ms));
        }
    }
    t.deliveries.extend(rows);
    Ok(())
}

fn delivery_entry(d: &Delivery, at_ms: i64) -> Entry {
    let mut entry = Entry::new(at_ms, Source::Logs, d.result.clone().unwrap_or_else(|| d.level.clone()));
    entry.path = Some("webhook".to_owned());
    entry.correlation_id = d.correlation_id.clone();
    entry.psp_event_id = d.psp_event_id.clone();
    entry.detail = Some(d.message.clone());
    entry
}

async fn payment_events(ctx: &Ctx, t: &mut Timeline, p: &Payment) -> Result<Vec<PaymentEvent>, crate::Error> {
    let mut events = Vec::new();
    for item in query(ctx, payment_pk(&p.id), Some(keys::EVENT_SK_PREFIX)).await? {
        let sk = text(&item, "sk").unwrap_or_default();
        match event_from_item(item) {
            Ok(e) => events.push(e),
            Err(e) => t.find(Level::Anomaly, format!("event item {sk} is unreadable: {e}")),
        }
    }
    for e in &events {
        let mut entry = Entry::new(e.recorded_at_ms, Source::Payment, e.kind.as_str());
        entry.version = Some(e.version);
        entry.status = match e.previous_status {
            Some(prev) => format!("{} -> {}", prev.as_str(), e.status.as_str()),
            None => format!("-> {}", e.status.as_str()),
        };
        entry.path = Some(e.path.as_str().to_owned());
        entry.correlation_id = Some(e.correlation_id.to_string());
        entry.trace_context = e.trace_context.clone();
        entry.psp_event_id = e.psp_event_id.as_ref().map(ToString::to_string);
        let mut detail = Vec::new();
        if let Some(r) = &e.reason {
            detail.push(r.clone());
        }
        if e.refunded_minor > 0 {
            detail.push(format!("refunded {} of {}", e.refunded_minor, e.money.amount_minor()));
        }
        if e.kind == EventKind::ActionRequired {
            detail.push("customer action withheld from the event (secrets are never in events)".into());
        }
        entry.detail = (!detail.is_empty()).then(|| detail.join("; "));
        t.entries.push(entry);
    }
    Ok(events)
}

/// Versions 1..=payment.version each exactly once, each based on the one before; no terminal regression.
fn check_payment(t: &mut Timeline, p: &Payment, events: &[PaymentEvent], opts: &Options) {
    let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
    let missing: Vec<u64> = (1..=p.version).filter(|v| !versions.contains(v)).collect();
    if !missing.is_empty() {
        t.find(
            Level::Gap,
            format!(
                "payment at version {} but the event log lacks version(s) {missing:?}: every accepted transition \
                 must leave its event",
                p.version
            ),
        );
    }
    for v in versions.iter().filter(|v| **v > p.version) {
        t.find(
            Level::Anomaly,
            format!("event version {v} is newer than the payment (version {})", p.version),
        );
    }
    if let Some(first) = events.first() {
        if first.version == 1 && first.kind != EventKind::PaymentCreated {
            t.find(
                Level::Anomaly,
                format!("version 1 is {}, not PaymentCreated", first.kind.as_str()),
            );
        }
    }
    for pair in events.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.version == a.version + 1 {
            if let Some(prev) = b.previous_status {
                if prev != a.status {
                    t.find(
                        Level::Anomaly,
                        format!(
                            "v{} starts from {} but v{} left the payment {}",
                            b.version,
                            prev.as_str(),
                            a.version,
                            a.status.as_str()
                        ),
                    );
                }
            }
        }
        if a.status.is_terminal() && !b.status.is_terminal() {
            t.find(
                Level::Anomaly,
                format!(
                    "terminal {} at v{} became {} at v{}",
                    a.status.as_str(),
                    a.version,
                    b.status.as_str(),
                    b.version
                ),
            );
        }
        if b.refunded_minor < a.refunded_minor {
            t.find(Level::Anomaly, format!("refunded total went down at v{}", b.version));
        }
    }
    for e in events.iter().filter(|e| e.kind == EventKind::AnomalyRecorded) {
        t.find(
            Level::Anomaly,
            format!(
                "anomaly recorded at v{} ({} path): {}",
                e.version,
                e.path.as_str(),
                e.reason.as_deref().unwrap_or("no reason given")
            ),
        );
    }
    if p.refunded_minor > p.money.amount_minor() {
        t.find(Level::Anomaly, "refunded more than the payment's amount");
    }
    if !p.status.is_terminal() {
        let open_ms = opts.now_ms - p.created_at_ms;
        let level = if open_ms > opts.payment_stale_after_ms {
            Level::Warning
        } else {
            Level::Note
        };
        t.find(
            level,
            format!(
                "payment is open ({}) for {}; recovery asks the PSP about payments open longer than {}",
                p.status.as_str(),
                human(open_ms),
                human(opts.payment_stale_after_ms)
            ),
        );
    }
}

fn human(ms: i64) -> String {
    let d = std::time::Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0));
    humantime::format_duration(d).to_string()
}

async fn cursors(ctx: &Ctx, t: &mut Timeline, p: &Payment, opts: &Options) -> Result<(), crate::Error> {
    for name in &opts.consumers {
        let item = get(ctx, keys::consumer_cursor(name, &p.id)).await?;
        let cursor = Cursor {
            payment_id: p.id.to_string(),
            consumer: name.clone(),
            applied_version: item
                .as_ref()
                .and_then(|i| number(i, "applied_version"))
                .and_then(|v| u64::try_from(v).ok()),
            applied_event_id: item.as_ref().and_then(|i| text(i, "applied_event_id")),
            updated_at_ms: item.as_ref().and_then(|i| number(i, "updated_at_ms")),
        };
        match cursor.applied_version {
            Some(v) if v == p.version => {}
            Some(v) if v > p.version => t.find(
                Level::Anomaly,
                format!("consumer {name} applied v{v}, beyond the payment's v{}", p.version),
            ),
            applied => t.find(
                Level::Warning,
                format!(
                    "consumer {name} has applied {} of {}: the rest is in the queue, held back after a gap, or in \
                     the DLQ (`paymentsctl redrive-dlq --dry-run`, `paymentsctl replay payment {}`)",
                    applied.map_or("nothing".to_owned(), |v| format!("up to v{v}")),
                    p.version,
                    p.id
                ),
            ),
        }
        if let (Some(v), Some(at)) = (cursor.applied_version, cursor.updated_at_ms) {
            let mut entry = Entry::new(at, Source::Cursor, format!("{name} at v{v}"));
            entry.version = Some(v);
            entry.detail = cursor.applied_event_id.clone().map(|id| format!("last applied {id}"));
            t.entries.push(entry);
        }
        t.cursors.push(cursor);
    }
    Ok(())
}

/// The order projection's item for `p`, checked against the payment.
async fn projection(ctx: &Ctx, t: &mut Timeline, p: &Payment) -> Result<(), crate::Error> {
    let item = get(ctx, keys::order_payment(&p.order_id, &p.id)).await?;
    if let Some(i) = item {
        let projection = Projection {
            payment_id: p.id.to_string(),
            payment_status: text(&i, "payment_status").unwrap_or_default(),
            payment_version: number(&i, "payment_version")
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0),
            last_event: text(&i, "last_event").unwrap_or_default(),
        };
        if projection.payment_version == p.version && projection.payment_status != p.status.as_str() {
            t.find(
                Level::Anomaly,
                format!(
                    "the order projection says {} at v{} but the payment is {}",
                    projection.payment_status,
                    projection.payment_version,
                    p.status.as_str()
                ),
            );
        }
        t.projections.push(projection);
    }
    Ok(())
}

async fn lease(ctx: &Ctx, t: &mut Timeline, id: &PaymentId, now_ms: i64) -> Result<(), crate::Error> {
    if let Some(item) = get(ctx, keys::lease(id)).await? {
        let expires_at_ms = number(&item, "expires_at_ms").unwrap_or(0);
        let view = LeaseView {
            payment_id: id.to_string(),
            owner: text(&item, "owner").unwrap_or_default(),
            expires_at_ms,
            live: expires_at_ms >= now_ms,
        };
        if view.live {
            t.find(
                Level::Note,
                format!(
                    "lease held by {} until {}: intake or recovery is working on the payment now",
                    view.owner,
                    format_ms(expires_at_ms)
                ),
            );
        }
        t.leases.push(view);
    }
    Ok(())
}

/// Parked webhooks that name this payment (id, PSP reference) or one of its PSP event ids.
fn parked_for(t: &mut Timeline, p: &Payment, events: &[PaymentEvent], parked: &[ParkedItem]) {
    let mut needles: Vec<String> = vec![p.id.to_string()];
    needles.extend(p.psp_reference.as_ref().map(ToString::to_string));
    let event_ids: Vec<String> = events
        .iter()
        .filter_map(|e| e.psp_event_id.as_ref().map(ToString::to_string))
        .collect();
    for item in parked {
        let named = needles.iter().any(|n| item.body.contains(n.as_str())) || event_ids.contains(&item.event_key);
        if !named {
            continue;
        }
        let mut entry = Entry::new(item.recorded_at_ms, Source::Parked, item.kind.clone());
        entry.psp_event_id = Some(item.event_key.clone());
        entry.detail = Some(format!("{} (key {})", item.reason, item.key));
        entry.status = item
            .replay_result
            .as_ref()
            .map(|r| format!("replayed: {r}"))
            .unwrap_or_default();
        t.entries.push(entry);
        if item.replayed_at_ms.is_none() {
            t.find(
                Level::Warning,
                format!(
                    "webhook {} is parked as {} ({}); `paymentsctl parked replay {} --kind {} --dry-run`",
                    item.event_key, item.kind, item.reason, item.key, item.kind
                ),
            );
        }
    }
}

async fn saga(
    ctx: &Ctx,
    t: &mut Timeline,
    order: &OrderId,
    payment: Option<&Payment>,
    opts: &Options,
) -> Result<(), crate::Error> {
    let Some(item) = get(ctx, keys::saga(order)).await? else {
        if payment.is_some() {
            t.find(
                Level::Note,
                format!("no checkout saga for order {order} (a payment created through /payments directly)"),
            );
        }
        return Ok(());
    };
    let record: SagaRecord = match serde_dynamo::from_item(item) {
        Ok(r) => r,
        Err(e) => {
            t.find(Level::Anomaly, format!("saga {order} is unreadable: {e}"));
            return Ok(());
        }
    };
    let next = match Loaded::from_record(record.clone()) {
        Ok(loaded) => describe_next(loaded.next_action()),
        Err(e) => {
            t.find(Level::Anomaly, format!("saga does not load: {e}"));
            "none: the saga does not load".to_owned()
        }
    };
    let log = SagaStore::new(ctx.dynamodb.clone(), ctx.table()).events(order).await?;
    for e in &log {
        t.entries.push(saga_entry(e));
    }
    check_saga(t, &record, &log, payment, opts);
    t.saga = Some(SagaSummary {
        order_id: order.to_string(),
        status: record.status.as_str().to_owned(),
        version: record.version,
        payment_id: record.payment_id.as_ref().map(ToString::to_string),
        captured: record.captured,
        refunded_minor: record.refunded_minor,
        failure: record.failure.as_ref().map(|f| format!("{}: {}", f.step, f.reason)),
        next,
        started_at_ms: record.started_at_ms,
        updated_at_ms: record.updated_at_ms,
    });
    Ok(())
}

fn is_compensation(kind: SagaEventKind) -> bool {
    matches!(
        kind,
        SagaEventKind::PaymentRefunded | SagaEventKind::StepCompensated | SagaEventKind::StockReleased
    )
}

fn saga_entry(e: &SagaEvent) -> Entry {
    let mut entry = Entry::new(e.at_ms, Source::Saga, e.kind.as_str());
    entry.version = Some(e.version);
    entry.status = e.status.as_str().to_owned();
    entry.compensation = is_compensation(e.kind);
    let step = if entry.compensation {
        format!("compensates {}", e.step)
    } else {
        format!("step {}", e.step)
    };
    entry.detail = Some(match &e.detail {
        Some(d) => format!("{step}: {d}"),
        None => step,
    });
    entry.correlation_id = Some(format!("checkout-{}", e.order_id));
    entry
}

fn check_saga(t: &mut Timeline, r: &SagaRecord, log: &[SagaEvent], payment: Option<&Payment>, opts: &Options) {
    let versions: Vec<u64> = log.iter().map(|e| e.version).collect();
    let missing: Vec<u64> = (1..=r.version).filter(|v| !versions.contains(v)).collect();
    if !missing.is_empty() {
        t.find(
            Level::Gap,
            format!("saga at version {} but its log lacks version(s) {missing:?}", r.version),
        );
    }
    // Compensations run in reverse order of the steps: the payment's before the stock's.
    let position = |kinds: &[SagaEventKind]| log.iter().position(|e| kinds.contains(&e.kind));
    if let (Some(stock), Some(pay)) = (
        position(&[SagaEventKind::StockReleased]),
        position(&[SagaEventKind::PaymentRefunded, SagaEventKind::StepCompensated]),
    ) {
        if stock < pay {
            t.find(
                Level::Anomaly,
                "the stock was released before the payment was compensated",
            );
        }
    }
    if !r.status.is_terminal() {
        let idle_ms = opts.now_ms - r.updated_at_ms;
        if idle_ms > opts.saga_stuck_after_ms {
            t.find(
                Level::Warning,
                format!(
                    "saga {} has not moved for {} (sweeper threshold {}); `paymentsctl escalations retry {} --dry-run`",
                    r.status,
                    human(idle_ms),
                    human(opts.saga_stuck_after_ms),
                    r.order_id
                ),
            );
        }
    }
    if let Some(p) = payment {
        use shared::PaymentStatus::*;
        match (r.status, p.status) {
            (SagaStatus::Completed, s) if s != Captured => t.find(
                Level::Anomaly,
                format!("the order is confirmed but its payment is {}", s.as_str()),
            ),
            (SagaStatus::Compensated, Captured) => t.find(
                Level::Anomaly,
                format!(
                    "the saga is compensated but its payment is captured with {} of {} refunded: money kept",
                    p.refunded_minor,
                    p.money.amount_minor()
                ),
            ),
            (SagaStatus::Compensated, s) if !s.is_terminal() => t.find(
                Level::Anomaly,
                format!("the saga is compensated but its payment is still {}", s.as_str()),
            ),
            _ => {}
        }
    }
}

async fn escalations(ctx: &Ctx, t: &mut Timeline, order: &OrderId, opts: &Options) {
    let url = match &opts.escalation_queue {
        Some(url) => Some(url.clone()),
        None => ctx.queue_url(QueueRole::Escalations, None).await.ok(),
    };
    let Some(url) = url else {
        t.find(
            Level::Note,
            "escalations not checked: ESCALATION_QUEUE_URL is not set (the stack's output SagaEscalationQueueUrl)",
        );
        return;
    };
    match peek(&ctx.sqs, &url).await {
        Ok(messages) => {
            for m in messages.into_iter().filter(|m| m.order_id == order.as_str()) {
                let mut entry = Entry::new(m.escalated_at_ms, Source::Escalation, "escalated");
                entry.detail = Some(format!("{} after {} attempts: {}", m.action, m.attempts, m.error));
                t.entries.push(entry);
                t.find(
                    Level::Anomaly,
                    format!(
                        "escalated: {} failed {} times; `paymentsctl escalations retry {order} --dry-run`",
                        m.action, m.attempts
                    ),
                );
                t.escalations.push(m);
            }
        }
        Err(e) => t.find(Level::Note, format!("escalations not checked: {e}")),
    }
}

/// The timeline for people.
pub fn render(t: &Timeline) -> String {
    let mut out = format!("timeline of {} ({})\n", t.query, t.resolved_as);
    for p in &t.payments {
        out.push_str(&render_payment(p));
    }
    if let Some(s) = &t.saga {
        out.push_str(&format!(
            "saga     {}  {}  v{}  captured {}  refunded {}{}  next: {}\n",
            s.order_id,
            s.status,
            s.version,
            s.captured,
            s.refunded_minor,
            s.failure
                .as_ref()
                .map(|f| format!("  failed at {f}"))
                .unwrap_or_default(),
            s.next
        ));
    }
    out.push('\n');
    out.push_str(&render_entries(t));
    out.push('\n');
    out.push_str(&render_state(t));
    out.push_str(&render_findings(&t.findings));
    out.push_str(&render_untimed_deliveries(t));
    out
}

fn render_payment(p: &PaymentSummary) -> String {
    format!(
        "payment  {}  order {}  {}  v{}  {} {} (refunded {})  PSP {}{}\n",
        p.payment_id,
        p.order_id,
        p.status,
        p.version,
        p.amount_minor,
        p.currency,
        p.refunded_minor,
        p.psp_reference.as_deref().unwrap_or("-"),
        if p.customer_action_held {
            "  (a customer action is held: withheld here)"
        } else {
            ""
        }
    )
}

/// The time-ordered table; a PAYMENT column when the order has several payments.
fn render_entries(t: &Timeline) -> String {
    let several = t.payments.len() > 1;
    let rows: Vec<Vec<String>> = t
        .entries
        .iter()
        .map(|e| {
            let mut detail = e.detail.clone().unwrap_or_default();
            if let Some(trace) = &e.trace_context {
                detail = format!("{detail}{}trace {trace}", if detail.is_empty() { "" } else { "; " });
            }
            let what = if e.compensation {
                format!("{} (compensation)", e.what)
            } else {
                e.what.clone()
            };
            let mut row = vec![e.at.clone(), e.source.as_str().to_owned()];
            if several {
                row.push(e.payment_id.clone().unwrap_or_default());
            }
            row.extend([
                e.version.map(|v| v.to_string()).unwrap_or_default(),
                what,
                e.status.clone(),
                e.path.clone().unwrap_or_default(),
                e.correlation_id.clone().unwrap_or_default(),
                e.psp_event_id.clone().unwrap_or_default(),
                detail,
            ]);
            row
        })
        .collect();
    let mut header = vec!["TIME", "SOURCE"];
    if several {
        header.push("PAYMENT");
    }
    header.extend(["V", "WHAT", "STATUS", "PATH", "CORRELATION", "PSP EVENT", "DETAIL"]);
    crate::table::render(&header, &rows)
}

/// Cursors, projections, leases and escalations, one line each.
fn render_state(t: &Timeline) -> String {
    let mut out = String::new();
    let of = |payment: &str| {
        if t.payments.len() > 1 {
            format!(" ({payment})")
        } else {
            String::new()
        }
    };
    for c in &t.cursors {
        let applied = match c.applied_version {
            Some(v) => format!(
                "applied up to v{v}{}",
                c.updated_at_ms
                    .map(|at| format!(" at {}", format_ms(at)))
                    .unwrap_or_default()
            ),
            None => "nothing applied".to_owned(),
        };
        out.push_str(&format!("cursor   {}{}: {applied}\n", c.consumer, of(&c.payment_id)));
    }
    for p in &t.projections {
        out.push_str(&format!(
            "order projection{}: {} at v{} (last event {})\n",
            of(&p.payment_id),
            p.payment_status,
            p.payment_version,
            p.last_event
        ));
    }
    for l in &t.leases {
        out.push_str(&if l.live {
            format!(
                "lease{}    held by {} until {}\n",
                of(&l.payment_id),
                l.owner,
                format_ms(l.expires_at_ms)
            )
        } else {
            format!(
                "lease{}    none live (an expired lease of {} awaits TTL deletion)\n",
                of(&l.payment_id),
                l.owner
            )
        });
    }
    if t.leases.is_empty() {
        out.push_str("lease    none\n");
    }
    if t.escalations.is_empty() {
        out.push_str("escalations: none found\n");
    }
    out
}

fn render_findings(findings: &[Finding]) -> String {
    let rank = |l: Level| match l {
        Level::Gap => 0,
        Level::Anomaly => 1,
        Level::Warning => 2,
        Level::Note => 3,
    };
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by_key(|f| rank(f.level));
    let mut out = "\nfindings:\n".to_owned();
    for f in sorted {
        out.push_str(&format!("  {:<8} {}\n", f.level.marker(), f.message));
    }
    out
}

/// The local log's delivery lines (no time: file order) and the Logs Insights commands.
fn render_untimed_deliveries(t: &Timeline) -> String {
    let mut out = String::new();
    let untimed: Vec<&Delivery> = t.deliveries.iter().filter(|d| d.at_ms.is_none()).collect();
    if !untimed.is_empty() {
        out.push_str("\nwebhook deliveries in the local log (file order; local text logs carry no time):\n");
        for d in untimed {
            out.push_str(&format!(
                "  {:<5} {}  result {}  correlation {}  PSP event {}\n",
                d.level,
                d.message,
                d.result.as_deref().unwrap_or("-"),
                d.correlation_id.as_deref().unwrap_or("-"),
                d.psp_event_id.as_deref().unwrap_or("-")
            ));
        }
    }
    if !t.logs_queries.is_empty() {
        out.push_str(
            "\nthe intake's log lines for deliveries that left no item (Logs Insights, billed per GB scanned):\n",
        );
        for q in &t.logs_queries {
            out.push_str(&format!("  {q}\n"));
        }
    }
    out
}
