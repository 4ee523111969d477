//! The breaker's one DynamoDB item (`pk = BREAKER#<name>`, `sk = BREAKER`): how it is read, and every write
//! to it, each conditioned on what its writer saw, so two instances (or an operator's `paymentsctl breaker
//! reset`) never undo each other's change blindly.
//!
//! Attributes: `state` (`open`, `closed`), `open_until_ms`, `changed_at_ms` (epoch ms of the last change),
//! `probe_until_ms` (a probe is running until then), `failures` and `failed_requests` (what opened it). The end
//! of an open state is read through [`payments_core::breaker::open_end`]: an item written by hand with a
//! missing or unreadable time still ends.

use super::BreakerState;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use payments_core::breaker::{open_end, BreakerRule, Opening};
use shared::store::item::Item;
use shared::store::{read_item, StoreError};

/// The breaker's item in a table.
#[derive(Debug, Clone)]
pub struct BreakerItem {
    client: Client,
    table: String,
    key: Item,
    name: String,
}

/// The item as read: the state it means now, what it stores, and the raw values the next write is
/// conditioned on.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerRecord {
    /// What the item means now (the end time read through `open_end`).
    pub state: BreakerState,
    /// `state` as stored (`open`, `closed`, or whatever someone wrote).
    pub stored_state: Option<String>,
    /// `open_until_ms` as stored, when it is a number.
    pub open_until_ms: Option<i64>,
    /// `changed_at_ms` as stored, when it is a number.
    pub changed_at_ms: Option<i64>,
    /// A probe runs until then (epoch ms).
    pub probe_until_ms: Option<i64>,
    /// Counted failures, and distinct requests among them, that opened it.
    pub failures: Option<u32>,
    pub failed_requests: Option<u32>,
    /// The raw `state` and `changed_at_ms`: a write conditioned on them fails if anyone changed the item.
    seen_state: Option<AttributeValue>,
    seen_changed: Option<AttributeValue>,
}

impl BreakerRecord {
    /// The record of an item that does not exist: closed.
    fn absent() -> Self {
        Self {
            state: BreakerState::Closed,
            stored_state: None,
            open_until_ms: None,
            changed_at_ms: None,
            probe_until_ms: None,
            failures: None,
            failed_requests: None,
            seen_state: None,
            seen_changed: None,
        }
    }

    fn from_item(item: &Item, rule: &BreakerRule, now_ms: i64) -> Self {
        let number = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<i64>().ok())
        };
        let count = |name: &str| number(name).and_then(|n| u32::try_from(n).ok());
        let stored_state = item.get("state").and_then(|v| v.as_s().ok()).cloned();
        let (open_until_ms, changed_at_ms) = (number("open_until_ms"), number("changed_at_ms"));
        let state = if stored_state.as_deref() == Some("open") {
            BreakerState::Open {
                until_ms: open_end(rule, open_until_ms, changed_at_ms, now_ms),
            }
        } else {
            BreakerState::Closed
        };
        Self {
            state,
            stored_state,
            open_until_ms,
            changed_at_ms,
            probe_until_ms: number("probe_until_ms"),
            failures: count("failures"),
            failed_requests: count("failed_requests"),
            seen_state: item.get("state").cloned(),
            seen_changed: item.get("changed_at_ms").cloned(),
        }
    }

    /// Whether the item exists.
    pub fn exists(&self) -> bool {
        self.seen_state.is_some() || self.seen_changed.is_some()
    }
}

fn number(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// What a conditional write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Done,
    /// The condition failed: someone changed the item first.
    Changed,
}

/// An update under construction with its condition's names and values.
struct Update {
    builder: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    conditions: Vec<String>,
}

impl Update {
    /// The condition that `attribute` still holds `seen` (or still does not exist).
    fn unchanged(mut self, attribute: &str, placeholder: &str, seen: Option<&AttributeValue>) -> Self {
        let name = format!("#{placeholder}");
        self.builder = self.builder.expression_attribute_names(&name, attribute);
        match seen {
            Some(value) => {
                let value_name = format!(":{placeholder}");
                self.conditions.push(format!("{name} = {value_name}"));
                self.builder = self.builder.expression_attribute_values(value_name, value.clone());
            }
            None => self.conditions.push(format!("attribute_not_exists({name})")),
        }
        self
    }

    fn condition(mut self, condition: &str) -> Self {
        self.conditions.push(format!("({condition})"));
        self
    }

    async fn send(self, context: &'static str) -> Result<Written, StoreError> {
        let builder = if self.conditions.is_empty() {
            self.builder
        } else {
            self.builder.condition_expression(self.conditions.join(" AND "))
        };
        Ok(if StoreError::condition_held(context, builder.send().await)? {
            Written::Done
        } else {
            Written::Changed
        })
    }
}

