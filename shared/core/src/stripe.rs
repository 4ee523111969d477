//! Stripe's PaymentIntent `status` and what each one means in our terms: the one table that Stripe's client
//! (`psp::stripe`, whose answers the saga's charge, its cancel and recovery read) and the protocol
//! model (`tools/protocol-model`, whose PSP speaks the same statuses) both decide with, so the model checks
//! the mapping that runs instead of a retelling of it.
//!
//! | PaymentIntent `status` | what we observe (any path) | the cancel step's view ([`IntentState`]) |
//! |---|---|---|
//! | `requires_payment_method` after a failed attempt (`last_payment_error`) | `attempt_failed` with the decline code | open |
//! | `requires_payment_method` (no attempt yet), `requires_confirmation` | nothing: the customer needs nothing new | open |
//! | `requires_action` | `requires_action` with the client secret and the `redirect_to_url` URL | open |
//! | `processing` | `processing` (recovery: only a `pending` payment moves; see `crate::decide`) | processing |
//! | `requires_capture` | `authorized` (manual capture), with the charge's `capture_before` when it was read with it: the money is held, not taken, until our capture; a cancel (or the deadline) releases it | open |
//! | `succeeded` | captured; with the charge expanded, its `amount_refunded` (cumulative) records refunds | succeeded |
//! | `canceled` | failed, with the `cancellation_reason` | canceled |
//! | a status Stripe adds later | nothing | open |
//!
//! The webhook intake reads `payment_intent.*` events by their type, not by this table (an event names what
//! happened, a status what stands now).

use crate::observation::Outcome;
use crate::payment::CustomerAction;
use crate::saga::IntentState;
use crate::text::{sanitized, MAX_REASON_CHARS};
use serde::Deserialize;

/// The `status` of a PaymentIntent. A status Stripe adds later reads as `Unknown` and changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentStatus {
    RequiresPaymentMethod,
    RequiresConfirmation,
    RequiresAction,
    Processing,
    RequiresCapture,
    Succeeded,
    Canceled,
    #[serde(other)]
    Unknown,
}

/// What a PaymentIntent says beside its status, as far as its outcome depends on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntentFacts<'a> {
    /// Why the last attempt failed (`last_payment_error`'s decline code, else its code), as Stripe sent it;
    /// `None` when no attempt failed.
    pub declined: Option<&'a str>,
    /// The charge's cumulative refunded amount, when the charge was read with it (expanded).
    pub refunded_minor: Option<u64>,
    /// `cancellation_reason`.
    pub cancellation_reason: Option<&'a str>,
    /// The charge's `payment_method_details.card.capture_before` (epoch ms), when it was read with it.
    pub capture_before_ms: Option<i64>,
}

impl IntentStatus {
    /// Every status Stripe documents (not `Unknown`).
    pub const ALL: [IntentStatus; 7] = [
        Self::RequiresPaymentMethod,
        Self::RequiresConfirmation,
        Self::RequiresAction,
        Self::Processing,
        Self::RequiresCapture,
        Self::Succeeded,
        Self::Canceled,
    ];

