//! The PSP circuit breakers' shared items, one per PSP (`BREAKER#stripe`, `BREAKER#adyen`): `breaker show`
//! says what each holds and what it means now; `breaker reset --psp NAME` closes one.
//!
//! The state is read and judged exactly as the functions read it (`psp::breaker::item` and the core's
//! end-time rule, with the functions' default settings), so "ends at" is when the functions will probe. A
//! reset is conditioned on the item being as it was shown (its `state` and `changed_at_ms`): if a function
//! opened, probed or closed it in between, nothing is written and the command says so. The failure counts
//! that decide opening live in each instance's memory and are not shown; the item keeps what opened it.

use crate::settings::Ctx;
use crate::when::format_ms;
use psp::breaker::item::{BreakerItem, BreakerRecord, Written};
use psp::breaker::BreakerState;
use psp::set::{ADYEN_BREAKER, STRIPE_BREAKER};
use psp::BreakerSettings;
use serde::Serialize;

/// Every PSP's breaker, in the order `breaker show` lists them.
pub const BREAKERS: [&str; 2] = [STRIPE_BREAKER, ADYEN_BREAKER];

/// `--psp`: one of [`BREAKERS`].
pub fn parse_psp(text: &str) -> Result<&'static str, String> {
    BREAKERS
        .into_iter()
        .find(|name| *name == text)
        .ok_or_else(|| format!("{text:?}: the PSPs with a breaker are {}", BREAKERS.join(" and ")))
}

/// The breaker as `show` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct BreakerView {
    pub name: String,
    /// `closed`, `open` (calls refused until `ends_at_ms`), or `probing` (the open state has ended: the next
    /// call, or the one running until `probe_until_ms`, is the probe).
    pub state: String,
    /// `state` as stored, when it is not what it means (e.g. an unknown word, read as closed).
    pub stored_state: Option<String>,
    /// What opened it: counted failed attempts, and distinct requests among them.
    pub failures: Option<u32>,
    pub failed_requests: Option<u32>,
    /// When the state last changed (opened, probed again, closed, reset).
    pub changed_at_ms: Option<i64>,
    /// When an open state ends (the stored end, or the rule's when it is missing, unreadable or too far).
    pub ends_at_ms: Option<i64>,
    /// The stored end, when it is not the one that applies.
    pub stored_end_ms: Option<i64>,
    pub probe_until_ms: Option<i64>,
    #[serde(skip)]
    record: BreakerRecord,
}

fn item(ctx: &Ctx, name: &str) -> BreakerItem {
    BreakerItem::new(ctx.dynamodb.clone(), ctx.config.table_name.clone(), name)
}

impl BreakerView {
    fn of(name: &str, record: BreakerRecord, now_ms: i64) -> Self {
        let (state, ends_at_ms) = match record.state {
            BreakerState::Closed => ("closed", None),
            BreakerState::Open { until_ms } if now_ms < until_ms => ("open", Some(until_ms)),
            BreakerState::Open { until_ms } => ("probing", (until_ms != i64::MIN).then_some(until_ms)),
        };
        let stored_state = record
            .stored_state
            .clone()
            .filter(|s| !matches!(s.as_str(), "open" | "closed"));
        Self {
            name: name.to_owned(),
            state: state.to_owned(),
            stored_state,
            failures: record.failures,
            failed_requests: record.failed_requests,
            changed_at_ms: record.changed_at_ms,
            ends_at_ms,
            stored_end_ms: record.open_until_ms.filter(|u| ends_at_ms != Some(*u)),
            probe_until_ms: record.probe_until_ms,
            record,
        }
    }

    /// Whether a reset has anything to do: the item exists and is not closed as stored.
    pub fn resettable(&self) -> bool {
        self.record.exists() && self.record.stored_state.as_deref() != Some("closed")
    }

    /// The breaker for people.
    pub fn render(&self) -> String {
        let time = |t: Option<i64>| t.map_or_else(|| "-".to_owned(), format_ms);
        let count = |c: Option<u32>| c.map_or_else(|| "-".to_owned(), |c| c.to_string());
        let mut rows = vec![
            vec!["state".to_owned(), self.state.clone()],
            vec![
                "failures".to_owned(),
                match self.failures {
                    Some(_) => format!(
                        "{} attempts over {} requests (what opened it)",
                        count(self.failures),
                        count(self.failed_requests)
                    ),
                    None => "-".to_owned(),
                },
            ],
            vec!["changed at".to_owned(), time(self.changed_at_ms)],
            vec!["ends at".to_owned(), time(self.ends_at_ms)],
        ];
        if let Some(stored) = &self.stored_state {
            rows.push(vec!["stored state".to_owned(), format!("{stored:?} (read as closed)")]);
        }
        if let Some(end) = self.stored_end_ms {
            rows.push(vec![
                "stored end".to_owned(),
                format!("{} (not applied)", format_ms(end)),
            ]);
        }
        if self.probe_until_ms.is_some() {
            rows.push(vec!["probe until".to_owned(), time(self.probe_until_ms)]);
        }
        format!("breaker {}\n{}", self.name, crate::table::render(&["", ""], &rows))
    }
}

/// `breaker show --psp NAME`: the PSP's item as the functions read it now.
pub async fn show(ctx: &Ctx, name: &str) -> Result<BreakerView, crate::Error> {
    let now = shared::clock::now_ms();
    let record = item(ctx, name).load(&BreakerSettings::default().rule(), now).await?;
    Ok(BreakerView::of(name, record, now))
}

/// What `breaker reset` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetOutcome {
    /// Closed: calls go through again, each instance counting afresh.
    Reset,
    /// Nothing to reset: no item, or closed already.
    AlreadyClosed,
}

/// The breaker changed between `show` and `reset`; nothing was written.
#[derive(Debug, thiserror::Error)]
#[error("the breaker changed since it was shown (a function opened, probed or closed it); nothing was reset: run `paymentsctl breaker show` again")]
pub struct ChangedMeanwhile;

/// `breaker reset --psp NAME`: closes the breaker `shown` if it is still as shown.
pub async fn reset(ctx: &Ctx, shown: &BreakerView) -> Result<ResetOutcome, crate::Error> {
    if !shown.resettable() {
        return Ok(ResetOutcome::AlreadyClosed);
    }
    match item(ctx, &shown.name)
        .reset(&shown.record, shared::clock::now_ms())
        .await?
    {
        Written::Done => Ok(ResetOutcome::Reset),
        Written::Changed => Err(ChangedMeanwhile.into()),
    }
}

impl ResetOutcome {
    /// The outcome for people.
    pub fn render(&self) -> String {
        match self {
            ResetOutcome::Reset => "breaker reset: closed; PSP calls go through again\n".to_owned(),
            ResetOutcome::AlreadyClosed => "breaker already closed; nothing to reset\n".to_owned(),
        }
    }
}