impl BreakerItem {
    /// The item of the breaker `name` (one per PSP account) in `table`.
    pub fn new(client: Client, table: impl Into<String>, name: &str) -> Self {
        Self {
            client,
            table: table.into(),
            key: shared::keys::breaker(name),
            name: name.to_owned(),
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The item as it stands (strongly consistent), its state judged by `rule` at `now_ms`.
    pub async fn load(&self, rule: &BreakerRule, now_ms: i64) -> Result<BreakerRecord, StoreError> {
        let item = read_item(&self.client, &self.table, self.key.clone(), "read PSP breaker").await?;
        Ok(item.map_or_else(BreakerRecord::absent, |item| {
            BreakerRecord::from_item(&item, rule, now_ms)
        }))
    }

    fn update(&self, expression: &str) -> Update {
        Update {
            builder: self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(self.key.clone()))
                .update_expression(expression)
                .expression_attribute_names("#state", "state"),
            conditions: Vec::new(),
        }
    }

    /// Claims the probe of an open state whose end has passed: the item is still as `seen` and no probe is
    /// running (a probe time that is not a number is none).
    pub async fn claim_probe(
        &self,
        seen: &BreakerRecord,
        now_ms: i64,
        probe_until_ms: i64,
    ) -> Result<Written, StoreError> {
        self.update("SET probe_until_ms = :probe_until")
            .unchanged("changed_at_ms", "seen_changed", seen.seen_changed.as_ref())
            .condition("#state = :open")
            .condition(
                "attribute_not_exists(probe_until_ms) OR NOT attribute_type(probe_until_ms, :number) \
                 OR probe_until_ms < :now",
            )
            .with_values(&[
                (":open", AttributeValue::S("open".into())),
                (":number", AttributeValue::S("N".into())),
                (":now", number(now_ms)),
                (":probe_until", number(probe_until_ms)),
            ])
            .send("claim PSP breaker probe")
            .await
    }

    /// Opens the breaker until `until_ms`: from closed (`opening` says what opened it; fails if another
    /// instance opened it first), or again after a failed probe (`opening` `None`, unconditional).
    pub async fn open(&self, opening: Option<Opening>, now_ms: i64, until_ms: i64) -> Result<Written, StoreError> {
        let values = [
            (":open", AttributeValue::S("open".into())),
            (":until", number(until_ms)),
            (":now", number(now_ms)),
        ];
        match opening {
            None => {
                self.update("SET #state = :open, open_until_ms = :until, changed_at_ms = :now REMOVE probe_until_ms")
                    .with_values(&values)
                    .send("reopen PSP breaker")
                    .await
            }
            Some(o) => {
                self.update(
                    "SET #state = :open, open_until_ms = :until, changed_at_ms = :now, failures = :failures, \
                     failed_requests = :requests REMOVE probe_until_ms",
                )
                .condition("attribute_not_exists(#state) OR #state <> :open")
                .with_values(&values)
                .with_values(&[
                    (":failures", number(i64::from(o.failures))),
                    (":requests", number(i64::from(o.requests))),
                ])
                .send("open PSP breaker")
                .await
            }
        }
    }

    /// Closes the breaker after a probe the PSP answered.
    pub async fn close(&self, now_ms: i64) -> Result<Written, StoreError> {
        self.closed_update()
            .with_values(&[(":now", number(now_ms))])
            .send("close PSP breaker")
            .await
    }

    /// Gives up a probe whose answer said nothing about the PSP (a replayed saved answer): another call probes.
    pub async fn release_probe(&self) -> Result<Written, StoreError> {
        self.update("REMOVE probe_until_ms")
            .condition("#state = :open")
            .with_values(&[(":open", AttributeValue::S("open".into()))])
            .send("release PSP breaker probe")
            .await
    }

    /// An operator's reset: closes the breaker if the item is still exactly as `seen` (its `state` and
    /// `changed_at_ms`); [`Written::Changed`] otherwise, and nothing is written.
    pub async fn reset(&self, seen: &BreakerRecord, now_ms: i64) -> Result<Written, StoreError> {
        self.closed_update()
            .unchanged("state", "seen_state", seen.seen_state.as_ref())
            .unchanged("changed_at_ms", "seen_changed", seen.seen_changed.as_ref())
            .with_values(&[(":now", number(now_ms))])
            .send("reset PSP breaker")
            .await
    }

    fn closed_update(&self) -> Update {
        self.update(
            "SET #state = :closed, changed_at_ms = :now \
             REMOVE probe_until_ms, open_until_ms, failures, failed_requests",
        )
        .with_values(&[(":closed", AttributeValue::S("closed".into()))])
    }
}

impl Update {
    fn with_values(mut self, values: &[(&str, AttributeValue)]) -> Self {
        for (name, value) in values {
            self.builder = self.builder.expression_attribute_values(*name, value.clone());
        }
        self
    }
}
