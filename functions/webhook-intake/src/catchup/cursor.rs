//! The catch-up's cursor: one item (`CURSOR#stripe-events`) saying how far Stripe's events were read, so
//! each run starts where the last one ended, and a pass cut by its bound resumes where it stopped.
//!
//! Written only under the `version` it was read at (a conditional put): two runs at once (a slow run and the
//! next schedule) never move it backwards; the one that loses leaves it to the winner (its events were
//! applied anyway, and applying them again is a duplicate).

use aws_sdk_dynamodb::types::AttributeValue;
use shared::keys::{self, Item};
use shared::store::{read_item, StoreError};

/// The cursor's name (its item is `CURSOR#stripe-events`).
pub const NAME: &str = "stripe-events";

/// How far the events were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Every event created before this (epoch seconds, less the overlap) was read: the next pass's lower bound.
    pub created_gte: i64,
    /// A pass cut by its bound: where it resumes.
    pub pass: Option<Pass>,
    /// The item's version (0: no item yet).
    pub version: u64,
}

/// A pass in progress: its upper bound and the last event handled (Stripe lists newest first, so every
/// event between it and `upper` was handled; the older ones are left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    pub upper: i64,
    pub starting_after: String,
}

/// The cursor's item in the table.
#[derive(Debug, Clone)]
pub struct CursorStore {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
}

fn number(item: &Item, name: &str) -> Option<i64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

impl CursorStore {
    /// The cursor as saved, or `None` before the first run.
    pub async fn load(&self) -> Result<Option<Cursor>, StoreError> {
        let item = read_item(
            &self.client,
            &self.table,
            keys::job_cursor(NAME),
            "read catch-up cursor",
        )
        .await?;
        Ok(item.map(|item| Cursor {
            created_gte: number(&item, "created_gte").unwrap_or(0),
            pass: match (
                number(&item, "pass_upper"),
                item.get("starting_after").and_then(|v| v.as_s().ok()),
            ) {
                (Some(upper), Some(after)) => Some(Pass {
                    upper,
                    starting_after: after.clone(),
                }),
                _ => None,
            },
            version: number(&item, "version")
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0),
        }))
    }

    /// Saves `next` if the item is still at `next.version - 1`'s predecessor, i.e. at `read_version`;
    /// `Ok(false)` when another run saved in between (its cursor stands).
    pub async fn save(&self, next: &Cursor, read_version: u64) -> Result<bool, StoreError> {
        let mut item = keys::job_cursor(NAME);
        let n = |v: i64| AttributeValue::N(v.to_string());
        item.insert("created_gte".into(), n(next.created_gte));
        item.insert(
            "version".into(),
            AttributeValue::N(read_version.saturating_add(1).to_string()),
        );
        item.insert("updated_at_ms".into(), n(shared::clock::now_ms()));
        if let Some(pass) = &next.pass {
            item.insert("pass_upper".into(), n(pass.upper));
            item.insert("starting_after".into(), AttributeValue::S(pass.starting_after.clone()));
        }
        let put = self.client.put_item().table_name(&self.table).set_item(Some(item));
        let put = if read_version == 0 {
            put.condition_expression("attribute_not_exists(pk)")
        } else {
            put.condition_expression("version = :read")
                .expression_attribute_values(":read", AttributeValue::N(read_version.to_string()))
        };
        StoreError::condition_held("save catch-up cursor", put.send().await)
    }
}
