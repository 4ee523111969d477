//! The fuzz targets' bodies, one function per target, so the nightly `cargo fuzz` targets (`fuzz/fuzz_targets`)
//! and the stable replay of the corpus (`tests/replay.rs`, in the test command) run the same code.
//!
//! Every function takes arbitrary bytes and must return for all of them: a panic (an `unwrap` on input, an
//! overflow with the fuzzer's overflow checks, an index out of range) is a finding. Besides "no panic", the
//! functions assert properties that hold for every input (a signature we make verifies; a decoded item
//! re-encodes to itself), so the fuzzer also finds wrong answers, not only crashes.
//!
//! Inputs that need more than a body are split into lines: the first lines are the header values (an HTTP
//! header cannot hold a line break), the rest is the body, byte for byte. A missing line is a missing header.

mod adyen;

pub use adyen::adyen_notification;
use checkout_saga::saga::{saga_event_from_item, saga_from_item};
use shared::store::item::{event_from_item, event_to_item, payment_from_item, payment_to_item, Item};
use shared::{CorrelationId, SigningSecret};
use webhook_intake::psp_event::{Expectations, Parsed};
use webhook_signatures::{
    sign_standard, sign_stripe, verify_standard, verify_stripe, SignedRequest, DEFAULT_TOLERANCE_SECS,
};

/// A fuzz target's body: any bytes, never a panic.
pub type Target = fn(&[u8]);

/// Every target by name: the corpus directory `fuzz/corpus/<name>` and the binary `fuzz_targets/<name>.rs`.
pub const TARGETS: &[(&str, Target)] = &[
    ("stripe_signature", stripe_signature),
    ("standard_signature", standard_signature),
    ("stripe_event", stripe_event),
    ("standard_event", standard_event),
    ("payments_request", payments_request),
    ("checkout_request", checkout_request),
    ("payment_item", payment_item),
    ("saga_item", saga_item),
    ("adyen_notification", adyen_notification),
];

/// "Now" when the input's first line is not a number: shortly after the official libraries' samples.
const SAMPLE_NOW: i64 = 1_614_265_400;

/// The first `N` lines (lossy UTF-8, as a header value read by `to_str` is a subset) and the rest.
fn split_lines<const N: usize>(data: &[u8]) -> ([Option<String>; N], &[u8]) {
    let mut rest = data;
    let lines = std::array::from_fn(|_| {
        let (line, after) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (rest.get(..i)?, rest.get(i + 1..)?),
            None if rest.is_empty() => return None,
            None => (rest, &[][..]),
        };
        rest = after;
        Some(String::from_utf8_lossy(line).into_owned())
    });
    (lines, rest)
}

fn now_from(line: Option<&String>) -> i64 {
    line.and_then(|l| l.trim().parse().ok()).unwrap_or(SAMPLE_NOW)
}

fn secrets(values: &[&str]) -> Vec<SigningSecret> {
    values.iter().filter_map(|s| SigningSecret::parse(*s).ok()).collect()
}

/// Stripe's secrets: the one of stripe-python's sample and the local development secret (README).
fn stripe_secrets() -> Vec<SigningSecret> {
    secrets(&["whsec_test_secret", "whsec_local_dev_stripe_signing_secret"])
}

/// Standard Webhooks secrets: the specification's example and the local development secret (README).
fn standard_secrets() -> Vec<SigningSecret> {
    secrets(&[
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_bG9jYWwtZGV2LXN0YW5kYXJkLXNlY3JldA==",
    ])
}

fn correlation() -> CorrelationId {
    CorrelationId::parse("fuzz").unwrap_or_else(|_| unreachable!("a valid correlation id"))
}

/// What an event parser produced goes through what the intake does next: the endpoint's checks (with and
/// without expectations) and the observation to finalize.
fn after_parse(parsed: Parsed) {
    let Parsed::Event(event) = parsed else { return };
    for expected in [
        Expectations::default(),
        Expectations {
            livemode: Some(true),
            account: Some("acct_fuzz".into()),
        },
    ] {
        let mismatch = event.check(&expected).err();
        let _ = event.observation(mismatch, correlation());
    }
}

fn stripe_request<'a>(header: Option<&'a str>, body: &'a [u8]) -> SignedRequest<'a> {
    SignedRequest {
        stripe_signature: header,
        webhook_id: None,
        webhook_timestamp: None,
        webhook_signature: None,
        body,
    }
}

/// `now\nStripe-Signature\nbody`: the header parser and the verifier.
pub fn stripe_signature(data: &[u8]) {
    let ([now, header], body) = split_lines::<2>(data);
    let now = now_from(now.as_ref());
    let secrets = stripe_secrets();
    if let Ok(t) = verify_stripe(
        &stripe_request(header.as_deref(), body),
        &secrets,
        now,
        DEFAULT_TOLERANCE_SECS,
    ) {
        assert!(
            now.abs_diff(t) <= DEFAULT_TOLERANCE_SECS.unsigned_abs(),
            "accepted outside the tolerance"
        );
        if let Ok(parsed) = webhook_intake::stripe::parse(body) {
            after_parse(parsed);
        }
    }
    // Whatever the body and the clock: our own signature verifies, with every secret.
    for secret in &secrets {
        let signed = sign_stripe(secret, now, body);
        assert_eq!(
            verify_stripe(
                &stripe_request(Some(&signed), body),
                &secrets,
                now,
                DEFAULT_TOLERANCE_SECS
            ),
            Ok(now)
        );
    }
}

