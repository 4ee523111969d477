//! A parked body read back through the intake's own parser: which provider's, with the redacted values
//! taken out first (the parser would trip over `"[redacted]"`), and what the body names. Shared by
//! `parked replay` and the timeline's search of parked webhooks.

use super::ParkedItem;
use shared::Env;
use webhook_intake::providers::{Provider, ProviderSpec, Scheme};
use webhook_intake::psp_event::{Expectations, Parsed, PaymentRef};

pub(super) fn provider(env: &Env, name: &str) -> Result<(Scheme, Expectations), crate::Error> {
    let endpoint = endpoint(env, name)?;
    Ok((endpoint.scheme, endpoint.expect))
}

/// The provider `name` as the intake reads its events (scheme, expectations, clock tolerance), without secrets.
fn endpoint(env: &Env, name: &str) -> Result<Provider, crate::Error> {
    let spec = ProviderSpec::from_env(env)?
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("provider {name} is not configured (WEBHOOK_PROVIDERS)"))?;
    Ok(spec.unsigned())
}

/// What a parked webhook's body names (payment id, PSP reference), read by the intake's parser; `None` when
/// it does not parse.
pub fn target(env: &Env, item: &ParkedItem) -> Option<PaymentRef> {
    match parse(env, item).ok()? {
        (Ok(Parsed::Event(event)), _) => Some(event.target),
        _ => None,
    }
}

pub(super) type ParseResult = Result<Parsed, webhook_intake::psp_event::Unparseable>;

/// The intake's parser over the parked body with its redacted values removed; also whether there were any.
pub(super) fn parse(env: &Env, item: &ParkedItem) -> Result<(ParseResult, bool), crate::Error> {
    let endpoint = endpoint(env, &item.provider)?;
    let (stripped, redacted) = strip_redacted(&item.body);
    let body = stripped.as_bytes();
    let parsed = match endpoint.scheme {
        Scheme::Stripe => webhook_intake::stripe::parse(body),
        // The webhook-timestamp header is not kept: the parking time bounds `created` (a body parked before
        // `created` was required, and lacking it, cannot be replayed: its event time is unknown).
        Scheme::Standard => {
            let parked_at = item.recorded_at_ms / 1000;
            webhook_intake::standard::parse(body, &item.event_key, parked_at, endpoint.tolerance_secs)
                .map_err(Into::into)
        }
        // An Adyen item is parked as its signed fields (`webhook_intake::adyen::parked::ParkedItem`).
        Scheme::Adyen => webhook_intake::adyen::parked::parse_parked(body),
    };
    Ok((parsed, redacted))
}

/// The parked body with every redacted value removed (as if the PSP had not sent it), and whether there
/// was one: the parser then reads what is left instead of tripping over `"[redacted]"` where it expects an
/// object or a URL.
fn strip_redacted(body: &str) -> (String, bool) {
    fn strip(value: &mut serde_json::Value, found: &mut bool) {
        match value {
            serde_json::Value::Object(map) => {
                let before = map.len();
                map.retain(|_, v| v.as_str() != Some(REDACTED));
                *found |= map.len() != before;
                map.values_mut().for_each(|v| strip(v, found));
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strip(v, found)),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(mut json) => {
            // Parked by the allow-list: the fields it withheld are counted under `_withheld`.
            let mut found = json
                .as_object_mut()
                .and_then(|o| o.remove(webhook_intake::redact::WITHHELD))
                .is_some();
            strip(&mut json, &mut found);
            (json.to_string(), found)
        }
        Err(_) => (body.to_owned(), false),
    }
}

/// What `webhook_intake::redact` puts where a secret was.
const REDACTED: &str = "[redacted]";
