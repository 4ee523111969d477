//! The findings: gaps and anomalies between a payment and its events, and between a saga, its log and its
//! payment.

use super::{Level, Options, Timeline};
use checkout_saga::saga::{SagaEvent, SagaEventKind, SagaRecord, SagaStatus};
use shared::{EventKind, Payment, PaymentEvent};

/// Versions 1..=payment.version each exactly once, each based on the one before; no terminal regression.
/// Each kind of finding is its own step below, called in the order the findings are printed.
pub(super) fn check_payment(t: &mut Timeline, p: &Payment, events: &[PaymentEvent], opts: &Options) {
    check_payment_versions(t, p, events);
    for pair in events.windows(2) {
        check_transition(t, &pair[0], &pair[1]);
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
    check_payment_open(t, p, opts);
}

/// The versions in `1..=version` that `versions` lacks: each accepted transition (of a payment or a saga)
/// leaves exactly one event, so a missing one is a lost write or a deleted item.
fn missing_versions(versions: &[u64], version: u64) -> Vec<u64> {
    (1..=version).filter(|v| !versions.contains(v)).collect()
}

/// The payment's event log against its version: none missing, none newer than the payment, and version 1 the
/// creation (a log that starts elsewhere was written by something other than `create`).
fn check_payment_versions(t: &mut Timeline, p: &Payment, events: &[PaymentEvent]) {
    let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
    let missing = missing_versions(&versions, p.version);
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
}

/// One transition `a` → `b` of the event log: `b` starts from the status `a` left (when they are consecutive),
/// a terminal status stays terminal, and the refunded total never goes down (finalize's rules, checked after
/// the fact on what was written).
fn check_transition(t: &mut Timeline, a: &PaymentEvent, b: &PaymentEvent) {
    if b.version == a.version + 1 {
        if let Some(prev) = b.previous_status.filter(|prev| *prev != a.status) {
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

/// An open payment is a note, or a warning once it is older than recovery's threshold: the operator sees
/// whether recovery should already have asked the PSP about it.
fn check_payment_open(t: &mut Timeline, p: &Payment, opts: &Options) {
    if p.status.is_terminal() {
        return;
    }
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

pub(super) fn human(ms: i64) -> String {
    let d = std::time::Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0));
    humantime::format_duration(d).to_string()
}

/// A saga against its log and its payment: no version missing, compensations in reverse order, not stuck,
/// and its end agreeing with the payment's. Each is its own step below, in the order the findings are printed.
pub(super) fn check_saga(
    t: &mut Timeline,
    r: &SagaRecord,
    log: &[SagaEvent],
    payment: Option<&Payment>,
    opts: &Options,
) {
    let versions: Vec<u64> = log.iter().map(|e| e.version).collect();
    let missing = missing_versions(&versions, r.version);
    if !missing.is_empty() {
        t.find(
            Level::Gap,
            format!("saga at version {} but its log lacks version(s) {missing:?}", r.version),
        );
    }
    check_compensation_order(t, log);
    check_saga_idle(t, r, opts);
    if let Some(p) = payment {
        check_saga_payment(t, r, p);
    }
}

/// Compensations run in reverse order of the steps: the payment's before the stock's.
fn check_compensation_order(t: &mut Timeline, log: &[SagaEvent]) {
    let position = |kinds: &[SagaEventKind]| log.iter().position(|e| kinds.contains(&e.kind));
    if let (Some(stock), Some(pay)) = (
        position(&[SagaEventKind::StockReleased]),
        position(&[
            SagaEventKind::PaymentRefunded,
            SagaEventKind::RefundImpossible,
            SagaEventKind::StepCompensated,
        ]),
    ) {
        if stock < pay {
            t.find(
                Level::Anomaly,
                "the stock was released before the payment was compensated",
            );
        }
    }
}

/// An open saga idle past the sweeper's threshold is a warning, with the command that shows its next step.
fn check_saga_idle(t: &mut Timeline, r: &SagaRecord, opts: &Options) {
    if r.status.is_terminal() {
        return;
    }
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

/// The saga's end against its payment's: a confirmed order is paid, a compensated one kept no money and left
/// no payment open.
fn check_saga_payment(t: &mut Timeline, r: &SagaRecord, p: &Payment) {
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
