//! Adyen's published HMAC vectors (its Python, Node and Java libraries' tests, MIT) verify; a changed signed
//! field fails; a changed unsigned field still verifies.

use super::*;
use serde_json::{json, Value};

/// The key of adyen-python-api-library's `test_notification_request_item_hmac`.
const PYTHON_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
/// The key of the Python library's `test_webhooks_with_slashes` and the Java library's
/// `testValidateHMACWithoutEscaping`.
const SLASHES_KEY: &str = "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174";
/// The key of adyen-node-api-library's `hmacValidator.spec.ts`.
const NODE_KEY: &str = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00";
/// The key of adyen-java-api-library's `HMACValidatorTest`.
const JAVA_KEY: &str = "9064450A8892A093D9E97EFCC9639DE31B74F3A7803135555A3C96F5A57915D6";

fn key(hex: &str) -> HmacKey {
    HmacKey::from_hex(Mode::Test, hex).unwrap()
}

/// The Python library's vector: the one issue 26 quotes.
fn python_item() -> Value {
    json!({
        "pspReference": "7914073381342284",
        "merchantReference": "TestPayment-1407325143704",
        "merchantAccountCode": "TestMerchant",
        "amount": { "currency": "EUR", "value": 1130 },
        "eventCode": "AUTHORISATION",
        "success": "true",
        "eventDate": "2019-05-06T17:15:34.121+02:00",
        "operations": ["CANCEL", "CAPTURE", "REFUND"],
        "paymentMethod": "visa",
        "additionalData": { "hmacSignature": "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=" }
    })
}

fn node_item(event_code: &str, signature: &str) -> Value {
    json!({
        "pspReference": "pspReference", "originalReference": "originalReference",
        "merchantAccountCode": "merchantAccount", "merchantReference": "reference",
        "amount": { "currency": "EUR", "value": 1000 }, "eventCode": event_code,
        "eventDate": "2019-09-21T11:45:24.637Z", "paymentMethod": "VISA", "reason": "reason", "success": "true",
        "additionalData": { "hmacSignature": signature }
    })
}

fn java_item() -> Value {
    json!({
        "additionalData": { "hmacSignature": "NuEkADFmlCC6VgX+wcoPAegIWxVPNBPCuKlM4Hzo5qc=" },
        "amount": { "currency": "EUR", "value": "0" },
        "eventCode": "REPORT_AVAILABLE", "eventDate": "2019-11-20T14:35:36+01:00",
        "merchantAccountCode": "Magento2Rik", "merchantReference": "testMerchantRef1",
        "pspReference": "test_REPORT_AVAILABLE", "reason": "will contain the url to the report", "success": "true"
    })
}

/// The Python library's fixtures with references holding `\`, `:` and `/` (`test/mocks/util/`).
fn slash_items() -> Vec<(&'static str, Value)> {
    [
        ("backslash", include_str!("vectors/python-backslash.json")),
        ("colon", include_str!("vectors/python-colon.json")),
        ("forwardslash", include_str!("vectors/python-forwardslash.json")),
        ("mixed", include_str!("vectors/python-mixed.json")),
    ]
    .into_iter()
    .map(|(name, text)| (name, serde_json::from_str(text).unwrap()))
    .collect()
}

/// The item as the intake reads it from its envelope.
fn one(item: &Value) -> Item {
    serde_json::from_value(item.clone()).unwrap()
}

/// `item` with the value at `pointer` replaced (its last key created).
fn changed(item: &Value, pointer: &str, value: Value) -> Value {
    let mut changed = item.clone();
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match changed.pointer_mut(parent) {
        Some(Value::Object(fields)) => fields.insert(key.to_owned(), value),
        _ => panic!("{parent} is not an object"),
    };
    changed
}

/// Every published vector with its key.
fn vectors() -> Vec<(String, Value, HmacKey)> {
    let mut all = vec![
        ("python".to_owned(), python_item(), key(PYTHON_KEY)),
        (
            "node REPORT_AVAILABLE".to_owned(),
            node_item("REPORT_AVAILABLE", "ZNBPtI+oDyyRrLyD1XirkKnQgIAlFc07Vj27TeHsDRE="),
            key(NODE_KEY),
        ),
        (
            "node EVENT".to_owned(),
            node_item("EVENT", "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="),
            key(NODE_KEY),
        ),
        ("java".to_owned(), java_item(), key(JAVA_KEY)),
    ];
    all.extend(
        slash_items()
            .into_iter()
            .map(|(name, item)| (format!("python {name}"), item, key(SLASHES_KEY))),
    );
    all
}

