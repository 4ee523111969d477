//! Signed sample events (feature `signing`): API Gateway HTTP API (v2) events around the PSP payloads in
//! `events/payloads/`, for `cargo lambda invoke --data-file`, the bench and tests. Signatures carry a
//! timestamp and expire after the tolerance (300 s), so `sign-events` re-signs them, also after a dev secret
//! changes.

use crate::{sign_standard, sign_stripe, Scheme, SignatureError};
use payments_core::SigningSecret;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// A Stripe `payment_intent.*` event of about 2 KiB, shaped like Stripe's (the fields a real one carries,
/// padded to a typical size), for `payment` (its `metadata.payment_id`) created at `created_secs`.
pub fn stripe_event(id: &str, kind: &str, payment: &str, created_secs: i64) -> Value {
    json!({
        "id": id, "object": "event", "api_version": "2024-06-20",
        "created": created_secs, "livemode": false, "pending_webhooks": 1, "type": kind,
        "request": { "id": "req_9aBcDeFgHiJkLm", "idempotency_key": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" },
        "data": { "object": {
            "id": format!("pi_{payment}"), "object": "payment_intent", "amount": 1000, "amount_capturable": 0,
            "amount_received": 1000, "capture_method": "automatic", "confirmation_method": "automatic",
            "client_secret": format!("pi_{payment}_secret_QwErTyUiOpAsDfGhJkLzXcVbN"),
            "created": created_secs.saturating_sub(10), "currency": "eur", "customer": "cus_PqRsTuVwXyZ012",
            "description": format!("Order order-{payment}"), "latest_charge": "ch_3OxYzA2eZvKYlo2C1mNoPqRs",
            "metadata": { "payment_id": payment, "order_id": format!("order-{payment}"), "cart": "c-8812" },
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
    })
}

/// An API Gateway HTTP API (payload format 2.0) `POST` event, as Lambda delivers it.
pub fn apigw_event(path: &str, headers: &Map<String, Value>, body: &[u8], base64: bool) -> Value {
    use base64::Engine;
    let body = if base64 {
        base64::engine::general_purpose::STANDARD.encode(body)
    } else {
        String::from_utf8_lossy(body).into_owned()
    };
    json!({
        "version": "2.0", "routeKey": "POST /webhooks/{provider}", "rawPath": path, "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012", "apiId": "local", "domainName": "127.0.0.1", "domainPrefix": "local",
            "http": { "method": "POST", "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                      "userAgent": "sample" },
            "requestId": "sample", "routeKey": "POST /webhooks/{provider}", "stage": "$default",
            "time": "29/Nov/2026:00:00:00 +0000", "timeEpoch": 0
        },
        "pathParameters": { "provider": path.rsplit('/').next().unwrap_or_default() },
        "body": body, "isBase64Encoded": base64
    })
}

/// The signature headers for `body` under `scheme`, signed at `now_secs`.
pub fn signature_headers(
    scheme: Scheme,
    secret: &SigningSecret,
    event_id: &str,
    now_secs: i64,
    body: &[u8],
) -> Result<Map<String, Value>, SignatureError> {
    let mut headers = Map::new();
    headers.insert("content-type".into(), json!("application/json"));
    match scheme {
        Scheme::Stripe => {
            headers.insert("stripe-signature".into(), json!(sign_stripe(secret, now_secs, body)));
        }
        Scheme::Standard => {
            headers.insert("webhook-id".into(), json!(event_id));
            headers.insert("webhook-timestamp".into(), json!(now_secs.to_string()));
            headers.insert(
                "webhook-signature".into(),
                json!(sign_standard(secret, event_id, now_secs, body)?),
            );
        }
        // Adyen signs each item inside the body ([`crate::adyen::HmacKey::sign`]); its request carries
        // Basic auth, which these samples do not hold.
        Scheme::Adyen => {}
    }
    Ok(headers)
}

/// Signs every payload in `events/payloads/<provider>/` and writes `events/webhook-<provider>-<type>.json`.
/// `provider` is `stripe` or `standard`; returns the files written.
pub fn sign_all(
    events_dir: &Path,
    provider: &str,
    scheme: Scheme,
    secret: &SigningSecret,
    now_secs: i64,
) -> Result<Vec<PathBuf>, Box<dyn std::error::Error>> {
    let mut written = Vec::new();
    let mut payloads: Vec<PathBuf> = std::fs::read_dir(events_dir.join("payloads").join(provider))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    payloads.sort();
    for (i, payload) in payloads.iter().enumerate() {
        let body = std::fs::read(payload)?;
        let name = payload.file_stem().and_then(|s| s.to_str()).unwrap_or("event");
        let headers = signature_headers(scheme, secret, &format!("msg_sample_{i:02}"), now_secs, &body)?;
        let event = apigw_event(&format!("/webhooks/{provider}"), &headers, &body, false);
        let out = events_dir.join(format!("webhook-{provider}-{name}.json"));
        std::fs::write(&out, serde_json::to_string_pretty(&event)? + "\n")?;
        written.push(out);
    }
    Ok(written)
}
