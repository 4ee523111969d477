//! The client view: the only type a handler returns to a caller about a payment.
//!
//! Secrets (client secret, redirect URL, retry token) exist only in the variants for a payment that needs the
//! customer: `RequiresAction` and `AttemptFailed`. The terminal variants' types have no field that could hold
//! one, and the secret-bearing views have private fields, so they are built only by
//! `ClientView::from(&Payment)`, which picks the variant from the payment's status. Leaking a secret for a
//! terminal payment is therefore a compile error (see `tests/ui/`), not a review finding.

use crate::ids::{OrderId, PaymentId};
use crate::money::Money;
use crate::payment::Payment;
use crate::secret::{ClientSecret, RedirectUrl, RetryToken};
use crate::status::PaymentStatus;
use serde::Serialize;

/// What every view says about the payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaymentSummary {
    pub payment_id: PaymentId,
    pub order_id: OrderId,
    pub amount: Money,
    pub version: u64,
}

/// A payment waiting for the customer: carries what the customer needs to act. Built only from a payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionView {
    #[serde(flatten)]
    summary: PaymentSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_secret: Option<ClientSecret>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redirect_url: Option<RedirectUrl>,
}

impl ActionView {
    pub fn summary(&self) -> &PaymentSummary {
        &self.summary
    }
    pub fn client_secret(&self) -> Option<&ClientSecret> {
        self.client_secret.as_ref()
    }
    pub fn redirect_url(&self) -> Option<&RedirectUrl> {
        self.redirect_url.as_ref()
    }
}

/// A declined attempt the customer may retry. Built only from a payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetryView {
    #[serde(flatten)]
    summary: PaymentSummary,
    decline_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_token: Option<RetryToken>,
}

impl RetryView {
    pub fn summary(&self) -> &PaymentSummary {
        &self.summary
    }
    pub fn decline_reason(&self) -> Option<&str> {
        self.decline_reason.as_deref()
    }
    pub fn retry_token(&self) -> Option<&RetryToken> {
        self.retry_token.as_ref()
    }
}

/// A payment still open with nothing for the customer to do (pending, processing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenView {
    #[serde(flatten)]
    pub summary: PaymentSummary,
}

/// An authorization (manual capture): the money is held, not taken, until the capture, at most until
/// `capture_before_ms` when known. No field for a secret: the customer has nothing left to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuthorizedView {
    #[serde(flatten)]
    pub summary: PaymentSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_before_ms: Option<i64>,
}

/// A terminal outcome. It has no field for a secret, URL or token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutcomeView {
    #[serde(flatten)]
    pub summary: PaymentSummary,
    /// Refunded: what the PSP reports `succeeded`.
    pub refunded_minor: u64,
    /// Asked back and not done yet: refunds the PSP reports `pending` or `requires_action`.
    #[serde(skip_serializing_if = "is_zero")]
    pub refund_pending_minor: u64,
    /// How many refunds the PSP reported failed or canceled (the money came back to us).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub refunds_failed: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Why the capture failed at the card scheme (Adyen's `CAPTURE_FAILED`) while no new capture came: the
    /// money of a `captured` payment that will not arrive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_failed: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// The answer about one payment, tagged by `status` in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ClientView {
    Pending(OpenView),
    RequiresAction(ActionView),
    Processing(OpenView),
    AttemptFailed(RetryView),
    Authorized(AuthorizedView),
    Captured(OutcomeView),
    Failed(OutcomeView),
    Refunded(OutcomeView),
}

impl ClientView {
    pub fn status(&self) -> PaymentStatus {
        match self {
            ClientView::Pending(_) => PaymentStatus::Pending,
            ClientView::RequiresAction(_) => PaymentStatus::RequiresAction,
            ClientView::Processing(_) => PaymentStatus::Processing,
            ClientView::AttemptFailed(_) => PaymentStatus::AttemptFailed,
            ClientView::Authorized(_) => PaymentStatus::Authorized,
            ClientView::Captured(_) => PaymentStatus::Captured,
            ClientView::Failed(_) => PaymentStatus::Failed,
            ClientView::Refunded(_) => PaymentStatus::Refunded,
        }
    }

    pub fn summary(&self) -> &PaymentSummary {
        match self {
            ClientView::Pending(v) | ClientView::Processing(v) => &v.summary,
            ClientView::RequiresAction(v) => &v.summary,
            ClientView::AttemptFailed(v) => &v.summary,
            ClientView::Authorized(v) => &v.summary,
            ClientView::Captured(v) | ClientView::Failed(v) | ClientView::Refunded(v) => &v.summary,
        }
    }

    /// True when the view carries a client secret, redirect URL or retry token.
    pub fn carries_secret(&self) -> bool {
        match self {
            ClientView::RequiresAction(v) => v.client_secret.is_some() || v.redirect_url.is_some(),
            ClientView::AttemptFailed(v) => v.retry_token.is_some(),
            _ => false,
        }
    }
}

impl From<&Payment> for ClientView {
    /// Build the view from the latest payment item. The status picks the variant, so a terminal payment's
    /// secrets (which the store also removes) are never read here.
    fn from(payment: &Payment) -> Self {
        let summary = PaymentSummary {
            payment_id: payment.id.clone(),
            order_id: payment.order_id.clone(),
            amount: payment.money,
            version: payment.version,
        };
        let outcome = |summary| OutcomeView {
            summary,
            refunded_minor: payment.refunded_minor,
            refund_pending_minor: crate::refund::RefundTotals::of(&payment.refunds).pending,
            refunds_failed: payment.refund_failures,
            failure_reason: None,
            capture_failed: payment.capture_failed.clone(),
        };
        match payment.status {
            PaymentStatus::Pending => ClientView::Pending(OpenView { summary }),
            PaymentStatus::Processing => ClientView::Processing(OpenView { summary }),
            PaymentStatus::RequiresAction => ClientView::RequiresAction(ActionView {
                summary,
                client_secret: payment.action.as_ref().and_then(|a| a.client_secret().cloned()),
                redirect_url: payment.action.as_ref().and_then(|a| a.redirect_url().cloned()),
            }),
            PaymentStatus::AttemptFailed => ClientView::AttemptFailed(RetryView {
                summary,
                decline_reason: payment.reason.clone(),
                retry_token: payment.retry_token.clone(),
            }),
            PaymentStatus::Authorized => ClientView::Authorized(AuthorizedView {
                summary,
                capture_before_ms: payment.capture_before_ms,
            }),
            PaymentStatus::Captured => ClientView::Captured(outcome(summary)),
            PaymentStatus::Refunded => ClientView::Refunded(outcome(summary)),
            PaymentStatus::Failed => ClientView::Failed(OutcomeView {
                failure_reason: payment.reason.clone(),
                ..outcome(summary)
            }),
        }
    }
}
