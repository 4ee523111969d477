//! Values that must never reach a log: client secrets, redirect URLs, retry tokens, webhook signing secrets.
//!
//! Each is a distinct type so the client view can refuse them by type. `Debug` prints `[redacted]` and there
//! is no `Display`; the value is read only through `expose()`, which makes every use easy to find.

use crate::error::DomainError;
use crate::text;
use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! secret_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The secret value. Call only where it is handed to its rightful receiver.
            pub fn expose(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "([redacted])"))
            }
        }
    };
}

secret_type!(
    /// The PSP's client secret (`pi_..._secret_...`) that lets a browser confirm the payment.
    ClientSecret
);
secret_type!(
    /// Where the customer is sent to authenticate (3-D Secure, a bank's page). Carries one-time tokens.
    RedirectUrl
);
secret_type!(
    /// Lets the customer retry a declined attempt.
    RetryToken
);
secret_type!(
    /// A webhook signing secret (Stripe `whsec_...`, a Standard Webhooks key).
    SigningSecret
);

fn non_empty(field: &'static str, value: String) -> Result<String, DomainError> {
    if value.trim().is_empty() {
        Err(DomainError::Empty { field })
    } else {
        Ok(value)
    }
}

impl ClientSecret {
    /// A client secret as the PSP gave it: 1 to [`text::MAX_SECRET_CHARS`] allowed characters (`crate::text`).
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        text::bounded("client_secret", &value.into(), text::MAX_SECRET_CHARS).map(Self)
    }
}

impl RetryToken {
    /// A retry token: 1 to [`text::MAX_SECRET_CHARS`] allowed characters (`crate::text`).
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        text::bounded("retry_token", &value.into(), text::MAX_SECRET_CHARS).map(Self)
    }
}

impl SigningSecret {
    /// A signing secret from the configuration; not empty.
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        non_empty("signing_secret", value.into()).map(Self)
    }
}

/// Which redirect URLs this process hands to customers. Read once from the environment
/// ([`RedirectPolicy::current`]); tests build their own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedirectPolicy {
    /// `http://` to a loopback host (`localhost`, `127.0.0.1`, `[::1]`): local development only.
    pub allow_local_http: bool,
    /// `REDIRECT_HOSTS`: the hosts a redirect may go to (lower case; `*.example.com` also takes every
    /// subdomain); `None` takes any host.
    pub hosts: Option<Vec<String>>,
}

static POLICY: std::sync::OnceLock<RedirectPolicy> = std::sync::OnceLock::new();

impl RedirectPolicy {
    /// From the process environment: local `http` only outside AWS Lambda (`AWS_LAMBDA_FUNCTION_NAME`
    /// unset: the local stack, tests, the simulator's demos), and the optional allowlist `REDIRECT_HOSTS`
    /// (comma-separated). This is the core's one read of the environment: a redirect URL is parsed in three
    /// places (the payments API, webhooks, the PSP client) that share this policy.
    pub fn from_env() -> Self {
        Self::from_values(
            std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_none(),
            std::env::var("REDIRECT_HOSTS").ok().as_deref(),
        )
    }

    /// From the two settings: whether this is local development, and `REDIRECT_HOSTS`.
    pub fn from_values(local_development: bool, redirect_hosts: Option<&str>) -> Self {
        let hosts: Vec<String> = redirect_hosts
            .unwrap_or_default()
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        Self {
            allow_local_http: local_development,
            hosts: (!hosts.is_empty()).then_some(hosts),
        }
    }

