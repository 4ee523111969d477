//! The payments demo's reading of Adyen (`psp_simulator::demo::adyen`): the orchestrator's sync answer from
//! each of Adyen's result codes, and where Adyen says a payment stands after each play, which is what the
//! demo's own check compares every payment with.

use psp_simulator::adyen::ledger::AdyenLedger;
use psp_simulator::adyen::AdyenSimulator;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::demo::adyen::{psp_says, sync_result};
use serde_json::{json, Value};
use webhook_signatures::adyen::{HmacKey, Mode};

const KEY: &str = "AQE_demo_test";
const ACCOUNT: &str = "DemoECOM";

fn simulator() -> std::sync::Arc<AdyenSimulator> {
    let key = HmacKey::from_hex(Mode::Test, &"AB".repeat(32)).expect("key");
    AdyenSimulator::new(AdyenLedger::new(KEY, ACCOUNT), key, None, DeliveryOptions::default())
}

fn post(sim: &AdyenSimulator, path: &str, body: &Value) -> psp_simulator::ledger::Answer {
    sim.ledger
        .handle("POST", path, Some(KEY), None, body.to_string().as_bytes())
        .answer
}

fn pay(sim: &AdyenSimulator, reference: &str, card: &str, holder: &str) -> psp_simulator::ledger::Answer {
    let body = json!({ "amount": { "value": 2500, "currency": "EUR" }, "merchantAccount": ACCOUNT,
        "reference": reference, "returnUrl": "https://shop.example/back",
        "paymentMethod": { "type": "scheme", "encryptedCardNumber": card, "holderName": holder } });
    post(sim, "/v71/payments", &body)
}

const CARD: &str = "test_4111111111111111";
const CHALLENGE: &str = "test_4917610000000000";

#[test]
fn each_result_code_is_the_sync_answer_the_intake_would_agree_with() {
    let sim = simulator();
    let authorised = sync_result(&pay(&sim, "pay_1", CARD, "J. Smith")).expect("authorised");
    assert_eq!(authorised["outcome"], "processing", "{authorised}");
    assert_eq!(authorised["psp_reference"].as_str().map(str::len), Some(16));
    let refused = sync_result(&pay(&sim, "pay_2", CARD, "DECLINED")).expect("refused");
    assert_eq!(
        (refused["outcome"].as_str(), refused["reason"].as_str()),
        (Some("failed"), Some("Refused"))
    );
    let challenged = sync_result(&pay(&sim, "pay_3", CHALLENGE, "J. Smith")).expect("challenged");
    assert_eq!(challenged["outcome"], "requires_action");
    assert!(
        challenged["redirect_url"]
            .as_str()
            .is_some_and(|u| u.starts_with("https://shop.example/back?redirectResult=")),
        "{challenged}"
    );
    let refusal = psp_simulator::ledger::Answer {
        status: 422,
        body: json!({ "status": 422, "errorType": "validation" }),
    };
    assert!(sync_result(&refusal).is_err(), "an error is not an outcome");
}

#[test]
fn where_adyen_says_each_play_ends() {
    let sim = simulator();
    let reference =
        |answer: psp_simulator::ledger::Answer| answer.body["pspReference"].as_str().expect("psp").to_owned();
    let money = json!({ "amount": { "value": 2500, "currency": "EUR" }, "merchantAccount": ACCOUNT });
    let captured = reference(pay(&sim, "pay_c", CARD, "J. Smith"));
    assert_eq!(
        psp_says(&sim, &captured),
        Some("processing"),
        "authorised, not captured"
    );
    post(&sim, &format!("/v71/payments/{captured}/captures"), &money);
    assert_eq!(psp_says(&sim, &captured), Some("captured"));
    let refunded = reference(pay(&sim, "pay_r", CARD, "J. Smith"));
    post(&sim, &format!("/v71/payments/{refunded}/captures"), &money);
    post(&sim, &format!("/v71/payments/{refunded}/refunds"), &money);
    assert_eq!(psp_says(&sim, &refunded), Some("refunded"));
    let cancelled = reference(pay(&sim, "pay_x", CARD, "J. Smith"));
    post(
        &sim,
        &format!("/v71/payments/{cancelled}/cancels"),
        &json!({ "merchantAccount": ACCOUNT }),
    );
    assert_eq!(psp_says(&sim, &cancelled), Some("failed"));
    let refused = reference(pay(&sim, "pay_d", CARD, "DECLINED"));
    assert_eq!(psp_says(&sim, &refused), Some("failed"));
    // Waiting for the shopper: no pspReference yet (it comes with /payments/details), known by our reference.
    let challenged = pay(&sim, "pay_3ds", CHALLENGE, "J. Smith");
    assert_eq!(challenged.body.get("pspReference"), None, "{:?}", challenged.body);
    let view = sim.ledger.view_by_reference("pay_3ds").expect("known by our reference");
    assert_eq!(view.status, psp_simulator::adyen::ledger::Status::AwaitingShopper);
    assert_eq!(psp_says(&sim, "UNKNOWN000000000"), None);
}
