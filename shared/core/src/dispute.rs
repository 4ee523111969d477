//! Disputes (chargebacks and inquiries) as the PSP reports them: facts a payment meets after its capture.
//!
//! A dispute never changes a payment's status: the payment stays `captured` (or `refunded`) and the dispute
//! is held beside it, each new fact recorded as a new event (DESIGN invariant 2: a closed payment changes only
//! by the PSP's report that money moved again, always as a new event). Stripe sends a dispute's events in any
//! order and may send one again under a new id, so [`Dispute::after`] records each fact at most once: the
//! opening, a status that moves the dispute on, the funds withdrawn, the funds reinstated, the closing. After
//! the closing only the money facts (withdrawn, reinstated) still count.

use crate::event::EventKind;
use crate::ids::DisputeId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Stripe's dispute statuses. `warning_*` are inquiries (no money moved yet); `needs_response` and
/// `under_review` are chargebacks; `won`, `lost`, `warning_closed` and `prevented` are closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisputeStatus {
    WarningNeedsResponse,
    WarningUnderReview,
    WarningClosed,
    NeedsResponse,
    UnderReview,
    Won,
    Lost,
    Prevented,
}

impl DisputeStatus {
    /// Every status, as Stripe names them.
    pub const ALL: [DisputeStatus; 8] = [
        Self::WarningNeedsResponse,
        Self::WarningUnderReview,
        Self::WarningClosed,
        Self::NeedsResponse,
        Self::UnderReview,
        Self::Won,
        Self::Lost,
        Self::Prevented,
    ];

    /// Stripe's name of the status (what serde writes).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WarningNeedsResponse => "warning_needs_response",
            Self::WarningUnderReview => "warning_under_review",
            Self::WarningClosed => "warning_closed",
            Self::NeedsResponse => "needs_response",
            Self::UnderReview => "under_review",
            Self::Won => "won",
            Self::Lost => "lost",
            Self::Prevented => "prevented",
        }
    }

    /// The status Stripe names `value`; `None` for one we do not know.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// The dispute is over: nothing but its money facts can follow.
    pub fn is_closed(self) -> bool {
        matches!(self, Self::WarningClosed | Self::Won | Self::Lost | Self::Prevented)
    }

    /// How far along a dispute in this status is: a report of a lower rank than the one held is older news.
    fn rank(self) -> u8 {
        match self {
            Self::WarningNeedsResponse => 0,
            Self::WarningUnderReview => 1,
            Self::NeedsResponse => 2,
            Self::UnderReview => 3,
            Self::WarningClosed | Self::Won | Self::Lost | Self::Prevented => 4,
        }
    }

    /// The event kind that records a dispute closing in this status.
    fn closing_kind(self) -> EventKind {
        match self {
            Self::Won => EventKind::DisputeWon,
            Self::Lost => EventKind::DisputeLost,
            _ => EventKind::DisputeClosed,
        }
    }
}

impl fmt::Display for DisputeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which fact a dispute event reports (Stripe's `charge.dispute.*` event types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeFact {
    Created,
    Updated,
    /// The disputed amount was taken from the merchant's balance.
    FundsWithdrawn,
    /// The disputed amount came back (a won chargeback).
    FundsReinstated,
    Closed,
}

impl DisputeFact {
    /// The fact a Stripe `charge.dispute.*` event type reports; `None` for any other type. One table for the
    /// webhook intake (which reads the event) and recovery (which reads the dispute of an event Stripe never
    /// made, whose type its event-generation failure names).
    pub fn of_stripe_event(event_type: &str) -> Option<Self> {
        Some(match event_type {
            "charge.dispute.created" => Self::Created,
            "charge.dispute.updated" => Self::Updated,
            "charge.dispute.funds_withdrawn" => Self::FundsWithdrawn,
            "charge.dispute.funds_reinstated" => Self::FundsReinstated,
            "charge.dispute.closed" => Self::Closed,
            _ => return None,
        })
    }
}

/// One dispute event: the dispute as the PSP reports it and the fact the event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisputeReport {
    pub id: DisputeId,
    pub status: DisputeStatus,
    /// The disputed amount (usually the charge's; it may differ), in the payment's currency.
    pub amount_minor: u64,
    pub fact: DisputeFact,
}

/// The dispute a payment holds: its latest status and which money facts happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispute {
    pub id: DisputeId,
    pub status: DisputeStatus,
    pub amount_minor: u64,
    /// The disputed amount was withdrawn from the merchant's balance.
    pub funds_withdrawn: bool,
    /// The disputed amount was reinstated.
    pub funds_reinstated: bool,
}

/// Why a dispute report changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unchanged {
    /// The dispute already holds this fact.
    NoOp,
    /// Older news than what the dispute holds (an update after the closing, a status it moved past).
    Stale,
    /// The payment holds another dispute: a charge is disputed at most once, so this is not about it.
    OtherDispute(String),
}

