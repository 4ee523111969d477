//! Item conversion, in one place: the payment item, the event item, and their keys.
//!
//! Layout (one table, `pk` + `sk`):
//! - payment: `pk = PAYMENT#<id>`, `sk = PAYMENT`; the secrets exist only while the status needs them.
//!   Written by a transition, it also carries that transition (`last_event`: what its event has that the
//!   payment has not) and `event_version` (= `version`): its stream record is the outbox (change-data-capture
//!   form, `docs/OUTBOX.md`). A change that moves no version removes `event_version`, so the stream mapping's
//!   filter passes only records that carry a transition.
//! - event (history): `pk = PAYMENT#<id>`, `sk = EVENT#<version, 10 digits>`: `entity = history` when the
//!   relay archived it from a payment's change record, `entity = event` when an older writer put it in its
//!   transaction (then it was the outbox).
//! - lease: `pk = LEASE#<id>`, `sk = LEASE` (see `lease.rs`).

use super::open_index::{shard_of, OpenKind, OpenShards};
use super::StoreError;
use crate::{
    Channel, ClientSecret, CorrelationId, Currency, CustomerAction, Dispute, EventKind, Metadata, Money, OrderId,
    Payment, PaymentEvent, PaymentId, PaymentStatus, PspEventId, PspName, PspReference, RedirectUrl, RetryToken,
    StrayCapture,
};
use crate::{GiveBack, RefundEntry};
use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};

pub use crate::keys::{event_sk, payment_pk, Item, EVENT_SK_PREFIX, PAYMENT_SK};

#[derive(Serialize, Deserialize)]
struct PaymentItem {
    pk: String,
    sk: String,
    entity: String,
    payment_id: PaymentId,
    order_id: OrderId,
    version: u64,
    status: PaymentStatus,
    amount_minor: u64,
    currency: Currency,
    refunded_minor: u64,
    /// Absent on items written before providers were recorded: those read as Stripe (`PspName::default`).
    #[serde(default)]
    provider: PspName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    psp_reference: Option<PspReference>,
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    metadata: Metadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<ClientSecret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    redirect_url: Option<RedirectUrl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_token: Option<RetryToken>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capture_before_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    seen_psp_events: Vec<PspEventId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    refused_psp_events: Vec<PspEventId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_psp_event_at_ms: Option<i64>,
    #[serde(default)]
    anomalies: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stray_capture: Option<StrayCapture>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    refunds: Vec<RefundEntry>,
    #[serde(default)]
    refund_failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    give_back: Option<GiveBack>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dispute: Option<Dispute>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capture_failed: Option<String>,
    created_at_ms: i64,
    updated_at_ms: i64,
    /// The sparse `open-items` index key, only while the payment is open (see `open_index`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_shard: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    opened_at_ms: Option<i64>,
    /// The transition that wrote this version (absent on items written before the payment was its own outbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_event: Option<LastEvent>,
    /// `version`, on an item written by a transition: the stream mapping's filter passes only records with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event_version: Option<u64>,
}

/// What a payment's event has that the payment at that version has not. With the item it is the whole
/// event: ids, version, status, money, refunded total and dispute are the item's own.
#[derive(Serialize, Deserialize)]
struct LastEvent {
    kind: EventKind,
    path: Channel,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<PaymentStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refund: Option<RefundEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    psp_event: Option<PspEventId>,
    correlation: CorrelationId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<String>,
    at: i64,
}

#[derive(Serialize, Deserialize)]
struct EventItem {
    pk: String,
    sk: String,
    entity: String,
    event_id: String,
    payment_id: PaymentId,
    order_id: OrderId,
    version: u64,
    kind: EventKind,
    path: Channel,
    status: PaymentStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_status: Option<PaymentStatus>,
    amount_minor: u64,
    currency: Currency,
    refunded_minor: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refund: Option<RefundEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    psp_event_id: Option<PspEventId>,
    correlation_id: CorrelationId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace_context: Option<String>,
    recorded_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dispute: Option<Dispute>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capture_failed: Option<String>,
}

