use super::*;
use shared::clock::MonotonicClock;
use shared::Env;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use webhook_signatures::MIN_SECRET_BYTES;

const STRIPE_A: &str = "whsec_stripe_test_secret_aaaaaaaaaa";
const STRIPE_B: &str = "whsec_stripe_test_secret_bbbbbbbbbb";
/// base64 of "standard-webhooks-test-secret" (29 bytes).
const STANDARD: &str = "whsec_c3RhbmRhcmQtd2ViaG9va3MtdGVzdC1zZWNyZXQ=";

fn secrets(stripe: &[&str]) -> String {
    serde_json::json!({ "stripe": stripe, "standard": [STANDARD] }).to_string()
}

#[test]
fn providers_need_secrets_and_valid_standard_keys() {
    let p = Providers::from_json(DEFAULT_PROVIDERS, &secrets(&[STRIPE_A, STRIPE_B])).unwrap();
    assert_eq!(p.get("stripe").unwrap().secrets.len(), 2);
    assert_eq!(p.get("standard").unwrap().scheme, Scheme::Standard);
    assert!(p.get("adyen").is_none());
    assert!(matches!(
        Providers::from_json(
            DEFAULT_PROVIDERS,
            &serde_json::json!({ "stripe": [STRIPE_A] }).to_string()
        ),
        Err(ProvidersError::NoSecret(_))
    ));
    let debug = format!("{p:?}");
    assert!(!debug.contains(STRIPE_A) && !debug.contains("c3RhbmRhcmQ"), "{debug}");
}

/// Each secret that cannot be one is refused with the provider's name and the reason, never the value.
#[test]
fn secrets_that_cannot_be_one_refuse_to_load_naming_the_provider_not_the_value() {
    let cases = [
        ("stripe", "", "secret 1 of 1 is empty"),
        ("stripe", "   ", "secret 1 of 1 is empty"),
        ("stripe", "whsec_short_stripe_secret", "shorter than 24 bytes"),
        (
            "stripe",
            "sk_live_not_a_signing_secret_at_all",
            "does not start with whsec_",
        ),
        ("standard", "whsec_not*base64*at*all*but*long*enough", "not base64"),
        // base64 of "only-twenty-bytes-ok" (20 bytes): valid base64, too short a key.
        (
            "standard",
            "whsec_b25seS10d2VudHktYnl0ZXMtb2s=",
            "shorter than 24 bytes",
        ),
    ];
    for (provider, bad, reason) in cases {
        let json = match provider {
            "stripe" => serde_json::json!({ "stripe": [bad], "standard": [STANDARD] }),
            _ => serde_json::json!({ "stripe": [STRIPE_A], "standard": [STANDARD, bad] }),
        };
        let err = Providers::from_json(DEFAULT_PROVIDERS, &json.to_string()).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(&err, ProvidersError::BadSecret(p, _) if p == provider),
            "{bad}: {message}"
        );
        assert!(message.starts_with(&format!("provider {provider}: ")), "{message}");
        assert!(message.contains(reason), "{bad}: {message}");
        let value = bad.trim().trim_start_matches("whsec_");
        assert!(
            value.is_empty() || !message.contains(value),
            "{message} shows the secret"
        );
    }
    // Secrets JSON of the wrong shape: the error names the shape and place, never the value.
    for shape in [
        serde_json::json!({ "stripe": STRIPE_A, "standard": [STANDARD] }).to_string(),
        format!(r#"{{"stripe": ["{STRIPE_A}"], "standard": ["{STANDARD}"],}}"#),
        serde_json::json!({ "stripe": [{ "secret": STRIPE_A }], "standard": [STANDARD] }).to_string(),
    ] {
        let message = Providers::from_json(DEFAULT_PROVIDERS, &shape).unwrap_err().to_string();
        assert!(message.starts_with("webhook secrets are not valid JSON"), "{message}");
        let key = STRIPE_A.trim_start_matches("whsec_");
        assert!(!message.contains(key), "{message} shows the secret");
    }
    // At the limit: exactly 24 bytes after whsec_ loads.
    let exactly = format!("whsec_{}", "k".repeat(MIN_SECRET_BYTES));
    Providers::from_json(DEFAULT_PROVIDERS, &secrets(&[&exactly])).unwrap();
}

#[test]
fn account_is_checked_only_on_a_connect_endpoint_and_either_half_alone_refuses_to_start() {
    let secrets = serde_json::json!({ "stripe": [STRIPE_A] }).to_string();
    let connect = r#"[{"name":"stripe","scheme":"stripe","connect":true,"account":"acct_1"}]"#;
    let p = Providers::from_json(connect, &secrets).unwrap();
    assert_eq!(p.get("stripe").unwrap().expect.account.as_deref(), Some("acct_1"));
    let plain = r#"[{"name":"stripe","scheme":"stripe","livemode":false}]"#;
    assert_eq!(
        Providers::from_json(plain, &secrets)
            .unwrap()
            .get("stripe")
            .unwrap()
            .expect
            .account,
        None
    );
    for (spec, says) in [
        (
            r#"[{"name":"stripe","scheme":"stripe","account":"acct_1"}]"#,
            "add \"connect\": true",
        ),
        (
            r#"[{"name":"stripe","scheme":"stripe","connect":true}]"#,
            "needs the connected \"account\"",
        ),
    ] {
        let err = Providers::from_json(spec, &secrets).unwrap_err();
        assert!(
            matches!(&err, ProvidersError::BadSpec(name, _) if name == "stripe"),
            "{err}"
        );
        assert!(err.to_string().contains(says), "{err}");
        let env = Env::from_lookup(|_| None).with("WEBHOOK_PROVIDERS", spec);
        assert!(
            ProviderSpec::from_env(&env).is_err(),
            "paymentsctl refuses it too: {spec}"
        );
    }
}

