//! Issue 34 item 2: `paymentsctl stripe setup` (the built binary) against the simulator's Stripe side. The
//! endpoint is created with the client's pinned API version and the intake's event types, its secret lands
//! in a new 0600 file and never on stdout; a URL Stripe refuses is refused (exit 1, Stripe's error quoted).

use crate::cli::{paymentsctl_with, text};
use crate::doctor::simulator;
use std::os::unix::fs::PermissionsExt;

const KEY: &str = "sk_test_setup";

fn setup(psp: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["stripe", "setup"];
    all.extend_from_slice(args);
    paymentsctl_with(None, &[("PSP_BASE_URL", psp), ("PSP_API_KEY", KEY)], &all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_creates_the_endpoint_in_the_pinned_version_and_keeps_the_secret_off_stdout() {
    let (_sim, psp) = simulator(KEY).await;
    let dir = std::env::temp_dir().join(format!("stripe-setup-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret_file = dir.join("secret");
    let url = "https://shop.example/webhooks/stripe";
    let out = tokio::task::spawn_blocking({
        let (psp, file) = (psp.clone(), secret_file.display().to_string());
        move || setup(&psp, &["--json", "--url", url, "--secret-file", &file])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let endpoint: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(endpoint["api_version"], psp::stripe::STRIPE_API_VERSION);
    assert_eq!(endpoint["url"], url);
    let events: Vec<&str> = endpoint["enabled_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events, webhook_intake::stripe::SUBSCRIBED_TYPES);
    let secret = std::fs::read_to_string(&secret_file).unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(
        std::fs::metadata(&secret_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!text(&out.stdout).contains(&secret) && !text(&out.stderr).contains(&secret));

    // The same file again: refused before Stripe is asked (it would be overwritten).
    let again = tokio::task::spawn_blocking({
        let (psp, file) = (psp.clone(), secret_file.display().to_string());
        move || setup(&psp, &["--url", url, "--secret-file", &file])
    })
    .await
    .unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));

    // A URL Stripe refuses: exit 1 with Stripe's error, nothing created.
    let refused = tokio::task::spawn_blocking(move || setup(&psp, &["--url", "webhooks/stripe"]))
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("url_invalid"),
        "{}",
        text(&refused.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
