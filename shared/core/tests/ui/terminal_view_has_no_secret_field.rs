// A terminal outcome has no field that could hold a client secret.
use payments_core::client_view::{ClientView, OutcomeView, PaymentSummary};
use payments_core::ClientSecret;

fn leak(summary: PaymentSummary, secret: ClientSecret) -> ClientView {
    ClientView::Captured(OutcomeView { summary, refunded_minor: 0, refund_pending_minor: 0, refunds_failed: 0, failure_reason: None, capture_failed: None, client_secret: Some(secret) })
}

fn main() {}