    /// Stripe's name (`unknown` for a status this version does not know).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequiresPaymentMethod => "requires_payment_method",
            Self::RequiresConfirmation => "requires_confirmation",
            Self::RequiresAction => "requires_action",
            Self::Processing => "processing",
            Self::RequiresCapture => "requires_capture",
            Self::Succeeded => "succeeded",
            Self::Canceled => "canceled",
            Self::Unknown => "unknown",
        }
    }

    /// The PaymentIntent as the saga's cancel, recovery's expiry and the protocol model decide on it: waiting
    /// for the customer or for us (an unknown status too) it can still be canceled; `processing` is Stripe's
    /// to settle.
    pub fn state(self) -> IntentState {
        match self {
            Self::Processing => IntentState::Processing,
            Self::Succeeded => IntentState::Succeeded,
            Self::Canceled => IntentState::Canceled,
            Self::RequiresPaymentMethod
            | Self::RequiresConfirmation
            | Self::RequiresAction
            | Self::RequiresCapture
            | Self::Unknown => IntentState::Open,
        }
    }

    /// What a PaymentIntent in this status tells our payment (the table in the module doc); `None` when it
    /// tells nothing new. `action` is asked only for `requires_action` (the client's and the model's ways of
    /// reading `next_action` differ); its error is the answer's. Reasons are kept as text that follows our
    /// rules ([`sanitized`]): a status read cannot be refused for its text.
    pub fn outcome<E>(
        self,
        facts: &IntentFacts<'_>,
        action: impl FnOnce() -> Result<CustomerAction, E>,
    ) -> Result<Option<Outcome>, E> {
        Ok(match self {
            Self::RequiresPaymentMethod => facts.declined.map(|declined| Outcome::AttemptFailed {
                reason: sanitized(declined, MAX_REASON_CHARS),
                retry_token: None,
            }),
            Self::RequiresConfirmation | Self::Unknown => None,
            Self::RequiresAction => Some(Outcome::RequiresAction(action()?)),
            Self::Processing => Some(Outcome::Processing),
            Self::RequiresCapture => Some(Outcome::Authorized {
                capture_before_ms: facts.capture_before_ms,
            }),
            Self::Succeeded => Some(match facts.refunded_minor {
                Some(total) if total > 0 => Outcome::Refunded {
                    refunded_total_minor: total,
                    capture_proven: true,
                },
                _ => Outcome::Succeeded,
            }),
            Self::Canceled => Some(Outcome::Failed {
                reason: sanitized(
                    &format!(
                        "canceled at the PSP: {}",
                        facts.cancellation_reason.unwrap_or("no reason given")
                    ),
                    MAX_REASON_CHARS,
                ),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::ClientSecret;

    fn action() -> Result<CustomerAction, String> {
        let secret = ClientSecret::parse("pi_1_secret_x").map_err(|e| e.to_string())?;
        CustomerAction::new(Some(secret), None).map_err(|e| e.to_string())
    }

    fn outcome(status: IntentStatus, facts: IntentFacts<'_>) -> Option<Outcome> {
        status.outcome(&facts, action).expect("the action reads")
    }

    #[test]
    fn each_status_reads_as_the_table_says() {
        use IntentStatus as S;
        let none = IntentFacts::default();
        assert_eq!(outcome(S::RequiresPaymentMethod, none), None, "no attempt yet");
        let declined = IntentFacts {
            declined: Some("insufficient_funds"),
            ..none
        };
        assert_eq!(
            outcome(S::RequiresPaymentMethod, declined),
            Some(Outcome::AttemptFailed {
                reason: "insufficient_funds".into(),
                retry_token: None
            })
        );
        assert_eq!(outcome(S::RequiresConfirmation, none), None);
        assert_eq!(outcome(S::Unknown, none), None);
        assert!(matches!(
            outcome(S::RequiresAction, none),
            Some(Outcome::RequiresAction(_))
        ));
        assert_eq!(outcome(S::Processing, none), Some(Outcome::Processing));
        assert_eq!(
            outcome(S::RequiresCapture, none),
            Some(Outcome::Authorized {
                capture_before_ms: None
            }),
            "authorized, not paid"
        );
        let held = IntentFacts {
            capture_before_ms: Some(1_700_000_000_000),
            ..none
        };
        assert_eq!(
            outcome(S::RequiresCapture, held),
            Some(Outcome::Authorized {
                capture_before_ms: Some(1_700_000_000_000)
            })
        );
        assert_eq!(outcome(S::Succeeded, none), Some(Outcome::Succeeded));
        let unrefunded = IntentFacts {
            refunded_minor: Some(0),
            ..none
        };
        assert_eq!(outcome(S::Succeeded, unrefunded), Some(Outcome::Succeeded));
        let refunded = IntentFacts {
            refunded_minor: Some(400),
            ..none
        };
        assert_eq!(
            outcome(S::Succeeded, refunded),
            Some(Outcome::Refunded {
                refunded_total_minor: 400,
                capture_proven: true
            })
        );
        assert_eq!(
            outcome(S::Canceled, none),
            Some(Outcome::Failed {
                reason: "canceled at the PSP: no reason given".into()
            })
        );
        let abandoned = IntentFacts {
            cancellation_reason: Some("abandoned"),
            ..none
        };
        assert_eq!(
            outcome(S::Canceled, abandoned),
            Some(Outcome::Failed {
                reason: "canceled at the PSP: abandoned".into()
            })
        );
    }

    #[test]
    fn only_requires_action_asks_for_the_action_and_its_error_is_the_answer() {
        for status in IntentStatus::ALL.into_iter().chain([IntentStatus::Unknown]) {
            let asked = status.outcome(&IntentFacts::default(), || Err::<CustomerAction, _>("unusable"));
            assert_eq!(asked.is_err(), status == IntentStatus::RequiresAction, "{status:?}");
        }
    }

    #[test]
    fn text_breaking_our_rules_is_kept_sanitized_not_refused() {
        let facts = IntentFacts {
            declined: Some("card\u{0}declined"),
            cancellation_reason: Some("x\u{7}y"),
            ..IntentFacts::default()
        };
        for status in [IntentStatus::RequiresPaymentMethod, IntentStatus::Canceled] {
            let Some(Outcome::AttemptFailed { reason, .. } | Outcome::Failed { reason }) = outcome(status, facts)
            else {
                panic!("{status:?}: a failure");
            };
            assert!(reason.contains(char::REPLACEMENT_CHARACTER), "{status:?}: {reason:?}");
        }
    }

    #[test]
    fn only_processing_and_the_ends_are_not_open_to_a_cancel() {
        use IntentState as St;
        let states: Vec<_> = IntentStatus::ALL.into_iter().map(IntentStatus::state).collect();
        assert_eq!(
            states,
            [
                St::Open,
                St::Open,
                St::Open,
                St::Processing,
                St::Open,
                St::Succeeded,
                St::Canceled
            ]
        );
        assert_eq!(IntentStatus::Unknown.state(), St::Open);
    }

    #[test]
    fn names_are_stripes_and_read_back() {
        for status in IntentStatus::ALL {
            let read: IntentStatus = serde_json::from_value(serde_json::json!(status.as_str())).unwrap();
            assert_eq!(read, status);
        }
        let later: IntentStatus = serde_json::from_value(serde_json::json!("requires_reauthorization")).unwrap();
        assert_eq!(later, IntentStatus::Unknown);
    }
}
