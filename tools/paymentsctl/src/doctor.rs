//! `paymentsctl doctor`: is the stack healthy, in one command. It reads what on call otherwise gathers from
//! five consoles: alarms in ALARM with their reason, the events DLQ, the escalations waiting, the parked
//! webhooks not replayed, each PSP's breaker, the oldest open payment and saga with their ages, the payments
//! whose refunds failed past the give-back bound (money only a person can return), and (with a
//! Stripe key) the webhook endpoint's status and API version at Stripe. Each thing that needs a person is a
//! finding naming the command to run next; any finding is exit 3. A source that cannot be asked (no alarms
//! locally, no key, a queue not configured) is said not checked, with why, and is no finding.
//!
//! Cost: two `GetQueueAttributes`, two Queries of the parked partitions, two breaker reads, the `open-items`
//! index (keys only) and one read per open item found (at most [`OPEN_LOOKED_AT`] of each kind), one
//! `DescribeAlarms`, one Stripe read. The ages use the thresholds the functions run with
//! (`RECOVERY_STALE_AFTER_SECONDS`, `SAGA_STUCK_AFTER_SECONDS`), as `timeline` does.

use crate::settings::{Ctx, QueueRole};
use crate::timeline::Options;
use crate::when::format_ms;
use serde::Serialize;
use shared::store::open_index::{age_seconds, open_since, OpenKind};
use shared::{OrderId, PaymentId};

/// The open items of each kind read to find the oldest: open items are those in flight, few on a healthy
/// stack; past this many the oldest shown is the oldest of those read, and the report says so.
pub const OPEN_LOOKED_AT: usize = 200;

/// An alarm in ALARM.
#[derive(Debug, Clone, Serialize)]
pub struct Alarm {
    pub name: String,
    pub reason: String,
    pub since_ms: Option<i64>,
}

/// The oldest open item of a kind.
#[derive(Debug, Clone, Serialize)]
pub struct Oldest {
    pub id: String,
    pub status: String,
    pub age_seconds: u64,
    /// How many open items were read to find it (at most [`OPEN_LOOKED_AT`]).
    pub open_read: usize,
}

pub use crate::stripe::WebhookEndpoint;

/// A breaker's state.
#[derive(Debug, Clone, Serialize)]
pub struct Breaker {
    pub name: String,
    pub state: String,
    pub ends_at_ms: Option<i64>,
}

/// What `doctor` found.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    pub alarms: Option<Vec<Alarm>>,
    pub dlq_messages: Option<u64>,
    pub escalations_waiting: Option<u64>,
    pub parked_not_replayed: usize,
    pub breakers: Vec<Breaker>,
    pub oldest_open_payment: Option<Oldest>,
    /// Open payments whose money only a person can return (refunds failed past the give-back bound:
    /// `Payment::refund_for_operator`), among the open payments read; each is a finding until it is refunded.
    pub refunds_for_operator: Vec<String>,
    /// Captured payments whose capture the card scheme rejected (Adyen's `CAPTURE_FAILED`, no re-capture yet:
    /// `Payment::capture_lost`), among the open payments read: money that will not arrive.
    pub captures_failed: Vec<String>,
    pub oldest_open_saga: Option<Oldest>,
    pub webhook_endpoints: Option<Vec<WebhookEndpoint>>,
    /// Sources not asked, and why.
    pub not_checked: Vec<String>,
    /// What needs a person, each with the command to run next.
    pub findings: Vec<String>,
}

impl Report {
    /// Whether anything needs a person (exit 3).
    pub fn needs_attention(&self) -> bool {
        !self.findings.is_empty()
    }
}

