//! `POST /webhooks/adyen` (issue 26 items 2 and 6) over the intake's HTTP handler, against DynamoDB Local:
//! Basic auth and per-item HMAC before anything is written, a batch applied item by item through the one
//! `decide`, Adyen's identity as the dedup key, `[accepted]` and never a 503 for what can be parked, and the
//! retry of what was parked, which ends (applied, or quarantined at its deadline).

use super::*;
use shared::PspReference;
use webhook_intake::adyen::notification;
use webhook_intake::adyen::retry;
use webhook_signatures::adyen::{HmacKey, Mode};

/// Adyen's published test key (its Python library's `test_notification_request_item_hmac`).
const TEST_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
/// A live key configured beside it (its notifications say "live" whatever their `live` field says).
const LIVE_KEY: &str = "0F1E2D3C4B5A69788796A5B4C3D2E1F00F1E2D3C4B5A69788796A5B4C3D2E1F0";
const USER: &str = "adyen";
const PASSWORD: &str = "correct-horse-battery";

fn adyen_app(ctx: &TestContext, function: &str) -> App {
    let spec = r#"[{"name":"stripe","scheme":"stripe","livemode":false},
                   {"name":"adyen","scheme":"adyen","livemode":false}]"#;
    let secrets = json!({
        "stripe": [STRIPE_NEW],
        "adyen": [format!("hmac:test:{TEST_KEY}"), format!("hmac:live:{LIVE_KEY}"), format!("basic:{USER}:{PASSWORD}")],
    });
    let providers = Providers::from_json(spec, &secrets.to_string()).unwrap();
    let settings = IntakeSettings {
        lease_max_wait: Duration::from_millis(20),
        ..IntakeSettings::default()
    };
    App::new(ctx.client_for(function), &ctx.config(), providers.into(), settings)
}

fn key(mode: Mode) -> HmacKey {
    match mode {
        Mode::Test => HmacKey::from_hex(Mode::Test, TEST_KEY).unwrap(),
        Mode::Live => HmacKey::from_hex(Mode::Live, LIVE_KEY).unwrap(),
    }
}

/// An item of `code` about the payment whose pspReference is `payment_ref` (a modification with its own
/// reference `own`), claiming `payment` as merchantReference, signed with `mode`'s key.
fn item(code: &str, success: bool, payment: &str, payment_ref: &str, own: Option<&str>, amount: u64) -> Value {
    let mut item = json!({
        "pspReference": own.unwrap_or(payment_ref), "merchantAccountCode": "TestMerchant",
        "merchantReference": payment, "amount": { "currency": "EUR", "value": amount }, "eventCode": code,
        "success": success.to_string(), "eventDate": "2026-12-02T12:00:00+01:00", "reason": "",
        "paymentMethod": "visa", "operations": ["CANCEL", "CAPTURE", "REFUND"]
    });
    if own.is_some() {
        item["originalReference"] = json!(payment_ref);
    }
    sign(item, Mode::Test)
}

/// `item` with `additionalData.hmacSignature` made by `mode`'s key.
fn sign(mut item: Value, mode: Mode) -> Value {
    let body = envelope(&[item.clone()], "false");
    let parsed = notification::items(&body).unwrap().pop().unwrap();
    item["additionalData"] = json!({ "hmacSignature": key(mode).sign(&parsed), "authCode": "076181" });
    item
}

fn envelope(items: &[Value], live: &str) -> Vec<u8> {
    let items: Vec<Value> = items.iter().map(|i| json!({ "NotificationRequestItem": i })).collect();
    json!({ "live": live, "notificationItems": items })
        .to_string()
        .into_bytes()
}

