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
//!
//! **Not on record**: a webhook delivery that changed nothing (duplicate, stale, deferred with 503, a 401)
//! writes no item, by design: recording it would add a write to every webhook. Those are in the intake's
//! logs only; the command prints the CloudWatch Logs Insights query that finds them for this payment, and
//! says so when it runs against the local stack (whose logs go to its terminal).

use crate::escalations::{describe_next, peek, EscalationMessage};
use crate::settings::{Ctx, QueueRole};
use crate::when::format_ms;
use aws_sdk_dynamodb::types::AttributeValue;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use shared::saga::{Loaded, SagaEvent, SagaEventKind, SagaRecord, SagaStatus, SagaStore};
use shared::store::item::{event_from_item, payment_pk, Item};
use shared::store::ParkedKind;
use shared::{EventKind, OrderId, Payment, PaymentEvent, PaymentId, PspReference};

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
    /// The intake's log group, for the Logs Insights query printed at the end.
    pub log_group: String,
    pub now_ms: i64,
    /// Show a spinner on stderr during scans.
    pub progress: bool,
    /// The local stack's log file: its webhook lines for the payment are shown (there is no Logs Insights
    /// locally).
    pub local_log: Option<std::path::PathBuf>,
}

impl Options {
    /// From the functions' own variables (`SAGA_STUCK_AFTER_SECONDS`, `RECOVERY_STALE_AFTER_SECONDS`,
    /// `INTAKE_LOG_GROUP`), with their documented defaults.
    pub fn from_env(now_ms: i64) -> Self {
        let seconds = |name: &str, default: i64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(default)
                * 1000
        };
        Self {
            consumers: vec![order_projection::NAME.to_owned()],
            escalation_queue: None,
            saga_stuck_after_ms: seconds("SAGA_STUCK_AFTER_SECONDS", 60),
            payment_stale_after_ms: seconds("RECOVERY_STALE_AFTER_SECONDS", 300),
            log_group: std::env::var("INTAKE_LOG_GROUP")
                .unwrap_or_else(|_| "/aws/lambda/payments-<stage>-webhook-intake".to_owned()),
            now_ms,
            progress: false,
            local_log: None,
        }
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
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Payment => "payment",
            Source::Saga => "saga",
            Source::Cursor => "cursor",
            Source::Parked => "parked",
            Source::Escalation => "escalation",
        }
    }
}

/// One line of the story.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub at_ms: i64,
    pub at: String,
    pub source: Source,
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

