//! The demo's Adyen payments: the demo plays the shop's orchestrator against an Adyen account held in
//! process (as the Stripe side's ledger is), so it can race the synchronous answers against the
//! notifications on purpose. Each payment is created with `provider: "adyen"`, authorised (a plain card, a
//! 3-D Secure challenge completed through `/payments/details`, or a refusal), then captured, captured and
//! refunded, or cancelled. The synchronous answers go to `sync-result` while the account's notifications
//! travel through the simulator's Adyen queue ([`crate::adyen::notify`]: batches, duplicates, delays,
//! retries in order) to the local API's `/webhooks/adyen`; modifications have no synchronous outcome, only
//! their notifications. At the end, where each payment stands at Adyen ([`AdyenLedger::view`]) is where it
//! must stand with us.

use super::{post_sync, race_sync, Checkout, DemoConfig};
use crate::adyen::ledger::{AdyenLedger, Handled, Status};
use crate::adyen::notify::Endpoint;
use crate::adyen::{AdyenSimulator, DEV_MERCHANT_ACCOUNT};
use crate::client::{BoxError, HttpClient};
use crate::delivery::DeliveryOptions;
use crate::ledger::Answer;
use rand::seq::IndexedRandom;
use rand::Rng;
use serde_json::{json, Value};
use std::sync::Arc;
use webhook_signatures::adyen::HmacKey;

/// The in-process account's API key (the demo calls the ledger directly, not over HTTP).
const DEMO_KEY: &str = "AQE_demo_adyen_key";
/// Where a challenged shopper returns (the simulated issuer sends it back with `redirectResult`).
const RETURN_URL: &str = "https://shop.example/checkout/return";

/// How the local API's Adyen endpoint takes notifications: the HMAC key it verifies and its Basic auth.
pub struct AdyenEndpoint {
    pub key: HmacKey,
    pub endpoint: Endpoint,
}

/// The demo's Adyen account, its notifications sent to `settings`' endpoint in the background.
pub fn account(settings: &AdyenEndpoint, delivery: DeliveryOptions) -> Arc<AdyenSimulator> {
    let ledger = AdyenLedger::new(DEMO_KEY, DEV_MERCHANT_ACCOUNT);
    let endpoint = Some(settings.endpoint.clone());
    let sim = AdyenSimulator::new(ledger, settings.key.clone(), endpoint, delivery);
    sim.clone().notify_in_background();
    sim
}

/// What the shopper and the shop do with one payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Play {
    /// Authorised, then captured.
    Capture,
    /// A 3-D Secure challenge, completed; authorised, then captured.
    Challenge,
    /// Authorised, captured, then refunded in full.
    Refund,
    /// Authorised, then cancelled (the order fell through before the capture).
    Cancel,
    /// Refused by the issuer.
    Refused,
    /// A 3-D Secure challenge, completed, then refused.
    ChallengeRefused,
}

const PLAYS: [Play; 6] = [
    Play::Capture,
    Play::Challenge,
    Play::Refund,
    Play::Cancel,
    Play::Refused,
    Play::ChallengeRefused,
];

impl Play {
    fn payment_method(self) -> Value {
        let challenged = matches!(self, Play::Challenge | Play::ChallengeRefused);
        let card = if challenged {
            "test_4917610000000000"
        } else {
            "test_4111111111111111"
        };
        let refused = matches!(self, Play::Refused | Play::ChallengeRefused);
        let holder = if refused { "DECLINED" } else { "J. Smith" };
        json!({ "type": "scheme", "encryptedCardNumber": card, "holderName": holder })
    }
}

/// The orchestrator's reading of Adyen's answer to `/payments` or `/payments/details`: the payments API's
/// `sync-result` body (a refusal is final for its pspReference, as the intake reads `AUTHORISATION` false).
pub fn sync_result(answer: &Answer) -> Result<Value, BoxError> {
    let body = &answer.body;
    let reference = body["pspReference"].clone();
    match (answer.status, body["resultCode"].as_str()) {
        (200, Some("Authorised")) => Ok(json!({ "outcome": "processing", "psp_reference": reference })),
        (200, Some("Refused")) => Ok(json!({ "outcome": "failed", "psp_reference": reference,
            "reason": body["refusalReason"].as_str().unwrap_or("Refused") })),
        (200, Some("RedirectShopper")) => Ok(json!({ "outcome": "requires_action", "psp_reference": reference,
            "redirect_url": body["action"]["url"] })),
        _ => Err(format!("Adyen answered {}: {body}", answer.status).into()),
    }
}

