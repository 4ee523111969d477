// The secret-bearing view cannot be assembled by hand (for example from a stale read): its fields are
// private, so the only way to get one is `ClientView::from(&payment)`, which looks at the payment's status.
use payments_core::client_view::{ActionView, ClientView, PaymentSummary};
use payments_core::ClientSecret;

fn leak(summary: PaymentSummary, secret: ClientSecret) -> ClientView {
    ClientView::RequiresAction(ActionView { summary, client_secret: Some(secret), redirect_url: None })
}

fn main() {}
