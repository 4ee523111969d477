//! Every object the simulator returns (PaymentIntents in each status, the expanded Charge, Refunds, Events and
//! the objects inside them) has Stripe's field names and JSON types, as Stripe's published fixtures
//! (`tests/fixtures/stripe-fixtures.json`) show them, for every field the system reads.

use psp_simulator::ledger::{Answer, Ledger, Timings, WebhookEvent};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const KEY: &str = "sk_test_fixtures";

/// The fields the system reads, per object type.
const READ: [(&str, &[&str]); 4] = [
    (
        "payment_intent",
        &[
            "id",
            "object",
            "amount",
            "currency",
            "status",
            "client_secret",
            "next_action",
            "last_payment_error",
            "cancellation_reason",
            "latest_charge",
            "metadata",
            "livemode",
            "created",
        ],
    ),
    (
        "charge",
        &[
            "id",
            "object",
            "amount",
            "amount_refunded",
            "captured",
            "currency",
            "payment_intent",
            "metadata",
            "refunded",
            "status",
            "livemode",
        ],
    ),
    (
        "refund",
        &[
            "id",
            "object",
            "amount",
            "currency",
            "status",
            "payment_intent",
            "charge",
            "created",
        ],
    ),
    (
        "event",
        &[
            "id",
            "object",
            "type",
            "created",
            "livemode",
            "data",
            "api_version",
            "pending_webhooks",
            "request",
        ],
    ),
];

/// Fields Stripe documents as nullable (or expandable), with the types they take when set.
const NULLABLE: [(&str, &[&str]); 7] = [
    ("next_action", &["object"]),
    ("last_payment_error", &["object"]),
    ("cancellation_reason", &["string"]),
    ("latest_charge", &["string", "object"]),
    ("payment_intent", &["string"]),
    ("charge", &["string"]),
    ("api_version", &["string"]),
];

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn fixtures() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/stripe-fixtures.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixtures file")).expect("fixtures JSON")
}

/// Checks `object` (whose `object` field names its type) against the fixture of that type.
fn check(fixtures: &Value, object: &Value, seen: &mut BTreeMap<String, usize>) {
    let name = object["object"]
        .as_str()
        .unwrap_or_else(|| panic!("no `object` field: {object}"));
    let fields = READ
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unexpected object type {name}"))
        .1;
    let fixture = &fixtures[name];
    for field in fields {
        let want = fixture
            .get(*field)
            .unwrap_or_else(|| panic!("fixture {name} has no {field}"));
        let got = object
            .get(*field)
            .unwrap_or_else(|| panic!("simulator's {name} lacks `{field}`: {object}"));
        let nullable = NULLABLE.iter().find(|(n, _)| n == field).map(|(_, t)| *t);
        let ok = match (kind(want), kind(got), nullable) {
            (w, g, _) if w == g => true,
            (_, "null", Some(_)) => true,
            ("null", g, Some(types)) => types.contains(&g),
            _ => false,
        };
        assert!(
            ok,
            "{name}.{field}: the fixture has {} ({want}), the simulator {} ({got})",
            kind(want),
            kind(got)
        );
    }
    *seen.entry(name.to_owned()).or_default() += 1;
    // The objects inside: an expanded charge, an event's object, a decline's PaymentIntent.
    for inner in [&object["latest_charge"], &object["data"]["object"]] {
        if inner.is_object() {
            check(fixtures, inner, seen);
        }
    }
}

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn auth() -> Option<&'static str> {
    Some("Bearer sk_test_fixtures")
}