/// `doctor`: every check; a table or breaker that cannot be read is an error (exit 1), a source that is not
/// configured is noted.
pub async fn run(ctx: &Ctx) -> Result<Report, crate::Error> {
    let now = shared::clock::now_ms();
    let thresholds = Options::from_env(&ctx.env, now)?;
    let mut report = Report::default();
    match alarms(ctx).await {
        Ok(alarms) => report.alarms = Some(alarms),
        Err(why) => report.not_checked.push(format!("alarms: {why}")),
    }
    report.dlq_messages = queue_depth(ctx, QueueRole::EventsDlq, &mut report.not_checked).await?;
    report.escalations_waiting = queue_depth(ctx, QueueRole::Escalations, &mut report.not_checked).await?;
    report.parked_not_replayed = crate::parked::list(ctx, None, None)
        .await?
        .iter()
        .filter(|p| p.replayed_at_ms.is_none())
        .count();
    for name in crate::breaker::BREAKERS {
        let view = crate::breaker::show(ctx, name).await?;
        report.breakers.push(Breaker {
            name: view.name,
            state: view.state,
            ends_at_ms: view.ends_at_ms,
        });
    }
    let open = open_payments(ctx, now).await?;
    (
        report.oldest_open_payment,
        report.refunds_for_operator,
        report.captures_failed,
    ) = (open.oldest, open.for_operator, open.captures_failed);
    report.oldest_open_saga = oldest_saga(ctx, now).await?;
    match webhook_endpoints(&ctx.env).await {
        Ok(endpoints) => report.webhook_endpoints = Some(endpoints),
        Err(why) => report.not_checked.push(format!("Stripe webhook endpoints: {why}")),
    }
    report.findings = findings(&report, &thresholds);
    Ok(report)
}

/// What needs a person in `report`, judged with the functions' thresholds.
pub fn findings(report: &Report, thresholds: &Options) -> Vec<String> {
    let mut out = Vec::new();
    for alarm in report.alarms.iter().flatten() {
        out.push(format!("alarm {} in ALARM: {}", alarm.name, alarm.reason));
    }
    if let Some(n) = report.dlq_messages.filter(|n| *n > 0) {
        out.push(format!(
            "{n} message(s) in the events DLQ: `paymentsctl redrive-dlq --dry-run`"
        ));
    }
    if let Some(n) = report.escalations_waiting.filter(|n| *n > 0) {
        out.push(format!("{n} escalation(s) waiting: `paymentsctl escalations list`"));
    }
    if report.parked_not_replayed > 0 {
        out.push(format!(
            "{} parked webhook(s) not replayed: `paymentsctl parked list`",
            report.parked_not_replayed
        ));
    }
    for b in report.breakers.iter().filter(|b| b.state != "closed") {
        out.push(format!(
            "breaker {} is {}: `paymentsctl breaker show --psp {}`",
            b.name, b.state, b.name
        ));
    }
    let open_too_long = [
        (
            "payment",
            &report.oldest_open_payment,
            thresholds.payment_stale_after_ms,
            "RECOVERY_STALE_AFTER_SECONDS",
        ),
        (
            "saga",
            &report.oldest_open_saga,
            thresholds.saga_stuck_after_ms,
            "SAGA_STUCK_AFTER_SECONDS",
        ),
    ];
    for (kind, oldest, limit_ms, setting) in open_too_long {
        let limit_seconds = u64::try_from(limit_ms / 1000).unwrap_or(0);
        if let Some(o) = oldest.as_ref().filter(|o| o.age_seconds > limit_seconds) {
            out.push(format!(
                "{kind} {} open ({}) for {}s, past {setting}: `paymentsctl timeline {}`",
                o.id, o.status, o.age_seconds, o.id
            ));
        }
    }
    for id in &report.captures_failed {
        out.push(format!(
            "payment {id}: captured, but the card scheme rejected the capture and no re-capture came: the money \
             will not arrive (docs/WEBHOOKS.md, `paymentsctl timeline {id}`)"
        ));
    }
    for id in &report.refunds_for_operator {
        out.push(format!(
            "payment {id}: refunds failed past the give-back bound, the money is still ours: refund the \
             customer by hand at the PSP (`paymentsctl timeline {id}`)"
        ));
    }
    for e in report
        .webhook_endpoints
        .iter()
        .flatten()
        .filter(|e| e.status != "enabled")
    {
        out.push(format!("Stripe webhook endpoint {} ({}) is {}", e.id, e.url, e.status));
    }
    out
}

