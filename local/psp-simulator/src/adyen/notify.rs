//! Adyen's notifications as the simulator sends them: `{"live": "false", "notificationItems":
//! [{"NotificationRequestItem": {...}}, ...]}`, each item signed on its own (`additionalData.hmacSignature`)
//! by the intake's own signer ([`HmacKey::sign`] over [`Item::signing_string`]), so the simulator and the
//! verifier cannot drift apart on which eight fields are signed, and a `Basic` `Authorization` header.
//!
//! Delivery is Adyen's: one queue per endpoint, sent in order, a few items per notification (a batch may mix
//! payments), each notification retried until the endpoint answers 2xx (`[accepted]`) before the next one
//! goes: an endpoint that keeps failing holds up everything behind it, as at Adyen. The faults of
//! [`DeliveryOptions`]: a delay before each notification, items sent again in a later notification
//! (duplicates), a batch's items reversed, attempts lost on the way.

use super::ledger::Notice;
use crate::client::HttpClient;
use crate::delivery::DeliveryOptions;
use base64::Engine;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use webhook_intake::adyen::notification::{Amount, AmountValue, HmacKey, Item};

/// Items one notification carries at most.
pub const MAX_BATCH: usize = 3;

/// Where notifications go: the endpoint's URL and its Basic auth credentials.
pub struct Endpoint {
    pub url: String,
    pub username: String,
    pub password: String,
}

impl Endpoint {
    /// `Authorization: Basic base64(username:password)`.
    pub fn authorization(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password);
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
    }
}

/// The notification item of `notice`, as the intake reads it (the eight signed fields, `reason`).
pub fn item(notice: &Notice, merchant_account: &str) -> Item {
    Item {
        psp_reference: Some(notice.psp_reference.clone()),
        original_reference: notice.original_reference.clone(),
        merchant_account_code: Some(merchant_account.to_owned()),
        merchant_reference: Some(notice.merchant_reference.clone()),
        amount: Some(Amount {
            value: Some(AmountValue::Number(notice.value)),
            currency: Some(notice.currency.clone()),
        }),
        event_code: Some(notice.event_code.to_owned()),
        success: Some(notice.success.to_string()),
        reason: notice.reason.clone(),
        additional_data: None,
    }
}

/// `item` as Adyen sends it: its fields (absent ones left out), `eventDate`, and `additionalData.hmacSignature`
/// by `key`.
pub fn signed(item: &Item, key: &HmacKey, now_ms: i64) -> Value {
    let mut value = serde_json::to_value(item).unwrap_or_else(|_| json!({}));
    if let Some(fields) = value.as_object_mut() {
        fields.retain(|_, v| !v.is_null());
        fields.insert("eventDate".into(), json!(event_date(now_ms)));
        fields.insert("additionalData".into(), json!({ "hmacSignature": key.sign(item) }));
    }
    value
}

/// A notification body carrying `items` (already signed).
pub fn notification(items: &[Value]) -> Value {
    let wrapped: Vec<Value> = items
        .iter()
        .map(|item| json!({ "NotificationRequestItem": item }))
        .collect();
    json!({ "live": "false", "notificationItems": wrapped })
}

/// `2026-12-02T12:00:00+00:00` (Adyen's `eventDate` format) for epoch milliseconds.
pub fn event_date(now_ms: i64) -> String {
    let secs = now_ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}+00:00")
}

/// One queued item; `copy` marks a duplicate (never duplicated again).
struct Queued {
    item: Value,
    copy: bool,
}

/// The endpoint's queue, and every item put in it (what tests and the demo read back).
#[derive(Default)]
pub struct Outbox {
    queue: Mutex<VecDeque<Queued>>,
    wake: tokio::sync::Notify,
    sent: Mutex<Vec<Value>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Outbox {
    /// Queues signed items, in order.
    pub fn push(&self, items: Vec<Value>) {
        lock(&self.sent).extend(items.iter().cloned());
        lock(&self.queue).extend(items.into_iter().map(|item| Queued { item, copy: false }));
        self.wake.notify_one();
    }

    /// Every item queued so far (duplicates not repeated), oldest first.
    pub fn sent(&self) -> Vec<Value> {
        lock(&self.sent).clone()
    }

    /// The next notification's items (1 to [`MAX_BATCH`]), each possibly queued again as a duplicate.
    fn next_batch(&self, options: &DeliveryOptions) -> Vec<Value> {
        let mut queue = lock(&self.queue);
        let mut rng = rand::rng();
        let size = rng.random_range(1..=MAX_BATCH).min(queue.len());
        let mut batch = Vec::with_capacity(size);
        for queued in queue.drain(..size).collect::<Vec<_>>() {
            if !queued.copy && rng.random_bool(options.duplicate_rate) {
                let item = queued.item.clone();
                queue.push_back(Queued { item, copy: true });
            }
            batch.push(queued.item);
        }
        if rng.random_bool(options.reorder_rate) {
            batch.reverse();
        }
        batch
    }

    /// Sends the queue to `endpoint` for as long as the simulator runs.
    pub async fn run(&self, client: &HttpClient, endpoint: &Endpoint, options: &DeliveryOptions) {
        loop {
            let batch = self.next_batch(options);
            if batch.is_empty() {
                self.wake.notified().await;
                continue;
            }
            let delay = rand::rng().random_range(Duration::ZERO..=options.max_delay);
            tokio::time::sleep(delay).await;
            send(client, endpoint, &notification(&batch), options).await;
        }
    }
}

/// One notification, attempted until a 2xx or `max_attempts` (then dropped, as Adyen gives up in the end).
async fn send(client: &HttpClient, endpoint: &Endpoint, body: &Value, options: &DeliveryOptions) -> bool {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let headers = [("authorization", endpoint.authorization())];
    for attempt in 0..options.max_attempts {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(attempt.min(5)))).await;
        }
        if rand::rng().random_bool(options.failure_rate) {
            continue; // lost on the way
        }
        if let Ok((status, _)) = client.send("POST", &endpoint.url, &headers, bytes.clone()).await {
            if (200..300).contains(&status) {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_dates_are_utc_calendar_dates() {
        assert_eq!(event_date(0), "1970-01-01T00:00:00+00:00");
        assert_eq!(event_date(1_796_212_800_000), "2026-12-02T12:00:00+00:00");
        assert_eq!(event_date(951_782_400_000), "2000-02-29T00:00:00+00:00");
    }
}
