//! The PSP as the model sees it: Stripe's PaymentIntents and Refunds with idempotency keys, webhooks in
//! flight, and what a PaymentIntent tells our payment.
//!
//! Mirrors the contract the real client relies on (`shared/psp/src/stripe.rs`, trait `StripeApi`, and the
//! Stripe-speaking simulator `local/psp-simulator`):
//! - `charge`, `cancel` and `refund` are decided by their idempotency key: the same key replays the *first*
//!   answer (a snapshot, possibly stale by now), the same key with another payment is refused
//!   (`idempotency_error`), as at Stripe. [`Psp::prune_keys`] forgets every key, as Stripe does after 24 h.
//! - a cancel is refused (with the PaymentIntent) once it succeeded, was canceled, or is processing (as at
//!   Stripe, and the simulator since main's cancel fix);
//! - [`Psp::search`] (`Psp::find_for_payment`, `GET /v1/payment_intents/search` by `metadata['payment_id']`)
//!   finds the oldest PaymentIntent created for a payment. Stripe's search is eventually consistent: the model
//!   lets it see only PaymentIntents created before the day passed (a day later they are indexed), never the
//!   ones created since (the index may lag), the adversarial choice;
//! - a refund is refused when it asks for more than is left on the charge (counted in
//!   [`Psp::refused_refunds`], which a property requires to stay 0: our code never asks for it);
//! - every change sends a webhook, a snapshot of the PaymentIntent at that time; webhooks wait in
//!   [`Psp::webhooks`] and the model delivers them in any order, late, twice or never.
//!
//! What a PaymentIntent snapshot means for our payment is decided by the core's table
//! ([`IntentStatus::outcome`]), as `PaymentIntent::outcome` in `shared/psp/src/stripe/objects.rs` decides it; the
//! observation around it mirrors `PaymentIntent::observation`.

use crate::ids;
use payments_core::stripe::IntentFacts;
use payments_core::{
    Channel, Claims, CorrelationId, CustomerAction, Observation, PaymentId, PspEventId, PspReference, RedirectPolicy,
    RedirectUrl,
};
use std::collections::BTreeMap;

/// What the customer's payment method does when charged (the simulator's `pm_<scenario>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scenario {
    /// Captured at once.
    Succeeds,
    /// A 3-D Secure challenge: `requires_action` until the customer completes it (or never).
    ThreeDs,
    /// `processing`, then the PSP captures on its own.
    Processing,
    /// Declined: `requires_payment_method` with a `last_payment_error`; the customer never retries.
    Declined,
}

impl Scenario {
    /// Every scenario, one initial state each.
    pub const ALL: [Scenario; 4] = [Self::Succeeds, Self::ThreeDs, Self::Processing, Self::Declined];
}

/// What a 3-D Secure PaymentIntent's `next_action` offers the customer, and how our client reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Offer {
    /// The client secret alone (Stripe.js handles the challenge).
    #[default]
    Secret,
    /// The secret and a `redirect_to_url` our [`RedirectPolicy`] refuses (another host than
    /// `REDIRECT_HOSTS`): main's decision, [`CustomerAction::offered`], drops the URL and keeps the secret.
    RefusedUrl,
    /// Broken on purpose: the same offer read by the client before 60fbc53, which dropped the whole action
    /// with the URL: the answer is unreadable (`PspError::BadAnswer`), so is the webhook.
    RefusedUrlDropsAction,
}

/// The redirect URL the PSP offers under [`Offer::RefusedUrl`], and the policy that refuses it.
const OFFERED_URL: &str = "https://hooks.elsewhere.example/3ds?token=t";

fn policy() -> RedirectPolicy {
    RedirectPolicy::from_values(false, Some("bank.example"))
}

impl Offer {
    /// The customer's action on PaymentIntent `index`, as our client reads the offer; `None`: unreadable.
    pub fn action(self, index: u8) -> Option<CustomerAction> {
        let secret = ids::secret(index);
        let url = (self != Self::Secret).then(|| RedirectUrl::parse_with(OFFERED_URL, &policy()));
        if self == Self::RefusedUrlDropsAction && url.as_ref().is_some_and(Result::is_err) {
            return None;
        }
        CustomerAction::offered(Some(secret), url).ok().map(|o| o.action)
    }
}

