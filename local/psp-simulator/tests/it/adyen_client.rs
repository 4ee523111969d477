//! Our Adyen client (`psp::adyen::AdyenClient`) against the simulator's Adyen side: each call in
//! Adyen's shapes, the 3-D Secure action kept for the customer, refusals, errors and outages in our terms, and
//! idempotency keys Adyen accepts.

use psp::adyen::{idempotency_key, AdyenClient, AdyenSettings, ModificationStatus, ResultCode, MAX_KEY_CHARS};
use psp::{ChargeRequest, PspError};
use psp_simulator::adyen::ledger::AdyenLedger;
use psp_simulator::adyen::AdyenSimulator;
use psp_simulator::delivery::DeliveryOptions;
use serde_json::{json, Value};
use shared::retry::Backoff;
use shared::{Currency, Money, OrderId, PaymentId, PspReference};
use std::sync::Arc;
use std::time::Duration;
use webhook_signatures::adyen::{HmacKey, Mode};

const KEY: &str = "AQE_client_test_key";
const ACCOUNT: &str = "ClientTestECOM";
const HMAC: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

struct Served {
    sim: Arc<AdyenSimulator>,
    url: String,
}

async fn served() -> Served {
    let key = HmacKey::from_hex(Mode::Test, HMAC).expect("hmac key");
    let sim = AdyenSimulator::new(AdyenLedger::new(KEY, ACCOUNT), key, None, DeliveryOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(sim.clone().serve(listener));
    Served { sim, url }
}

fn settings(url: &str, key: &str, account: &str) -> AdyenSettings {
    let mut settings = AdyenSettings::local(url, key, account).expect("settings");
    settings.retries = Backoff::new(3, Duration::from_millis(1), Duration::from_millis(5));
    settings.request_timeout = Duration::from_millis(300);
    settings
}

impl Served {
    fn client(&self) -> AdyenClient {
        AdyenClient::new(&settings(&self.url, KEY, ACCOUNT)).expect("client")
    }

    /// The notifications the simulator has sent so far: (eventCode, success, pspReference, originalReference).
    fn notified(&self) -> Vec<(String, String, String, Option<String>)> {
        let text = |v: &Value, f: &str| v[f].as_str().map(str::to_owned);
        self.sim
            .outbox
            .sent()
            .iter()
            .map(|i| {
                let field = |f| text(i, f).unwrap_or_default();
                (
                    field("eventCode"),
                    field("success"),
                    field("pspReference"),
                    text(i, "originalReference"),
                )
            })
            .collect()
    }
}

struct Order {
    payment: PaymentId,
    order: OrderId,
    money: Money,
}

fn order(n: u32) -> Order {
    Order {
        payment: PaymentId::parse(format!("pay_adyen_{n}")).expect("payment id"),
        order: OrderId::parse(format!("order_adyen_{n}")).expect("order id"),
        money: Money::new(1130, Currency::parse("EUR").expect("currency")).expect("money"),
    }
}

fn card(number: &str, holder: &str) -> String {
    json!({ "type": "scheme", "encryptedCardNumber": format!("test_{number}"), "holderName": holder }).to_string()
}

fn charge<'a>(o: &'a Order, method: &'a str) -> ChargeRequest<'a> {
    ChargeRequest {
        payment_id: &o.payment,
        order_id: &o.order,
        money: &o.money,
        payment_method: method,
    }
}

#[tokio::test]
async fn a_card_is_authorised_then_captured_and_refunded_each_notified_under_its_own_reference() {
    let s = served().await;
    let (c, o) = (s.client(), order(1));
    let method = card("4111111111111111", "J. Smith");
    let paid = c
        .authorise("order_adyen_1:charge", &charge(&o, &method))
        .await
        .expect("authorised");
    assert_eq!((paid.result_code, paid.action.as_ref()), (ResultCode::Authorised, None));
    assert_eq!(
        paid.merchant_reference.as_deref(),
        Some(format!("pay_adyen_1@{}", shared::metrics::stage()).as_str()),
        "our payment id and stage are Adyen's reference"
    );
    let psp = paid.psp_reference.expect("pspReference");
    let capture = c
        .capture("order_adyen_1:capture", &psp, &o.money)
        .await
        .expect("capture");
    assert_eq!(
        (capture.status, capture.payment_psp_reference.as_ref()),
        (ModificationStatus::Received, Some(&psp))
    );
    assert_ne!(capture.psp_reference, psp);
    let half = Money::new(500, Currency::parse("EUR").expect("currency")).expect("money");
    let refund = c.refund("order_adyen_1:refund", &psp, &half).await.expect("refund");
    let reversal = c.reverse("order_adyen_1:reverse", &psp).await.expect("reversal");
    let mine = |m: &psp::adyen::Modification| Some(m.psp_reference.as_str().to_owned());
    let notified = s.notified();
    let original = Some(psp.as_str().to_owned());
    assert_eq!(
        notified,
        vec![
            ("AUTHORISATION".into(), "true".into(), psp.as_str().into(), None),
            (
                "CAPTURE".into(),
                "true".into(),
                mine(&capture).unwrap_or_default(),
                original.clone()
            ),
            (
                "REFUND".into(),
                "true".into(),
                mine(&refund).unwrap_or_default(),
                original.clone()
            ),
            (
                "CANCEL_OR_REFUND".into(),
                "true".into(),
                mine(&reversal).unwrap_or_default(),
                original
            ),
        ]
    );
}

#[tokio::test]
async fn a_challenge_keeps_its_action_for_the_customer_and_details_finish_it() {
    let s = served().await;
    let (c, o) = (s.client(), order(2));
    let method = card("4917610000000000", "J. Smith");
    let challenged = c.authorise("k2", &charge(&o, &method)).await.expect("challenge");
    assert_eq!(
        (challenged.result_code, &challenged.psp_reference),
        (ResultCode::RedirectShopper, &None),
        "the pspReference comes with /payments/details"
    );
    let action = challenged.action.clone().expect("the action, kept whole");
    assert_eq!(
        (action["type"].as_str(), action["method"].as_str()),
        (Some("redirect"), Some("GET"))
    );
    let url = action["url"].as_str().expect("url");
    assert!(
        url.starts_with("http://127.0.0.1/checkout/return?"),
        "back to ADYEN_RETURN_URL: {url}"
    );
    let result = url.split_once("redirectResult=").expect("redirectResult").1;
    let done = c.details("k2:details", result).await.expect("details");
    assert_eq!(done.result_code, ResultCode::Authorised);
    assert!(done.psp_reference.is_some(), "{done:?}");
    // Used twice, the redirect result is refused by Adyen (a new key: the first answer is not replayed).
    let again = c.details("k2:details-again", result).await.expect_err("used once");
    assert!(matches!(again, PspError::Refused { status: 422, .. }), "{again:?}");
}

#[tokio::test]
async fn a_refusal_is_a_decline_with_adyens_reason() {
    let s = served().await;
    let (c, o) = (s.client(), order(3));
    let method = card("4111111111111111", "NOT_ENOUGH_BALANCE");
    let declined = c.authorise("k3", &charge(&o, &method)).await.expect_err("refused");
    let PspError::Declined(e) = &declined else {
        panic!("a refusal is a decline: {declined:?}")
    };
    assert_eq!(
        (e.code.as_deref(), e.decline_code.as_deref()),
        (Some("12"), Some("Not enough balance"))
    );
    assert!(!declined.is_transient() && !declined.is_deferred());
}

#[tokio::test]
async fn a_key_or_merchant_account_adyen_refuses_is_a_deployment_fault() {
    let s = served().await;
    let o = order(4);
    let method = card("4111111111111111", "J. Smith");
    for (key, account, status) in [("AQE_revoked", ACCOUNT, 401), (KEY, "NotOurAccount", 403)] {
        let c = AdyenClient::new(&settings(&s.url, key, account)).expect("client");
        let e = c.authorise("k4", &charge(&o, &method)).await.expect_err("refused");
        assert!(
            matches!(&e, PspError::AuthFailed { status: s, .. } if *s == status),
            "{e:?}"
        );
        assert!(e.is_deferred(), "{e:?}");
    }
    assert!(s.notified().is_empty());
}

#[tokio::test]
async fn requests_adyen_refuses_are_refused_and_never_retried() {
    let s = served().await;
    let (c, o) = (s.client(), order(5));
    let e = c
        .authorise("k5", &charge(&o, "pm_card_visa"))
        .await
        .expect_err("not Adyen's");
    assert!(
        matches!(&e, PspError::Refused { status: 422, error } if error.param.as_deref() == Some("paymentMethod")),
        "{e:?}"
    );
    let method = card("4111111111111111", "J. Smith");
    c.authorise("k5", &charge(&o, &method)).await.expect("authorised");
    // The same key with another request: refused by Adyen, not applied.
    let other = order(6);
    let e = c
        .authorise("k5", &charge(&other, &method))
        .await
        .expect_err("key reused");
    assert!(
        matches!(&e, PspError::Refused { status: 422, error } if error.code.as_deref() == Some("704")),
        "{e:?}"
    );
    let unknown = PspReference::parse("NOSUCHPAYMENT000").expect("reference");
    let e = c.cancel("k7", &unknown).await.expect_err("unknown payment");
    assert!(matches!(&e, PspError::Refused { status: 422, .. }), "{e:?}");
    assert_eq!(s.notified().len(), 1, "only the one authorisation");
}

#[tokio::test]
async fn long_idempotency_keys_are_digested_the_same_way_every_time() {
    let long = format!("{}:charge", "order_".repeat(20));
    let key = idempotency_key(&long);
    assert!(
        key.chars().count() <= MAX_KEY_CHARS && key.starts_with("sha256:"),
        "{key}"
    );
    assert_eq!(key, idempotency_key(&long));
    assert_ne!(key, idempotency_key(&format!("{long}2")));
    assert_eq!(idempotency_key("short:key"), "short:key");
    let s = served().await;
    let (c, o) = (s.client(), order(8));
    let method = card("4111111111111111", "J. Smith");
    let first = c
        .authorise(&long, &charge(&o, &method))
        .await
        .expect("accepted by Adyen");
    let again = c.authorise(&long, &charge(&o, &method)).await.expect("replayed");
    assert_eq!(
        first.psp_reference, again.psp_reference,
        "the same key: the first answer, no second payment"
    );
    assert_eq!(s.notified().len(), 1);
}

#[tokio::test]
async fn an_outage_is_retried_then_reported_unavailable() {
    let s = served().await;
    let (c, o) = (s.client(), order(9));
    let method = card("4111111111111111", "J. Smith");
    s.sim.ledger.storm(503, 2);
    let paid = c.authorise("k9", &charge(&o, &method)).await.expect("third attempt");
    assert_eq!(paid.result_code, ResultCode::Authorised);
    s.sim.ledger.storm(500, 3);
    let psp = paid.psp_reference.expect("psp");
    let e = c.cancel("k9:cancel", &psp).await.expect_err("down");
    assert!(e.is_transient(), "{e:?}");
    // The cancel did not happen: retried later with the same key, it does.
    let cancelled = c.cancel("k9:cancel", &psp).await.expect("cancel");
    assert_eq!(cancelled.status, ModificationStatus::Received);
}

#[tokio::test]
async fn an_adyen_that_never_answers_times_out_as_unavailable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream); // accepted, never answered
        }
    });
    let c = AdyenClient::new(&settings(&url, KEY, ACCOUNT)).expect("client");
    let o = order(10);
    let started = std::time::Instant::now();
    let e = c.cancel_by_reference("k10", &o.payment).await.expect_err("no answer");
    assert!(e.is_transient(), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "three attempts of 300 ms");
}

