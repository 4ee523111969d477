//! Which payment a PSP object names, and the one lookup that finds it: by our payment id (the object's
//! metadata) first, else by the PSP reference bound to a payment (`by-psp-reference`). The webhook intake,
//! `paymentsctl parked replay` and recovery's recheck of an object Stripe never told about all locate a
//! payment here, so a payment created before its PaymentIntent was bound (the merchant's page confirms a
//! PaymentIntent carrying `metadata.payment_id`) is found by every path, not only by the webhook.

use crate::{text, DomainError, PaymentId, PaymentStore, PspReference, StoreError};
use std::collections::HashMap;

/// The metadata key every PaymentIntent this system creates carries, valued with its stage (`STAGE`; the
/// charge sends it): one PSP account also holds other stages', Billing's, Checkout's and Payment Links'
/// objects, whose events reach the same endpoint.
pub const STAGE_MARKER: &str = "payments_stage";

/// The longest stage marker taken (it is logged when not ours).
const MAX_STAGE_CHARS: usize = 64;

/// How to find the payment an object is about, and whose the object says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRef {
    pub payment_id: Option<PaymentId>,
    pub psp_reference: Option<PspReference>,
    /// The deployment that created the object ([`STAGE_MARKER`] in its metadata), when it says.
    pub stage: Option<String>,
}

/// Whose an object is, by what it carries, before any lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Our stage's marker, or (no marker) our payment id: ours, perhaps before its payment is written.
    Claimed,
    /// Another stage's marker: another deployment's payment, never ours; acknowledged and ignored.
    OtherStage(String),
    /// Neither marker nor payment id: ours only when its PSP reference is bound to one of our payments (a
    /// refund or dispute of a payment we know).
    Unmarked,
}

impl PaymentRef {
    /// An object known by its PSP reference alone (a refund or a dispute, found by its PaymentIntent).
    pub fn by_reference(psp_reference: Option<PspReference>) -> Self {
        Self {
            payment_id: None,
            psp_reference,
            stage: None,
        }
    }

    /// What a Stripe object's `metadata` and PSP id say about its payment. A `payment_id` that is not one of
    /// our ids counts only on a marked object (ours or another stage's, both made by this system, where it is
    /// a fault): on an unmarked one it is another system's key of the same name, and the object is not ours.
    pub fn of_metadata(metadata: &HashMap<String, String>, psp_reference: Option<&str>) -> Result<Self, DomainError> {
        let stage = stage_marker(metadata.get(STAGE_MARKER).map(String::as_str))?;
        let payment_id = metadata.get("payment_id").map(|id| PaymentId::parse(id.as_str()));
        let payment_id = match (&stage, payment_id) {
            (Some(_), id) => id.transpose()?,
            (None, id) => id.and_then(Result::ok),
        };
        Ok(Self {
            payment_id,
            psp_reference: psp_reference.map(PspReference::parse).transpose()?,
            stage,
        })
    }

    /// The payment this names: its payment id, else the payment its PSP reference is bound to.
    pub async fn locate(&self, store: &PaymentStore) -> Result<Option<PaymentId>, StoreError> {
        if let Some(id) = &self.payment_id {
            return Ok(Some(id.clone()));
        }
        match &self.psp_reference {
            Some(reference) => store.find_by_psp_reference(reference).await,
            None => Ok(None),
        }
    }

    /// Whose the object is for a deployment of `stage`. A marker decides; without one, our payment id claims
    /// it (a PaymentIntent made before the marker existed).
    pub fn ownership(&self, stage: &str) -> Ownership {
        match (&self.stage, &self.payment_id) {
            (Some(marked), _) if marked != stage => Ownership::OtherStage(marked.clone()),
            (Some(_), _) | (None, Some(_)) => Ownership::Claimed,
            (None, None) => Ownership::Unmarked,
        }
    }
}

/// The stage marker of an object's metadata, within the text rules.
pub fn stage_marker(value: Option<&str>) -> Result<Option<String>, DomainError> {
    value
        .map(|v| text::bounded(STAGE_MARKER, v, MAX_STAGE_CHARS))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> Result<PaymentRef, DomainError> {
        let metadata = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        PaymentRef::of_metadata(&metadata, Some("pi_1"))
    }

    #[test]
    fn a_marker_decides_and_without_one_our_payment_id_claims_the_object() {
        let own = |pairs: &[(&str, &str)]| of(pairs).unwrap().ownership("prod");
        assert_eq!(own(&[(STAGE_MARKER, "prod")]), Ownership::Claimed);
        assert_eq!(own(&[(STAGE_MARKER, "dev")]), Ownership::OtherStage("dev".into()));
        assert_eq!(own(&[("payment_id", "pay_1")]), Ownership::Claimed);
        assert_eq!(own(&[]), Ownership::Unmarked);
        // Another system's key of the same name on an unmarked object: not one of our ids, not ours.
        assert_eq!(own(&[("payment_id", "order #5")]), Ownership::Unmarked);
    }

    #[test]
    fn a_marked_object_with_a_bad_payment_id_or_marker_is_refused() {
        assert!(of(&[(STAGE_MARKER, "prod"), ("payment_id", "order #5")]).is_err());
        assert!(of(&[(STAGE_MARKER, &"p".repeat(65))]).is_err());
    }
}