#[derive(Debug, Clone, Serialize)]
pub struct Cursor {
    pub consumer: String,
    /// `None`: the consumer has applied nothing of this payment.
    pub applied_version: Option<u64>,
    pub applied_event_id: Option<String>,
    pub updated_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Projection {
    pub payment_status: String,
    pub payment_version: u64,
    pub last_event: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeaseView {
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
    pub payment: Option<PaymentSummary>,
    pub saga: Option<SagaSummary>,
    pub entries: Vec<Entry>,
    pub cursors: Vec<Cursor>,
    pub projection: Option<Projection>,
    pub lease: Option<LeaseView>,
    pub escalations: Vec<EscalationMessage>,
    pub findings: Vec<Finding>,
    /// A CloudWatch Logs Insights query for what left no item (duplicates, stale, 503s).
    pub logs_insights_query: Option<String>,
    /// With `--log`: the local stack's webhook log lines for the payment, in file order (its text logs
    /// carry no time).
    pub log_lines: Vec<String>,
}

impl Timeline {
    fn find(&mut self, level: Level, message: impl Into<String>) {
        self.findings.push(Finding {
            level,
            message: message.into(),
        });
    }
}

async fn get(ctx: &Ctx, pk: String, sk: &str) -> Result<Option<Item>, crate::Error> {
    let out = ctx
        .dynamodb
        .get_item()
        .table_name(ctx.table())
        .key("pk", AttributeValue::S(pk))
        .key("sk", AttributeValue::S(sk.to_owned()))
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
    let items = query(ctx, format!("PARKED#{}", kind.as_str()), None).await?;
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
        let saga = get(ctx, shared::saga::saga_pk(&order), "SAGA").await?;
        let mut payments: Vec<PaymentId> = saga
            .as_ref()
            .and_then(|s| text(s, "payment_id"))
            .and_then(|p| PaymentId::parse(p).ok())
            .into_iter()
            .collect();
        for item in query(ctx, format!("ORDER#{order}"), Some("PAYMENT#")).await? {
            if let Some(p) = text(&item, "sk")
                .and_then(|sk| sk.strip_prefix("PAYMENT#").map(str::to_owned))
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
        let target = crate::parked::target(&item);
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
    let mut t = Timeline {
        query: q.to_owned(),
        resolved_as: resolved_as.to_owned(),
        payment: None,
        saga: None,
        entries: Vec::new(),
        cursors: Vec::new(),
        projection: None,
        lease: None,
        escalations: Vec::new(),
        findings: Vec::new(),
        logs_insights_query: None,
        log_lines: Vec::new(),
    };
    let (payment_id, order_id) = match resolved {
        Resolved::Payment(id) => (Some(id), None),
        Resolved::Order(order, payments) => {
            if payments.len() > 1 {
                t.find(
                    Level::Note,
                    format!(
                        "order {order} has {} payments ({}); showing the first, run the timeline of each for the others",
                        payments.len(),
                        payments.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    ),
                );
            }
            (payments.into_iter().next(), Some(order))
        }
    };
    let payment = match &payment_id {
        Some(id) => ctx.store().get(id).await?,
        None => None,
    };
    if let (Some(id), None) = (&payment_id, &payment) {
        t.find(
            Level::Anomaly,
            format!("payment {id} is named by the order but has no payment item"),
        );
    }
    let order_id = order_id.or_else(|| payment.as_ref().map(|p| p.order_id.clone()));
    if let Some(p) = &payment {
        t.payment = Some(PaymentSummary::from(p));
        let events = payment_events(ctx, &mut t, p).await?;
        check_payment(&mut t, p, &events, opts);
        cursors(ctx, &mut t, p, opts).await?;
        lease(ctx, &mut t, &p.id, opts.now_ms).await?;
        parked_for(ctx, &mut t, p, &events).await?;
        t.logs_insights_query = Some(logs_query(p, &opts.log_group));
        if let Some(path) = &opts.local_log {
            let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            t.log_lines = webhook_log_lines(&text, p.id.as_str());
        }
    }
    if let Some(order) = &order_id {
        saga(ctx, &mut t, order, payment.as_ref(), opts).await?;
        escalations(ctx, &mut t, order, opts).await;
    }
    t.entries.sort_by_key(|e| e.at_ms);
    t.find(
        Level::Note,
        "webhook deliveries that changed nothing (duplicate, stale, deferred with 503, refused with 401) write \
         no item by design; they are in the intake's logs only (see the Logs Insights query)",
    );
    Ok(t)
}

async fn payment_events(ctx: &Ctx, t: &mut Timeline, p: &Payment) -> Result<Vec<PaymentEvent>, crate::Error> {
    let mut events = Vec::new();
    for item in query(ctx, payment_pk(&p.id), Some(shared::store::item::EVENT_SK_PREFIX)).await? {
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
        let item = get(ctx, format!("CONSUMER#{name}#{}", p.id), "CURSOR").await?;
        let cursor = Cursor {
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
    let [pk, sk] = order_projection::key(&p.order_id, &p.id);
    let item = get(
        ctx,
        pk.1.as_s().cloned().unwrap_or_default(),
        sk.1.as_s().map(String::as_str).unwrap_or_default(),
    )
    .await?;
    if let Some(i) = item {
        let projection = Projection {
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
        t.projection = Some(projection);
    }
    Ok(())
}

async fn lease(ctx: &Ctx, t: &mut Timeline, id: &PaymentId, now_ms: i64) -> Result<(), crate::Error> {
    if let Some(item) = get(ctx, format!("LEASE#{id}"), "LEASE").await? {
        let expires_at_ms = number(&item, "expires_at_ms").unwrap_or(0);
        let view = LeaseView {
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
        t.lease = Some(view);
    }
    Ok(())
}

/// Parked webhooks that name this payment (id, PSP reference) or one of its PSP event ids.
async fn parked_for(ctx: &Ctx, t: &mut Timeline, p: &Payment, events: &[PaymentEvent]) -> Result<(), crate::Error> {
    let mut needles: Vec<String> = vec![p.id.to_string()];
    needles.extend(p.psp_reference.as_ref().map(ToString::to_string));
    let event_ids: Vec<String> = events
        .iter()
        .filter_map(|e| e.psp_event_id.as_ref().map(ToString::to_string))
        .collect();
    for item in all_parked(ctx).await? {
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
    Ok(())
}

async fn saga(
    ctx: &Ctx,
    t: &mut Timeline,
    order: &OrderId,
    payment: Option<&Payment>,
    opts: &Options,
) -> Result<(), crate::Error> {
    let Some(item) = get(ctx, shared::saga::saga_pk(order), "SAGA").await? else {
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

/// The Logs Insights query for this payment's webhook deliveries, including those that wrote nothing.
/// Intake logs are JSON with the request span (`spans.0.payment_id`, `spans.0.correlation_id`); a delivery
/// refused before the payment was found (401, unknown payment) carries the PSP reference in its message only.
pub fn logs_query(p: &Payment, log_group: &str) -> String {
    let mut filter = format!("spans.0.payment_id = \"{}\"", p.id);
    if let Some(reference) = &p.psp_reference {
        filter.push_str(&format!(" or @message like \"{reference}\""));
    }
    format!(
        "aws logs start-query --log-group-names {log_group} --start-time <epoch s> --end-time <epoch s> \
         --query-string 'fields @timestamp, level, message, result, reason, spans.0.correlation_id \
         | filter {filter} | sort @timestamp asc'"
    )
}

/// The lines of a local stack log (text, coloured, no time) about the webhook path of `payment`, without the
/// colours: each delivery's `result` (applied, `Ignored(Duplicate)`, `Ignored(Stale)`, ...) and correlation id.
pub fn webhook_log_lines(log: &str, payment: &str) -> Vec<String> {
    log.lines()
        .map(strip_ansi)
        .filter(|l| l.contains(payment) && l.contains("path=\"webhook\""))
        .map(|l| l.trim().to_owned())
        .collect()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-letter.
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The timeline for people.
pub fn render(t: &Timeline) -> String {
    let mut out = format!("timeline of {} ({})\n", t.query, t.resolved_as);
    if let Some(p) = &t.payment {
        out.push_str(&format!(
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
        ));
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
    let rows: Vec<Vec<String>> = t
        .entries
        .iter()
        .map(|e| {
            let mut detail = e.detail.clone().unwrap_or_default();
            if let Some(trace) = &e.trace_context {
                detail = format!("{detail}{}trace {trace}", if detail.is_empty() { "" } else { "; " });
            }
            vec![
                e.at.clone(),
                e.source.as_str().to_owned(),
                e.version.map(|v| v.to_string()).unwrap_or_default(),
                if e.compensation {
                    format!("{} (compensation)", e.what)
                } else {
                    e.what.clone()
                },
                e.status.clone(),
                e.path.clone().unwrap_or_default(),
                e.correlation_id.clone().unwrap_or_default(),
                e.psp_event_id.clone().unwrap_or_default(),
                detail,
            ]
        })
        .collect();
    out.push_str(&crate::table::render(
        &[
            "TIME",
            "SOURCE",
            "V",
            "WHAT",
            "STATUS",
            "PATH",
            "CORRELATION",
            "PSP EVENT",
            "DETAIL",
        ],
        &rows,
    ));
    out.push('\n');
    for c in &t.cursors {
        out.push_str(&format!(
            "cursor   {}: {}\n",
            c.consumer,
            match c.applied_version {
                Some(v) => format!(
                    "applied up to v{v}{}",
                    c.updated_at_ms
                        .map(|at| format!(" at {}", format_ms(at)))
                        .unwrap_or_default()
                ),
                None => "nothing applied".to_owned(),
            }
        ));
    }
    if let Some(p) = &t.projection {
        out.push_str(&format!(
            "order projection: {} at v{} (last event {})\n",
            p.payment_status, p.payment_version, p.last_event
        ));
    }
    out.push_str(&match &t.lease {
        Some(l) if l.live => format!("lease    held by {} until {}\n", l.owner, format_ms(l.expires_at_ms)),
        Some(l) => format!(
            "lease    none live (an expired lease of {} awaits TTL deletion)\n",
            l.owner
        ),
        None => "lease    none\n".to_owned(),
    });
    if t.escalations.is_empty() {
        out.push_str("escalations: none found\n");
    }
    out.push_str("\nfindings:\n");
    let order = |l: Level| match l {
        Level::Gap => 0,
        Level::Anomaly => 1,
        Level::Warning => 2,
        Level::Note => 3,
    };
    let mut findings: Vec<&Finding> = t.findings.iter().collect();
    findings.sort_by_key(|f| order(f.level));
    for f in findings {
        out.push_str(&format!("  {:<8} {}\n", f.level.marker(), f.message));
    }
    if !t.log_lines.is_empty() {
        out.push_str("\nwebhook deliveries in the local log (file order; local text logs carry no time):\n");
        for line in &t.log_lines {
            out.push_str(&format!("  {line}\n"));
        }
    }
    if let Some(q) = &t.logs_insights_query {
        out.push_str(&format!(
            "\ndeliveries that left no item (AWS; locally `--log <local stack log>`):\n  {q}\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_local_log_yields_the_payments_webhook_lines_without_colours() {
        let log = "\u{1b}[32m INFO\u{1b}[0m \u{1b}[1mrequest\u{1b}[0m: webhook finalized \u{1b}[3mresult\u{1b}[0m\u{1b}[2m=\u{1b}[0mIgnored(Duplicate) \u{1b}[2m\u{1b}[3mpath\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"webhook\" \u{1b}[3mpayment_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"pay_1\"\u{1b}[0m
 INFO request: payment transition written payment_id=pay_1 path=\"sync\"
 INFO request: webhook finalized result=Applied path=\"webhook\" payment_id=\"pay_2\"";
        let lines = super::webhook_log_lines(log, "pay_1");
        assert_eq!(
            lines,
            ["INFO request: webhook finalized result=Ignored(Duplicate) path=\"webhook\" payment_id=\"pay_1\""]
        );
    }
}