/// Whether the run talks to local endpoints (DynamoDB Local), where a service without its own endpoint
/// variable is not there.
fn local_without(ctx: &Ctx, variable: &str) -> bool {
    ctx.env.optional("AWS_ENDPOINT_URL_DYNAMODB").is_some() && ctx.env.optional(variable).is_none()
}

/// The alarms in ALARM: those named `<stack>-...` with `--stack` (the template names them
/// `payments-<stage>-...`), else every alarm of the account and region.
async fn alarms(ctx: &Ctx) -> Result<Vec<Alarm>, String> {
    if local_without(ctx, "AWS_ENDPOINT_URL_CLOUDWATCH") {
        return Err("not available locally (no AWS_ENDPOINT_URL_CLOUDWATCH)".to_owned());
    }
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&ctx.sdk);
    let mut found = Vec::new();
    let mut token = None;
    loop {
        let out = cloudwatch
            .describe_alarms()
            .state_value(aws_sdk_cloudwatch::types::StateValue::Alarm)
            .set_alarm_name_prefix(ctx.target.stack.as_ref().map(|s| format!("{s}-")))
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| format!("DescribeAlarms: {}", shared::store::SdkFailure::from(e)))?;
        found.extend(out.metric_alarms().iter().map(|a| Alarm {
            name: a.alarm_name().unwrap_or_default().to_owned(),
            reason: a.state_reason().unwrap_or_default().to_owned(),
            since_ms: a.state_updated_timestamp().and_then(|t| t.to_millis().ok()),
        }));
        token = out.next_token().map(str::to_owned);
        if token.is_none() {
            return Ok(found);
        }
    }
}

/// A queue's approximate depth, or `None` (noted) when the queue is not configured.
async fn queue_depth(ctx: &Ctx, role: QueueRole, not_checked: &mut Vec<String>) -> Result<Option<u64>, crate::Error> {
    match ctx.queue_url(role, None).await {
        Ok(url) => Ok(Some(
            crate::replay::approximate_count(ctx, &url, "GetQueueAttributes").await?,
        )),
        Err(why) => {
            not_checked.push(format!("{role:?} queue: {why}"));
            Ok(None)
        }
    }
}

/// The open items of `kind` (their ids), at most [`OPEN_LOOKED_AT`].
async fn open_ids(ctx: &Ctx, kind: OpenKind, prefix: &str, now: i64) -> Result<Vec<String>, crate::Error> {
    let keys = open_since(
        &ctx.dynamodb,
        ctx.table(),
        ctx.config.open_shards,
        kind,
        now,
        OPEN_LOOKED_AT,
    )
    .await?;
    Ok(keys
        .iter()
        .filter_map(|k| k.strip_prefix(prefix).map(str::to_owned))
        .collect())
}

/// What one read of each open payment found.
#[derive(Default)]
struct OpenPayments {
    oldest: Option<Oldest>,
    /// Money only a person can return (`Payment::refund_for_operator`).
    for_operator: Vec<String>,
    /// Money that will not arrive (`Payment::capture_lost`).
    captures_failed: Vec<String>,
}

/// The open payment created longest ago, and the open payments whose money waits for a person or will not
/// arrive, from one read of each open payment.
async fn open_payments(ctx: &Ctx, now: i64) -> Result<OpenPayments, crate::Error> {
    let ids = open_ids(ctx, OpenKind::Payment, "PAYMENT#", now).await?;
    let store = ctx.store();
    let mut found = OpenPayments::default();
    for id in &ids {
        let Some(p) = store.get(&PaymentId::parse(id)?).await? else {
            continue;
        };
        if p.refund_for_operator() {
            found.for_operator.push(id.clone());
        }
        if p.capture_lost() {
            found.captures_failed.push(id.clone());
        }
        let age = age_seconds(p.created_at_ms, now);
        if !p.status.is_terminal() && found.oldest.as_ref().is_none_or(|o| age > o.age_seconds) {
            found.oldest = Some(Oldest {
                id: id.clone(),
                status: p.status.to_string(),
                age_seconds: age,
                open_read: ids.len(),
            });
        }
    }
    Ok(found)
}