    /// The process's policy, read once.
    pub fn current() -> &'static Self {
        POLICY.get_or_init(Self::from_env)
    }

    fn allows_host(&self, host: &str) -> bool {
        self.hosts.as_ref().is_none_or(|hosts| {
            hosts.iter().any(|allowed| match allowed.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                None => host == allowed,
            })
        })
    }
}

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The host of an absolute URL's authority (`host[:port]`), lower case; `None` for user info, an empty or
/// odd host, or a port that is not a number. Only plain DNS names, IPv4 and `[::1]` are taken, so the host
/// we check is the host every browser goes to.
fn url_host(authority: &str) -> Option<String> {
    if authority.contains('@') {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && !h.starts_with('[') || h == "[::1]" => (h, Some(p)),
        _ => (authority, None),
    };
    if port.is_some_and(|p| p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let plain = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && !host.starts_with(['.', '-'])
        && !host.contains("..");
    (plain || host == "[::1]").then(|| host.to_ascii_lowercase())
}

impl RedirectUrl {
    /// A URL to send the customer to, under this process's [`RedirectPolicy::current`]: see
    /// [`RedirectUrl::parse_with`].
    pub fn parse(value: impl Into<String>) -> Result<Self, DomainError> {
        Self::parse_with(value, RedirectPolicy::current())
    }

    /// An absolute `https://` URL (`http://` to a loopback host only when `policy` allows local http), at
    /// most [`text::MAX_URL_CHARS`] printable ASCII characters, no user info (`https://good@evil`), no
    /// backslash, a plain host that `policy` allows.
    pub fn parse_with(value: impl Into<String>, policy: &RedirectPolicy) -> Result<Self, DomainError> {
        let value = value.into();
        text::check("redirect_url", &value, text::MAX_URL_CHARS)?;
        if !value.bytes().all(|b| b.is_ascii_graphic()) || value.contains('\\') {
            return Err(DomainError::BadRedirectUrl);
        }
        let (secure, rest) = match (value.strip_prefix("https://"), value.strip_prefix("http://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            (None, None) => return Err(DomainError::BadRedirectUrl),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = url_host(authority).ok_or(DomainError::BadRedirectUrl)?;
        let local = policy.allow_local_http && LOOPBACK.contains(&host.as_str());
        if !(secure || local) {
            return Err(DomainError::BadRedirectUrl);
        }
        if !policy.allows_host(&host) {
            return Err(DomainError::RedirectHostNotAllowed);
        }
        Ok(Self(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = ClientSecret::parse("pi_1_secret_abc").unwrap();
        assert_eq!(format!("{s:?}"), "ClientSecret([redacted])");
        let w = SigningSecret::parse("whsec_topsecret").unwrap();
        assert!(!format!("{w:?}").contains("topsecret"));
    }

    #[test]
    fn redirect_urls_are_validated() {
        let local = RedirectPolicy::from_values(true, None);
        let deployed = RedirectPolicy::from_values(false, None);
        for policy in [&local, &deployed] {
            assert!(RedirectUrl::parse_with("https://hooks.stripe.com/3d_secure/x?a=1#f", policy).is_ok());
            assert!(RedirectUrl::parse_with("https://bank.example:8443/3ds", policy).is_ok());
            for bad in [
                "http://evil.example/3ds",
                "javascript:alert(1)",
                "https:///path",
                "http://localhost@evil.example/3ds",
                "https://bank.example@evil.example/",
                "https://user:pw@bank.example/",
                "https://bank.example\\@evil.example/",
                "https://bank.example/a b",
                "https://bank.example:x/",
                "https://.evil/",
                "https://bänk.example/",
                "https://bank.example/\u{FFFF}",
            ] {
                assert!(RedirectUrl::parse_with(bad, policy).is_err(), "{bad}");
            }
            assert!(RedirectUrl::parse_with(format!("https://bank.example/{}", "a".repeat(2100)), policy).is_err());
        }
        assert!(RedirectUrl::parse_with("http://127.0.0.1:4000/3ds", &local).is_ok());
        assert!(RedirectUrl::parse_with("http://localhost/3ds", &local).is_ok());
        assert!(RedirectUrl::parse_with("http://[::1]:4000/3ds", &local).is_ok());
        assert!(RedirectUrl::parse_with("http://localhost.evil.example/3ds", &local).is_err());
        assert!(RedirectUrl::parse_with("http://127.0.0.1.evil.example/", &local).is_err());
        assert!(
            RedirectUrl::parse_with("http://127.0.0.1:4000/3ds", &deployed).is_err(),
            "https only in AWS"
        );
    }

    #[test]
    fn redirect_hosts_allowlist() {
        let policy = RedirectPolicy::from_values(false, Some(" hooks.stripe.com, *.bank.example ,"));
        assert!(RedirectUrl::parse_with("https://hooks.stripe.com/x", &policy).is_ok());
        assert!(RedirectUrl::parse_with("https://HOOKS.stripe.com/x", &policy).is_ok());
        assert!(RedirectUrl::parse_with("https://acs.bank.example/x", &policy).is_ok());
        for refused in [
            "https://evil.example/x",
            "https://bank.example/x",
            "https://evilbank.example/x",
            "https://hooks.stripe.com.evil.example/x",
        ] {
            assert_eq!(
                RedirectUrl::parse_with(refused, &policy).unwrap_err(),
                DomainError::RedirectHostNotAllowed,
                "{refused}"
            );
        }
    }

    #[test]
    fn secrets_are_bounded() {
        assert!(ClientSecret::parse("x".repeat(512)).is_ok());
        assert!(ClientSecret::parse("x".repeat(513)).is_err());
        assert!(RetryToken::parse("tok\u{FFFF}").is_err());
        assert!(ClientSecret::parse("pi_1\u{7}").is_err());
    }

    #[test]
    fn empty_secrets_are_refused() {
        assert!(ClientSecret::parse(" ").is_err());
        assert!(RetryToken::parse("").is_err());
    }
}
