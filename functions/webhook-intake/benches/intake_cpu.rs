//! The intake's own CPU work per webhook, without I/O: verify the signature over the raw bytes, parse the
//! Stripe event, check it against the payment and run the finalize decision. Target: under 50 µs for a
//! 2 KiB event. Run: `cargo bench -p webhook-intake --bench intake_cpu`.
// Test code: a failed unwrap or index is the test failing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
#![recursion_limit = "256"]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use payments_core::fixtures;
use serde_json::json;
use shared::{decide, CorrelationId, SigningSecret};
use std::hint::black_box;
use webhook_intake::psp_event::{Expectations, Parsed};
use webhook_intake::signature::{sign_stripe, verify_stripe, SignedRequest};
use webhook_intake::stripe;

/// A `payment_intent.succeeded` event of about 2 KiB, shaped like Stripe's.
fn stripe_event() -> Vec<u8> {
    let body = json!({
        "id": "evt_3OxYzA2eZvKYlo2C1Qw8kLmN", "object": "event", "api_version": "2024-06-20",
        "created": 1_700_000_000, "livemode": false, "pending_webhooks": 1, "type": "payment_intent.succeeded",
        "request": { "id": "req_9aBcDeFgHiJkLm", "idempotency_key": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" },
        "data": { "object": {
            "id": "pi_3OxYzA2eZvKYlo2C1aBcDeFg", "object": "payment_intent", "amount": 1000, "amount_capturable": 0,
            "amount_received": 1000, "capture_method": "automatic", "confirmation_method": "automatic",
            "client_secret": "pi_3OxYzA2eZvKYlo2C1aBcDeFg_secret_QwErTyUiOpAsDfGhJkLzXcVbN",
            "created": 1_699_999_990, "currency": "eur", "customer": "cus_PqRsTuVwXyZ012",
            "description": "Order order-pay_bench", "latest_charge": "ch_3OxYzA2eZvKYlo2C1mNoPqRs",
            "metadata": { "payment_id": "pay_bench", "order_id": "order-pay_bench", "cart": "c-8812" },
            "payment_method": "pm_1OxYzA2eZvKYlo2CaBcDeFgH",
            "payment_method_options": { "card": { "installments": null, "mandate_options": null, "network": null,
                "request_three_d_secure": "automatic" } },
            "payment_method_types": ["card"], "receipt_email": "customer@example.com", "status": "succeeded",
            "shipping": { "name": "Jenny Rosen", "address": { "line1": "510 Townsend St", "city": "San Francisco",
                "postal_code": "94103", "state": "CA", "country": "US" } },
            "statement_descriptor": "EXAMPLE SHOP", "statement_descriptor_suffix": null,
            "automatic_payment_methods": { "enabled": true, "allow_redirects": "always" },
            "amount_details": { "tip": {} }, "processing": null, "review": null, "setup_future_usage": null,
            "transfer_data": null, "transfer_group": null, "on_behalf_of": null, "application": null,
            "application_fee_amount": null, "canceled_at": null, "cancellation_reason": null,
            "last_payment_error": null, "next_action": null, "source": null,
            "charges_note": "padding to a realistic size".repeat(22)
        } }
    });
    body.to_string().into_bytes()
}

fn intake_cpu(c: &mut Criterion) {
    let secret = SigningSecret::parse("whsec_bench_secret").unwrap();
    let body = stripe_event();
    let now = 1_700_000_000;
    let header = sign_stripe(&secret, now, &body);
    let payment = fixtures::payment("pay_bench");
    let secrets = [secret];
    let correlation = CorrelationId::parse("corr-bench").unwrap();
    let expect = Expectations {
        livemode: Some(false),
        account: None,
    };

    let mut group = c.benchmark_group("intake_cpu");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function(format!("verify+parse+decide, {} byte Stripe event", body.len()), |b| {
        b.iter(|| {
            let signed = SignedRequest {
                stripe_signature: Some(&header),
                webhook_id: None,
                webhook_timestamp: None,
                webhook_signature: None,
                body: black_box(&body),
            };
            verify_stripe(&signed, &secrets, now, 300).unwrap();
            let Parsed::Event(event) = stripe::parse(&body).unwrap() else {
                unreachable!()
            };
            let mismatch = event.check(&expect).err();
            let observation = event.observation(mismatch, correlation.clone());
            black_box(decide(&payment, &observation, now * 1000))
        })
    });
    group.finish();
}

criterion_group!(benches, intake_cpu);
criterion_main!(benches);