/// `now\nwebhook-id\nwebhook-timestamp\nwebhook-signature\nbody`: the Standard Webhooks verifier.
pub fn standard_signature(data: &[u8]) {
    let ([now, id, timestamp, signature], body) = split_lines::<4>(data);
    let now = now_from(now.as_ref());
    let secrets = standard_secrets();
    let request = SignedRequest {
        stripe_signature: None,
        webhook_id: id.as_deref(),
        webhook_timestamp: timestamp.as_deref(),
        webhook_signature: signature.as_deref(),
        body,
    };
    if let Ok(ts) = verify_standard(&request, &secrets, now, DEFAULT_TOLERANCE_SECS) {
        assert!(
            now.abs_diff(ts) <= DEFAULT_TOLERANCE_SECS.unsigned_abs(),
            "accepted outside the tolerance"
        );
        if let Ok(parsed) =
            webhook_intake::standard::parse(body, id.as_deref().unwrap_or_default(), ts, DEFAULT_TOLERANCE_SECS)
        {
            after_parse(parsed);
        }
    }
    let id = id.as_deref().unwrap_or("msg_fuzz");
    let now_text = now.to_string();
    for secret in &secrets {
        let Ok(signed) = sign_standard(secret, id, now, body) else {
            panic!("the harness's Standard Webhooks secrets are valid")
        };
        let request = SignedRequest {
            webhook_id: Some(id),
            webhook_timestamp: Some(&now_text),
            webhook_signature: Some(&signed),
            ..request
        };
        assert_eq!(
            verify_standard(&request, &secrets, now, DEFAULT_TOLERANCE_SECS),
            Ok(now)
        );
    }
}

/// A Stripe event body (verified already), parsed into our terms.
pub fn stripe_event(data: &[u8]) {
    if let Ok(parsed) = webhook_intake::stripe::parse(data) {
        after_parse(parsed);
    }
}

/// `webhook-id\nwebhook-timestamp\nbody`: an event of our Standard Webhooks schema, parsed into our terms.
pub fn standard_event(data: &[u8]) {
    let ([id, timestamp], body) = split_lines::<2>(data);
    let timestamp = now_from(timestamp.as_ref());
    if let Ok(parsed) = webhook_intake::standard::parse(
        body,
        id.as_deref().unwrap_or_default(),
        timestamp,
        DEFAULT_TOLERANCE_SECS,
    ) {
        after_parse(parsed);
    }
}

/// A body of `POST /payments` and of `POST /payments/{id}/sync-result`, parsed and validated.
pub fn payments_request(data: &[u8]) {
    use payments_api::requests::{CreatePayment, SyncResult};
    if let Ok(create) = shared::http::parse_json::<CreatePayment>(data) {
        let _ = create.fingerprint();
        let _ = create.into_new_payment(&shared::KnownPsps::default(), correlation(), None, SAMPLE_NOW);
    }
    if let Ok(result) = shared::http::parse_json::<SyncResult>(data) {
        let _ = result.into_observation(correlation(), None);
    }
}

/// A body of `POST /checkouts`, parsed and validated.
pub fn checkout_request(data: &[u8]) {
    if let Ok(start) = shared::http::parse_json::<checkout_saga::api::StartCheckout>(data) {
        let _ = start.parse();
    }
}

/// An item in DynamoDB's JSON (as in a stream record), or `None`.
fn item(data: &[u8]) -> Option<Item> {
    serde_json::from_slice::<serde_dynamo::Item>(data).ok().map(Into::into)
}

/// A stored payment or payment event (a table read or a stream image): decoded, and what decodes re-encodes
/// to the same value.
pub fn payment_item(data: &[u8]) {
    let Some(item) = item(data) else { return };
    if let Ok(payment) = payment_from_item(item.clone()) {
        let again =
            payment_to_item(&payment, shared::store::open_index::OpenShards::DEFAULT).and_then(payment_from_item);
        assert_eq!(
            again.ok().as_ref(),
            Some(&payment),
            "a payment item does not round-trip"
        );
    }
    if let Ok(event) = event_from_item(item) {
        let again = event_to_item(&event).and_then(event_from_item);
        assert_eq!(again.ok().as_ref(), Some(&event), "an event item does not round-trip");
    }
}

/// A stored saga state or saga log entry: decoded and checked; a loaded saga re-encodes to itself.
pub fn saga_item(data: &[u8]) {
    let Some(item) = item(data) else { return };
    if let Ok(loaded) = saga_from_item(item.clone()) {
        let again = serde_dynamo::to_item(loaded.record())
            .ok()
            .and_then(|item| saga_from_item(item).ok());
        assert_eq!(again.as_ref(), Some(&loaded), "a saga item does not round-trip");
    }
    let _ = saga_event_from_item(item);
}
