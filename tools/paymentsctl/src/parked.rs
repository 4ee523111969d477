//! Parked webhooks (`PARKED#quarantined`, `PARKED#unknown_payment`): list them, and replay one once its
//! cause is fixed (the payment exists now, the parser learned the event, the endpoint's mode or account was
//! corrected).
//!
//! **What a replay can and cannot do.** The intake parks the body *redacted* (values under keys naming a
//! secret, token, URL, password, authorization or redirect are replaced, bodies over 16 KiB are cut, a body
//! that is not JSON is not stored at all), and the signature was checked when it arrived, on bytes that are
//! not kept. So a replay cannot verify a signature again and cannot restore what was redacted. It re-runs the
//! intake's own parser (`webhook_intake::stripe::parse` / `standard::parse`), its endpoint check (live mode,
//! account), finds the payment as the intake does (payment id, else the `by-psp-reference` index), takes the
//! payment's lease and finalizes through the one decision and versioned write (`PaymentStore::finalize_from`),
//! with `path = webhook` and a correlation id `replay-<event key>`. It can apply a success, a processing, a
//! decline reason, a failure and a refund. It refuses an event that carries a customer action or a retry
//! token (they were redacted: applying them would hand a customer `[redacted]`); recovery fetches those from
//! the PSP. `--dry-run` runs the same parse, lookup and pure `decide` against the current payment and writes
//! nothing. A replay that ran marks the parked item (`replayed_at_ms`, `replay_result`); it is not deleted, it
//! expires with the others after 30 days.
//!
//! Reading a parked body back through the intake's parser is in `body`.

mod body;

pub use body::target;

use crate::settings::Ctx;
use crate::timeline::{parked_items, ParkedItem};
use crate::when::format_ms;
use aws_sdk_dynamodb::types::AttributeValue;
use body::{parse, provider};
use serde::Serialize;
use shared::apply::{apply_under_lease, LeaseWait};
use shared::store::ParkedKind;
use shared::{
    clock, decide, CorrelationId, Decision, FinalizeResult, Leases, Observation, Outcome, PaymentId, PaymentStore,
    StoreError,
};
use std::time::Duration;
use webhook_intake::psp_event::{Parsed, PspEvent};

/// What every replay says about its limits (also in the README).
pub const LIMITS: &str = "a replay re-runs the intake's parser, endpoint check and the one finalize on the \
    REDACTED body: no signature check (it was checked on arrival), nothing redacted comes back, so events that \
    carry a customer action or retry token are refused (recovery fetches them from the PSP)";

pub fn parse_kind(text: &str) -> Result<ParkedKind, String> {
    match text {
        "quarantined" => Ok(ParkedKind::Quarantined),
        "unknown_payment" => Ok(ParkedKind::UnknownPayment),
        other => Err(format!("{other:?}: the kinds are quarantined and unknown_payment")),
    }
}

/// `parked list [--kind K] [--since T]`.
pub async fn list(ctx: &Ctx, kind: Option<ParkedKind>, since_ms: Option<i64>) -> Result<Vec<ParkedItem>, crate::Error> {
    let kinds = match kind {
        Some(k) => vec![k],
        None => vec![ParkedKind::Quarantined, ParkedKind::UnknownPayment],
    };
    let mut all = Vec::new();
    for k in kinds {
        all.extend(parked_items(ctx, k).await?);
    }
    all.retain(|p| since_ms.is_none_or(|since| p.recorded_at_ms >= since));
    all.sort_by_key(|p| p.recorded_at_ms);
    Ok(all)
}

pub fn render_list(items: &[ParkedItem]) -> String {
    if items.is_empty() {
        return "no parked webhooks\n".into();
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|p| {
            vec![
                format_ms(p.recorded_at_ms),
                p.kind.clone(),
                p.key.clone(),
                match (&p.replay_result, p.replayed_at_ms) {
                    (Some(r), Some(at)) => format!("{r} at {}", format_ms(at)),
                    _ => "-".into(),
                },
                p.reason.clone(),
            ]
        })
        .collect();
    format!(
        "{}\n{} parked; `paymentsctl parked replay <KEY> --dry-run` says what a replay would do\n",
        crate::table::render(&["RECORDED", "KIND", "KEY", "REPLAYED", "REASON"], &rows),
        items.len()
    )
}

/// What a replay did or would do.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub kind: String,
    pub key: String,
    pub dry_run: bool,
    pub payment_id: Option<String>,
    /// `would_apply`/`applied`, `duplicate` or `stale` (worded as the intake answers them:
    /// [`shared::IgnoreReason::answer`]), `deferred`, `refused`, `unparseable`, `ignored`, `unknown_payment`,
    /// `redacted`, `unchanged`. A lease another worker still holds after
    /// [`LEASE_WAIT`] is an error, not a result.
    pub result: String,
    pub detail: String,
    pub wrote: bool,
    pub limits: &'static str,
}

