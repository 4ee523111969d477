//! The Adyen notification target: the `Authorization` header, the body's parser, every item's verifier with
//! Adyen's published keys, and what a verified item becomes in our terms (and as parked for the retry).

use crate::{after_parse, split_lines, SAMPLE_NOW};
use webhook_intake::adyen::config::AdyenSecrets;
use webhook_intake::adyen::notification::{self, MAX_ITEMS};
use webhook_intake::adyen::{fact, parked};
use webhook_intake::psp_event::Parsed;
use webhook_signatures::adyen::{verify, AdditionalData, HmacKey, Mode};

/// The keys of Adyen's libraries' tests (Python, Python with slashes, Node, Java) and the local development
/// key of the README, marked test; and the Basic auth credential of the README's local setup.
fn secrets() -> AdyenSecrets {
    let values = [
        "hmac:test:44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
        "hmac:test:74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174",
        "hmac:test:DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00",
        "hmac:test:9064450A8892A093D9E97EFCC9639DE31B74F3A7803135555A3C96F5A57915D6",
        "basic:adyen:local-dev-adyen-password",
    ];
    let values: Vec<_> = values
        .iter()
        .filter_map(|v| shared::SigningSecret::parse(*v).ok())
        .collect();
    AdyenSecrets::parse(&values).unwrap_or_else(|why| panic!("the harness's Adyen secrets are valid: {why}"))
}

/// `Authorization\nbody`: Basic auth, the notification's items, each verified and read in our terms.
pub fn adyen_notification(data: &[u8]) {
    let ([authorization], body) = split_lines::<1>(data);
    let secrets = secrets();
    let _ = secrets.authorizes(authorization.as_deref());
    let Ok(items) = notification::items(body) else { return };
    assert!(!items.is_empty() && items.len() <= MAX_ITEMS, "{} items", items.len());
    for (i, item) in items.iter().enumerate() {
        // Whatever the item: our own signature of it verifies, with the key's mode.
        let Some(key) = secrets.keys.first() else { return };
        let mut signed = item.clone();
        signed.additional_data = Some(AdditionalData {
            hmac_signature: Some(key.sign(item)),
        });
        assert_eq!(verify(i, &signed, &secrets.keys), Ok(Mode::Test));
        let live = HmacKey::from_hex(Mode::Live, &"ab".repeat(32)).unwrap_or_else(|_| unreachable!("a valid key"));
        assert!(verify(i, &signed, &[live]).is_err(), "another key verifies");
        // What it says, verified or not (the reader must hold for any signed text).
        let mode = verify(i, item, &secrets.keys).unwrap_or(Mode::Test);
        if let Ok(Some(n)) = fact::parse(item, mode, SAMPLE_NOW) {
            assert_eq!(n.event.facts.livemode, Some(false));
            after_parse(Parsed::Event(Box::new(n.event.clone())));
            // As parked for the retry, it reads back as the same event.
            let parked = parked::ParkedItem::new(item.clone(), mode, SAMPLE_NOW);
            let back = parked::parse_parked(&parked.to_body());
            assert_eq!(
                back.ok(),
                Some(Parsed::Event(Box::new(n.event))),
                "a parked item reads back"
            );
        }
    }
}