/// A PaymentIntent's `status`: Stripe's, as our client reads it, so what each one means is the core's one
/// table (the model's PSP moves through `requires_payment_method` (after a decline), `requires_action`,
/// `processing`, `succeeded` and `canceled`).
pub use payments_core::stripe::IntentStatus;

/// One PaymentIntent at the PSP. Its id is `pi_<index + 1>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Intent {
    /// `metadata[payment_id]`: our payment it was created for.
    pub payment: PaymentId,
    pub status: IntentStatus,
    /// Cumulative refunded amount of its charge.
    pub refunded: u64,
    /// The cardholder disputed the charge: Stripe refuses every refund of it (`charge_disputed`).
    pub disputed: bool,
}

impl Intent {
    /// Money was taken (the charge exists, whatever was refunded since).
    pub fn captured(&self) -> bool {
        self.status == IntentStatus::Succeeded
    }
}

/// A PaymentIntent as one answer or webhook showed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IntentView {
    pub index: u8,
    pub status: IntentStatus,
    pub refunded: u64,
    /// What its `next_action` offers, when it requires one.
    pub offer: Offer,
}

impl IntentView {
    /// `pi_<index + 1>`.
    pub fn reference(&self) -> PspReference {
        reference(self.index)
    }

    /// What this snapshot tells our payment, on `path`: the core's outcome of its status, and as
    /// `PaymentIntent::observation` the PaymentIntent id as the PSP reference, amount and currency as claims.
    /// `None` when it tells nothing, or our client cannot read it (a `next_action` it refuses whole: [`Offer::RefusedUrlDropsAction`]).
    pub fn observation(&self, path: Channel) -> Option<Observation> {
        let facts = IntentFacts {
            // The model's PaymentIntents are declined one way, and canceled only by the saga's cancel.
            declined: Some("card_declined"),
            refunded_minor: Some(self.refunded),
            cancellation_reason: Some("requested_by_customer"),
            // The model charges with automatic capture: its PaymentIntents never hold an authorization.
            capture_before_ms: None,
        };
        let outcome = self
            .status
            .outcome(&facts, || self.offer.action(self.index).ok_or(()))
            .ok()??;
        let mut observation = Observation::new(path, outcome, correlation());
        observation.psp_reference = Some(self.reference());
        observation.claims = Claims {
            amount_minor: Some(ids::AMOUNT),
            currency: Some(ids::currency()),
        };
        Some(observation)
    }
}

/// The PSP's id of PaymentIntent `index`.
pub fn reference(index: u8) -> PspReference {
    ids::valid(PspReference::parse(format!("pi_{}", u32::from(index) + 1)))
}

fn correlation() -> CorrelationId {
    ids::valid(CorrelationId::parse("model"))
}

/// A webhook the PSP has yet to deliver: an event id, the PaymentIntent as it was, and when (PSP time).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Webhook {
    pub event: u8,
    pub intent: IntentView,
    pub at: u8,
}

impl Webhook {
    /// The observation webhook intake makes of it (mirrors `functions/webhook-intake/src/stripe.rs`: the
    /// event's object, its id and `created` time).
    pub fn observation(&self) -> Option<Observation> {
        let id = ids::valid(PspEventId::parse(format!("evt_{}", self.event)));
        self.intent
            .observation(Channel::Webhook)
            .map(|o| o.with_event(id, i64::from(self.at) * 1000))
    }
}

/// What an idempotency key remembers: the first answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Remembered {
    /// A charge: the PaymentIntent as first answered, and the payment it was for.
    Charge(IntentView, PaymentId),
    /// A cancel: the answer (accepted or refused) with the PaymentIntent as it was.
    Cancel(Result<IntentView, IntentView>),
    /// A refund: the answer.
    Refund(RefundAnswer),
    /// A charge whose first attempt failed with a 500: Stripe saves it for the key and replays it (with
    /// `Idempotent-Replayed: true`) to every retry for 24 hours.
    Failed,
}

/// The PSP's answer to a refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefundAnswer {
    Accepted,
    /// Refused with Stripe's error `code` (`charge_already_refunded`: nothing left; `charge_disputed`).
    Refused(&'static str),
}

/// Why a charge did not produce a PaymentIntent answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChargeRefused {
    /// The key was used for another payment, or with other parameters (a deploy changed the charge's return
    /// URL): `idempotency_error`, a refusal for good (`PspError::Refused`).
    KeyReused,
    /// A 500 (`replayed`: the one Stripe saved for the key, answered again). Transient to the client.
    ServerError { replayed: bool },
}