async fn find(ctx: &Ctx, key: &str, kind: Option<ParkedKind>) -> Result<ParkedItem, crate::Error> {
    let kinds = match kind {
        Some(k) => vec![k],
        None => vec![ParkedKind::Quarantined, ParkedKind::UnknownPayment],
    };
    for k in kinds {
        if let Some(item) = parked_items(ctx, k).await?.into_iter().find(|p| p.key == key) {
            return Ok(item);
        }
    }
    Err(format!("no parked webhook with key {key:?} (`paymentsctl parked list` shows the keys)").into())
}

/// How long a replay waits for the payment's lease while another worker (the intake, recovery) holds it;
/// still held then, the replay fails saying so and writes nothing.
pub const LEASE_WAIT: LeaseWait = LeaseWait::within(Duration::from_secs(3), Duration::from_millis(200));

/// Where a replay ended: its result and detail, and whether the parked item is marked with it.
struct Ended {
    result: &'static str,
    detail: String,
    mark: bool,
}

impl Ended {
    /// Ended without touching anything: the parked item is left as it was.
    fn unmarked(result: &'static str, detail: String) -> Self {
        Self {
            result,
            detail,
            mark: false,
        }
    }

    /// Ended by running: the parked item records the result (not in a dry run).
    fn marked(result: &'static str, detail: String) -> Self {
        Self {
            result,
            detail,
            mark: true,
        }
    }
}

/// `parked replay <key> [--kind K] [--dry-run]`.
pub async fn replay(
    ctx: &Ctx,
    key: &str,
    kind: Option<ParkedKind>,
    dry_run: bool,
) -> Result<ReplayReport, crate::Error> {
    let item = find(ctx, key, kind).await?;
    let mut report = ReplayReport {
        kind: item.kind.clone(),
        key: item.key.clone(),
        dry_run,
        payment_id: None,
        result: String::new(),
        detail: String::new(),
        wrote: false,
        limits: LIMITS,
    };
    let ended = run(ctx, &item, &mut report).await?;
    report.result = ended.result.to_owned();
    report.detail = ended.detail;
    if ended.mark && !dry_run {
        mark(ctx, &item, &report.result).await?;
        report.wrote = true;
    }
    Ok(report)
}

/// The replay itself: the intake's parse and endpoint check, its lookup, the pure decision, and (not in a
/// dry run) the one apply under the payment's lease.
async fn run(ctx: &Ctx, item: &ParkedItem, report: &mut ReplayReport) -> Result<Ended, crate::Error> {
    let (_, expect) = provider(&ctx.env, &item.provider)?;
    let event = match event_of(ctx, item)? {
        Ok(event) => event,
        Err(ended) => return Ok(ended),
    };
    let store = ctx.store();
    let current = match event.target.locate(&store).await? {
        Some(id) => store.get(&id).await?,
        None => None,
    };
    let Some(current) = current else {
        let detail = format!("still no payment for {:?}; nothing written", event.target);
        return Ok(Ended::unmarked("unknown_payment", detail));
    };
    report.payment_id = Some(current.id.to_string());
    let correlation = CorrelationId::parse(format!("replay-{}", item.event_key))
        .or_else(|_| CorrelationId::parse("replay"))
        .map_err(|e| e.to_string())?;
    let observation = event.observation(event.check(&expect).err(), correlation);
    let decision = decide(&current, &observation, clock::now_ms());
    let (result, detail) = describe(&decision, &current);
    match &decision {
        _ if report.dry_run => Ok(Ended::unmarked(result, format!("{detail}; dry run: nothing written"))),
        Decision::Apply(t) if t.refused.is_some() => Ok(Ended::unmarked(
            result,
            format!("{detail}; nothing written (the cause is not fixed)"),
        )),
        Decision::Apply(_) => applied(ctx, &store, &current.id, &observation, report).await,
        Decision::Ignore(_) | Decision::Defer(_) => Ok(Ended::marked(result, detail)),
    }
}

