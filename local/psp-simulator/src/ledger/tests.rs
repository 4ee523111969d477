use super::*;

fn ledger() -> Ledger {
    Ledger::new("sk_test_k", Timings::default(), None)
}

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// A confirmed PaymentIntent of 1000 for `pay_1`, made under `key` with the payment method `method`.
pub(super) fn create(l: &Ledger, key: &str, method: &str) -> Effects {
    let p = params(&[
        ("amount", "1000"),
        ("currency", "eur"),
        ("confirm", "true"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
        ("payment_method", method),
        ("metadata[payment_id]", "pay_1"),
    ]);
    l.handle("POST", "/v1/payment_intents", Some("Bearer sk_test_k"), Some(key), &p)
}

#[test]
fn a_repeated_key_replays_the_first_answer_and_other_parameters_are_an_idempotency_error() {
    let l = ledger();
    let first = create(&l, "k1", "pm_requires_action");
    assert_eq!(first.webhooks.len(), 2, "requires_action, then succeeded at once");
    let again = create(&l, "k1", "pm_requires_action");
    assert_eq!(again.answer, first.answer);
    assert!(again.webhooks.is_empty());
    let other = create(&l, "k1", "pm_succeeded").answer.unwrap();
    assert_eq!(
        (other.status, other.body["error"]["type"].as_str()),
        (400, Some("idempotency_error"))
    );
    assert_eq!(l.intents_for("pay_1").len(), 1);
    assert!(
        !first.replayed && again.replayed,
        "a replay says so (Idempotent-Replayed)"
    );
}

#[test]
fn a_saved_500_is_replayed_for_its_key_and_a_new_key_does_the_work() {
    let l = ledger();
    l.fail_saved(1);
    let first = create(&l, "k1", "pm_succeeded");
    assert_eq!(first.answer.as_ref().map(|a| a.status), Some(500));
    assert!(!first.replayed);
    for _ in 0..3 {
        let again = create(&l, "k1", "pm_succeeded");
        assert_eq!((again.answer, again.replayed), (first.answer.clone(), true));
    }
    assert!(l.intents_for("pay_1").is_empty(), "the failed request made nothing");
    assert_eq!(create(&l, "k2", "pm_succeeded").answer.map(|a| a.status), Some(200));
}

#[test]
fn a_hang_holds_the_next_requests_then_stops() {
    let l = ledger();
    l.hang(Duration::from_millis(50), 2);
    assert_eq!(l.take_hang(), Some(Duration::from_millis(50)));
    assert_eq!(l.take_hang(), Some(Duration::from_millis(50)));
    assert_eq!(l.take_hang(), None);
}

#[test]
fn refunds_are_bounded_by_the_charge_and_partial_refunds_add_up() {
    let l = ledger();
    let pi = create(&l, "k", "pm_succeeded").answer.unwrap().body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refund = |key: &str, amount: Option<&str>| {
        let mut p = params(&[("payment_intent", pi.as_str())]);
        if let Some(a) = amount {
            p.insert("amount".into(), a.into());
        }
        l.handle("POST", "/v1/refunds", Some("Bearer sk_test_k"), Some(key), &p)
            .answer
            .unwrap()
    };
    assert_eq!(refund("r1", Some("400")).body["amount"], 400);
    assert_eq!(
        refund("r1", Some("400")).body["amount"],
        400,
        "replayed, not refunded again"
    );
    assert_eq!(refund("r2", Some("700")).body["error"]["code"], "amount_too_large");
    assert_eq!(refund("r3", None).body["amount"], 600, "the rest");
    let got = l.handle(
        "GET",
        &format!("/v1/payment_intents/{pi}"),
        Some("Bearer sk_test_k"),
        None,
        &params(&[("expand[]", "latest_charge")]),
    );
    assert_eq!(got.answer.unwrap().body["latest_charge"]["amount_refunded"], 1000);
}

#[test]
fn requests_without_the_key_are_refused() {
    let l = ledger();
    let e = l.handle(
        "GET",
        "/v1/payment_intents/pi_x",
        Some("Bearer sk_wrong"),
        None,
        &BTreeMap::new(),
    );
    assert_eq!(e.answer.unwrap().status, 401);
    assert_eq!(l.auth_counts(), (0, 1));
}

#[test]
fn a_refund_fails_charges_refund_is_answered_pending_then_reported_failed() {
    let l = ledger();
    let pi = create(&l, "k", "pm_refund_fails").answer.unwrap().body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(l.intents_for("pay_1")[0]["status"], "succeeded");
    let refund = || {
        let p = params(&[("payment_intent", pi.as_str())]);
        l.handle("POST", "/v1/refunds", Some("Bearer sk_test_k"), Some("r1"), &p)
    };
    let first = refund();
    let answer = first.answer.unwrap().body;
    assert_eq!(
        (answer["status"].as_str(), answer["amount"].as_u64()),
        (Some("pending"), Some(1000))
    );
    let sent: Vec<(&str, &str)> = first
        .webhooks
        .iter()
        .map(|w| (w.kind, w.body["data"]["object"]["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        sent,
        [
            ("refund.created", "pending"),
            ("refund.updated", "failed"),
            ("refund.failed", "failed")
        ]
    );
    let failed = &first.webhooks[2].body["data"]["object"];
    assert_eq!(
        (
            failed["id"].clone(),
            failed["payment_intent"].as_str(),
            failed["failure_reason"].as_str()
        ),
        (
            answer["id"].clone(),
            Some(pi.as_str()),
            Some("expired_or_canceled_card")
        )
    );
    // Stripe's fixture's fields, all there.
    let fixture = [
        "amount",
        "balance_transaction",
        "charge",
        "created",
        "currency",
        "id",
        "metadata",
        "object",
        "payment_intent",
        "reason",
        "receipt_number",
        "status",
    ];
    assert!(fixture.iter().all(|k| failed.get(*k).is_some()), "{failed}");
    // Replayed for its key as first answered; the charge keeps its money.
    let again = refund();
    assert_eq!(again.answer.unwrap().body["status"], "pending");
    assert!(again.webhooks.is_empty());
    let intent = l.handle(
        "GET",
        &format!("/v1/payment_intents/{pi}"),
        Some("Bearer sk_test_k"),
        None,
        &params(&[("expand[]", "latest_charge")]),
    );
    assert_eq!(intent.answer.unwrap().body["latest_charge"]["amount_refunded"], 0);
}

/// One line per create: HTTP status, the PaymentIntent's status in the answer (or the error's type, code and
/// the PaymentIntent's status it carries), the webhooks sent at once (`payment_intent.` left out), how many
/// steps are left for later, and `dropped` when the answer is lost.
fn summary(effects: &Effects) -> String {
    let answer = effects.answer.as_ref().unwrap();
    let error = &answer.body["error"];
    let shown = match error["type"].as_str() {
        None => answer.body["status"].as_str().unwrap_or_default().to_owned(),
        Some(kind) => format!("{kind} {} {}", error["code"], error["payment_intent"]["status"]),
    };
    let sent: Vec<&str> = effects
        .webhooks
        .iter()
        .map(|w| w.kind.trim_start_matches("payment_intent."))
        .collect();
    let dropped = if effects.drop_answer { " dropped" } else { "" };
    format!(
        "{} {shown} [{}] later:{}{dropped}",
        answer.status,
        sent.join(","),
        effects.later.len()
    )
}

/// Each scenario's create, as Stripe tells it: the first status in the answer, the webhooks of the steps
/// due at once, a slow step left for later, a decline answered 402 with the PaymentIntent, a lost answer.
#[test]
fn each_scenario_creates_its_timeline() {
    let declined = r#"402 card_error "card_declined" "requires_payment_method""#;
    let expected = [
        (
            "pm_requires_action",
            "200 requires_action [requires_action,succeeded] later:0".to_owned(),
        ),
        (
            "pm_processing",
            "200 processing [processing,succeeded] later:0".to_owned(),
        ),
        ("pm_succeeded", "200 succeeded [succeeded] later:0".to_owned()),
        ("pm_failed", "200 canceled [canceled] later:0".to_owned()),
        ("pm_declined", format!("{declined} [payment_failed,canceled] later:0")),
        ("pm_silent", "200 processing [] later:0".to_owned()),
        (
            "pm_slow_action",
            "200 requires_action [requires_action] later:1".to_owned(),
        ),
        (
            "pm_abandoned_action",
            "200 requires_action [requires_action] later:0".to_owned(),
        ),
        ("pm_decline_then_retry", format!("{declined} [payment_failed] later:1")),
        ("pm_slow_processing", "200 processing [processing] later:1".to_owned()),
        ("pm_lost_answer", "200 succeeded [succeeded] later:0 dropped".to_owned()),
        ("pm_refund_fails", "200 succeeded [succeeded] later:0".to_owned()),
    ];
    let l = ledger();
    let got: Vec<(&str, String)> = expected
        .iter()
        .map(|(method, _)| (*method, summary(&create(&l, method, method))))
        .collect();
    assert_eq!(got, expected);
}

/// Stripe's refusals of a create, each with its HTTP status, error code and parameter, in the order Stripe
/// checks them (a request breaking one rule only), and nothing made.
#[test]
fn a_create_is_refused_as_stripe_refuses_it() {
    let base = [
        ("amount", "1000"),
        ("currency", "eur"),
        ("confirm", "true"),
        ("automatic_payment_methods[enabled]", "true"),
        ("automatic_payment_methods[allow_redirects]", "never"),
        ("payment_method", "pm_succeeded"),
        ("metadata[payment_id]", "pay_1"),
    ];
    // (parameter, its value or None for left out) -> (HTTP status, code, the error's param)
    let expected = [
        (("amount", None), (400, "parameter_missing", "amount")),
        (("amount", Some("0")), (400, "parameter_missing", "amount")),
        (("amount", Some("-5")), (400, "parameter_missing", "amount")),
        (("currency", None), (400, "parameter_missing", "currency")),
        (("currency", Some("EUR")), (400, "parameter_missing", "currency")),
        (("currency", Some("euro")), (400, "parameter_missing", "currency")),
        (("confirm", None), (400, "parameter_invalid", "confirm")),
        (("confirm", Some("false")), (400, "parameter_invalid", "confirm")),
        (("payment_method", None), (400, "parameter_missing", "payment_method")),
        (("payment_method", Some("card_1")), (404, "resource_missing", "id")),
    ];
    let l = ledger();
    for (n, ((name, value), want)) in expected.iter().enumerate() {
        let mut p = params(&base);
        match value {
            Some(v) => p.insert((*name).to_owned(), (*v).to_owned()),
            None => p.remove(*name),
        };
        let key = format!("k{n}");
        let effects = l.handle("POST", "/v1/payment_intents", Some("Bearer sk_test_k"), Some(&key), &p);
        assert!(effects.webhooks.is_empty() && effects.later.is_empty());
        let answer = effects.answer.unwrap();
        let error = &answer.body["error"];
        assert_eq!(error["type"], "invalid_request_error");
        let refusal = (
            answer.status,
            error["code"].as_str().unwrap(),
            error["param"].as_str().unwrap(),
        );
        assert_eq!(refusal, *want, "{name} {value:?}");
    }
    assert!(l.intents_for("pay_1").is_empty(), "a refused create makes nothing");
}
