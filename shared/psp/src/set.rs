//! [`PspSet`]: one guarded client per PSP this deployment is configured for, and the one lookup that routes
//! every call about a payment to the PSP recorded on it (invariant 13).
//!
//! Each PSP has its own circuit breaker (`BREAKER#stripe`, `BREAKER#adyen`), by the same rule
//! ([`super::breaker`]): an Adyen outage stops Adyen's calls only. What each PSP can be asked differs, and the
//! difference is in the types, not in a runtime refusal: [`PspRoute::Stripe`] is a [`StripeApi`] (a PaymentIntent can
//! be read, searched by our payment id, its refunds read back), [`PspRoute::Adyen`] is [`GuardedAdyen`], which has
//! no read and no search because Adyen's Checkout API has none (its modifications are answered `received`;
//! what became of them arrives by notification, and a payment whose pspReference never reached us is
//! cancelled by our own reference). A caller matching on [`PspRoute`] cannot ask Adyen what it cannot answer.
//!
//! Built once per cold start ([`PspSetSettings::build`]); a payment whose PSP has no client here is [`PspRoute::Missing`]: a
//! Standard Webhooks provider's (nothing to call, by design) or a deployment fault, which a caller that must
//! call turns into [`not_configured`] (deferred and alarmed, never a refusal of the customer's).

use super::adyen::{AdyenClient, AdyenSettings};
use super::breaker::{BreakerSettings, CircuitBreaker};
use super::error::PspError;
use super::pace::ScanRates;
use super::stripe::{CaptureMethod, StripeApi, StripeClient, StripeSettings};
use shared::{clock, ConfigError, Env, PspName};
use tracing::error;

/// The PSP every function calls: Stripe's API behind the shared circuit breaker.
pub type GuardedStripe = CircuitBreaker<StripeClient>;

/// The Stripe breaker's name (its item is `BREAKER#stripe`): [`STRIPE_BREAKER`], as the tools name it.
pub const BREAKER_NAME: &str = STRIPE_BREAKER;

/// Builds [`GuardedStripe`] alone from its settings (the key from Secrets Manager when `PSP_API_KEY_ARN` is
/// set), once per cold start, for what speaks only to Stripe (the events catch-up). Every PSP configured:
/// [`PspSetSettings::build`].
pub async fn guarded_stripe(
    settings: &StripeSettings,
    sdk: &aws_config::SdkConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<GuardedStripe, shared::lambda::BuildError> {
    let client = StripeClient::from_settings(settings, sdk).await?;
    Ok(guarded(client, dynamodb, table, STRIPE_BREAKER))
}

/// Adyen's Checkout client behind its own breaker (`BREAKER#adyen`).
pub type GuardedAdyen = CircuitBreaker<AdyenClient>;

/// The Stripe breaker's name (its item is `BREAKER#stripe`).
pub const STRIPE_BREAKER: &str = "stripe";
/// The Adyen breaker's name (its item is `BREAKER#adyen`).
pub const ADYEN_BREAKER: &str = "adyen";

/// One guarded client per configured PSP. `P` is the Stripe-speaking client ([`GuardedStripe`] in the
/// functions; tests put a simulator's client or a misbehaving one there).
#[derive(Debug, Clone)]
pub struct PspSet<P = GuardedStripe> {
    stripe: Option<P>,
    adyen: Option<GuardedAdyen>,
}

/// The client a payment's calls go to, by the PSP recorded on it.
#[derive(Debug)]
pub enum PspRoute<'a, P> {
    /// Stripe: PaymentIntents, which can be read, searched and refunded, their refunds read back.
    Stripe(&'a P),
    /// Adyen: authorise, details and modifications only; no read, no search.
    Adyen(&'a GuardedAdyen),
    /// No client of this PSP here: a Standard Webhooks provider (webhooks only), or a PSP this deployment
    /// is not configured for.
    Missing(PspName),
}

/// The PSP clients a caller holds, routed by a payment's provider: a [`PspSet`], or one Stripe-speaking
/// client alone (a set of one, as the tests and tools hold it), so the saga and recovery take either.
pub trait Psps: Send + Sync {
    /// The Stripe-speaking client.
    type Stripe: StripeApi;

    /// The client of `provider`, the PSP a payment recorded when it was created.
    fn route(&self, provider: &PspName) -> PspRoute<'_, Self::Stripe>;

    /// The Stripe client, if configured.
    fn stripe(&self) -> Option<&Self::Stripe>;

    /// The Adyen client, if configured.
    fn adyen(&self) -> Option<&GuardedAdyen>;
}

/// One client alone answers for its own PSP only.
impl<P: StripeApi> Psps for P {
    type Stripe = P;

    fn route(&self, provider: &PspName) -> PspRoute<'_, P> {
        if *provider == self.provider() {
            PspRoute::Stripe(self)
        } else {
            PspRoute::Missing(provider.clone())
        }
    }

    fn stripe(&self) -> Option<&P> {
        Some(self)
    }

    fn adyen(&self) -> Option<&GuardedAdyen> {
        None
    }
}

impl<P: StripeApi> Psps for PspSet<P> {
    type Stripe = P;

    fn route(&self, provider: &PspName) -> PspRoute<'_, P> {
        PspSet::route(self, provider)
    }

    fn stripe(&self) -> Option<&P> {
        PspSet::stripe(self)
    }

    fn adyen(&self) -> Option<&GuardedAdyen> {
        PspSet::adyen(self)
    }
}

