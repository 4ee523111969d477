//! The checkout saga against Adyen (issue 26 item 4), end to end: the simulator's Adyen side answers the
//! Checkout API, its signed notifications go through the intake's `/webhooks/adyen` into DynamoDB Local, and
//! the payment's events reach the saga's inbox as SQS delivers them. Adyen has no status read, so what the
//! saga learns after a modification comes only this way.

use super::api::call;
use super::support::*;
use checkout_saga::orders;
use checkout_saga::runner::{CheckoutPsp, Runner, Settings};
use checkout_saga::saga::SagaStatus;
use lambda_http::http::{Method, StatusCode};
use psp::adyen::{merchant_reference, AdyenClient, AdyenPayment, AdyenSettings};
use psp::set::{guarded, ADYEN_BREAKER};
use psp::{ChargeRequest, GuardedAdyen, PspSet, StripeClient};
use psp_simulator::adyen::ledger::AdyenLedger;
use psp_simulator::adyen::notify::{self, Endpoint};
use psp_simulator::adyen::{self as sim_adyen, AdyenSimulator};
use psp_simulator::delivery::DeliveryOptions;
use serde_json::{json, Value};
use shared::retry::Backoff;
use shared::{OrderId, PaymentStatus, PspName};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use webhook_intake::providers::Providers;
use webhook_intake::{App, IntakeSettings};
use webhook_signatures::adyen::{HmacKey, Mode};

/// A plain test card: authorised.
const CARD: &str = r#"{"type":"scheme","encryptedCardNumber":"test_4111111111111111"}"#;
/// A 3-D Secure 2 test card: Adyen asks for a challenge (`RedirectShopper` with an `action`).
const CHALLENGE: &str = r#"{"type":"scheme","encryptedCardNumber":"test_4917610000000000"}"#;
/// Refused by the issuer (Adyen's test holder name `DECLINED`).
const DECLINED: &str = r#"{"type":"scheme","encryptedCardNumber":"test_4111111111111111","holderName":"DECLINED"}"#;

struct AdyenWorld {
    w: World,
    sim: Arc<AdyenSimulator>,
    url: String,
    intake: App,
    /// How many of the simulator's notifications went to the intake already.
    delivered: Mutex<usize>,
}