/// Why the search (`find_for_payment`) gave no answer: Stripe refused it for good (a 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SearchRefused;

/// The PSP: its PaymentIntents, idempotency keys and webhooks in flight.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Psp {
    pub scenario: Scenario,
    pub intents: Vec<Intent>,
    pub keys: BTreeMap<String, Remembered>,
    pub webhooks: Vec<Webhook>,
    /// PSP time: +1 with every change; the time of the newest event.
    pub time: u8,
    /// Event ids handed out so far.
    pub events: u8,
    /// Refunds refused because they asked for more than was left on the charge.
    pub refused_refunds: u8,
    /// PaymentIntents the search index holds: those created before the day passed.
    pub indexed: u8,
    /// Every call is answered 401: the API key was rejected (a deployment fault) until someone fixes it.
    pub key_rejected: bool,
    /// Times the key was rejected (once at most).
    pub key_rejections: u8,
    /// A deploy changed the charge request (its return URL): a retry with the key of the first is refused.
    pub request_changed: bool,
    /// The first charge fails with a 500 that Stripe saves for the key.
    pub charge_fails: bool,
    /// The search is refused for good (a 400).
    pub search_refused: bool,
    /// What a PaymentIntent's `next_action` offers the customer.
    pub offer: Offer,
}

impl Psp {
    /// A PSP with nothing on it yet.
    pub fn new(scenario: Scenario) -> Self {
        Self {
            scenario,
            intents: Vec::new(),
            keys: BTreeMap::new(),
            webhooks: Vec::new(),
            time: 0,
            events: 0,
            refused_refunds: 0,
            indexed: 0,
            key_rejected: false,
            key_rejections: 0,
            request_changed: false,
            charge_fails: false,
            search_refused: false,
            offer: Offer::default(),
        }
    }

    /// PaymentIntent `index` as it stands now (`GET /v1/payment_intents/{id}` with the charge expanded).
    pub fn retrieve(&self, index: u8) -> Option<IntentView> {
        self.intents.get(usize::from(index)).map(|i| IntentView {
            index,
            status: i.status,
            refunded: i.refunded,
            offer: self.offer,
        })
    }

    /// The PaymentIntent a reference names.
    pub fn index_of(reference: &PspReference) -> Option<u8> {
        reference
            .as_str()
            .strip_prefix("pi_")
            .and_then(|n| n.parse::<u8>().ok())
            .and_then(|n| n.checked_sub(1))
    }

    fn changed(&mut self, index: u8) {
        self.time = self.time.saturating_add(1);
        self.events = self.events.saturating_add(1);
        if let Some(intent) = self.retrieve(index) {
            self.webhooks.push(Webhook {
                event: self.events,
                intent,
                at: self.time,
            });
        }
    }

    /// Creates and confirms a PaymentIntent for `payment`, once per `key`.
    pub fn charge(&mut self, key: &str, payment: &PaymentId) -> Result<IntentView, ChargeRefused> {
        match self.keys.get(key) {
            Some(Remembered::Charge(view, for_payment)) => {
                return if for_payment == payment && !self.request_changed {
                    Ok(*view)
                } else {
                    Err(ChargeRefused::KeyReused)
                };
            }
            Some(Remembered::Failed) => return Err(ChargeRefused::ServerError { replayed: true }),
            _ => {}
        }
        if self.charge_fails {
            self.charge_fails = false;
            self.keys.insert(key.to_owned(), Remembered::Failed);
            return Err(ChargeRefused::ServerError { replayed: false });
        }
        let status = match self.scenario {
            Scenario::Succeeds => IntentStatus::Succeeded,
            Scenario::ThreeDs => IntentStatus::RequiresAction,
            Scenario::Processing => IntentStatus::Processing,
            Scenario::Declined => IntentStatus::RequiresPaymentMethod,
        };
        let index = u8::try_from(self.intents.len()).unwrap_or(u8::MAX);
        self.intents.push(Intent {
            payment: payment.clone(),
            status,
            refunded: 0,
            disputed: false,
        });
        self.changed(index);
        let view = self.retrieve(index).unwrap_or_else(|| unreachable!("just created"));
        self.keys
            .insert(key.to_owned(), Remembered::Charge(view, payment.clone()));
        Ok(view)
    }