/// An item to write, as DynamoDB attributes. Failing here is a bug of ours in the value's shape, not a stored
/// item that is corrupt: a `Request` error naming what was being encoded.
fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Item, StoreError> {
    serde_dynamo::to_item(value).map_err(|e| StoreError::request(what, e))
}

/// The payment item without a transition (tests, sizes), an open one under its shard among `shards`; a
/// writer writes [`transition_to_item`].
pub fn payment_to_item(p: &Payment, shards: OpenShards) -> Result<Item, StoreError> {
    encode("encode payment item", &payment_item(p, shards))
}

/// The payment item written by the transition `e` to it: the payment, what `e` adds, and `event_version`.
/// Refused (a bug of ours) when `e` does not describe `p`, since the relay rebuilds `e` from this item.
pub fn transition_to_item(p: &Payment, e: &PaymentEvent, shards: OpenShards) -> Result<Item, StoreError> {
    let describes = e.payment_id == p.id
        && e.order_id == p.order_id
        && e.version == p.version
        && e.status == p.status
        && e.money == p.money
        && e.refunded_minor == p.refunded_minor
        && e.dispute == p.dispute
        && e.capture_failed == p.capture_failed;
    if !describes {
        return Err(StoreError::request(
            "encode payment transition",
            format!("event v{} does not describe payment {} v{}", e.version, p.id, p.version),
        ));
    }
    let mut item = payment_item(p, shards);
    item.last_event = Some(LastEvent {
        kind: e.kind,
        path: e.path,
        from: e.previous_status,
        refund: e.refund.clone(),
        reason: e.reason.clone(),
        psp_event: e.psp_event_id.clone(),
        correlation: e.correlation_id.clone(),
        trace: e.trace_context.clone(),
        at: e.recorded_at_ms,
    });
    item.event_version = Some(p.version);
    encode("encode payment transition", &item)
}

fn payment_item(p: &Payment, shards: OpenShards) -> PaymentItem {
    PaymentItem {
        pk: payment_pk(&p.id),
        sk: PAYMENT_SK.to_owned(),
        entity: "payment".to_owned(),
        payment_id: p.id.clone(),
        order_id: p.order_id.clone(),
        version: p.version,
        status: p.status,
        amount_minor: p.money.amount_minor(),
        currency: p.money.currency(),
        refunded_minor: p.refunded_minor,
        provider: p.provider.clone(),
        psp_reference: p.psp_reference.clone(),
        metadata: p.metadata.clone(),
        client_secret: p.action.as_ref().and_then(|a| a.client_secret().cloned()),
        redirect_url: p.action.as_ref().and_then(|a| a.redirect_url().cloned()),
        retry_token: p.retry_token.clone(),
        capture_before_ms: p.capture_before_ms,
        reason: p.reason.clone(),
        seen_psp_events: p.seen_psp_events.clone(),
        refused_psp_events: p.refused_psp_events.clone(),
        last_psp_event_at_ms: p.last_psp_event_at_ms,
        anomalies: p.anomalies,
        stray_capture: p.stray_capture,
        refunds: p.refunds.clone(),
        refund_failures: p.refund_failures,
        give_back: p.give_back,
        dispute: p.dispute.clone(),
        capture_failed: p.capture_failed.clone(),
        created_at_ms: p.created_at_ms,
        updated_at_ms: p.updated_at_ms,
        open_shard: p.is_open().then(|| shard_of(OpenKind::Payment, p.id.as_str(), shards)),
        opened_at_ms: p.is_open().then_some(p.created_at_ms),
        last_event: None,
        event_version: None,
    }
}