#[test]
fn every_published_vector_verifies_with_its_key_and_no_other() {
    for (name, item, k) in vectors() {
        let parsed = one(&item);
        assert_eq!(verify(0, &parsed, std::slice::from_ref(&k)), Ok(Mode::Test), "{name}");
        assert_eq!(k.sign(&parsed), parsed.signature(), "{name}: we sign as Adyen does");
        let other = key(&"00".repeat(32));
        assert_eq!(verify(0, &parsed, &[other]), Err(Unsigned::NoMatch(0)), "{name}");
    }
}

#[test]
fn the_signing_string_is_the_eight_fields_unescaped() {
    assert_eq!(
        one(&python_item()).signing_string(),
        "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
    );
    let mixed = slash_items().pop().unwrap().1;
    assert_eq!(
        one(&mixed).signing_string(),
        r"ZVWN7D3WSMK2WN82::AntoniStroinski:\:/\/slashes are fun:1000:EUR:AUTHORISATION:true"
    );
    assert_eq!(
        one(&java_item()).signing_string(),
        "test_REPORT_AVAILABLE::Magento2Rik:testMerchantRef1:0:EUR:REPORT_AVAILABLE:true",
        "an amount sent as text signs as its text"
    );
}

/// Each signed field changed (one at a time, in every vector) fails: nothing that moves money can be altered.
#[test]
fn a_changed_signed_field_fails() {
    let changes: [(&str, Value); 8] = [
        ("/pspReference", json!("7914073381342285")),
        ("/originalReference", json!("8814073381342284")),
        ("/merchantAccountCode", json!("OtherMerchant")),
        ("/merchantReference", json!("pay_other")),
        ("/amount/value", json!(1)),
        ("/amount/currency", json!("USD")),
        ("/eventCode", json!("REFUND")),
        ("/success", json!("false")),
    ];
    for (name, item, k) in vectors() {
        for (pointer, value) in &changes {
            let changed = changed(&item, pointer, value.clone());
            assert_eq!(
                verify(0, &one(&changed), std::slice::from_ref(&k)),
                Err(Unsigned::NoMatch(0)),
                "{name}: {pointer} changed still verifies"
            );
        }
    }
}

/// The unsigned fields may be anything: the item still verifies (and the intake's `adyen::fact` reads none
/// of them for a decision: its test shows which fields a decision uses).
#[test]
fn an_unsigned_field_changed_still_verifies() {
    for (name, item, k) in vectors() {
        for (pointer, value) in [
            ("/eventDate", json!("2030-01-01T00:00:00Z")),
            ("/reason", json!("anything at all")),
            ("/paymentMethod", json!("mc")),
            ("/operations", json!([])),
            ("/additionalData/modification.action", json!("refund")),
            ("/additionalData/totalFraudScore", json!("99")),
        ] {
            let changed = changed(&item, pointer, value);
            assert_eq!(
                verify(0, &one(&changed), std::slice::from_ref(&k)),
                Ok(Mode::Test),
                "{name}: {pointer}"
            );
        }
    }
}

/// The key that verified decides the mode; during a rotation either key verifies.
#[test]
fn the_key_that_verified_decides_test_or_live_and_rotation_takes_either_key() {
    let parsed = one(&python_item());
    let old = HmacKey::from_hex(Mode::Live, &"11".repeat(32)).unwrap();
    let live = HmacKey::from_hex(Mode::Live, PYTHON_KEY).unwrap();
    assert_eq!(verify(0, &parsed, &[old.clone(), live]), Ok(Mode::Live));
    assert_eq!(verify(0, &parsed, &[old, key(PYTHON_KEY)]), Ok(Mode::Test));
}

#[test]
fn signatures_that_cannot_be_one_are_refused_and_keys_are_never_shown() {
    let empty = changed(&python_item(), "/additionalData/hmacSignature", json!(""));
    assert_eq!(verify(3, &one(&empty), &[key(PYTHON_KEY)]), Err(Unsigned::Missing(3)));
    let mut item = python_item();
    item.as_object_mut().unwrap().remove("additionalData");
    assert_eq!(verify(0, &one(&item), &[key(PYTHON_KEY)]), Err(Unsigned::Missing(0)));
    for bad in [
        "not base64!",
        "c2hvcnQ=",
        "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0==",
    ] {
        let item = changed(&item, "/additionalData", json!({ "hmacSignature": bad }));
        assert_eq!(
            verify(0, &one(&item), &[key(PYTHON_KEY)]),
            Err(Unsigned::Malformed(0)),
            "{bad}"
        );
    }
    assert_eq!(verify(0, &one(&python_item()), &[]), Err(Unsigned::NoMatch(0)));
    assert!(HmacKey::from_hex(Mode::Test, "zz").is_err());
    assert!(HmacKey::from_hex(Mode::Test, "abcd").is_err(), "2 bytes");
    assert!(!format!("{:?}", key(PYTHON_KEY)).contains("44782"));
}