/// The open saga started longest ago.
async fn oldest_saga(ctx: &Ctx, now: i64) -> Result<Option<Oldest>, crate::Error> {
    let ids = open_ids(ctx, OpenKind::Saga, "SAGA#", now).await?;
    let sagas = checkout_saga::saga::SagaStore::new(ctx.dynamodb.clone(), ctx.table(), ctx.config.open_shards);
    let mut oldest: Option<Oldest> = None;
    for id in &ids {
        let Some(loaded) = sagas.load(&OrderId::parse(id)?).await? else {
            continue;
        };
        let record = loaded.record();
        let age = age_seconds(record.started_at_ms, now);
        if oldest.as_ref().is_none_or(|o| age > o.age_seconds) {
            oldest = Some(Oldest {
                id: id.clone(),
                status: record.status.to_string(),
                age_seconds: age,
                open_read: ids.len(),
            });
        }
    }
    Ok(oldest)
}

/// Stripe's webhook endpoints (`GET /v1/webhook_endpoints`) with the key in `PSP_API_KEY` at `PSP_BASE_URL`
/// (default Stripe's API). A restricted key with "Webhook Endpoints: read" is enough.
async fn webhook_endpoints(env: &shared::Env) -> Result<Vec<WebhookEndpoint>, String> {
    crate::stripe::StripeApi::from_env(env)?.webhook_endpoints().await
}

/// The report for people.
pub fn render(r: &Report) -> String {
    let count = |n: Option<u64>| n.map_or_else(|| "not checked".to_owned(), |n| n.to_string());
    let oldest = |o: &Option<Oldest>| {
        o.as_ref().map_or_else(
            || "none".to_owned(),
            |o| {
                format!(
                    "{} ({}), {}s old (of {} open read)",
                    o.id, o.status, o.age_seconds, o.open_read
                )
            },
        )
    };
    let mut rows = vec![
        vec![
            "alarms in ALARM".to_owned(),
            r.alarms
                .as_ref()
                .map_or_else(|| "not checked".to_owned(), |a| a.len().to_string()),
        ],
        vec!["events DLQ".to_owned(), count(r.dlq_messages)],
        vec!["escalations waiting".to_owned(), count(r.escalations_waiting)],
        vec!["parked, not replayed".to_owned(), r.parked_not_replayed.to_string()],
    ];
    for b in &r.breakers {
        let until = b
            .ends_at_ms
            .map(|t| format!(" until {}", format_ms(t)))
            .unwrap_or_default();
        rows.push(vec![format!("breaker {}", b.name), format!("{}{until}", b.state)]);
    }
    rows.push(vec!["oldest open payment".to_owned(), oldest(&r.oldest_open_payment)]);
    rows.push(vec![
        "refunds for an operator".to_owned(),
        r.refunds_for_operator.len().to_string(),
    ]);
    rows.push(vec!["captures failed".to_owned(), r.captures_failed.len().to_string()]);
    rows.push(vec!["oldest open saga".to_owned(), oldest(&r.oldest_open_saga)]);
    for e in r.webhook_endpoints.iter().flatten() {
        let version = e.api_version.as_deref().unwrap_or("account default");
        rows.push(vec![
            format!("webhook endpoint {}", e.id),
            format!("{} (API {version}) {}", e.status, e.url),
        ]);
    }
    let mut out = crate::table::render(&["CHECK", "FOUND"], &rows);
    for why in &r.not_checked {
        out.push_str(&format!("not checked: {why}\n"));
    }
    if r.findings.is_empty() {
        out.push_str("nothing needs a person\n");
    }
    for f in &r.findings {
        out.push_str(&format!("NEEDS A PERSON: {f}\n"));
    }
    out
}
