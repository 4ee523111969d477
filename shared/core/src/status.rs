//! Payment statuses and the table of allowed moves between them.

use crate::error::DomainError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a payment stands. `Captured`, `Failed` and `Refunded` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    /// Created, nothing heard from the PSP yet.
    Pending,
    /// The customer must act (3-D Secure, a bank redirect); the client view carries the secret or URL.
    RequiresAction,
    /// The PSP is working on it; the outcome comes later.
    Processing,
    /// An attempt was declined; the customer may retry (the client view offers the retry).
    AttemptFailed,
    /// The PSP holds the money for us (an authorization, manual capture): not taken until we capture it,
    /// released by a cancel or when the authorization lapses (the payment's `capture_before_ms`).
    Authorized,
    /// Money was taken. Terminal; the only way on is a refund.
    Captured,
    /// Cancelled or finally failed. Terminal.
    Failed,
    /// Refunded in full. Terminal.
    Refunded,
}

impl PaymentStatus {
    pub const ALL: [PaymentStatus; 8] = [
        Self::Pending,
        Self::RequiresAction,
        Self::Processing,
        Self::AttemptFailed,
        Self::Authorized,
        Self::Captured,
        Self::Failed,
        Self::Refunded,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Captured | Self::Failed | Self::Refunded)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::RequiresAction => "requires_action",
            Self::Processing => "processing",
            Self::AttemptFailed => "attempt_failed",
            Self::Authorized => "authorized",
            Self::Captured => "captured",
            Self::Failed => "failed",
            Self::Refunded => "refunded",
        }
    }

    pub fn parse(value: &str) -> Result<Self, DomainError> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == value)
            .ok_or_else(|| DomainError::UnknownStatus(value.to_owned()))
    }

    /// The transition table. A move not listed here is never written.
    ///
    /// | from \ to        | requires_action | processing | attempt_failed | authorized | captured | failed | refunded |
    /// |------------------|-----------------|------------|----------------|------------|----------|--------|----------|
    /// | pending          | yes             | yes        | yes            | yes        | yes      | yes    | yes (1)  |
    /// | requires_action  | yes (2)         | yes        | yes            | yes        | yes      | yes    | yes (1)  |
    /// | processing       | recovery (4)    | -          | yes            | yes        | yes      | yes    | yes (1)  |
    /// | attempt_failed   | yes             | yes        | yes (2)        | yes        | yes      | yes    | yes (1)  |
    /// | authorized       | no              | no         | no             | yes (6)    | yes      | yes    | no       |
    /// | captured         | no              | no         | no             | no         | - (3)    | no     | yes      |
    /// | refunded         | no              | no         | no             | no         | yes (5)  | no     | -        |
    /// | failed           | no              | no         | no             | no         | no       | no     | no       |
    ///
    /// (1) only when the refund event proves the capture; (2) a new action or decline replaces the old one;
    /// (3) a partial refund stays `captured` with a higher refunded amount; (4) only when recovery finds the PSP
    /// asking for an action again (its status query is the PSP's present); a webhook saying so is stale; (5)
    /// only when the PSP reports a refund failed, canceled or still pending (the money is not back), always
    /// as a new event (invariant 2); (6) only to record the authorization's capture deadline, learned after
    /// the authorization (a webhook without the charge, then a read with it). An authorization ends captured,
    /// or failed when it is canceled or lapses: never refunded, as no money was taken.
    pub fn can_move_to(self, to: PaymentStatus) -> bool {
        use PaymentStatus::*;
        match (self, to) {
            (Pending | RequiresAction | AttemptFailed, _) => to != Pending,
            (Processing, Pending) => false,
            (Processing, _) => true,
            // Refunded: a capture and its refund both reported late (a `charge.refunded` that proves the
            // capture, before the capture's own event): the money was taken and given back.
            (Authorized, Authorized | Captured | Failed | Refunded) => true,
            (Authorized, _) => false,
            (Captured, Captured | Refunded) | (Refunded, Captured) => true,
            (Captured, _) | (Failed, _) | (Refunded, _) => false,
        }
    }
}

impl fmt::Display for PaymentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::PaymentStatus::*;
    use super::*;

    #[test]
    fn terminal_statuses() {
        let terminal: Vec<_> = PaymentStatus::ALL.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal, vec![Captured, Failed, Refunded]);
    }

    #[test]
    fn no_terminal_status_moves_to_a_non_terminal_one() {
        for from in PaymentStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in PaymentStatus::ALL.into_iter().filter(|s| !s.is_terminal()) {
                assert!(!from.can_move_to(to), "{from} -> {to} must be refused");
            }
        }
    }

    #[test]
    fn only_captured_and_refunded_move_between_terminals() {
        for from in PaymentStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in PaymentStatus::ALL.into_iter().filter(|s| s.is_terminal() && *s != from) {
                assert_eq!(
                    from.can_move_to(to),
                    matches!((from, to), (Captured, Refunded) | (Refunded, Captured)),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn nothing_moves_back_to_pending() {
        for from in PaymentStatus::ALL {
            assert!(!from.can_move_to(Pending));
        }
    }

    #[test]
    fn names_round_trip() {
        for s in PaymentStatus::ALL {
            assert_eq!(PaymentStatus::parse(s.as_str()).unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
        }
        assert!(PaymentStatus::parse("succeeded").is_err());
    }
}