impl<P: StripeApi> PspSet<P> {
    /// The set of these clients (at least one, for a set that can call anyone).
    pub fn new(stripe: Option<P>, adyen: Option<GuardedAdyen>) -> Self {
        Self { stripe, adyen }
    }

    /// Stripe only (the tests of Stripe's paths, the functions before Adyen).
    pub fn stripe_only(stripe: P) -> Self {
        Self::new(Some(stripe), None)
    }

    /// This set with `adyen` as its Adyen client.
    pub fn with_adyen(mut self, adyen: GuardedAdyen) -> Self {
        self.adyen = Some(adyen);
        self
    }

    /// The Stripe client, if configured.
    pub fn stripe(&self) -> Option<&P> {
        self.stripe.as_ref()
    }

    /// The Adyen client, if configured.
    pub fn adyen(&self) -> Option<&GuardedAdyen> {
        self.adyen.as_ref()
    }

    /// The client of `provider`, the PSP a payment recorded when it was created.
    pub fn route(&self, provider: &PspName) -> PspRoute<'_, P> {
        match (provider, &self.stripe, &self.adyen) {
            (PspName::Stripe, Some(stripe), _) => PspRoute::Stripe(stripe),
            (PspName::Adyen, _, Some(adyen)) => PspRoute::Adyen(adyen),
            (other, _, _) => PspRoute::Missing(other.clone()),
        }
    }

    /// The PSPs this set has a client of.
    pub fn providers(&self) -> Vec<PspName> {
        let stripe = self.stripe.as_ref().map(|_| PspName::Stripe);
        let adyen = self.adyen.as_ref().map(|_| PspName::Adyen);
        stripe.into_iter().chain(adyen).collect()
    }
}

/// A call about a payment of `provider`, which this deployment holds no client of: a deployment fault (the
/// PSP's settings missing where its payments are handled). Logged and counted (`PspNotConfigured`, alarmed);
/// the error defers the caller ([`PspError::is_deferred`]) until the settings are fixed.
pub fn not_configured(provider: &PspName, operation: &str) -> PspError {
    error!(provider = %provider, operation, "no client of the payment's PSP in this deployment: deferred");
    shared::metrics::emit(&shared::metrics::counts(
        super::http::NAMESPACE,
        &[&[]],
        &["PspNotConfigured"],
        serde_json::json!({ "Provider": provider.to_string(), "Operation": operation, "PspNotConfigured": 1 }),
        clock::now_ms(),
    ));
    PspError::NotConfigured(provider.clone())
}

/// Which PSPs a function calls, and their settings, read once per cold start: Stripe when `PSP_BASE_URL` is
/// set (its [`StripeSettings`]), Adyen when `ADYEN_BASE_URL` is set ([`AdyenSettings`]: `ADYEN_API_KEY_ARN` or
/// `ADYEN_API_KEY`, `ADYEN_MERCHANT_ACCOUNT`, `ADYEN_RETURN_URL`). Neither, or a malformed setting, fails the
/// start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PspSetSettings {
    /// Stripe's client settings, when `PSP_BASE_URL` is set.
    pub stripe: Option<StripeSettings>,
    /// Adyen's client settings, when `ADYEN_BASE_URL` is set.
    pub adyen: Option<AdyenSettings>,
}