fn basic(user_password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

fn post(items: &[Value]) -> Request {
    post_as(items, &format!("{USER}:{PASSWORD}"))
}

fn post_as(items: &[Value], user_password: &str) -> Request {
    apigw(
        "/webhooks/adyen",
        json!({ "content-type": "application/json", "authorization": basic(user_password) }),
        &envelope(items, "false"),
        false,
    )
}

/// Sends and returns the answer's status and body text.
async fn deliver(app: &App, req: Request) -> (StatusCode, String, RequestMetrics) {
    let (response, metrics) = process(app, req).await;
    let text = match response.body() {
        Body::Text(t) => t.clone(),
        Body::Binary(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    (response.status(), text, metrics)
}

async fn accepted(app: &App, items: &[Value]) -> RequestMetrics {
    let (status, text, metrics) = deliver(app, post(items)).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "[accepted]"), "{metrics:?}");
    metrics
}

/// An Adyen payment of 11.30 EUR, bound to `psp_ref` (as the sync answer of `/payments` leaves it).
async fn adyen_payment(ctx: &TestContext, id: &str, psp_ref: Option<&str>) -> PaymentId {
    let mut new = fixtures::new_payment(id, 1130);
    new.provider = shared::PspName::Adyen;
    new.psp_reference = psp_ref.map(|r| PspReference::parse(r).unwrap());
    ctx.store.create(new).await.unwrap().id
}

async fn status(ctx: &TestContext, id: &PaymentId) -> (PaymentStatus, u64) {
    let p = ctx.store.get(id).await.unwrap().unwrap();
    (p.status, p.version)
}

async fn parked(ctx: &TestContext, kind: ParkedKind) -> Vec<shared::store::Parked> {
    ctx.store.parked(kind).await.unwrap()
}

async fn retry_run(ctx: &TestContext, deadline: Duration) -> retry::RetryReport {
    let app = adyen_app(ctx, "webhook-catchup");
    let provider = app.providers.current().await.get("adyen").unwrap().clone();
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    retry::run(&app, &provider, deadline, until).await.unwrap()
}

const PSP: &str = "7914073381342284";
const CAPTURE_REF: &str = "8835511210681017";
const REFUND_REF: &str = "9935511210681017";

/// Adyen's published vector, as Adyen would post it, moves the payment it names; its redelivery is a
/// duplicate by Adyen's identity; a changed unsigned field still verifies and moves nothing new.
#[tokio::test]
async fn the_published_vector_is_applied_once() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let id = adyen_payment(&ctx, "pay_adyen_v1", Some(PSP)).await;
    let mut vector = json!({
        "pspReference": PSP, "merchantReference": "TestPayment-1407325143704",
        "merchantAccountCode": "TestMerchant", "amount": { "currency": "EUR", "value": 1130 },
        "eventCode": "AUTHORISATION", "success": "true", "eventDate": "2019-05-06T17:15:34.121+02:00",
        "operations": ["CANCEL", "CAPTURE", "REFUND"], "paymentMethod": "visa",
        "additionalData": { "hmacSignature": "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=" }
    });
    accepted(&app, &[vector.clone()]).await;
    assert_eq!(status(&ctx, &id).await, (PaymentStatus::Processing, 2));
    let events = ctx.events(&id).await.unwrap();
    assert_eq!(
        events.last().unwrap().psp_event_id.as_ref().map(|e| e.as_str()),
        Some("AUTHORISATION-true-7914073381342284")
    );
    // Adyen's redelivery, an unsigned field changed on the way: verified, a duplicate, nothing written.
    vector["eventDate"] = json!("2030-01-01T00:00:00Z");
    vector["additionalData"]["modification.action"] = json!("refund");
    accepted(&app, &[vector]).await;
    assert_eq!(status(&ctx, &id).await, (PaymentStatus::Processing, 2));
}