#[tokio::test]
async fn a_payment_is_cancelled_by_our_reference_and_the_key_is_never_shown() {
    let s = served().await;
    let (c, o) = (s.client(), order(11));
    let method = card("4111111111111111", "J. Smith");
    let psp = c
        .authorise("k11", &charge(&o, &method))
        .await
        .expect("paid")
        .psp_reference;
    let cancel = c.cancel_by_reference("k11:cancel", &o.payment).await.expect("cancel");
    assert_eq!(
        (cancel.status, cancel.payment_reference.as_deref()),
        (
            ModificationStatus::Received,
            Some(format!("pay_adyen_11@{}", shared::metrics::stage()).as_str())
        )
    );
    let last = s.notified().pop().expect("notified");
    assert_eq!(
        (last.0.as_str(), last.1.as_str(), last.3),
        ("TECHNICAL_CANCEL", "true", psp.map(|p| p.as_str().to_owned()))
    );
    let shown = format!("{c:?} {:?}", settings(&s.url, KEY, ACCOUNT));
    assert!(!shown.contains(KEY), "{shown}");
}

#[test]
fn the_settings_refuse_to_start_without_what_adyen_needs() {
    use shared::Env;
    let full = || {
        Env::from_lookup(|_| None)
            .with("ADYEN_BASE_URL", "https://checkout-test.adyen.com/")
            .with("ADYEN_API_KEY", " AQE_key \n")
            .with("ADYEN_MERCHANT_ACCOUNT", ACCOUNT)
            .with("ADYEN_RETURN_URL", "https://shop.example/back")
    };
    let settings = AdyenSettings::from_env(&full()).expect("settings");
    assert_eq!(settings.base_url, "https://checkout-test.adyen.com");
    assert_eq!(
        settings.key,
        psp::settings::KeySource::Value(psp::ApiKey::parse("AQE_key").expect("key"))
    );
    for name in [
        "ADYEN_BASE_URL",
        "ADYEN_API_KEY",
        "ADYEN_MERCHANT_ACCOUNT",
        "ADYEN_RETURN_URL",
    ] {
        let missing = AdyenSettings::from_env(&Env::from_lookup(move |n| full_value(n).filter(|_| n != name)));
        assert!(missing.is_err(), "{name} missing must fail the start");
    }
    assert!(AdyenSettings::from_env(&Env::from_lookup(full_value)).is_ok());
    let plain = full().with("ADYEN_BASE_URL", "http://checkout-test.adyen.com");
    assert!(AdyenSettings::from_env(&plain).is_err(), "http:// only to 127.0.0.1");
}

fn full_value(name: &str) -> Option<String> {
    match name {
        "ADYEN_BASE_URL" => Some("https://checkout-test.adyen.com".into()),
        "ADYEN_API_KEY" => Some("AQE_key".into()),
        "ADYEN_MERCHANT_ACCOUNT" => Some(ACCOUNT.into()),
        "ADYEN_RETURN_URL" => Some("https://shop.example/back".into()),
        _ => None,
    }
}