impl PspSetSettings {
    /// The PSPs `env` configures (see the type).
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let stripe = match env.optional("PSP_BASE_URL") {
            Some(_) => Some(StripeSettings::from_env(env)?),
            None => None,
        };
        let adyen = match env.optional("ADYEN_BASE_URL") {
            Some(_) => Some(AdyenSettings::from_env(env)?),
            None => None,
        };
        if stripe.is_none() && adyen.is_none() {
            return Err(ConfigError::Missing(
                "PSP_BASE_URL (Stripe) or ADYEN_BASE_URL (Adyen): no PSP configured",
            ));
        }
        Ok(Self { stripe, adyen })
    }

    /// These settings for a scanner (recovery): each PSP's requests at most its rate of `rates`
    /// ([`super::pace`]).
    pub fn paced(mut self, rates: &ScanRates) -> Self {
        if let Some(stripe) = &mut self.stripe {
            stripe.scan_rate = Some(rates.stripe);
        }
        if let Some(adyen) = &mut self.adyen {
            adyen.scan_rate = Some(rates.adyen);
        }
        self
    }

    /// These settings for the checkout functions, which alone charge: Stripe's charges captured as
    /// `capture` says (`STRIPE_CAPTURE_METHOD`, [`CaptureMethod::from_env`]).
    pub fn capturing(mut self, capture: CaptureMethod) -> Self {
        if let Some(stripe) = &mut self.stripe {
            stripe.capture = capture;
        }
        self
    }

    /// The PSPs these settings configure, as [`PspSet::providers`] will name them.
    pub fn providers(&self) -> Vec<PspName> {
        let stripe = self.stripe.as_ref().map(|_| PspName::Stripe);
        let adyen = self.adyen.as_ref().map(|_| PspName::Adyen);
        stripe.into_iter().chain(adyen).collect()
    }

    /// The set these settings configure, once per cold start: each client with its key (from Secrets Manager
    /// when its `*_ARN` is set), each behind its own breaker in `table`.
    pub async fn build(
        &self,
        sdk: &aws_config::SdkConfig,
        dynamodb: aws_sdk_dynamodb::Client,
        table: &str,
    ) -> Result<PspSet<GuardedStripe>, shared::lambda::BuildError> {
        let stripe = match &self.stripe {
            Some(settings) => {
                let client = StripeClient::from_settings(settings, sdk).await?;
                Some(guarded(client, dynamodb.clone(), table, STRIPE_BREAKER))
            }
            None => None,
        };
        let adyen = match &self.adyen {
            Some(settings) => {
                let client = AdyenClient::from_settings(settings, sdk).await?;
                Some(guarded(client, dynamodb, table, ADYEN_BREAKER))
            }
            None => None,
        };
        Ok(PspSet::new(stripe, adyen))
    }
}

/// `client` behind the breaker `name` with the default rule.
pub fn guarded<C>(client: C, dynamodb: aws_sdk_dynamodb::Client, table: &str, name: &str) -> CircuitBreaker<C> {
    CircuitBreaker::new(client, dynamodb, table, name, BreakerSettings::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adyen() -> GuardedAdyen {
        let settings = AdyenSettings::local("http://127.0.0.1:9", "AQE_key", "Shop").expect("settings");
        let client = AdyenClient::new(&settings).expect("client");
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        guarded(client, aws_sdk_dynamodb::Client::new(&sdk), "t", ADYEN_BREAKER)
    }

    fn stripe() -> StripeClient {
        let settings = StripeSettings::local("http://127.0.0.1:9", "sk_test_x").expect("settings");
        StripeClient::new(&settings, crate::ApiKey::parse("sk_test_x").expect("key")).expect("client")
    }

    #[test]
    fn each_payment_goes_to_its_own_psp_and_to_no_other() {
        let both = PspSet::stripe_only(stripe()).with_adyen(adyen());
        assert!(matches!(both.route(&PspName::Stripe), PspRoute::Stripe(_)));
        assert!(matches!(both.route(&PspName::Adyen), PspRoute::Adyen(a) if a.provider() == PspName::Adyen));
        let standard = PspName::standard("acme").expect("name");
        assert!(matches!(both.route(&standard), PspRoute::Missing(p) if p == standard));
        assert_eq!(both.providers(), vec![PspName::Stripe, PspName::Adyen]);
        // A Stripe-only deployment never hands an Adyen payment to Stripe, nor the other way round.
        let stripe_only = PspSet::stripe_only(stripe());
        assert!(matches!(
            stripe_only.route(&PspName::Adyen),
            PspRoute::Missing(PspName::Adyen)
        ));
        let adyen_only = PspSet::<StripeClient>::new(None, Some(adyen()));
        assert!(matches!(
            adyen_only.route(&PspName::Stripe),
            PspRoute::Missing(PspName::Stripe)
        ));
        assert!(not_configured(&PspName::Adyen, "charge").is_deferred());
    }
}
