//! Adyen's notifications as the simulator sends them: `{"live": "false", "notificationItems":
//! [{"NotificationRequestItem": {...}}, ...]}`, each item signed on its own (`additionalData.hmacSignature`)
//! by the signer of the intake's verifier ([`HmacKey::sign`] over [`Item::signing_string`], both in
//! `webhook-signatures`), so the simulator and the verifier cannot drift apart on which eight fields are signed, and a `Basic` `Authorization` header.
//!
//! Delivery is Adyen's: one queue per endpoint, sent in order, each notification retried until the endpoint
//! answers 2xx (`[accepted]`) before the next one goes: an endpoint that keeps failing holds up everything
//! behind it, as at Adyen ("if we successfully deliver it to your server, we retry sending the next webhook
//! in the queue", retry queues "separate for each endpoint": Adyen's webhook troubleshooting page). A
//! notification carries 1 to [`MAX_BATCH`] items, which may mix payments: harsher than Adyen's JSON webhooks,
//! which its docs say carry one item (SOAP ones up to six), so that the intake's reading of the array is
//! exercised whatever its length. The faults of
//! [`DeliveryOptions`]: a delay before each notification, items sent again in a later notification
//! (duplicates), a batch's items reversed, attempts lost on the way. [`Outbox::delivery`] counts what
//! happened (the demo prints it), [`Outbox::idle`] says when everything queued was sent.

use super::ledger::Notice;
use crate::client::HttpClient;
use crate::delivery::DeliveryOptions;
use base64::Engine;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use webhook_signatures::adyen::{Amount, AmountValue, HmacKey, Item};

/// Items one notification carries at most.
pub const MAX_BATCH: usize = 3;

/// Where notifications go: the endpoint's URL and its Basic auth credentials.
#[derive(Clone)]
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
    let at =
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(now_ms.div_euclid(1000)).unwrap_or(0));
    let utc = humantime::format_rfc3339_seconds(at).to_string();
    format!("{}+00:00", utc.trim_end_matches('Z'))
}

/// One queued item; `copy` marks a duplicate (never duplicated again).
struct Queued {
    item: Value,
    copy: bool,
}

/// The items waiting, and whether a notification is on its way (then the queue is not idle though empty).
#[derive(Default)]
struct Queue {
    items: VecDeque<Queued>,
    sending: bool,
}

/// What the endpoint's queue did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Notifications the endpoint accepted (2xx), and the items they carried.
    pub notifications: usize,
    pub items: usize,
    /// Accepted notifications carrying more than one item.
    pub batches: usize,
    /// Items queued again as duplicates.
    pub duplicates: usize,
    /// Attempts that failed (lost on the way, or answered other than 2xx) and were retried while
    /// everything behind them waited.
    pub retries: usize,
    /// Notifications given up after `max_attempts`.
    pub undelivered: usize,
}

/// The endpoint's queue, and every item put in it (what tests and the demo read back).
#[derive(Default)]
pub struct Outbox {
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
    sent: Mutex<Vec<Value>>,
    delivery: Mutex<Delivery>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Outbox {
    /// Queues signed items, in order.
    pub fn push(&self, items: Vec<Value>) {
        lock(&self.sent).extend(items.iter().cloned());
        lock(&self.queue)
            .items
            .extend(items.into_iter().map(|item| Queued { item, copy: false }));
        self.wake.notify_one();
    }

    /// Every item queued so far (duplicates not repeated), oldest first.
    pub fn sent(&self) -> Vec<Value> {
        lock(&self.sent).clone()
    }

    /// What the queue did so far.
    pub fn delivery(&self) -> Delivery {
        *lock(&self.delivery)
    }

    /// Nothing queued and nothing on its way: every item pushed so far was sent (or given up).
    pub fn idle(&self) -> bool {
        let queue = lock(&self.queue);
        queue.items.is_empty() && !queue.sending
    }

    /// The next notification's items (1 to [`MAX_BATCH`]), each possibly queued again as a duplicate; the
    /// queue is `sending` until [`Outbox::sent_one`].
    fn next_batch(&self, options: &DeliveryOptions) -> Vec<Value> {
        let mut queue = lock(&self.queue);
        let mut rng = rand::rng();
        let size = rng.random_range(1..=MAX_BATCH).min(queue.items.len());
        let mut batch = Vec::with_capacity(size);
        let mut duplicates = 0;
        for queued in queue.items.drain(..size).collect::<Vec<_>>() {
            if !queued.copy && rng.random_bool(options.duplicate_rate) {
                let item = queued.item.clone();
                queue.items.push_back(Queued { item, copy: true });
                duplicates += 1;
            }
            batch.push(queued.item);
        }
        queue.sending = !batch.is_empty();
        lock(&self.delivery).duplicates += duplicates;
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
            let (accepted, retries) = send(client, endpoint, &notification(&batch), options).await;
            self.sent_one(batch.len(), accepted, retries);
        }
    }

    /// Counts a notification of `items` items, accepted or given up after `retries` failed attempts, and
    /// ends its `sending`.
    fn sent_one(&self, items: usize, accepted: bool, retries: usize) {
        {
            let mut delivery = lock(&self.delivery);
            delivery.retries += retries;
            if accepted {
                delivery.notifications += 1;
                delivery.items += items;
                delivery.batches += usize::from(items > 1);
            } else {
                delivery.undelivered += 1;
            }
        }
        lock(&self.queue).sending = false;
    }
}

/// One notification, attempted until a 2xx or `max_attempts` (then dropped, as Adyen gives up in the end):
/// whether it was accepted, and how many attempts failed before.
async fn send(client: &HttpClient, endpoint: &Endpoint, body: &Value, options: &DeliveryOptions) -> (bool, usize) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let headers = [("authorization", endpoint.authorization())];
    let mut failed = 0;
    for attempt in 0..options.max_attempts {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(attempt.min(5)))).await;
        }
        if !rand::rng().random_bool(options.failure_rate) {
            let answer = client.send("POST", &endpoint.url, &headers, bytes.clone()).await;
            if matches!(answer, Ok((status, _)) if (200..300).contains(&status)) {
                return (true, failed);
            }
        }
        // Lost on the way, or refused: the same notification again, everything behind it waiting.
        failed += 1;
    }
    (false, failed)
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
