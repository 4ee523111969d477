//! The PSP a payment belongs to (invariant 13): recorded when the payment is created, never changed, and the
//! one thing that says which client may be asked about it and which endpoint's webhooks may change it.
//!
//! A name, not a client: the core does no I/O. `stripe` and `adyen` are well known (each has its own
//! reference namespace and, in the shell, its own client); any other name is a Standard Webhooks provider as
//! `WEBHOOK_PROVIDERS` configures it, which only sends webhooks (no API we could ask). The enum makes every
//! caller that routes on the PSP say what it does for each kind, so a new PSP is a compile error where it
//! matters, not a silent "ask Stripe".

use crate::error::DomainError;
use crate::ids::PspReference;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest provider name (a `{provider}` path segment and a configuration key).
pub const MAX_PSP_NAME: usize = 32;

/// The PSP a payment belongs to. Stored on the payment item as its name (`"stripe"`, `"adyen"`, or a
/// Standard Webhooks provider's configured name); an item written before providers were recorded reads as
/// [`PspName::Stripe`], the only PSP whose API the system called then.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PspName {
    /// Stripe: PaymentIntents (`pi_...`), asked by recovery through the Stripe client.
    Stripe,
    /// Adyen: 16-character pspReferences; its Checkout API called by the checkout and asked by recovery
    /// (`psp::adyen::AdyenClient`), its notifications taken by the intake.
    Adyen,
    /// A Standard Webhooks provider, by its configured name: webhooks only, nothing to ask.
    Standard(StandardPsp),
}

/// A Standard Webhooks provider's configured name: 1 to [`MAX_PSP_NAME`] characters of `[a-z0-9_-]`, and
/// never a well-known PSP's name (so `Standard("stripe")` cannot exist).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StandardPsp(String);

impl StandardPsp {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl PspName {
    /// `stripe`, `adyen`, or a well-formed Standard Webhooks provider name. Whether a deployment knows the
    /// provider is the shell's question (its configuration); this only says what the name can be.
    pub fn parse(name: &str) -> Result<Self, DomainError> {
        match name {
            "stripe" => Ok(Self::Stripe),
            "adyen" => Ok(Self::Adyen),
            other => Self::standard(other),
        }
    }

    /// The Standard Webhooks provider configured under `name`: refused if `name` is malformed or a
    /// well-known PSP's (a Standard endpoint named `stripe` would take Stripe's payments).
    pub fn standard(name: &str) -> Result<Self, DomainError> {
        const FIELD: &str = "provider";
        if name.is_empty() {
            return Err(DomainError::Empty { field: FIELD });
        }
        if name.len() > MAX_PSP_NAME {
            return Err(DomainError::TooLong {
                field: FIELD,
                max: MAX_PSP_NAME,
            });
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
        {
            return Err(DomainError::BadProviderName);
        }
        if matches!(name, "stripe" | "adyen") {
            return Err(DomainError::WellKnownProvider(name.to_owned()));
        }
        Ok(Self::Standard(StandardPsp(name.to_owned())))
    }

    /// The PSP whose events a webhook endpoint of `scheme` (as `WEBHOOK_PROVIDERS` spells it) receives:
    /// the scheme's own PSP, or for `standard` the endpoint's name.
    pub fn for_endpoint(scheme: &str, name: &str) -> Result<Self, DomainError> {
        match scheme {
            "stripe" => Ok(Self::Stripe),
            "adyen" => Ok(Self::Adyen),
            _ => Self::standard(name),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Stripe => "stripe",
            Self::Adyen => "adyen",
            Self::Standard(name) => name.as_str(),
        }
    }

    /// Is `reference` one this PSP could have issued? Stripe's are PaymentIntent ids (`pi_...`), Adyen's are
    /// 16 upper-case letters or digits; a Standard Webhooks provider's are anything [`PspReference`] takes.
    /// A reference from another namespace would send recovery asking the wrong PSP about it, forever.
    pub fn check_reference(&self, reference: &PspReference) -> Result<(), DomainError> {
        let r = reference.as_str();
        let fits = match self {
            Self::Stripe => r.strip_prefix("pi_").is_some_and(|rest| !rest.is_empty()),
            Self::Adyen => r.len() == 16 && r.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()),
            Self::Standard(_) => true,
        };
        if fits {
            Ok(())
        } else {
            Err(DomainError::ForeignReference {
                provider: self.as_str().to_owned(),
            })
        }
    }
}

/// The PSPs a deployment takes payments for: Stripe (whose client the saga and recovery hold) and the PSP of
/// every webhook endpoint `WEBHOOK_PROVIDERS` configures, so a payment is never recorded for a PSP whose
/// news could not reach it. `POST /payments` refuses any other `provider`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownPsps(Vec<PspName>);

/// One entry of `WEBHOOK_PROVIDERS`, as far as the PSP it names goes (the intake reads the rest).
#[derive(Deserialize)]
struct Endpoint {
    name: String,
    scheme: String,
}

impl KnownPsps {
    /// From `WEBHOOK_PROVIDERS`' JSON (`[{"name": ..., "scheme": ...}, ...]`, other fields ignored here).
    pub fn from_webhook_providers(json: &str) -> Result<Self, String> {
        let endpoints: Vec<Endpoint> = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let mut known = vec![PspName::Stripe];
        for e in endpoints {
            let psp = PspName::for_endpoint(&e.scheme, &e.name).map_err(|err| format!("provider {}: {err}", e.name))?;
            if !known.contains(&psp) {
                known.push(psp);
            }
        }
        Ok(Self(known))
    }