/// The event a payment item carries (the one that wrote its version), from the SDK or a stream image;
/// `None` for an item written before the payment was its own outbox.
pub fn event_of_payment_item(item: impl Into<serde_dynamo::Item>) -> Result<Option<PaymentEvent>, StoreError> {
    let item: serde_dynamo::Item = item.into();
    let key = match item.get("pk") {
        Some(serde_dynamo::AttributeValue::S(pk)) => pk.clone(),
        _ => String::new(),
    };
    let i: PaymentItem = serde_dynamo::from_item(item).map_err(|e| StoreError::corrupt(&key, e))?;
    let Some(last) = i.last_event else { return Ok(None) };
    Ok(Some(PaymentEvent {
        money: Money::new(i.amount_minor, i.currency).map_err(|e| StoreError::corrupt(&key, e))?,
        payment_id: i.payment_id,
        order_id: i.order_id,
        version: i.version,
        kind: last.kind,
        path: last.path,
        status: i.status,
        previous_status: last.from,
        refunded_minor: i.refunded_minor,
        refund: last.refund,
        reason: last.reason,
        psp_event_id: last.psp_event,
        correlation_id: last.correlation,
        trace_context: last.trace,
        recorded_at_ms: last.at,
        dispute: i.dispute,
        capture_failed: i.capture_failed,
    }))
}

pub fn payment_from_item(item: Item) -> Result<Payment, StoreError> {
    let key = item.get("pk").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    let i: PaymentItem = serde_dynamo::from_item(item).map_err(|e| StoreError::corrupt(&key, e))?;
    let money = Money::new(i.amount_minor, i.currency).map_err(|e| StoreError::corrupt(&key, e))?;
    let action = match (i.client_secret, i.redirect_url) {
        (None, None) => None,
        (secret, url) => Some(CustomerAction::new(secret, url).map_err(|e| StoreError::corrupt(&key, e))?),
    };
    Ok(Payment {
        id: i.payment_id,
        order_id: i.order_id,
        version: i.version,
        status: i.status,
        money,
        refunded_minor: i.refunded_minor,
        provider: i.provider,
        psp_reference: i.psp_reference,
        metadata: i.metadata,
        action,
        retry_token: i.retry_token,
        capture_before_ms: i.capture_before_ms,
        reason: i.reason,
        seen_psp_events: i.seen_psp_events,
        refused_psp_events: i.refused_psp_events,
        last_psp_event_at_ms: i.last_psp_event_at_ms,
        anomalies: i.anomalies,
        stray_capture: i.stray_capture,
        refunds: i.refunds,
        refund_failures: i.refund_failures,
        give_back: i.give_back,
        dispute: i.dispute,
        capture_failed: i.capture_failed,
        created_at_ms: i.created_at_ms,
        updated_at_ms: i.updated_at_ms,
    })
}

/// The `entity` of an event item an older writer put in its transaction (then the outbox: the stream
/// mapping relays its INSERT while records of that form may still be in the stream).
pub const ENTITY_EVENT: &str = "event";
/// The `entity` of an event item the relay archived from a payment's change record (history only).
pub const ENTITY_HISTORY: &str = "history";

/// The event item an older writer put in its transaction (`entity = event`); the migration tests write it.
pub fn event_to_item(e: &PaymentEvent) -> Result<Item, StoreError> {
    event_item(e, ENTITY_EVENT)
}

/// The history item the relay archives for an event it read from a payment's change record.
pub fn history_to_item(e: &PaymentEvent) -> Result<Item, StoreError> {
    event_item(e, ENTITY_HISTORY)
}

fn event_item(e: &PaymentEvent, entity: &str) -> Result<Item, StoreError> {
    let item = EventItem {
        pk: payment_pk(&e.payment_id),
        sk: event_sk(e.version),
        entity: entity.to_owned(),
        event_id: e.event_id(),
        payment_id: e.payment_id.clone(),
        order_id: e.order_id.clone(),
        version: e.version,
        kind: e.kind,
        path: e.path,
        status: e.status,
        previous_status: e.previous_status,
        amount_minor: e.money.amount_minor(),
        currency: e.money.currency(),
        refunded_minor: e.refunded_minor,
        refund: e.refund.clone(),
        reason: e.reason.clone(),
        psp_event_id: e.psp_event_id.clone(),
        correlation_id: e.correlation_id.clone(),
        trace_context: e.trace_context.clone(),
        recorded_at_ms: e.recorded_at_ms,
        dispute: e.dispute.clone(),
        capture_failed: e.capture_failed.clone(),
    };
    encode("encode event item", &item)
}