/// Nothing is written for a request that is not Adyen's: wrong Basic auth, a forged or unsigned item (even
/// beside a good one in the same batch), a body that is not a notification.
#[tokio::test]
async fn refused_requests_write_nothing() {
    let t = TestIntake::with(TestContext::new().await);
    let app = adyen_app(&t.ctx, "webhook-intake");
    let id = adyen_payment(&t.ctx, "pay_adyen_r1", Some(PSP)).await;
    let good = item("AUTHORISATION", true, id.as_str(), PSP, None, 1130);
    let mut forged = item("CAPTURE", true, id.as_str(), PSP, Some(CAPTURE_REF), 1130);
    forged["amount"]["value"] = json!(1);
    let mut unsigned = good.clone();
    unsigned.as_object_mut().unwrap().remove("additionalData");
    let before = t.item_count().await;
    for (req, status, why) in [
        (
            post_as(std::slice::from_ref(&good), &format!("{USER}:wrong-password-here")),
            StatusCode::UNAUTHORIZED,
            "basic auth",
        ),
        (
            apigw(
                "/webhooks/adyen",
                json!({}),
                &envelope(std::slice::from_ref(&good), "false"),
                false,
            ),
            StatusCode::UNAUTHORIZED,
            "no auth",
        ),
        (post(&[good.clone(), forged]), StatusCode::UNAUTHORIZED, "a forged item"),
        (post(&[unsigned]), StatusCode::UNAUTHORIZED, "an unsigned item"),
        (
            apigw(
                "/webhooks/adyen",
                json!({ "authorization": basic(&format!("{USER}:{PASSWORD}")) }),
                b"{\"notificationItems\": 5}",
                false,
            ),
            StatusCode::BAD_REQUEST,
            "not a notification",
        ),
    ] {
        let (got, text, metrics) = deliver(&app, req).await;
        assert_eq!(got, status, "{why}: {text}");
        assert!(!text.contains(PASSWORD) && !text.contains(TEST_KEY), "{text}");
        assert_eq!(
            metrics.unauthorized,
            u32::from(status == StatusCode::UNAUTHORIZED),
            "{why}"
        );
    }
    assert_eq!(t.item_count().await, before, "nothing written");
    assert_eq!(status(&t.ctx, &id).await, (PaymentStatus::Pending, 1));
}

/// A batch is applied item by item, in any order: the authorisation, the capture and a refund in one
/// request refund the payment; sent in reverse, the refund waits (parked, no 503) for the capture and the
/// retry applies it.
#[tokio::test]
async fn a_batch_is_applied_item_by_item_in_any_order() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let id = adyen_payment(&ctx, "pay_adyen_b1", Some(PSP)).await;
    let batch = [
        item("AUTHORISATION", true, id.as_str(), PSP, None, 1130),
        item("CAPTURE", true, id.as_str(), PSP, Some(CAPTURE_REF), 1130),
        item("REFUND", true, id.as_str(), PSP, Some(REFUND_REF), 1130),
    ];
    accepted(&app, &batch).await;
    let p = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.refunded_minor, p.version),
        (PaymentStatus::Refunded, 1130, 4)
    );

    let other = "7914073381349999";
    let id2 = adyen_payment(&ctx, "pay_adyen_b2", Some(other)).await;
    let reversed = [
        item("REFUND", true, id2.as_str(), other, Some(REFUND_REF), 1130),
        item("CAPTURE", true, id2.as_str(), other, Some(CAPTURE_REF), 1130),
        item("AUTHORISATION", true, id2.as_str(), other, None, 1130),
    ];
    accepted(&app, &reversed).await;
    assert_eq!(
        status(&ctx, &id2).await,
        (PaymentStatus::Captured, 2),
        "processing after captured is stale"
    );
    let waiting = parked(&ctx, ParkedKind::Retrying).await;
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].event_key, format!("REFUND-true-{REFUND_REF}-{other}"));
    assert!(
        waiting[0].reason.contains("RefundBeforeCapture"),
        "{}",
        waiting[0].reason
    );
    assert!(!waiting[0].body.contains("hmacSignature") && !waiting[0].body.contains("076181"));
    let report = retry_run(&ctx, Duration::from_secs(3600)).await;
    assert_eq!((report.retried, report.done), (1, 1), "{report:?}");
    let p = ctx.store.get(&id2).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Refunded, 1130));
    assert!(parked(&ctx, ParkedKind::Retrying).await.is_empty());
    assert_eq!(retry_run(&ctx, Duration::from_secs(3600)).await.retried, 0);
}

