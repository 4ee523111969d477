//! Which Stripe API version rendered an event (`api_version`), against the one our client pins
//! (`psp::stripe::STRIPE_API_VERSION`). Webhooks and the Events API render in the endpoint's version,
//! else the account's default, never in the version of the request that caused them: an endpoint created
//! without `api_version` (`paymentsctl stripe setup` sets it) silently changes what events say, e.g.
//! `refund.*` covers card refunds only from `2024-10-28.acacia`.
//!
//! Parsing stays tolerant: [`super::parse`] reads only the fields it needs, which every version of the pinned
//! release family renders alike. Any other version is still parsed, and counted (`VersionMismatches`, alarmed)
//! and logged, so an operator pins the endpoint before a field that moved is missed.

use psp::stripe::STRIPE_API_VERSION;
use tracing::warn;

/// The release family of a version (`endive` of `2026-10-28.endive`); none for the dated versions before
/// Stripe named its releases (`2024-06-20`).
pub fn release(version: &str) -> Option<&str> {
    version
        .split_once('.')
        .map(|(_, family)| family)
        .filter(|f| !f.is_empty())
}

/// How an event's rendering compares with the pinned version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendered {
    /// The pinned version, or an event that does not say (nothing to compare).
    Pinned,
    /// Another version of the pinned release family: parsed alike, still counted.
    SameRelease(String),
    /// A version of another release (or before releases had names).
    OtherRelease(String),
}

/// What `api_version` of a Stripe event body says (any top-level shape; an unreadable body is the parser's).
pub fn rendered(body: &[u8]) -> Rendered {
    #[derive(serde::Deserialize)]
    struct Versioned {
        #[serde(default)]
        api_version: Option<String>,
    }
    let version = serde_json::from_slice::<Versioned>(body)
        .ok()
        .and_then(|v| v.api_version);
    match version {
        None => Rendered::Pinned,
        Some(v) if v == STRIPE_API_VERSION => Rendered::Pinned,
        Some(v) if release(&v).is_some() && release(&v) == release(STRIPE_API_VERSION) => Rendered::SameRelease(v),
        Some(v) => Rendered::OtherRelease(v),
    }
}

/// Notes the event's version: 1 (to count) and a warning when it is not the pinned one, else 0.
pub fn note(body: &[u8]) -> u32 {
    let (version, same_release) = match rendered(body) {
        Rendered::Pinned => return 0,
        Rendered::SameRelease(v) => (v, true),
        Rendered::OtherRelease(v) => (v, false),
    };
    // The value is the sender's text: logged only within the text rules.
    let shown = shared::text::bounded("api_version", &version, 64).unwrap_or_else(|_| "<unreadable>".to_owned());
    warn!(
        api_version = %shown,
        pinned = STRIPE_API_VERSION,
        same_release,
        "Stripe event rendered in another API version than the pinned one: create the endpoint with \
         paymentsctl stripe setup (it pins the version)"
    );
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(version: Option<&str>) -> Vec<u8> {
        serde_json::json!({ "id": "evt_1", "api_version": version })
            .to_string()
            .into_bytes()
    }

    #[test]
    fn only_the_pinned_version_goes_uncounted_and_the_family_is_told_apart() {
        assert_eq!(release(STRIPE_API_VERSION), Some("endive"));
        assert_eq!(release("2024-06-20"), None);
        assert_eq!(rendered(&body(Some(STRIPE_API_VERSION))), Rendered::Pinned);
        assert_eq!(rendered(&body(None)), Rendered::Pinned);
        assert_eq!(
            rendered(&body(Some("2026-09-30.endive"))),
            Rendered::SameRelease("2026-09-30.endive".into())
        );
        assert_eq!(
            rendered(&body(Some("2024-06-20"))),
            Rendered::OtherRelease("2024-06-20".into())
        );
        assert_eq!(note(&body(Some("2024-10-28.acacia"))), 1);
        assert_eq!(note(&body(Some(STRIPE_API_VERSION))), 0);
        assert_eq!(note(b"not json"), 0, "an unreadable body is the parser's to quarantine");
    }
}