    /// The known PSP named `name`; an unknown or malformed name is refused, naming the known ones.
    pub fn get(&self, name: &str) -> Result<PspName, String> {
        let psp = PspName::parse(name).map_err(|e| e.to_string())?;
        if self.0.contains(&psp) {
            return Ok(psp);
        }
        let names: Vec<&str> = self.0.iter().map(PspName::as_str).collect();
        Err(format!(
            "unknown provider {name:?}; this deployment knows {}",
            names.join(", ")
        ))
    }
}

impl Default for KnownPsps {
    /// The intake's providers when `WEBHOOK_PROVIDERS` is unset: Stripe and one Standard Webhooks PSP named
    /// `standard`.
    fn default() -> Self {
        Self(vec![
            PspName::Stripe,
            PspName::Standard(StandardPsp("standard".to_owned())),
        ])
    }
}

impl Default for PspName {
    /// Stripe: the provider of a payment whose creator named none, and of every item older than the field.
    fn default() -> Self {
        Self::Stripe
    }
}

impl TryFrom<String> for PspName {
    type Error = DomainError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<PspName> for String {
    fn from(value: PspName) -> String {
        value.as_str().to_owned()
    }
}

impl fmt::Display for PspName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(r: &str) -> PspReference {
        PspReference::parse(r).unwrap()
    }

    #[test]
    fn well_known_names_and_standard_providers() {
        assert_eq!(PspName::parse("stripe"), Ok(PspName::Stripe));
        assert_eq!(PspName::parse("adyen"), Ok(PspName::Adyen));
        let acme = PspName::parse("acme-pay_2").unwrap();
        assert!(matches!(&acme, PspName::Standard(n) if n.as_str() == "acme-pay_2"));
        assert_eq!(acme.to_string(), "acme-pay_2");
        for bad in ["", "Stripe", "a b", "x/y", "é", &"a".repeat(33)] {
            assert!(PspName::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            PspName::standard("stripe"),
            Err(DomainError::WellKnownProvider("stripe".into()))
        );
        assert_eq!(PspName::default(), PspName::Stripe);
    }

    #[test]
    fn the_known_psps_are_stripe_and_the_configured_endpoints() {
        let known = KnownPsps::from_webhook_providers(
            r#"[{"name":"stripe-connect","scheme":"stripe","connect":true,"account":"acct_1"},
                {"name":"acme","scheme":"standard","livemode":false}]"#,
        )
        .unwrap();
        assert_eq!(known.get("stripe"), Ok(PspName::Stripe));
        assert_eq!(known.get("acme"), Ok(PspName::parse("acme").unwrap()));
        let unknown = known.get("standard").unwrap_err();
        assert!(
            unknown.contains("unknown provider") && unknown.contains("stripe, acme"),
            "{unknown}"
        );
        assert!(known.get("adyen").is_err(), "no Adyen endpoint configured");
        assert!(known.get("Not A Name").is_err());
        assert!(KnownPsps::default().get("standard").is_ok());
        assert!(KnownPsps::from_webhook_providers(r#"[{"name":"stripe","scheme":"standard"}]"#).is_err());
        assert!(KnownPsps::from_webhook_providers("nope").is_err());
    }

    #[test]
    fn stored_as_its_name_and_read_back() {
        for name in [PspName::Stripe, PspName::Adyen, PspName::parse("standard").unwrap()] {
            let json = serde_json::to_string(&name).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<PspName>(&json).unwrap(), name);
        }
        assert!(serde_json::from_str::<PspName>("\"Not A Name\"").is_err());
    }

    #[test]
    fn a_reference_is_checked_in_its_providers_namespace() {
        assert!(PspName::Stripe
            .check_reference(&reference("pi_3MtwBwLkdIwHu7ix28a3tqPa"))
            .is_ok());
        for foreign in ["psp_sample_1", "7914073381342284", "pi_", "re_1"] {
            assert_eq!(
                PspName::Stripe.check_reference(&reference(foreign)),
                Err(DomainError::ForeignReference {
                    provider: "stripe".into()
                }),
                "{foreign}"
            );
        }
        assert!(PspName::Adyen.check_reference(&reference("7914073381342284")).is_ok());
        assert!(PspName::Adyen.check_reference(&reference("V4HZ4RBFJGXXGN82")).is_ok());
        for foreign in ["pi_1", "791407338134228", "v4hz4rbfjgxxgn82"] {
            assert!(
                PspName::Adyen.check_reference(&reference(foreign)).is_err(),
                "{foreign}"
            );
        }
        let standard = PspName::parse("standard").unwrap();
        assert!(standard.check_reference(&reference("psp_sample_1")).is_ok());
        assert!(standard.check_reference(&reference("pi_1")).is_ok());
    }

    #[test]
    fn an_observation_naming_another_psps_reference_is_not_about_the_payment() {
        use crate::fixtures;
        use crate::observation::Channel;
        let stripe = fixtures::payment("pay_ns");
        let mut from_standard = fixtures::observe(Channel::Webhook, crate::Outcome::Succeeded);
        from_standard.psp_reference = Some(reference("psp_sample_1"));
        assert_eq!(
            from_standard.check(&stripe),
            Err("psp_reference is not a stripe reference".to_owned())
        );
        let mut standard = stripe.clone();
        standard.provider = PspName::parse("standard").unwrap();
        assert_eq!(from_standard.check(&standard), Ok(()));
    }
}