/// The payment's lease held by another worker, or a payment not written yet: `[accepted]`, never a 503, and
/// parked; the retry applies it once it can.
#[tokio::test]
async fn what_cannot_be_applied_now_is_accepted_parked_and_retried() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let id = adyen_payment(&ctx, "pay_adyen_l1", Some(PSP)).await;
    let lease = ctx.leases.acquire(&ctx.read(&id).await).await.unwrap().unwrap();
    let m = accepted(
        &app,
        &[item("CAPTURE", true, id.as_str(), PSP, Some(CAPTURE_REF), 1130)],
    )
    .await;
    assert_eq!(m.lease_deferrals, 1);
    assert_eq!(status(&ctx, &id).await, (PaymentStatus::Pending, 1));
    // Not yet: the lease is still held.
    let report = retry_run(&ctx, Duration::from_secs(3600)).await;
    assert_eq!((report.waiting, report.done), (1, 0), "{report:?}");
    ctx.leases.release(&lease).await.unwrap();

    // Its payment not written yet (the notification outran the sync answer): claimed by our payment id.
    let ghost = "pay_adyen_l2";
    let other = "7914073381347777";
    accepted(&app, &[item("AUTHORISATION", true, ghost, other, None, 1130)]).await;
    assert_eq!(parked(&ctx, ParkedKind::Retrying).await.len(), 2);
    let id2 = adyen_payment(&ctx, ghost, None).await;

    let report = retry_run(&ctx, Duration::from_secs(3600)).await;
    assert_eq!((report.retried, report.done), (2, 2), "{report:?}");
    assert_eq!(status(&ctx, &id).await.0, PaymentStatus::Captured);
    let p = ctx.store.get(&id2).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.psp_reference.as_ref().map(|r| r.as_str())),
        (PaymentStatus::Processing, Some(other)),
        "bound to the pspReference its notification named"
    );
    assert!(parked(&ctx, ParkedKind::Retrying).await.is_empty());
}

/// The wait ends: an item still not applicable at its deadline is quarantined (alarmed) and removed.
#[tokio::test]
async fn a_parked_item_past_its_deadline_is_quarantined() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let id = adyen_payment(&ctx, "pay_adyen_d1", Some(PSP)).await;
    accepted(&app, &[item("REFUND", true, id.as_str(), PSP, Some(REFUND_REF), 500)]).await;
    assert_eq!(retry_run(&ctx, Duration::from_secs(3600)).await.waiting, 1);
    let report = retry_run(&ctx, Duration::ZERO).await;
    assert_eq!(report.expired, 1, "{report:?}");
    assert!(parked(&ctx, ParkedKind::Retrying).await.is_empty());
    let q = parked(&ctx, ParkedKind::Quarantined).await;
    assert_eq!(q.len(), 1);
    assert!(q[0].reason.starts_with("not applicable within 0 s"), "{}", q[0].reason);
    assert_eq!(status(&ctx, &id).await, (PaymentStatus::Pending, 1));
}

/// Test or live is the key's: an item verified by the live key on a test endpoint is an anomaly (recorded,
/// quarantined, not applied), whatever the unsigned `live` says.
#[tokio::test]
async fn the_verifying_key_decides_the_mode() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let id = adyen_payment(&ctx, "pay_adyen_m1", Some(PSP)).await;
    let mut live = item("AUTHORISATION", true, id.as_str(), PSP, None, 1130);
    live.as_object_mut().unwrap().remove("additionalData");
    let live = sign(live, Mode::Live);
    let m = accepted(&app, &[live]).await;
    assert_eq!((m.anomalies, m.quarantines), (1, 1));
    let p = ctx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((p.status, p.anomalies), (PaymentStatus::Pending, 1));
}

