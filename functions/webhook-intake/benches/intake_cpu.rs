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

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use payments_core::fixtures;
use shared::{decide, CorrelationId, SigningSecret};
use std::hint::black_box;
use webhook_intake::psp_event::{Expectations, Parsed};
use webhook_intake::stripe;
use webhook_signatures::samples::stripe_event;
use webhook_signatures::{sign_stripe, verify_stripe, SignedRequest};

fn intake_cpu(c: &mut Criterion) {
    let secret = SigningSecret::parse("whsec_bench_secret").unwrap();
    let body = stripe_event(
        "evt_3OxYzA2eZvKYlo2C1Qw8kLmN",
        "payment_intent.succeeded",
        "pay_bench",
        1_700_000_000,
    )
    .to_string()
    .into_bytes();
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