    /// Cancels PaymentIntent `index`, once per `key`. `Err` with the PaymentIntent when it cannot be canceled
    /// (succeeded, canceled, processing), as Stripe's `payment_intent_unexpected_state`.
    pub fn cancel(&mut self, key: &str, index: u8) -> Result<IntentView, IntentView> {
        if let Some(Remembered::Cancel(answer)) = self.keys.get(key) {
            return *answer;
        }
        let Some(intent) = self.intents.get_mut(usize::from(index)) else {
            unreachable!("cancel of an unknown PaymentIntent");
        };
        let answer = match intent.status {
            IntentStatus::RequiresAction | IntentStatus::RequiresPaymentMethod => {
                intent.status = IntentStatus::Canceled;
                self.changed(index);
                Ok(self.retrieve(index).unwrap_or_else(|| unreachable!()))
            }
            _ => Err(self.retrieve(index).unwrap_or_else(|| unreachable!())),
        };
        self.keys.insert(key.to_owned(), Remembered::Cancel(answer));
        answer
    }

    /// Refunds `amount` (all that is left when `None`) of PaymentIntent `index`'s charge, once per `key`.
    /// Refused when there is no charge or less is left (`charge_already_refunded`, counted in
    /// [`Psp::refused_refunds`]), or when the charge is disputed (`charge_disputed`).
    pub fn refund(&mut self, key: &str, index: u8, amount: Option<u64>) -> RefundAnswer {
        if let Some(Remembered::Refund(answer)) = self.keys.get(key) {
            return *answer;
        }
        let Some(intent) = self.intents.get_mut(usize::from(index)) else {
            unreachable!("refund of an unknown PaymentIntent");
        };
        let left = if intent.captured() {
            ids::AMOUNT - intent.refunded
        } else {
            0
        };
        let amount = amount.unwrap_or(left);
        let answer = if intent.disputed {
            RefundAnswer::Refused("charge_disputed")
        } else if amount > 0 && amount <= left {
            intent.refunded += amount;
            self.changed(index);
            RefundAnswer::Accepted
        } else {
            self.refused_refunds = self.refused_refunds.saturating_add(1);
            RefundAnswer::Refused("charge_already_refunded")
        };
        self.keys.insert(key.to_owned(), Remembered::Refund(answer));
        answer
    }

    /// The cardholder disputes PaymentIntent `index`'s charge (captured, nothing refunded).
    pub fn dispute(&mut self, index: u8) -> bool {
        match self.intents.get_mut(usize::from(index)) {
            Some(intent) if intent.captured() && intent.refunded == 0 && !intent.disputed => {
                intent.disputed = true;
                true
            }
            _ => false,
        }
    }

    /// The customer completes the 3-D Secure challenge of PaymentIntent `index`.
    pub fn complete_action(&mut self, index: u8) -> bool {
        self.settle_from(index, IntentStatus::RequiresAction)
    }

    /// The PSP captures a processing PaymentIntent `index`.
    pub fn settle(&mut self, index: u8) -> bool {
        self.settle_from(index, IntentStatus::Processing)
    }

    fn settle_from(&mut self, index: u8, from: IntentStatus) -> bool {
        match self.intents.get_mut(usize::from(index)) {
            Some(intent) if intent.status == from => {
                intent.status = IntentStatus::Succeeded;
                self.changed(index);
                true
            }
            _ => false,
        }
    }

    /// Stripe prunes idempotency keys after 24 hours; a day later, its search index holds every
    /// PaymentIntent created until then.
    pub fn prune_keys(&mut self) {
        self.keys.clear();
        self.indexed = u8::try_from(self.intents.len()).unwrap_or(u8::MAX);
    }

    /// `Psp::find_for_payment`: the oldest PaymentIntent whose `metadata[payment_id]` is `payment`, among
    /// those the search index holds; refused for good when [`Psp::search_refused`].
    pub fn search(&self, payment: &PaymentId) -> Result<Option<IntentView>, SearchRefused> {
        if self.search_refused {
            return Err(SearchRefused);
        }
        let index = self
            .intents
            .iter()
            .take(usize::from(self.indexed))
            .position(|i| &i.payment == payment);
        Ok(index.and_then(|i| self.retrieve(u8::try_from(i).ok()?)))
    }

    /// PaymentIntents that took money.
    pub fn captures(&self) -> usize {
        self.intents.iter().filter(|i| i.captured()).count()
    }
}