/// A loader whose answer the test changes, counting its calls, and a clock the test moves.
struct Fixture {
    json: Arc<Mutex<String>>,
    calls: Arc<AtomicUsize>,
    offset_secs: Arc<AtomicU64>,
    source: ProviderSource,
}

impl Fixture {
    async fn new() -> Self {
        let json = Arc::new(Mutex::new(secrets(&[STRIPE_A])));
        let calls = Arc::new(AtomicUsize::new(0));
        let offset_secs = Arc::new(AtomicU64::new(0));
        let loader: SecretsLoader = {
            let (json, calls) = (json.clone(), calls.clone());
            Arc::new(move || {
                calls.fetch_add(1, Ordering::SeqCst);
                let json = json.lock().unwrap().clone();
                Box::pin(async move {
                    if json == "fail" {
                        Err(ProvidersError::SecretsManager(shared::aws::SecretError::Read {
                            arn: "arn:test".into(),
                            source: "AccessDenied".into(),
                        }))
                    } else {
                        Ok(json)
                    }
                })
            })
        };
        let start = Instant::now();
        let clock: MonotonicClock = {
            let offset = offset_secs.clone();
            Arc::new(move || start + Duration::from_secs(offset.load(Ordering::SeqCst)))
        };
        let source = ProviderSource::load(DEFAULT_PROVIDERS, loader, clock).await.unwrap();
        Self {
            json,
            calls,
            offset_secs,
            source,
        }
    }
    fn at(&self, secs: u64) {
        self.offset_secs.store(secs, Ordering::SeqCst);
    }
    fn rotate_to(&self, json: String) {
        *self.json.lock().unwrap() = json;
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn stripe_secrets(p: &Arc<Providers>) -> Vec<String> {
    p.get("stripe")
        .unwrap()
        .secrets
        .iter()
        .map(|s| s.expose().to_owned())
        .collect()
}

#[tokio::test]
async fn the_secrets_are_read_again_once_the_copy_is_older_than_the_ttl() {
    let f = Fixture::new().await;
    assert_eq!(f.calls(), 1);
    f.rotate_to(secrets(&[STRIPE_A, STRIPE_B]));
    f.at(SECRETS_TTL.as_secs() - 1);
    assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A]);
    assert_eq!(f.calls(), 1, "no read before the TTL");
    f.at(SECRETS_TTL.as_secs());
    assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A, STRIPE_B]);
    assert_eq!(f.calls(), 2);
    f.at(SECRETS_TTL.as_secs() + 10);
    f.source.current().await;
    assert_eq!(f.calls(), 2, "the fresh copy is used for another TTL");
}

#[tokio::test]
async fn a_failed_signature_reads_the_secrets_again_at_most_every_30_seconds() {
    let f = Fixture::new().await;
    f.rotate_to(secrets(&[STRIPE_B]));
    f.at(5);
    assert!(
        f.source.refresh_after_failed_signature().await.is_none(),
        "5 s after the load"
    );
    assert_eq!(f.calls(), 1);
    f.at(MIN_REFRESH_INTERVAL.as_secs());
    let fresh = f.source.refresh_after_failed_signature().await.expect("a re-read");
    assert_eq!(stripe_secrets(&fresh), vec![STRIPE_B]);
    assert_eq!(
        stripe_secrets(&f.source.current().await),
        vec![STRIPE_B],
        "later requests use it"
    );
    for secs in [31, 45, 59] {
        f.at(MIN_REFRESH_INTERVAL.as_secs() + secs - 30);
        assert!(f.source.refresh_after_failed_signature().await.is_none(), "at {secs} s");
    }
    assert_eq!(f.calls(), 2, "a flood of bad signatures costs one read per interval");
    f.at(2 * MIN_REFRESH_INTERVAL.as_secs());
    assert!(f.source.refresh_after_failed_signature().await.is_some());
    assert_eq!(f.calls(), 3);
}

#[tokio::test]
async fn a_failed_or_invalid_re_read_keeps_the_loaded_secrets() {
    let f = Fixture::new().await;
    f.rotate_to("fail".into());
    f.at(SECRETS_TTL.as_secs());
    assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A]);
    f.rotate_to(secrets(&["whsec_truncated"]));
    f.at(SECRETS_TTL.as_secs() + MIN_REFRESH_INTERVAL.as_secs());
    assert!(f.source.refresh_after_failed_signature().await.is_none());
    assert_eq!(stripe_secrets(&f.source.current().await), vec![STRIPE_A]);
    assert_eq!(f.calls(), 3);
}

#[tokio::test]
async fn providers_from_the_environment_are_never_re_read() {
    let source = ProviderSource::from(Providers::from_json(DEFAULT_PROVIDERS, &secrets(&[STRIPE_A])).unwrap());
    assert!(source.refresh_after_failed_signature().await.is_none());
    assert_eq!(stripe_secrets(&source.current().await), vec![STRIPE_A]);
    assert!(!format!("{source:?}").contains(STRIPE_A));
}