#[test]
fn every_object_the_simulator_returns_has_stripes_field_names_and_types() {
    let fixtures = fixtures();
    let ledger = Ledger::new(KEY, Timings { slow: Duration::ZERO }, None);
    let mut answers: Vec<Answer> = Vec::new();
    let mut events: Vec<WebhookEvent> = Vec::new();
    let mut ids = Vec::new();
    for (n, scenario) in [
        "succeeded",
        "requires_action",
        "abandoned_action",
        "processing",
        "slow_processing",
        "failed",
        "declined",
        "decline_then_retry",
    ]
    .iter()
    .enumerate()
    {
        let method = format!("pm_{scenario}");
        let p = params(&[
            ("amount", "1000"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("automatic_payment_methods[enabled]", "true"),
            ("automatic_payment_methods[allow_redirects]", "never"),
            ("payment_method", &method),
            ("metadata[payment_id]", "pay_1"),
        ]);
        let e = ledger.handle("POST", "/v1/payment_intents", auth(), Some(&format!("k{n}")), &p);
        let answer = e.answer.expect("answer");
        let pi = if answer.status == 200 {
            answer.body.clone()
        } else {
            assert_eq!(answer.body["error"]["type"], "card_error", "{scenario}");
            answer.body["error"]["payment_intent"].clone()
        };
        ids.push(pi["id"].as_str().expect("id").to_owned());
        answers.push(Answer { status: 200, body: pi });
        events.extend(e.webhooks);
    }
    for id in &ids {
        let path = format!("/v1/payment_intents/{id}");
        for expand in [params(&[]), params(&[("expand[]", "latest_charge")])] {
            let e = ledger.handle("GET", &path, auth(), None, &expand);
            answers.push(e.answer.expect("answer"));
            events.extend(e.webhooks);
        }
    }
    // A partial and a full refund of the succeeded one; a cancel of the abandoned challenge.
    for (key, amount) in [("r1", Some("300")), ("r2", None)] {
        let mut p = params(&[("payment_intent", &ids[0])]);
        if let Some(a) = amount {
            p.insert("amount".into(), a.into());
        }
        let e = ledger.handle("POST", "/v1/refunds", auth(), Some(key), &p);
        answers.push(e.answer.expect("answer"));
        events.extend(e.webhooks);
    }
    let e = ledger.handle(
        "POST",
        &format!("/v1/payment_intents/{}/cancel", ids[2]),
        auth(),
        Some("c1"),
        &params(&[]),
    );
    answers.push(e.answer.expect("answer"));
    events.extend(e.webhooks);

    let mut seen = BTreeMap::new();
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.body);
        check(&fixtures, &answer.body, &mut seen);
    }
    for event in &events {
        check(&fixtures, &event.body, &mut seen);
    }
    let statuses: std::collections::BTreeSet<&str> = answers.iter().filter_map(|a| a.body["status"].as_str()).collect();
    for status in [
        "requires_action",
        "requires_payment_method",
        "processing",
        "succeeded",
        "canceled",
    ] {
        assert!(
            statuses.contains(status),
            "no PaymentIntent in {status} was checked: {statuses:?}"
        );
    }
    for name in ["payment_intent", "charge", "refund", "event"] {
        assert!(
            seen.get(name).copied().unwrap_or(0) > 0,
            "no {name} was checked: {seen:?}"
        );
    }
}

#[test]
fn errors_are_stripes_error_object() {
    let ledger = Ledger::new(KEY, Timings::default(), None);
    let cases = [
        ledger.handle("GET", "/v1/payment_intents/pi_nope", auth(), None, &params(&[])),
        ledger.handle(
            "GET",
            "/v1/payment_intents/pi_nope",
            Some("Bearer sk_wrong"),
            None,
            &params(&[]),
        ),
        ledger.handle(
            "POST",
            "/v1/payment_intents",
            auth(),
            Some("k"),
            &params(&[("currency", "eur")]),
        ),
        ledger.handle(
            "POST",
            "/v1/refunds",
            auth(),
            None,
            &params(&[("payment_intent", "pi_x")]),
        ),
    ];
    let mut statuses = Vec::new();
    for e in cases {
        let a = e.answer.expect("answer");
        let error = &a.body["error"];
        assert!(error["type"].is_string() && error["message"].is_string(), "{}", a.body);
        statuses.push(a.status);
    }
    assert_eq!(statuses, vec![404, 401, 400, 400]);
    ledger.storm(503, 1);
    let a = ledger.handle("GET", "/v1/payment_intents/pi_x", auth(), None, &params(&[]));
    assert_eq!(a.answer.expect("answer").body["error"]["type"], "api_error");
}
