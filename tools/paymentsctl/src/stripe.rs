//! Stripe's API as the operator's command uses it: the key in `PSP_API_KEY` at `PSP_BASE_URL` (default
//! Stripe's), webhook endpoints listed (`doctor`) and created (`stripe setup`).
//!
//! `stripe setup` creates the webhook endpoint with the client's pinned `Stripe-Version` as the endpoint's
//! `api_version` and the event types the intake handles: webhooks render in the endpoint's version, else the
//! account's default, never in the version of the request that caused them, so an endpoint made without one
//! changes what events say whenever the account is upgraded. The signing secret, which Stripe shows in the
//! create answer only, is never printed: it goes to `--secret-file` (created new, mode 0600), from where the
//! operator puts it into the intake's Secrets Manager secret.

use psp::stripe::STRIPE_API_VERSION;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// A Stripe webhook endpoint as Stripe lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    pub id: String,
    pub url: String,
    pub status: String,
    pub api_version: Option<String>,
    #[serde(default)]
    pub enabled_events: Vec<String>,
}

/// Stripe's API with the operator's key.
pub struct StripeApi {
    key: String,
    base: String,
    http: reqwest::Client,
}

impl StripeApi {
    /// From `PSP_API_KEY` (required: a key that may read, or for `setup` write, webhook endpoints) and
    /// `PSP_BASE_URL`.
    pub fn from_env(env: &shared::Env) -> Result<Self, String> {
        let key = env
            .optional("PSP_API_KEY")
            .ok_or("no key (set PSP_API_KEY to a Stripe key that may read webhook endpoints)")?;
        let base = env
            .optional("PSP_BASE_URL")
            .unwrap_or_else(|| "https://api.stripe.com".to_owned());
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            key,
            base: base.trim_end_matches('/').to_owned(),
            http,
        })
    }

    /// Stripe's answer to `request` as `T`; a non-2xx answer is an error quoting Stripe's error object.
    async fn answer<T: serde::de::DeserializeOwned>(what: &str, request: reqwest::RequestBuilder) -> Result<T, String> {
        let answer = request.send().await.map_err(|e| format!("{what}: {e}"))?;
        let status = answer.status();
        let body = answer.text().await.map_err(|e| format!("{what}: {e}"))?;
        if !status.is_success() {
            return Err(format!("{what} answered {status}: {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("{what}: unreadable answer: {e}"))
    }

    /// `GET /v1/webhook_endpoints` (the first 100).
    pub async fn webhook_endpoints(&self) -> Result<Vec<WebhookEndpoint>, String> {
        #[derive(Deserialize)]
        struct List {
            data: Vec<WebhookEndpoint>,
        }
        let url = format!("{}/v1/webhook_endpoints?limit=100", self.base);
        let request = self.http.get(url).bearer_auth(&self.key);
        Self::answer::<List>("GET /v1/webhook_endpoints", request)
            .await
            .map(|l| l.data)
    }

    /// `POST /v1/webhook_endpoints` for `url`: the pinned `api_version`, the intake's event types. The
    /// `Idempotency-Key` is made of the request, so a rerun after a lost answer (within Stripe's 24 hours)
    /// gets the same endpoint back instead of a second one.
    pub async fn create_webhook_endpoint(&self, url: &str) -> Result<(WebhookEndpoint, String), String> {
        #[derive(Deserialize)]
        struct Created {
            #[serde(flatten)]
            endpoint: WebhookEndpoint,
            secret: String,
        }
        let mut form = vec![
            ("url".to_owned(), url.to_owned()),
            ("api_version".to_owned(), STRIPE_API_VERSION.to_owned()),
        ];
        for (i, kind) in webhook_intake::stripe::SUBSCRIBED_TYPES.iter().enumerate() {
            form.push((format!("enabled_events[{i}]"), (*kind).to_owned()));
        }
        let key: String = format!("paymentsctl-stripe-setup-{STRIPE_API_VERSION}-{url}")
            .chars()
            .take(255)
            .collect();
        let request = self
            .http
            .post(format!("{}/v1/webhook_endpoints", self.base))
            .bearer_auth(&self.key)
            .header("Stripe-Version", STRIPE_API_VERSION)
            .header("Idempotency-Key", key)
            .form(&form);
        let created: Created = Self::answer("POST /v1/webhook_endpoints", request).await?;
        Ok((created.endpoint, created.secret))
    }
}

/// `stripe setup`: creates the endpoint, writes its secret to `secret_file` (when given) and returns the
/// endpoint. Refuses a `secret_file` that exists before asking Stripe (it would be overwritten).
pub async fn setup(env: &shared::Env, url: &str, secret_file: Option<&Path>) -> Result<WebhookEndpoint, crate::Error> {
    if let Some(path) = secret_file.filter(|p| p.exists()) {
        return Err(crate::UsageError(format!("{} exists; the secret goes to a new file", path.display())).into());
    }
    let api = StripeApi::from_env(env)?;
    let (endpoint, secret) = api.create_webhook_endpoint(url).await?;
    if let Some(path) = secret_file {
        write_secret(path, &secret)?;
    }
    Ok(endpoint)
}

/// The secret in a new file only its owner may read.
fn write_secret(path: &Path, secret: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(secret.as_bytes())
}

/// The endpoint for people, with where its secret went.
pub fn render(endpoint: &WebhookEndpoint, secret_file: Option<&Path>) -> String {
    let secret = secret_file.map_or_else(
        || "not shown (Stripe shows it once: rerun with --secret-file, or reveal it in the Dashboard)".to_owned(),
        |p| format!("written to {} (mode 0600)", p.display()),
    );
    format!(
        "webhook endpoint {} for {}\n  api_version     {}\n  enabled_events  {}\n  status          {}\n  signing secret  {secret}\n",
        endpoint.id,
        endpoint.url,
        endpoint.api_version.as_deref().unwrap_or("(account default)"),
        endpoint.enabled_events.len(),
        endpoint.status,
    )
}