async fn adyen_world() -> AdyenWorld {
    let w = world().await;
    let key = HmacKey::from_hex(Mode::Test, sim_adyen::DEV_HMAC_KEY).expect("hmac key");
    let ledger = AdyenLedger::new(sim_adyen::DEV_API_KEY, sim_adyen::DEV_MERCHANT_ACCOUNT);
    // No endpoint: the notifications are kept, and handed to the intake by `notify`.
    let sim = AdyenSimulator::new(ledger, key, None, DeliveryOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(sim.clone().serve(listener));
    let spec = r#"[{"name":"adyen","scheme":"adyen","livemode":false}]"#;
    let secrets = json!({ "adyen": [
        format!("hmac:test:{}", sim_adyen::DEV_HMAC_KEY),
        format!("basic:{}:{}", sim_adyen::DEV_WEBHOOK_USERNAME, sim_adyen::DEV_WEBHOOK_PASSWORD),
    ] });
    let providers = Providers::from_json(spec, &secrets.to_string()).expect("providers");
    let intake = App::new(
        w.ctx.client_for("webhook-intake"),
        &w.ctx.config(),
        providers.into(),
        IntakeSettings::default(),
    );
    AdyenWorld {
        w,
        sim,
        url,
        intake,
        delivered: Mutex::new(0),
    }
}

impl AdyenWorld {
    /// The Adyen client behind its own breaker (`BREAKER#adyen`), as `checkout-api` builds it.
    fn adyen(&self) -> GuardedAdyen {
        let mut settings =
            AdyenSettings::local(&self.url, sim_adyen::DEV_API_KEY, sim_adyen::DEV_MERCHANT_ACCOUNT).expect("settings");
        settings.retries = Backoff::new(3, Duration::from_millis(1), Duration::from_millis(5));
        let client = AdyenClient::new(&settings).expect("client");
        guarded(
            client,
            self.w.ctx.client_for("checkout-api"),
            &self.w.ctx.table,
            ADYEN_BREAKER,
        )
    }

    /// A runner whose new checkouts go to Adyen (`SAGA_PSP=adyen`), holding both PSPs.
    fn runner_with(&self, settings: Settings) -> Runner<PspSet<StripeClient>> {
        let psps = PspSet::stripe_only(self.w.psp()).with_adyen(self.adyen());
        let settings = Settings {
            new_checkouts: CheckoutPsp::Adyen,
            ..settings
        };
        self.w.runner_with(self.w.ctx.client.clone(), psps, settings)
    }

    fn runner(&self) -> Runner<PspSet<StripeClient>> {
        self.runner_with(settings())
    }

    /// Posts every notification the simulator sent since the last call to the intake's `/webhooks/adyen`,
    /// signed and authenticated as Adyen sends them; the intake must accept them all.
    async fn notify(&self) -> Vec<Value> {
        let sent = self.sim.outbox.sent();
        let from = std::mem::replace(&mut *self.delivered.lock().expect("lock"), sent.len());
        let items = sent.get(from..).unwrap_or_default().to_vec();
        if items.is_empty() {
            return items;
        }
        let endpoint = Endpoint {
            url: String::new(),
            username: sim_adyen::DEV_WEBHOOK_USERNAME.into(),
            password: sim_adyen::DEV_WEBHOOK_PASSWORD.into(),
        };
        let headers = json!({ "content-type": "application/json", "authorization": endpoint.authorization() });
        let body = notify::notification(&items).to_string();
        let event = webhook_signatures::samples::apigw_event(
            "/webhooks/adyen",
            headers.as_object().expect("headers"),
            body.as_bytes(),
            false,
        );
        let request = lambda_http::request::from_str(&event.to_string()).expect("request");
        let (response, metrics) = webhook_intake::process(&self.intake, request).await;
        assert_eq!(response.status(), 200, "{metrics:?}");
        items
    }

    /// The notifications of `code` the simulator sent about our payment `payment` (its merchant reference)
    /// or a modification of it.
    fn notified(&self, code: &str, reference: &str) -> usize {
        self.sim
            .outbox
            .sent()
            .iter()
            .filter(|i| i["eventCode"] == code)
            .filter(|i| i["merchantReference"] == reference || i["originalReference"] == reference)
            .count()
    }

    /// The `redirectResult` the shopper brings back from the challenge of `record`'s payment, read from the
    /// action the customer's page was handed: Adyen's `action` whole (its `url` leads to the return page).
    async fn challenge(&self, record: &checkout_saga::saga::SagaRecord) -> String {
        let payment = self.payment(record).await;
        assert_eq!(payment.status, PaymentStatus::RequiresAction, "{payment:?}");
        let kept = payment
            .action
            .as_ref()
            .and_then(|a| a.client_secret())
            .expect("the action, kept");
        let action: Value = serde_json::from_str(kept.expose()).expect("Adyen's action object");
        assert_eq!(action["type"], "redirect", "{action}");
        let url = action["url"].as_str().expect("url");
        url.split("redirectResult=").nth(1).expect("redirectResult").to_owned()
    }

    async fn payment(&self, record: &checkout_saga::saga::SagaRecord) -> shared::Payment {
        let id = record.payment_id.as_ref().expect("payment");
        self.w.ctx.store.get(id).await.expect("read").expect("payment")
    }
}

#[tokio::test]
async fn an_adyen_checkout_is_authorised_captured_and_completed() {
    let a = adyen_world().await;
    let runner = a.runner();
    let order = order();
    let pending = runner.start(order.clone(), a.w.checkout(CARD, 2)).await.expect("start");
    assert_eq!(pending.status, SagaStatus::PaymentPending, "{pending:?}");
    let payment = a.payment(&pending).await;
    assert_eq!(payment.provider, PspName::Adyen, "the payment records its PSP");
    let reference = payment.psp_reference.clone().expect("Adyen's pspReference");
    assert_eq!(pending.psp_reference.as_ref(), Some(&reference));
    // Authorised, not captured yet: only Adyen's CAPTURE notification says the money is taken.
    assert_eq!(payment.status, PaymentStatus::Processing);
    assert!(
        a.w.sim.ledger.intents_for(payment.id.as_str()).is_empty(),
        "nothing at Stripe"
    );
    a.notify().await;
    assert_eq!(a.w.payment_status(&pending).await, PaymentStatus::Captured);
    a.w.deliver(&runner, &pending).await;
    let done = a.w.saga(&order).await;
    assert_eq!(done.status, SagaStatus::Completed, "{done:?}");
    assert_eq!(a.w.log(&order).await, HAPPY.to_vec());
    assert_eq!(a.w.stock().await, STOCK - 2);
    assert_eq!(
        (
            a.notified("AUTHORISATION", &merchant_reference(&payment.id)),
            a.notified("CAPTURE", reference.as_str())
        ),
        (1, 1),
        "authorised once, captured once"
    );
}

/// `POST /checkouts` with its `psp` in a deployment holding both PSPs (new checkouts to Stripe by default):
/// each checkout is charged where its request says, its payment records that PSP, and both complete; a
/// payment method the chosen PSP does not take is refused before anything is written.
#[tokio::test]
async fn one_deployment_charges_each_checkout_through_the_psp_its_request_names() {
    let a = adyen_world().await;
    let psps = PspSet::stripe_only(a.w.psp()).with_adyen(a.adyen());
    let runner = a.w.runner_with(a.w.ctx.client.clone(), psps, settings());
    assert_eq!(runner.settings.new_checkouts, CheckoutPsp::Stripe);
    let body = |order: &str, psp: Option<&str>, method: &str| {
        let mut body = json!({ "order_id": order, "sku": a.w.sku.as_str(), "quantity": 1, "amount_minor": 2500,
                               "currency": "EUR", "payment_method": method });
        if let Some(psp) = psp {
            body["psp"] = json!(psp);
        }
        body
    };
    let (status, answer) = call(
        &runner,
        Method::POST,
        "/checkouts",
        Some(body("order-mixed-0", Some("adyen"), "pm_succeeded")),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("payment_method"),
        "{answer}"
    );
    assert!(
        runner
            .sagas
            .load(&OrderId::parse("order-mixed-0").unwrap())
            .await
            .unwrap()
            .is_none(),
        "nothing written"
    );
    for (order, psp, method, provider) in [
        ("order-mixed-1", Some("adyen"), CARD, PspName::Adyen),
        ("order-mixed-2", Some("stripe"), "pm_succeeded", PspName::Stripe),
        ("order-mixed-3", None, "pm_succeeded", PspName::Stripe),
    ] {
        let (status, answer) = call(&runner, Method::POST, "/checkouts", Some(body(order, psp, method))).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        let pending = a.w.saga(&OrderId::parse(order).unwrap()).await;
        assert_eq!(
            pending.checkout.psp.map(CheckoutPsp::name),
            Some(provider.clone()),
            "stored with the checkout"
        );
        let payment = a.payment(&pending).await;
        assert_eq!(payment.provider, provider, "{order}: the payment records its PSP");
        let at_stripe = a.w.sim.ledger.intents_for(payment.id.as_str()).len();
        let at_adyen = a.notified("AUTHORISATION", &merchant_reference(&payment.id));
        let expected = if provider == PspName::Stripe { (1, 0) } else { (0, 1) };
        assert_eq!((at_stripe, at_adyen), expected, "{order}: charged at its PSP only");
        a.notify().await;
        a.w.deliver(&runner, &pending).await;
        let done = a.w.saga(&pending.order_id).await;
        assert_eq!(done.status, SagaStatus::Completed, "{done:?}");
    }
    assert_eq!(a.w.stock().await, STOCK - 3);
}

#[tokio::test]
async fn a_refused_adyen_checkout_fails_its_payment_and_is_compensated() {
    let a = adyen_world().await;
    let runner = a.runner();
    let order = order();
    let done = runner
        .start(order.clone(), a.w.checkout(DECLINED, 3))
        .await
        .expect("start");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    let payment = a.payment(&done).await;
    assert_eq!(
        (payment.provider, payment.status),
        (PspName::Adyen, PaymentStatus::Failed)
    );
    assert_eq!(a.w.stock().await, STOCK, "the reservation released");
    // Adyen's own AUTHORISATION `success: false` changes nothing more.
    a.notify().await;
    assert_eq!(a.payment(&done).await.status, PaymentStatus::Failed);
    let sent = a.sim.outbox.sent();
    assert!(
        sent.iter().all(|i| i["eventCode"] == "AUTHORISATION"),
        "nothing captured or cancelled at Adyen: {sent:?}"
    );
}

#[tokio::test]
async fn an_adyen_checkout_cancelled_by_the_customer_after_the_capture_is_refunded() {
    let a = adyen_world().await;
    let runner = a.runner();
    let order = order();
    let pending = runner.start(order.clone(), a.w.checkout(CARD, 1)).await.expect("start");
    a.notify().await;
    orders::cancel(&a.w.ctx.client, &a.w.ctx.table, &order)
        .await
        .expect("cancel the order");
    a.w.deliver(&runner, &pending).await;
    let refunding = a.w.saga(&order).await;
    assert_eq!(
        refunding.status,
        SagaStatus::RefundingPayment,
        "waits for Adyen's REFUND: {refunding:?}"
    );
    let reference = refunding.psp_reference.clone().expect("reference");
    assert_eq!(a.notified("REFUND", reference.as_str()), 1);
    // The refund's outcome arrives by notification; the next resume finds it succeeded.
    a.notify().await;
    let done = runner.resume(&order).await.expect("resume").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(a.w.log(&order).await, FAILED_AFTER_CAPTURE.to_vec());
    assert_eq!(a.w.stock().await, STOCK);
    let payment = a.payment(&done).await;
    assert_eq!(payment.refunds.len(), 1, "{:?}", payment.refunds);
    assert_eq!(payment.refunds[0].status, shared::RefundStatus::Succeeded);
    assert_eq!(a.notified("REFUND", reference.as_str()), 1, "refunded once at Adyen");
}

#[tokio::test]
async fn a_charge_answered_5xx_is_sent_again_with_its_key_and_replayed_by_adyen() {
    let a = adyen_world().await;
    let runner = a.runner_with(AdyenWorld::one_try());
    let order = order();
    let (payment, first) = a.charge_answer_lost(&runner, &order, 1).await;
    // The sweeper's resume sends it again with its key: Adyen replays the first answer, one payment there.
    let pending = runner.resume(&order).await.expect("resume").expect("saga");
    assert_eq!(pending.status, SagaStatus::PaymentPending, "{pending:?}");
    assert_eq!(
        pending.psp_reference, first.psp_reference,
        "the first authorisation, replayed"
    );
    assert_eq!(
        a.notified("AUTHORISATION", &merchant_reference(&payment.id)),
        1,
        "authorised once at Adyen"
    );
    a.notify().await;
    a.w.deliver(&runner, &pending).await;
    assert_eq!(a.w.saga(&order).await.status, SagaStatus::Completed);
}

#[tokio::test]
async fn a_3ds_challenge_keeps_adyens_action_for_the_customer_and_the_shoppers_return_finishes_the_checkout() {
    use lambda_http::http::{Method, StatusCode};
    let a = adyen_world().await;
    let runner = a.runner();
    let order = order();
    // Through the checkout API, as the shop calls it: Adyen's paymentMethod object is the payment method.
    let start = json!({ "order_id": order.as_str(), "sku": a.w.sku.as_str(), "quantity": 1, "amount_minor": 2500,
                        "currency": "EUR", "payment_method": CHALLENGE });
    let (status, body) = super::api::call(&runner, Method::POST, "/checkouts", Some(start)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let pending = a.w.saga(&order).await;
    assert_eq!(pending.status, SagaStatus::PaymentPending, "{pending:?}");
    assert!(pending.customer_action, "the customer's turn");
    let redirect_result = a.challenge(&pending).await;
    let path = format!("/checkouts/{order}/details");
    let (status, body) = super::api::call(
        &runner,
        Method::POST,
        &path,
        Some(json!({ "redirect_result": redirect_result })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["status"], "payment_pending",
        "captured only when Adyen says so: {body}"
    );
    assert_eq!(
        a.payment(&pending).await.status,
        PaymentStatus::Processing,
        "authorised"
    );
    let (status, _) = super::api::call(&runner, Method::POST, &path, Some(json!({ "redirect_result": "" }))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    a.notify().await;
    a.w.deliver(&runner, &pending).await;
    let done = a.w.saga(&order).await;
    assert_eq!(done.status, SagaStatus::Completed);
    let reference = a.payment(&pending).await.psp_reference.expect("reference");
    assert_eq!(
        done.psp_reference.as_ref(),
        Some(&reference),
        "the saga recorded the reference /payments/details brought"
    );
    assert_eq!(a.notified("CAPTURE", reference.as_str()), 1, "captured once");
    let (status, body) = super::api::call(&runner, Method::GET, &format!("/checkouts/{order}"), None).await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &json!("completed")),
        "{body}"
    );
}

#[tokio::test]
async fn a_challenge_authorised_by_notification_is_captured_by_the_waiting_saga() {
    let a = adyen_world().await;
    let runner = a.runner();
    let order = order();
    let pending = runner
        .start(order.clone(), a.w.checkout(CHALLENGE, 1))
        .await
        .expect("start");
    let redirect_result = a.challenge(&pending).await;
    // The shop finished the challenge itself: the saga learns it only from Adyen's AUTHORISATION.
    a.adyen()
        .details("the-shops-own-call", &redirect_result)
        .await
        .expect("authorised");
    a.notify().await;
    assert_eq!(a.w.payment_status(&pending).await, PaymentStatus::Processing);
    a.w.deliver(&runner, &pending).await;
    let reference = a.payment(&pending).await.psp_reference.expect("reference");
    assert_eq!(
        a.notified("CAPTURE", reference.as_str()),
        1,
        "the waiting saga captured it"
    );
    a.notify().await;
    a.w.deliver(&runner, &pending).await;
    assert_eq!(a.w.saga(&order).await.status, SagaStatus::Completed);
    // Resumed again (a sweep, a duplicate event): Adyen's replay for the key, no second capture.
    runner.resume(&order).await.expect("resume");
    assert_eq!(a.notified("CAPTURE", reference.as_str()), 1);
}

#[tokio::test]
async fn adyen_failing_opens_adyens_own_breaker_and_its_checkouts_wait_without_escalation() {
    use psp::breaker::BreakerState;
    use psp::{BreakerSettings, PspError};
    let a = adyen_world().await;
    let adyen = a.adyen();
    // Three requests (other keys) that Adyen keeps failing: each counts twice, five open the breaker.
    a.sim.ledger.storm(500, 9);
    let unknown = shared::PspReference::parse("ABCDEFGHIJKLMNOP").expect("reference");
    for n in 0..3 {
        let failed = adyen.cancel(&format!("failing-{n}"), &unknown).await;
        assert!(matches!(failed, Err(PspError::Unavailable(_))), "{failed:?}");
    }
    assert!(matches!(adyen.state().await.expect("state"), BreakerState::Open { .. }));
    let stripe = a.w.guarded_for("checkout-api", a.w.psp(), BreakerSettings::default());
    assert_eq!(
        stripe.state().await.expect("state"),
        BreakerState::Closed,
        "Stripe's calls go on"
    );
    // A checkout for Adyen now waits where it is, for its sweeper, with no escalation and no call.
    let order = order();
    let waiting = a
        .runner()
        .start(order.clone(), a.w.checkout(CARD, 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::Charging, "{waiting:?}");
    assert!(a.w.escalations().await.is_empty());
    assert!(a.sim.outbox.sent().is_empty(), "Adyen was not called");
}

#[tokio::test]
async fn a_key_adyen_refuses_is_a_deployment_fault_and_a_rolled_one_is_read_again_from_its_secret() {
    use psp::key::{CurrentKey, KeyLoader};
    use psp::{ApiKey, PspError};
    use shared::clock::MonotonicClock;
    use std::sync::atomic::{AtomicU64, Ordering};
    let a = adyen_world().await;
    let settings = AdyenSettings::local(&a.url, "AQE_revoked", sim_adyen::DEV_MERCHANT_ACCOUNT).expect("settings");
    let unknown = shared::PspReference::parse("ABCDEFGHIJKLMNOP").expect("reference");
    // A key from the environment that Adyen refuses: AuthFailed (deferred, never the customer's refusal).
    let fixed = AdyenClient::new(&settings).expect("client");
    let refused = fixed.cancel("k-1", &unknown).await;
    assert!(
        matches!(&refused, Err(e @ PspError::AuthFailed { status: 401, .. }) if e.is_deferred()),
        "{refused:?}"
    );
    // The secret now holds the rolled key: read again after the 401 (past the minimum interval), and the call
    // made once more with it reaches Adyen (which refuses the unknown payment as a request, not our key).
    let reads = Arc::new(AtomicU64::new(0));
    let loader: KeyLoader = {
        let reads = reads.clone();
        Arc::new(move || {
            reads.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(ApiKey::parse(sim_adyen::DEV_API_KEY)?) })
        })
    };
    let start = std::time::Instant::now();
    let ticks = Arc::new(AtomicU64::new(0));
    let clock: MonotonicClock =
        Arc::new(move || start + Duration::from_secs(60 * ticks.fetch_add(1, Ordering::SeqCst)));
    let key = CurrentKey::refreshable(ApiKey::parse("AQE_revoked").expect("key"), loader, clock);
    let rolled = AdyenClient::with_key(&settings, key).expect("client");
    let answer = rolled.cancel("k-2", &unknown).await;
    assert!(
        matches!(answer, Err(PspError::Refused { status: 422, .. })),
        "{answer:?}"
    );
    assert_eq!(reads.load(Ordering::SeqCst), 1, "one read of the secret");
}

/// A customer cancels a checkout waiting on its 3-D Secure challenge: Adyen's answer to the authorise gave no
/// pspReference (it comes with `/payments/details` or the notification), so the payment is cancelled by our
/// own reference (`<order>:cancel`, `POST /cancels`, notified `TECHNICAL_CANCEL`), failed at once, the stock
/// released, and nothing was captured.
#[tokio::test]
async fn a_checkout_cancelled_during_its_challenge_is_cancelled_by_our_reference_and_takes_nothing() {
    let a = adyen_world().await;
    let runner = a.runner();
    let order = order();
    let pending = runner
        .start(order.clone(), a.w.checkout(CHALLENGE, 2))
        .await
        .expect("start");
    assert!(pending.customer_action, "the customer's turn: {pending:?}");
    let payment = a.payment(&pending).await;
    assert_eq!(
        (&payment.psp_reference, &pending.psp_reference),
        (&None, &None),
        "no pspReference before the shopper acted"
    );
    let done = runner.cancel_by_customer(&order).await.expect("cancel").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(a.w.payment_status(&pending).await, PaymentStatus::Failed);
    assert_eq!(a.w.stock().await, STOCK, "the reservation released");
    runner.resume(&order).await.expect("resume");
    assert_eq!(
        a.notified("TECHNICAL_CANCEL", &merchant_reference(&payment.id)),
        1,
        "cancelled once, by our reference"
    );
    let view = a.sim.ledger.view_by_reference(payment.id.as_str()).expect("at Adyen");
    assert_eq!(
        (view.status, view.captured),
        (psp_simulator::adyen::ledger::Status::Cancelled, 0),
        "{view:?}"
    );
    a.notify().await;
    assert_eq!(a.w.payment_status(&pending).await, PaymentStatus::Failed);
}

/// A charge whose answer never comes: the request reached Adyen, which authorised it, but the saga never
/// learnt its pspReference. Past the charge's deadline the saga gives up and cancels by our own reference
/// (`POST /cancels` with `paymentReference`, notified `TECHNICAL_CANCEL`): the payment failed, the stock
/// released, nothing captured.
#[tokio::test]
async fn a_charge_unanswered_past_its_deadline_is_cancelled_by_our_reference_and_takes_nothing() {
    let a = adyen_world().await;
    let order = order();
    let (payment, made) = a
        .charge_answer_lost(&a.runner_with(AdyenWorld::one_try()), &order, 2)
        .await;
    let reference = made.psp_reference.expect("Adyen's pspReference");
    let later = a.runner_with(Settings {
        clock: shared::clock::WallClock::ahead(Duration::from_secs(3600)),
        ..settings()
    });
    let done = later.resume(&order).await.expect("resume").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(a.w.payment_status(&done).await, PaymentStatus::Failed);
    assert_eq!(a.w.stock().await, STOCK, "the reservation released");
    assert_eq!(
        (
            a.notified("TECHNICAL_CANCEL", &merchant_reference(&payment.id)),
            a.notified("CANCELLATION", reference.as_str()),
            a.notified("CAPTURE", reference.as_str())
        ),
        (1, 0, 0),
        "one cancel by our reference, nothing captured"
    );
    a.cancelled_at_adyen(&reference);
    // Adyen's notifications (the authorisation, the cancel) change nothing more.
    a.notify().await;
    assert_eq!(a.w.payment_status(&done).await, PaymentStatus::Failed);
}

impl AdyenWorld {
    /// One try of a step: a storm outlasting the client's three attempts leaves the saga to its sweeper.
    fn one_try() -> Settings {
        Settings {
            backoff: Backoff::new(1, Duration::ZERO, Duration::ZERO),
            ..settings()
        }
    }

    /// Starts a checkout of `quantity` whose charge fails every attempt (5xx), so the saga is left charging;
    /// then the same request with the same key reaches Adyen, which authorises it: a charge whose answer was
    /// lost. Returns the saga's payment and Adyen's answer.
    async fn charge_answer_lost(
        &self,
        runner: &Runner<PspSet<StripeClient>>,
        order: &OrderId,
        quantity: u32,
    ) -> (shared::Payment, AdyenPayment) {
        self.sim.ledger.storm(500, 3);
        let failed = runner.start(order.clone(), self.w.checkout(CARD, quantity)).await;
        assert!(failed.is_err(), "{failed:?}");
        let charging = self.w.saga(order).await;
        assert_eq!(charging.status, SagaStatus::Charging, "{charging:?}");
        let payment = self.payment(&charging).await;
        let request = ChargeRequest {
            payment_id: &payment.id,
            order_id: order,
            money: &charging.checkout.money,
            payment_method: CARD,
        };
        let made = self
            .adyen()
            .authorise(&format!("{order}:charge"), &request)
            .await
            .expect("authorised");
        (payment, made)
    }

    /// Adyen holds the payment of `reference` cancelled, with nothing captured.
    fn cancelled_at_adyen(&self, reference: &shared::PspReference) {
        let view = self.sim.ledger.view(reference.as_str()).expect("at Adyen");
        assert_eq!(
            (view.status, view.captured),
            (psp_simulator::adyen::ledger::Status::Cancelled, 0),
            "{view:?}"
        );
    }
}

/// Its first refund fails after Adyen received it (`REFUND`, then `REFUND_FAILED`); later ones succeed.
const REFUND_FAILS_ONCE: &str =
    r#"{"type":"scheme","encryptedCardNumber":"test_4111111111111111","holderName":"REFUND_FAILED_ONCE"}"#;

#[tokio::test]
async fn an_adyen_refund_that_failed_is_given_back_by_recovery_and_then_the_saga_releases_the_stock() {
    let a = adyen_world().await;
    let runner = a.runner();
    let order = order();
    let pending = runner
        .start(order.clone(), a.w.checkout(REFUND_FAILS_ONCE, 1))
        .await
        .expect("start");
    a.notify().await;
    orders::cancel(&a.w.ctx.client, &a.w.ctx.table, &order)
        .await
        .expect("cancel the order");
    a.w.deliver(&runner, &pending).await;
    let refunding = a.w.saga(&order).await;
    let reference = refunding.psp_reference.clone().expect("reference");
    // Adyen reports the saga's refund failed: the money is ours again, the saga is not done.
    a.notify().await;
    let resumed = runner.resume(&order).await;
    assert!(resumed.is_err(), "{resumed:?}");
    assert_eq!(a.w.saga(&order).await.status, SagaStatus::RefundingPayment);
    assert_eq!(a.w.stock().await, STOCK - 1, "reserved while the money is not back");
    let failed = a.payment(&refunding).await;
    assert_eq!(failed.give_back.map(|g| g.failure), Some(1), "{failed:?}");

    // Recovery gives it back at Adyen under `<payment>:refund-failure-1`; its REFUND notification says so.
    let id = failed.id.clone();
    let correlation = shared::CorrelationId::parse("corr-recovery").expect("correlation");
    let given = runner.recovery.reconcile(&id, correlation).await.expect("give back");
    assert!(matches!(given, recovery::Reconciled::Applied(_)), "{given:?}");
    assert_eq!(
        a.notified("REFUND", reference.as_str()),
        2,
        "the give-back: one more refund"
    );
    a.notify().await;

    let done = runner.resume(&order).await.expect("resume").expect("saga");
    assert_eq!(done.status, SagaStatus::Compensated, "{done:?}");
    assert_eq!(a.w.stock().await, STOCK, "the stock is released");
    let payment = a.payment(&done).await;
    assert_eq!(
        (payment.status, payment.refunded_minor, payment.give_back),
        (PaymentStatus::Refunded, payment.money.amount_minor(), None),
        "{payment:?}"
    );
    assert_eq!(
        a.notified("REFUND", reference.as_str()),
        2,
        "no refund beyond the give-back"
    );
}
