//! The findings: gaps and anomalies between a payment and its events, and between a saga, its log and its
//! payment.

use super::{Level, Options, Timeline};
use shared::saga::{SagaEvent, SagaEventKind, SagaRecord, SagaStatus};
use shared::{EventKind, Payment, PaymentEvent};

/// Versions 1..=payment.version each exactly once, each based on the one before; no terminal regression.
pub(super) fn check_payment(t: &mut Timeline, p: &Payment, events: &[PaymentEvent], opts: &Options) {
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

pub(super) fn human(ms: i64) -> String {
    let d = std::time::Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0));
    humantime::format_duration(d).to_string()
}

pub(super) fn check_saga(
    t: &mut Timeline,
    r: &SagaRecord,
    log: &[SagaEvent],
    payment: Option<&Payment>,
    opts: &Options,
) {
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
