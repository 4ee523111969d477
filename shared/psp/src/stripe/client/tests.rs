use super::*;
use crate::settings::KeySource;
use shared::ConfigError;

fn settings(vars: &[(&str, &str)]) -> Result<StripeSettings, ConfigError> {
    let vars: Vec<(String, String)> = vars.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
    StripeSettings::from_lookup(move |name| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
}

#[test]
fn settings_need_a_base_url_and_a_key_and_refuse_malformed_numbers() {
    assert_eq!(
        settings(&[("PSP_API_KEY", "sk")]),
        Err(ConfigError::Missing("PSP_BASE_URL"))
    );
    assert_eq!(
        settings(&[("PSP_BASE_URL", "https://api.stripe.com")]),
        Err(ConfigError::Missing("PSP_API_KEY_ARN or PSP_API_KEY"))
    );
    assert!(matches!(
        settings(&[("PSP_BASE_URL", "http://api.stripe.com"), ("PSP_API_KEY", "sk")]),
        Err(ConfigError::Invalid {
            name: "PSP_BASE_URL",
            ..
        })
    ));
    assert!(matches!(
        settings(&[
            ("PSP_BASE_URL", "https://x"),
            ("PSP_API_KEY", "sk"),
            ("PSP_MAX_RETRIES", "two")
        ]),
        Err(ConfigError::Invalid {
            name: "PSP_MAX_RETRIES",
            ..
        })
    ));
    let s = settings(&[
        ("PSP_BASE_URL", "https://api.stripe.com/"),
        ("PSP_API_KEY_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:psp"),
        ("PSP_API_KEY", "sk_ignored"),
        ("PSP_REDIRECTS", "never"),
    ])
    .unwrap();
    assert_eq!(s.base_url, "https://api.stripe.com");
    assert_eq!(
        s.key,
        KeySource::SecretArn("arn:aws:secretsmanager:eu-west-1:1:secret:psp".into())
    );
    assert_eq!(s.retries.attempts, 3);
}

#[test]
fn the_key_never_shows_in_debug_output() {
    let key = ApiKey::from_secret_string(r#"{"api_key": "sk_test_very_secret"}"#).unwrap();
    assert_eq!(key.expose(), "sk_test_very_secret");
    let s = settings(&[
        ("PSP_BASE_URL", "https://x"),
        ("PSP_API_KEY", "sk_test_very_secret\n"),
        ("PSP_REDIRECTS", "never"),
    ])
    .unwrap();
    let client = StripeClient::new(&s, key).unwrap();
    for text in [format!("{s:?}"), format!("{client:?}")] {
        assert!(!text.contains("very_secret"), "{text}");
    }
    assert_eq!(
        ApiKey::from_secret_string("  sk_live_x \n").unwrap().expose(),
        "sk_live_x"
    );
    assert!(ApiKey::from_secret_string("  ").is_err());
}

#[test]
fn redirects_are_a_choice_a_function_cannot_start_without() {
    let with = |extra: &[(&str, &str)]| {
        let mut vars = vec![("PSP_BASE_URL", "https://api.stripe.com"), ("PSP_API_KEY", "sk")];
        vars.extend_from_slice(extra);
        settings(&vars).map(|s| s.redirects)
    };
    // Neither: refused, naming both options.
    let neither = with(&[]).unwrap_err().to_string();
    assert!(
        neither.contains("PSP_REDIRECTS=never") && neither.contains("PSP_RETURN_URL"),
        "{neither}"
    );
    assert!(with(&[("PSP_RETURN_URL", " ")]).is_err(), "a blank URL is no URL");
    assert_eq!(with(&[("PSP_REDIRECTS", "never")]), Ok(Redirects::Never));
    let shop = Redirects::ReturnTo("https://shop.example/return".into());
    assert_eq!(
        with(&[("PSP_RETURN_URL", "https://shop.example/return")]),
        Ok(shop.clone())
    );
    assert_eq!(
        with(&[
            ("PSP_REDIRECTS", "allowed"),
            ("PSP_RETURN_URL", "https://shop.example/return")
        ]),
        Ok(shop)
    );
    // Contradictions and typos are refused, not guessed.
    for bad in [
        vec![("PSP_REDIRECTS", "allowed")],
        vec![
            ("PSP_REDIRECTS", "never"),
            ("PSP_RETURN_URL", "https://shop.example/return"),
        ],
        vec![("PSP_REDIRECTS", "nevr")],
        vec![("PSP_RETURN_URL", "shop.example/return")],
    ] {
        let refused = with(&bad).unwrap_err();
        assert!(matches!(refused, ConfigError::Invalid { .. }), "{bad:?}: {refused}");
    }
    assert_eq!(
        StripeSettings::local("http://127.0.0.1:1", "sk").unwrap().redirects,
        Redirects::Never
    );
}

#[test]
fn a_key_in_stripes_message_is_redacted() {
    assert_eq!(
        redact_keys("Invalid API Key provided: sk_test_****1234"),
        "Invalid API Key provided: [redacted]"
    );
    assert_eq!(
        redact_keys("Expired key 'rk_live_abc' and (sk_live_x)."),
        "Expired key '[redacted]' and ([redacted])."
    );
    assert_eq!(
        redact_keys("key:sk_live_abc,rk_test_1\tpk_live_2"),
        "key:[redacted],[redacted]\t[redacted]"
    );
    assert_eq!(redact_keys("a task_sk_x stays"), "a task_sk_x stays");
    let plain = "You must provide a `return_url` when confirming a PaymentIntent";
    assert_eq!(redact_keys(plain), plain);
}
