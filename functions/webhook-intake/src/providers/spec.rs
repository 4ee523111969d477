//! `WEBHOOK_PROVIDERS`: the endpoints this deployment accepts webhooks on, each checked against how its PSP
//! sends events, without their secrets (what an operator's replay needs too).

use super::{Provider, ProvidersError};
use crate::psp_event::Expectations;
use serde::Deserialize;
use shared::{Env, PspName};
use webhook_signatures::{Scheme, DEFAULT_TOLERANCE_SECS};

/// One entry of `WEBHOOK_PROVIDERS`: a provider without its secrets (what an operator's replay needs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSpec {
    pub name: String,
    pub scheme: Scheme,
    #[serde(default)]
    pub livemode: Option<bool>,
    /// A Stripe Connect endpoint (events of connected accounts, each naming its `account`).
    #[serde(default)]
    pub connect: bool,
    /// The connected account a Connect endpoint takes events of; only with `connect`.
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub tolerance_secs: Option<i64>,
}

impl ProviderSpec {
    /// The providers `WEBHOOK_PROVIDERS` names (default: [`DEFAULT_PROVIDERS`]), without reading any secret.
    pub fn from_env(env: &Env) -> Result<Vec<Self>, ProvidersError> {
        let providers = env
            .optional("WEBHOOK_PROVIDERS")
            .unwrap_or_else(|| DEFAULT_PROVIDERS.to_owned());
        parse_specs(&providers)
    }

    /// A Connect endpoint names its account, and only a Connect endpoint does: Stripe sets `account` on
    /// Connect events alone, so an ordinary endpoint expecting one would refuse (park and alarm) every event.
    pub fn check(&self) -> Result<(), ProvidersError> {
        let bad = |why| Err(ProvidersError::BadSpec(self.name.clone(), why));
        if self.scheme == Scheme::Standard && PspName::standard(&self.name).is_err() {
            return bad(
                "a Standard Webhooks provider's name is the PSP its payments record: 1 to 32 characters from \
                 [a-z0-9_-], and not a well-known PSP's (stripe, adyen)",
            );
        }
        match (self.connect, &self.account) {
            (false, Some(_)) => bad(
                "\"account\" is set on an endpoint that is not a Connect endpoint, whose events never name an \
                 account; remove it, or add \"connect\": true if this endpoint receives your connected accounts' events",
            ),
            (true, None) => bad("a Connect endpoint (\"connect\": true) needs the connected \"account\" (acct_...) it takes"),
            _ => Ok(()),
        }
    }

    /// What this provider's events must say about mode and (a Connect endpoint's) account.
    pub fn expectations(&self) -> Expectations {
        Expectations {
            livemode: self.livemode,
            account: self.account.clone().filter(|_| self.connect),
        }
    }

    /// This provider without secrets, for events that need no signature: those the catch-up job reads from
    /// the PSP's API with our own key (`crate::catchup`). The endpoint's expectations are the same.
    pub fn unsigned(&self) -> Provider {
        Provider {
            name: self.name.clone(),
            scheme: self.scheme,
            secrets: Vec::new(),
            expect: self.expectations(),
            tolerance_secs: self.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS),
        }
    }
}

/// `WEBHOOK_PROVIDERS`' specs, each checked ([`ProviderSpec::check`]): a wrong one fails the cold start.
pub(super) fn parse_specs(providers: &str) -> Result<Vec<ProviderSpec>, ProvidersError> {
    let specs: Vec<ProviderSpec> =
        serde_json::from_str(providers).map_err(|e| ProvidersError::BadProviders(shared::http::json_error(&e)))?;
    specs.iter().try_for_each(ProviderSpec::check)?;
    Ok(specs)
}

/// The providers when `WEBHOOK_PROVIDERS` is not set: Stripe and one Standard Webhooks PSP.
pub const DEFAULT_PROVIDERS: &str = r#"[{"name":"stripe","scheme":"stripe"},{"name":"standard","scheme":"standard"}]"#;
