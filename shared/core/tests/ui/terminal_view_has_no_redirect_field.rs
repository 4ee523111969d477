// Nor one for a redirect URL or a retry token.
use payments_core::client_view::{ClientView, OutcomeView, PaymentSummary};
use payments_core::{RedirectUrl, RetryToken};

fn leak(summary: PaymentSummary, url: RedirectUrl, token: RetryToken) -> ClientView {
    ClientView::Failed(OutcomeView { summary, refunded_minor: 0, refund_pending_minor: 0, refunds_failed: 0, failure_reason: None, capture_failed: None, redirect_url: Some(url), retry_token: Some(token) })
}

fn main() {}
