//! The envelope: its items read, bounded, and its `live` never read (each item's signature is the
//! signatures library's, tested there with Adyen's published vectors).

use super::*;
use serde_json::{json, Value};
use webhook_signatures::adyen::{verify, HmacKey, Mode};

/// An item as Adyen sends it (its signature is not checked by these tests unless they sign it).
fn an_item() -> Value {
    json!({
        "pspReference": "7914073381342284", "merchantReference": "TestPayment-1407325143704",
        "merchantAccountCode": "TestMerchant", "amount": { "currency": "EUR", "value": 1130 },
        "eventCode": "AUTHORISATION", "success": "true", "eventDate": "2019-05-06T17:15:34.121+02:00",
        "additionalData": { "hmacSignature": "not checked here" }
    })
}

/// The body Adyen would post with these items.
pub(crate) fn body(items: &[Value]) -> Vec<u8> {
    let items: Vec<Value> = items.iter().map(|i| json!({ "NotificationRequestItem": i })).collect();
    json!({ "live": "false", "notificationItems": items })
        .to_string()
        .into_bytes()
}

/// The envelope's `live` is not read at all: the key that verified an item says test or live.
#[test]
fn the_envelopes_live_is_not_read() {
    let key = HmacKey::from_hex(Mode::Test, &"44".repeat(32)).unwrap();
    let mut item = an_item();
    let signature = key.sign(&items(&body(std::slice::from_ref(&item))).unwrap()[0]);
    set(&mut item, "/additionalData/hmacSignature", json!(signature));
    let live = json!({ "live": "true", "notificationItems": [{ "NotificationRequestItem": item }] });
    let parsed = items(live.to_string().as_bytes()).unwrap();
    assert_eq!(verify(0, &parsed[0], &[key]), Ok(Mode::Test));
}

#[test]
fn bodies_that_are_not_notifications_or_too_big_are_refused() {
    assert!(matches!(items(b"[accepted]"), Err(Malformed::Json(_))));
    assert!(matches!(items(br#"{"live":"false"}"#), Err(Malformed::Json(_))));
    assert_eq!(items(&body(&[])), Err(Malformed::Items(0)));
    let many = vec![an_item(); MAX_ITEMS + 1];
    assert_eq!(items(&body(&many)), Err(Malformed::Items(MAX_ITEMS + 1)));
    assert_eq!(
        items(&body(&vec![an_item(); MAX_ITEMS])).map(|i| i.len()),
        Ok(MAX_ITEMS)
    );
    let mut long = an_item();
    set(&mut long, "/merchantReference", json!("r".repeat(MAX_FIELD_CHARS + 1)));
    assert_eq!(
        items(&body(&[an_item(), long])),
        Err(Malformed::TooLong {
            item: 1,
            field: "merchantReference"
        })
    );
    let mut float = an_item();
    set(&mut float, "/amount/value", json!(11.3));
    assert!(matches!(items(&body(&[float])), Err(Malformed::Json(_))));
    let mut negative = an_item();
    set(&mut negative, "/amount/value", json!(-1));
    assert!(matches!(items(&body(&[negative])), Err(Malformed::Json(_))));
}

/// Sets the value at a JSON pointer, creating the last key.
pub(crate) fn set(item: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let target = if parent.is_empty() {
        item
    } else {
        item.pointer_mut(parent).unwrap()
    };
    target[key] = value;
}