/// CANCEL_OR_REFUND is a cancel of an authorised payment and a refund of a captured one; a refused
/// authorisation fails the payment with its reason; codes we do not act on are acknowledged.
#[tokio::test]
async fn cancel_or_refund_refusals_and_other_codes() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let cancel_ref = "6635511210681017";
    let authorised = adyen_payment(&ctx, "pay_adyen_c1", Some(PSP)).await;
    accepted(
        &app,
        &[item("AUTHORISATION", true, authorised.as_str(), PSP, None, 1130)],
    )
    .await;
    accepted(
        &app,
        &[item(
            "CANCEL_OR_REFUND",
            true,
            authorised.as_str(),
            PSP,
            Some(cancel_ref),
            1130,
        )],
    )
    .await;
    assert_eq!(status(&ctx, &authorised).await.0, PaymentStatus::Failed);

    let other = "7914073381346666";
    let captured = adyen_payment(&ctx, "pay_adyen_c2", Some(other)).await;
    accepted(
        &app,
        &[
            item("AUTHORISATION", true, captured.as_str(), other, None, 1130),
            item("CAPTURE", true, captured.as_str(), other, Some(CAPTURE_REF), 1130),
            item(
                "CANCEL_OR_REFUND",
                true,
                captured.as_str(),
                other,
                Some(cancel_ref),
                1130,
            ),
        ],
    )
    .await;
    let p = ctx.store.get(&captured).await.unwrap().unwrap();
    assert_eq!((p.status, p.refunded_minor), (PaymentStatus::Refunded, 1130));

    let third = "7914073381345555";
    let refused = adyen_payment(&ctx, "pay_adyen_c3", Some(third)).await;
    let mut no = item("AUTHORISATION", false, refused.as_str(), third, None, 1130);
    no["reason"] = json!("CVC Declined");
    let no = sign(no, Mode::Test);
    let report = item("REPORT_AVAILABLE", true, refused.as_str(), "report1", None, 0);
    accepted(&app, &[no, report]).await;
    let p = ctx.store.get(&refused).await.unwrap().unwrap();
    assert_eq!(
        (p.status, p.reason.as_deref()),
        (PaymentStatus::Failed, Some("refused: CVC Declined"))
    );
}

/// A notification about a payment no one here knows, not claiming one of our ids: acknowledged and left
/// alone, nothing parked.
#[tokio::test]
async fn a_notification_that_is_not_ours_is_acknowledged_and_left_alone() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let m = accepted(
        &app,
        &[item("AUTHORISATION", true, "order-5", "7914073381340000", None, 1130)],
    )
    .await;
    assert_eq!(m.foreign_events, 1);
    assert!(parked(&ctx, ParkedKind::Retrying).await.is_empty());
}

/// Invariant 13: an Adyen notification naming a payment of another PSP (here our id of a Stripe payment as
/// its merchantReference) is acknowledged and left alone: nothing applied, recorded or parked.
#[tokio::test]
async fn a_notification_about_another_psps_payment_is_left_alone() {
    let t = TestIntake::with(TestContext::new().await);
    let app = adyen_app(&t.ctx, "webhook-intake");
    let stripes = t.payment("pay_adyen_s1").await;
    let before = t.item_count().await;
    let m = accepted(&app, &[item("AUTHORISATION", true, stripes.as_str(), PSP, None, 1000)]).await;
    assert_eq!((m.foreign_events, m.anomalies, m.quarantines), (1, 0, 0));
    assert_eq!(t.item_count().await, before, "nothing written");
    assert_eq!(status(&t.ctx, &stripes).await, (PaymentStatus::Pending, 1));
}

/// Our merchantReference carries our stage (`<payment id>@<stage>`, signed with the item): a notification
/// of ours for a payment not written yet is claimed (parked, applied by the retry), another stage's is
/// acknowledged and ignored at once (nothing parked, never alarmed as an unknown payment); a reference
/// without a stage is read as before (the tests above).
#[tokio::test]
async fn the_stage_in_the_signed_merchant_reference_decides_whose_a_notification_is() {
    let ctx = TestContext::new().await;
    let app = adyen_app(&ctx, "webhook-intake");
    let ours = PaymentId::parse("pay_adyen_stage_ours").unwrap();
    let our_reference = psp::adyen::merchant_reference(&ours);
    assert_eq!(
        our_reference,
        format!("pay_adyen_stage_ours@{}", shared::metrics::stage())
    );
    let theirs = "pay_adyen_stage_theirs@another-stage";
    let m = accepted(
        &app,
        &[
            item("AUTHORISATION", true, &our_reference, "7914073381348881", None, 1130),
            item("AUTHORISATION", true, theirs, "7914073381348882", None, 1130),
        ],
    )
    .await;
    assert_eq!(m.foreign_events, 1, "another stage's: ignored");
    let kept = parked(&ctx, ParkedKind::Retrying).await;
    assert_eq!(kept.len(), 1, "ours, its payment not written yet: parked; {kept:?}");
    adyen_payment(&ctx, ours.as_str(), None).await;
    let report = retry_run(&ctx, Duration::from_secs(3600)).await;
    assert_eq!((report.retried, report.done), (1, 1), "{report:?}");
    assert_eq!(status(&ctx, &ours).await.0, PaymentStatus::Processing);
}
