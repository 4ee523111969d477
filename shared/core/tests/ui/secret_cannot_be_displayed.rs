// Secrets have no Display: they cannot be formatted into a log line with `{}`.
use payments_core::ClientSecret;

fn log(secret: &ClientSecret) -> String {
    format!("secret is {}", secret)
}

fn main() {}
