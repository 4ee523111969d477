//! Issue 34 item 2: the API version Stripe rendered an event in. An event of the pinned version and one of an
//! older release both apply (the parser reads only what every version renders alike); the older one is
//! counted (`VersionMismatches`), the pinned one not.

use super::*;
use psp::stripe::STRIPE_API_VERSION;

fn rendered_in(id: &str, payment: &PaymentId, version: &str) -> Value {
    let mut event = intent_event(id, "payment_intent.processing", payment, now());
    event["api_version"] = json!(version);
    event
}

#[tokio::test]
async fn an_event_of_another_api_version_applies_and_is_counted() {
    let t = TestIntake::new().await;
    let pinned = t.payment("pay_v1").await;
    let a = t
        .send(stripe(&rendered_in("evt_v1", &pinned, STRIPE_API_VERSION), STRIPE_NEW))
        .await;
    assert_eq!((result(&a), a.metrics.version_mismatches), ("applied", 0), "{}", a.body);

    // An account default from before Stripe named its releases: the same fields, parsed alike, counted.
    let older = t.payment("pay_v2").await;
    let a = t
        .send(stripe(&rendered_in("evt_v2", &older, "2024-06-20"), STRIPE_NEW))
        .await;
    assert_eq!((result(&a), a.metrics.version_mismatches), ("applied", 1), "{}", a.body);
    let emf = a.metrics.to_emf(1);
    assert_eq!(emf["VersionMismatches"], 1);
    let names = &emf["_aws"]["CloudWatchMetrics"][0]["Metrics"];
    assert!(
        names
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["Name"] == "VersionMismatches"),
        "{names}"
    );

    // Another version of the pinned release: parsed alike, counted all the same.
    let family = t.payment("pay_v3").await;
    let a = t
        .send(stripe(&rendered_in("evt_v3", &family, "2026-09-30.endive"), STRIPE_NEW))
        .await;
    assert_eq!((result(&a), a.metrics.version_mismatches), ("applied", 1), "{}", a.body);
    for id in [&pinned, &older, &family] {
        assert_eq!(
            t.ctx.store.get(id).await.unwrap().unwrap().status,
            PaymentStatus::Processing
        );
    }
}
