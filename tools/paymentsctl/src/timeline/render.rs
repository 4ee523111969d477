//! The timeline for people: the payments and the saga, the time-ordered entries, each consumer's state and
//! the findings.

use super::{Finding, Level, PaymentSummary, Timeline};
use crate::deliveries::Delivery;
use crate::when::format_ms;

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