/// The parked body as an event to apply, or where the replay ends without one (an acknowledged type, a body
/// the parser still refuses, one that needs what was redacted).
fn event_of(ctx: &Ctx, item: &ParkedItem) -> Result<Result<PspEvent, Ended>, crate::Error> {
    let (parsed, redacted) = parse(&ctx.env, item)?;
    let event = match parsed {
        Ok(Parsed::Event(event)) => *event,
        Ok(Parsed::Ignored { event_type }) => {
            let detail = format!("event type {event_type} is not acted on; nothing to replay");
            return Ok(Err(Ended::marked("ignored", detail)));
        }
        Err(e) if item.body.starts_with('[') => {
            let detail = format!("the body was not stored ({}): {e}", item.body);
            return Ok(Err(Ended::unmarked("unparseable", detail)));
        }
        Err(e) if redacted => {
            let detail = format!(
                "without its redacted values the intake's parser refuses the body ({e}): it needs what was \
                 redacted; nothing written. Recovery (the reconciler) asks the PSP for the payment's state"
            );
            return Ok(Err(Ended::unmarked("redacted", detail)));
        }
        Err(e) => {
            let detail = format!("the intake's parser still refuses the (redacted) body: {e}; nothing written");
            return Ok(Err(Ended::unmarked("unparseable", detail)));
        }
    };
    if let Outcome::RequiresAction(_)
    | Outcome::AttemptFailed {
        retry_token: Some(_), ..
    } = &event.outcome
    {
        let detail = "the event carries a customer action or retry token, redacted when it was parked; replaying \
                      it would store [redacted] for the customer. Nothing written: recovery (the reconciler) asks \
                      the PSP and records the real action";
        return Ok(Err(Ended::unmarked("redacted", detail.to_owned())));
    }
    Ok(Ok(event))
}

/// The intake's own write: a read, the payment's lease at its version (waited for up to [`LEASE_WAIT`]), the one
/// finalize (which decides again on the item it writes against and frees the lease with its write).
async fn applied(
    ctx: &Ctx,
    store: &PaymentStore,
    id: &PaymentId,
    observation: &Observation,
    report: &mut ReplayReport,
) -> Result<Ended, crate::Error> {
    let leases = Leases::new(ctx.dynamodb.clone(), ctx.table(), ctx.config.lease);
    let outcome = apply_under_lease(store, &leases, id, observation, LEASE_WAIT)
        .await?
        .ok_or_else(|| StoreError::NotFound(id.to_string()))?;
    report.wrote = matches!(outcome.result, FinalizeResult::Applied(_));
    Ok(match (&outcome.result, &outcome.refused) {
        (_, Some(reason)) => Ended::marked("refused", format!("anomaly recorded again: {reason}")),
        (FinalizeResult::Applied(kind), None) => Ended::marked(
            "applied",
            format!(
                "{} -> {} at v{}",
                kind.as_str(),
                outcome.payment.status.as_str(),
                outcome.payment.version
            ),
        ),
        (other, None) => Ended::marked("unchanged", format!("{other:?}")),
    })
}

fn describe(decision: &Decision, current: &shared::Payment) -> (&'static str, String) {
    match decision {
        Decision::Apply(t) => match &t.refused {
            Some(reason) => ("refused", format!("still inconsistent with the payment: {reason}")),
            None => (
                "would_apply",
                format!(
                    "would apply {}: {} -> {} at v{}",
                    t.event.kind.as_str(),
                    current.status.as_str(),
                    t.payment.status.as_str(),
                    t.payment.version
                ),
            ),
        },
        Decision::Ignore(reason) => (
            reason.answer(),
            format!(
                "changes nothing: the payment is {} at v{}",
                current.status.as_str(),
                current.version
            ),
        ),
        Decision::Defer(reason) => ("deferred", format!("cannot apply yet: {reason:?}")),
    }
}

/// Marks the parked item with the replay's result.
async fn mark(ctx: &Ctx, item: &ParkedItem, result: &str) -> Result<(), crate::Error> {
    ctx.dynamodb
        .update_item()
        .table_name(ctx.table())
        .set_key(Some(shared::keys::parked(&item.kind, &item.key)))
        .update_expression("SET replayed_at_ms = :at, replay_result = :r")
        .condition_expression("attribute_exists(pk)")
        .expression_attribute_values(":at", AttributeValue::N(clock::now_ms().to_string()))
        .expression_attribute_values(":r", AttributeValue::S(result.to_owned()))
        .send()
        .await
        .map_err(|e| crate::aws_error("marking the parked item (UpdateItem)", e))?;
    Ok(())
}

pub fn render_replay(r: &ReplayReport) -> String {
    format!(
        "parked {} ({}){}\n  result:  {}\n  payment: {}\n  {}\n  wrote:   {}\n  note:    {}\n",
        r.key,
        r.kind,
        if r.dry_run { " [dry run]" } else { "" },
        r.result,
        r.payment_id.as_deref().unwrap_or("-"),
        r.detail,
        if r.wrote { "yes" } else { "nothing" },
        r.limits
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::IgnoreReason;

    /// A replay that would change nothing is worded as the intake answers the same event: one wording per
    /// reason (`IgnoreReason::answer`), so a no-op reads `duplicate` here as in the intake's `result`.
    #[test]
    fn an_ignored_replay_is_worded_as_the_intake_answers_it() {
        let current = payments_core::fixtures::payment("pay_1");
        for (reason, worded) in [
            (IgnoreReason::Duplicate, "duplicate"),
            (IgnoreReason::NoOp, "duplicate"),
            (IgnoreReason::Stale, "stale"),
        ] {
            assert_eq!(describe(&Decision::Ignore(reason), &current).0, worded, "{reason:?}");
        }
    }
}
