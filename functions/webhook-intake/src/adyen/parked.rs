//! An Adyen item as it is parked for the intake's own retry ([`ParkedItem`]: its signed fields, the verifying
//! key's mode, when it was first received), parking it ([`park`]) and reading it back ([`parse_parked`]).
//! The intake parks what it cannot apply now; the retry (`super::retry`) applies it later.

use crate::app::App;
use crate::providers::Provider;
use crate::psp_event::{Parsed, Unparseable};
use crate::redact::redact;
use serde::{Deserialize, Serialize};
use shared::http::ApiError;
use shared::store::ParkedKind;
use tracing::info;
use webhook_signatures::adyen::{Item, Mode};

/// A verified item as parked: what a retry needs to apply it as its delivery would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedItem {
    #[serde(flatten)]
    pub item: Item,
    /// The mode of the key that verified it.
    pub livemode: bool,
    /// When it was first received (epoch seconds): the start of its unknown-payment window and deadline.
    pub created: i64,
}

impl ParkedItem {
    /// The item as it may be kept: the signed fields, and a reason only for a refusal (an authorisation's
    /// reason holds the card's last digits and expiry).
    pub fn new(mut item: Item, mode: Mode, received_secs: i64) -> Self {
        item.additional_data = None;
        if item.success.as_deref() != Some("false") {
            item.reason = None;
        }
        Self {
            item,
            livemode: mode.is_live(),
            created: received_secs,
        }
    }

    pub fn mode(&self) -> Mode {
        if self.livemode {
            Mode::Live
        } else {
            Mode::Test
        }
    }

    /// The JSON kept (and redacted again by the parking, which keeps exactly these fields).
    pub fn to_body(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The key it is parked under: its identity when it has one (what the dedup uses), else a hash of what
    /// Adyen signed, so one item is one parked entry however often it comes.
    pub fn key(&self) -> String {
        use sha2::{Digest, Sha256};
        match super::fact::parse(&self.item, self.mode(), self.created) {
            Ok(Some(n)) => n.event.id.to_string(),
            _ => format!(
                "sha256-{}",
                hex::encode(Sha256::digest(self.item.signing_string().as_bytes()))
            ),
        }
    }
}

/// Parks an item the intake cannot apply now, saying why; `Err` (a 503) only if even that fails.
pub(crate) async fn park(app: &App, provider: &Provider, parked: &ParkedItem, why: &ApiError) -> Result<(), ApiError> {
    let key = parked.key();
    app.store
        .park(
            ParkedKind::Retrying,
            &provider.name,
            &key,
            &why.message,
            &redact(&parked.to_body()),
        )
        .await?;
    info!(result = "Parked(Retrying)", psp_event_id = %key, reason = %why.message, "Adyen item accepted and parked for the retry");
    Ok(())
}

/// A parked item's body read back as the intake reads it (`paymentsctl parked`): its event, with the
/// outcome of a payment without a capture for a `CANCEL_OR_REFUND` (the intake decides that on the payment).
pub fn parse_parked(body: &[u8]) -> Result<Parsed, Unparseable> {
    let parked: ParkedItem = serde_json::from_slice(body).map_err(Unparseable::because)?;
    Ok(match super::fact::parse(&parked.item, parked.mode(), parked.created)? {
        Some(n) => Parsed::Event(Box::new(n.event)),
        None => Parsed::Ignored {
            event_type: parked.item.event_code.unwrap_or_default(),
        },
    })
}