/// One call to the account, its notifications queued.
fn call(sim: &AdyenSimulator, path: &str, key: &str, body: &Value) -> Handled {
    let handled = sim
        .ledger
        .handle("POST", path, Some(DEMO_KEY), Some(key), body.to_string().as_bytes());
    sim.notify(&handled.notices);
    handled
}

/// The `redirectResult` the issuer's redirect brings back.
fn redirect_result(answer: &Value) -> Result<String, BoxError> {
    let url = answer["action"]["url"].as_str().unwrap_or_default();
    url.split_once("redirectResult=")
        .map(|(_, token)| token.to_owned())
        .ok_or_else(|| format!("no redirectResult in the action: {answer}").into())
}

/// One Adyen payment played out (module doc).
pub async fn checkout(
    client: &HttpClient,
    sim: &AdyenSimulator,
    config: &DemoConfig,
    n: usize,
) -> Result<Checkout, BoxError> {
    let play = *PLAYS.choose(&mut rand::rng()).unwrap_or(&Play::Capture);
    let amount = rand::rng().random_range(100..100_000u64);
    let payment_id = super::create(client, config, n, amount, Some("adyen")).await?;
    let money = json!({ "value": amount, "currency": "EUR" });
    let account = sim.ledger.merchant_account().to_owned();
    let request = json!({ "amount": money, "merchantAccount": account, "reference": payment_id,
        "paymentMethod": play.payment_method(), "returnUrl": RETURN_URL });
    let mut handled = call(sim, "/v71/payments", &format!("{payment_id}:authorise"), &request);
    let mut sync = sync_result(&handled.answer)?;
    let mut asked_secret = false;
    if sync["outcome"] == "requires_action" {
        // No notification for a redirect: the shop shows the challenge, the shopper completes it.
        asked_secret = true;
        post_sync(client, config, &payment_id, &sync).await?;
        let details = json!({ "details": { "redirectResult": redirect_result(&handled.answer.body)? } });
        handled = call(sim, "/v71/payments/details", &format!("{payment_id}:details"), &details);
        sync = sync_result(&handled.answer)?;
    }
    // The race on purpose: the authorisation's notification is already in the queue.
    let sync_answer = race_sync(client, config, &payment_id, &sync).await?;
    let psp_reference = sync["psp_reference"].as_str().unwrap_or_default().to_owned();
    if sync["outcome"] == "processing" {
        let operations: &[&str] = match play {
            Play::Cancel => &["cancels"],
            Play::Refund => &["captures", "refunds"],
            _ => &["captures"],
        };
        for operation in operations {
            let mut body = json!({ "merchantAccount": account });
            if *operation != "cancels" {
                body["amount"] = money.clone();
            }
            let path = format!("/v71/payments/{psp_reference}/{operation}");
            call(sim, &path, &format!("{payment_id}:{operation}"), &body);
        }
    }
    Ok(Checkout {
        payment_id,
        provider: "adyen",
        psp_reference: Some(psp_reference),
        sync_answer,
        sync_asked_secret: asked_secret,
        webhook_results: Vec::new(),
    })
}

/// Where Adyen says the payment stands, in our statuses.
pub fn psp_says(sim: &AdyenSimulator, psp_reference: &str) -> Option<&'static str> {
    let view = sim.ledger.view(psp_reference)?;
    Some(match view.status {
        Status::Refused | Status::Cancelled => "failed",
        Status::AwaitingShopper => "requires_action",
        Status::Authorised if view.captured > 0 && view.refunded >= view.captured => "refunded",
        Status::Authorised if view.captured > 0 => "captured",
        Status::Authorised => "processing",
    })
}