/// Reads an event item, from the SDK or from a stream image (`serde_dynamo::Item`).
pub fn event_from_item(item: impl Into<serde_dynamo::Item>) -> Result<PaymentEvent, StoreError> {
    let item: serde_dynamo::Item = item.into();
    let key = match item.get("sk") {
        Some(serde_dynamo::AttributeValue::S(sk)) => sk.clone(),
        _ => String::new(),
    };
    let i: EventItem = serde_dynamo::from_item(item).map_err(|e| StoreError::corrupt(&key, e))?;
    Ok(PaymentEvent {
        money: Money::new(i.amount_minor, i.currency).map_err(|e| StoreError::corrupt(&key, e))?,
        payment_id: i.payment_id,
        order_id: i.order_id,
        version: i.version,
        kind: i.kind,
        path: i.path,
        status: i.status,
        previous_status: i.previous_status,
        refunded_minor: i.refunded_minor,
        refund: i.refund,
        reason: i.reason,
        psp_event_id: i.psp_event_id,
        correlation_id: i.correlation_id,
        trace_context: i.trace_context,
        recorded_at_ms: i.recorded_at_ms,
        dispute: i.dispute,
        capture_failed: i.capture_failed,
    })
}

/// The size DynamoDB bills an item at: attribute names plus values (UTF-8 bytes for strings, an
/// approximation of the number encoding), as in the DynamoDB developer guide.
// Cannot overflow: sums of the lengths of values held in memory, far below `usize::MAX`.
#[allow(clippy::arithmetic_side_effects)]
pub fn item_size_bytes(item: &Item) -> usize {
    fn value_size(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) => s.len(),
            AttributeValue::N(n) => {
                let digits = n
                    .trim_start_matches('-')
                    .replace('.', "")
                    .trim_start_matches('0')
                    .len()
                    .max(1);
                digits.div_ceil(2) + 1
            }
            AttributeValue::B(b) => b.as_ref().len(),
            AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
            AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
            AttributeValue::M(m) => 3 + m.iter().map(|(k, v)| 1 + k.len() + value_size(v)).sum::<usize>(),
            AttributeValue::Ss(s) => s.iter().map(String::len).sum(),
            AttributeValue::Ns(n) => n.iter().map(|x| x.len().div_ceil(2) + 1).sum(),
            AttributeValue::Bs(b) => b.iter().map(|x| x.as_ref().len()).sum(),
            _ => 0,
        }
    }
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use payments_core::fixtures;
    use payments_core::{decide, Channel, Decision};

    #[test]
    fn payment_round_trips_and_secrets_disappear_when_terminal() {
        let p = fixtures::payment("pay_item");
        let Decision::Apply(t) = decide(&p, &fixtures::observe(Channel::Sync, fixtures::requires_action()), 1) else {
            panic!()
        };
        let item = payment_to_item(&t.payment, OpenShards::DEFAULT).unwrap();
        assert!(item.contains_key("client_secret") && item.contains_key("redirect_url"));
        assert_eq!(payment_from_item(item).unwrap(), t.payment);

        let Decision::Apply(done) = decide(
            &t.payment,
            &fixtures::webhook("evt_1", 5, payments_core::Outcome::Succeeded),
            2,
        ) else {
            panic!()
        };
        let item = payment_to_item(&done.payment, OpenShards::DEFAULT).unwrap();
        assert!(!item.contains_key("client_secret") && !item.contains_key("redirect_url"));
        assert_eq!(payment_from_item(item).unwrap(), done.payment);

        let event = event_to_item(&done.event).unwrap();
        assert_eq!(event["sk"].as_s().unwrap(), "EVENT#0000000003");
        assert_eq!(event_from_item(event).unwrap(), done.event);
    }

    /// The relay rebuilds each event from the payment item its transition wrote: the same event, so the
    /// same message body, group and deduplication id as the event item of the transactional form.
    #[test]
    fn a_transition_item_carries_its_event_whole() {
        let (created, first) = fixtures::new_payment("pay_cdc", 1000).into_payment();
        let mut steps = vec![(created.clone(), first)];
        let observations = [
            fixtures::observe(Channel::Sync, fixtures::requires_action()),
            fixtures::webhook("evt_1", 5, payments_core::Outcome::Succeeded),
            fixtures::webhook("evt_2", 6, fixtures::refunded(400, false)),
        ];
        let mut current = created;
        for (i, obs) in observations.iter().enumerate() {
            let Decision::Apply(t) = decide(&current, obs, 10 + i as i64) else {
                panic!("{i}")
            };
            steps.push((t.payment.clone(), t.event));
            current = t.payment;
        }
        for (payment, event) in steps {
            let item = transition_to_item(&payment, &event, OpenShards::DEFAULT).unwrap();
            assert_eq!(item["event_version"].as_n().unwrap(), &payment.version.to_string());
            assert_eq!(event_of_payment_item(item.clone()).unwrap().as_ref(), Some(&event));
            assert_eq!(payment_from_item(item).unwrap(), payment);
        }
        let plain = payment_to_item(&current, OpenShards::DEFAULT).unwrap();
        assert!(!plain.contains_key("event_version"));
        assert_eq!(event_of_payment_item(plain).unwrap(), None);
    }

    #[test]
    fn an_event_that_does_not_describe_the_payment_is_refused() {
        let (payment, mut event) = fixtures::new_payment("pay_cdc2", 1000).into_payment();
        event.version = 2;
        assert!(matches!(
            transition_to_item(&payment, &event, OpenShards::DEFAULT),
            Err(StoreError::Request { .. })
        ));
    }

    #[test]
    fn a_corrupt_item_is_an_error_not_a_default() {
        let mut item = payment_to_item(&fixtures::payment("pay_c"), OpenShards::DEFAULT).unwrap();
        item.insert("status".into(), AttributeValue::S("bogus".into()));
        assert!(matches!(payment_from_item(item), Err(StoreError::Corrupt { .. })));
    }

    #[test]
    fn the_provider_is_stored_and_an_item_without_one_is_stripes() {
        let mut p = fixtures::payment("pay_provider");
        p.provider = PspName::parse("acme").unwrap();
        let item = payment_to_item(&p, OpenShards::DEFAULT).unwrap();
        assert_eq!(item["provider"].as_s().unwrap(), "acme");
        assert_eq!(payment_from_item(item.clone()).unwrap().provider, p.provider);

        let mut old = item.clone();
        old.remove("provider");
        assert_eq!(payment_from_item(old).unwrap().provider, PspName::Stripe);

        let mut bad = item;
        bad.insert("provider".into(), AttributeValue::S("Not/A Name".into()));
        assert!(matches!(payment_from_item(bad), Err(StoreError::Corrupt { .. })));
    }

    #[test]
    fn items_stay_small() {
        let p = fixtures::payment("pay_0123456789abcdef0123456789abcdef");
        assert!(item_size_bytes(&payment_to_item(&p, OpenShards::DEFAULT).unwrap()) < 400);
        // With the transition that ended it (a webhook's, traced): one write unit (at most 1 KB).
        let Decision::Apply(t) = decide(
            &p,
            &fixtures::webhook("evt_0123456789abcdefghijklmn", 5, payments_core::Outcome::Succeeded),
            1,
        ) else {
            panic!()
        };
        let mut event = t.event.clone();
        event.trace_context = Some(format!("00-{}-{}-01", "a".repeat(32), "b".repeat(16)));
        let size = item_size_bytes(&transition_to_item(&t.payment, &event, OpenShards::DEFAULT).unwrap());
        assert!(size < 700, "{size} bytes");
    }
}
