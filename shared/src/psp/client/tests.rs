use super::*;
use crate::ConfigError;

fn settings(vars: &[(&str, &str)]) -> Result<PspSettings, ConfigError> {
    let vars: Vec<(String, String)> = vars.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
    PspSettings::from_lookup(move |name| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
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
    let s = settings(&[("PSP_BASE_URL", "https://x"), ("PSP_API_KEY", "sk_test_very_secret\n")]).unwrap();
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