impl Dispute {
    /// The dispute after `report`, and the event kind that records it; `current` is the payment's dispute, if
    /// it has one. The first report of a dispute opens it (`DisputeOpened`, whatever it says: a dispute first
    /// heard of at its closing is opened closed), so every dispute is opened, and alarmed, exactly once.
    pub fn after(current: Option<&Dispute>, report: &DisputeReport) -> Result<(Dispute, EventKind), Unchanged> {
        let Some(current) = current else {
            let reinstated = report.fact == DisputeFact::FundsReinstated;
            let opened = Dispute {
                id: report.id.clone(),
                status: report.status,
                amount_minor: report.amount_minor,
                funds_withdrawn: reinstated || report.fact == DisputeFact::FundsWithdrawn,
                funds_reinstated: reinstated,
            };
            return Ok((opened, EventKind::DisputeOpened));
        };
        if current.id != report.id {
            return Err(Unchanged::OtherDispute(format!(
                "dispute {} reported on a payment that holds dispute {}",
                report.id, current.id
            )));
        }
        let mut next = current.clone();
        next.amount_minor = report.amount_minor;
        let kind = match report.fact {
            DisputeFact::FundsWithdrawn if current.funds_withdrawn => return Err(Unchanged::NoOp),
            DisputeFact::FundsWithdrawn => {
                next.funds_withdrawn = true;
                EventKind::DisputeFundsWithdrawn
            }
            DisputeFact::FundsReinstated if current.funds_reinstated => return Err(Unchanged::NoOp),
            DisputeFact::FundsReinstated => {
                next.funds_withdrawn = true;
                next.funds_reinstated = true;
                EventKind::DisputeFundsReinstated
            }
            DisputeFact::Created | DisputeFact::Updated | DisputeFact::Closed => {
                next.status = moved_status(current.status, report.status)?;
                if next.status.is_closed() {
                    next.status.closing_kind()
                } else {
                    EventKind::DisputeUpdated
                }
            }
        };
        Ok((next, kind))
    }

    /// A short account of the dispute for the event's reason: `dispute du_1 needs_response, funds withdrawn`.
    pub fn summary(&self) -> String {
        let money = match (self.funds_withdrawn, self.funds_reinstated) {
            (_, true) => ", funds withdrawn and reinstated",
            (true, false) => ", funds withdrawn",
            (false, false) => "",
        };
        format!("dispute {} {}{money}", self.id, self.status)
    }
}

/// The status a status report moves the dispute to: only further along, never out of a closed status.
fn moved_status(held: DisputeStatus, reported: DisputeStatus) -> Result<DisputeStatus, Unchanged> {
    if reported == held {
        return Err(Unchanged::NoOp);
    }
    if held.is_closed() || reported.rank() < held.rank() {
        return Err(Unchanged::Stale);
    }
    Ok(reported)
}

#[cfg(test)]
mod tests {
    use super::DisputeFact::*;
    use super::DisputeStatus::*;
    use super::*;

    fn report(status: DisputeStatus, fact: DisputeFact) -> DisputeReport {
        DisputeReport {
            id: DisputeId::parse("du_1").unwrap(),
            status,
            amount_minor: 1000,
            fact,
        }
    }

    fn opened(status: DisputeStatus) -> Dispute {
        Dispute::after(None, &report(status, Created)).unwrap().0
    }

    #[test]
    fn the_first_report_opens_the_dispute_whatever_it_says() {
        let (d, kind) = Dispute::after(None, &report(Lost, Closed)).unwrap();
        assert_eq!(
            (kind, d.status, d.funds_withdrawn),
            (EventKind::DisputeOpened, Lost, false)
        );
        let (d, _) = Dispute::after(None, &report(Won, FundsReinstated)).unwrap();
        assert!(
            d.funds_withdrawn && d.funds_reinstated,
            "reinstated money was withdrawn first"
        );
    }

    #[test]
    fn each_fact_counts_once_and_a_closing_is_final() {
        let d = opened(NeedsResponse);
        assert_eq!(
            Dispute::after(Some(&d), &report(NeedsResponse, Updated)),
            Err(Unchanged::NoOp)
        );
        let (d, kind) = Dispute::after(Some(&d), &report(NeedsResponse, FundsWithdrawn)).unwrap();
        assert_eq!(kind, EventKind::DisputeFundsWithdrawn);
        assert_eq!(
            Dispute::after(Some(&d), &report(UnderReview, FundsWithdrawn)),
            Err(Unchanged::NoOp)
        );
        let (d, kind) = Dispute::after(Some(&d), &report(UnderReview, Updated)).unwrap();
        assert_eq!((kind, d.status), (EventKind::DisputeUpdated, UnderReview));
        assert_eq!(
            Dispute::after(Some(&d), &report(NeedsResponse, Created)),
            Err(Unchanged::Stale)
        );
        let (won, kind) = Dispute::after(Some(&d), &report(Won, Closed)).unwrap();
        assert_eq!(kind, EventKind::DisputeWon);
        assert_eq!(Dispute::after(Some(&won), &report(Lost, Closed)), Err(Unchanged::Stale));
        assert_eq!(
            Dispute::after(Some(&won), &report(UnderReview, Updated)),
            Err(Unchanged::Stale)
        );
        // Money facts still count after the closing.
        let (back, kind) = Dispute::after(Some(&won), &report(Won, FundsReinstated)).unwrap();
        assert_eq!((kind, back.funds_reinstated), (EventKind::DisputeFundsReinstated, true));
        let lost = Dispute::after(Some(&d), &report(Lost, Updated)).unwrap();
        assert_eq!(lost.1, EventKind::DisputeLost, "an update that closes is the closing");
        let inquiry = opened(WarningUnderReview);
        assert_eq!(
            Dispute::after(Some(&inquiry), &report(WarningClosed, Closed))
                .unwrap()
                .1,
            EventKind::DisputeClosed
        );
    }

    #[test]
    fn another_dispute_is_not_about_the_one_held() {
        let d = opened(NeedsResponse);
        let mut other = report(NeedsResponse, Created);
        other.id = DisputeId::parse("du_2").unwrap();
        assert!(matches!(
            Dispute::after(Some(&d), &other),
            Err(Unchanged::OtherDispute(_))
        ));
    }

    #[test]
    fn statuses_round_trip() {
        for s in DisputeStatus::ALL {
            assert_eq!(DisputeStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(DisputeStatus::parse("charge_refunded"), None);
    }
}
