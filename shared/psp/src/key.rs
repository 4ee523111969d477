//! [`CurrentKey`]: the PSP API key a client sends, refreshable while the process runs.
//!
//! A rolled or revoked key answers 401 to every call. Read once per cold start, it would stay wrong until
//! every instance recycled, and every checkout meanwhile would be deferred. So after a 401/403 the client asks
//! for the key again: from Secrets Manager (`PSP_API_KEY_ARN`), at most once per [`MIN_REFRESH_INTERVAL`] per
//! instance (as the webhook secrets are re-read after a failed signature), so a revoked key costs one
//! Secrets Manager call per interval, not one per request. A key from the environment cannot change and is
//! never re-read. A failed re-read keeps the key loaded before.

use super::error::PspError;
use super::settings::{ApiKey, KeySource};
use shared::clock::MonotonicClock;
use shared::telemetry::ErrorChain;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// At most one re-read of the key per this interval and instance.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// Reads the key again (from Secrets Manager in AWS).
pub type KeyLoader = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<ApiKey, Box<dyn std::error::Error + Send + Sync>>> + Send>>
        + Send
        + Sync,
>;

/// The key in use, shared by the client's clones; its `Debug` is the key's (redacted).
#[derive(Clone)]
pub struct CurrentKey {
    inner: Arc<Inner>,
}

struct Inner {
    key: RwLock<ApiKey>,
    /// None: a key fixed for the process.
    loader: Option<KeyLoader>,
    clock: MonotonicClock,
    last_attempt: RwLock<Instant>,
    /// One re-read at a time; the others use what it loaded.
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for CurrentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentKey")
            .field("key", &self.get())
            .field("refreshable", &self.inner.loader.is_some())
            .finish()
    }
}

impl CurrentKey {
    /// A key fixed for the process (`PSP_API_KEY`, tests).
    pub fn fixed(key: ApiKey) -> Self {
        Self::build(key, None, Arc::new(Instant::now))
    }

    /// `key`, read again through `loader` after an authentication failure, at most once per
    /// [`MIN_REFRESH_INTERVAL`] by `clock`.
    pub fn refreshable(key: ApiKey, loader: KeyLoader, clock: MonotonicClock) -> Self {
        Self::build(key, Some(loader), clock)
    }

    fn build(key: ApiKey, loader: Option<KeyLoader>, clock: MonotonicClock) -> Self {
        let now = clock();
        Self {
            inner: Arc::new(Inner {
                key: RwLock::new(key),
                loader,
                clock,
                last_attempt: RwLock::new(now),
                refreshing: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The key of `source`: the environment's, fixed; or Secrets Manager's (the secret read now, and read
    /// again from there after a 401/403), the one way every PSP client resolves its key.
    pub async fn resolve(
        source: &KeySource,
        sdk: &aws_config::SdkConfig,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        match source {
            KeySource::Value(key) => Ok(Self::fixed(key.clone())),
            KeySource::SecretArn(arn) => {
                let (client, arn) = (shared::aws::secrets_client(sdk), arn.clone());
                let loader: KeyLoader = Arc::new(move || {
                    let (client, arn) = (client.clone(), arn.clone());
                    Box::pin(async move {
                        let secret = shared::aws::secret_string(&client, &arn).await?;
                        Ok(ApiKey::from_secret_string(&secret)?)
                    })
                });
                let first = loader().await?;
                Ok(Self::refreshable(first, loader, Arc::new(Instant::now)))
            }
        }
    }

    /// Runs `call` with the key; when the PSP refuses it ([`PspError::AuthFailed`]) and a re-read finds
    /// another, once more with that one (the same idempotency key: a call refused for its key did nothing).
    pub async fn with_refresh<T, F, Fut>(&self, operation: &str, call: F) -> Result<T, PspError>
    where
        F: Fn(ApiKey) -> Fut,
        Fut: Future<Output = Result<T, PspError>>,
    {
        let key = self.get();
        let result = call(key.clone()).await;
        if !matches!(result, Err(PspError::AuthFailed { .. })) {
            return result;
        }
        match self.refresh_after_rejection(&key).await {
            Some(fresh) => {
                info!(operation, "PSP refused the key; calling again with the key read anew");
                call(fresh).await
            }
            None => result,
        }
    }

    /// The key to send now.
    pub fn get(&self) -> ApiKey {
        self.inner.key.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// After a 401/403: reads the key again unless that was done less than [`MIN_REFRESH_INTERVAL`] ago.
    /// `Some` with the new key only when a re-read found a key other than `rejected`, the one refused.
    pub async fn refresh_after_rejection(&self, rejected: &ApiKey) -> Option<ApiKey> {
        let loader = self.inner.loader.as_ref()?;
        let _one_at_a_time = self.inner.refreshing.lock().await;
        // Whoever held the lock before may have just loaded a new key: use it.
        let current = self.get();
        if &current != rejected {
            return Some(current);
        }
        let now = (self.inner.clock)();
        {
            let mut last = self.inner.last_attempt.write().unwrap_or_else(PoisonError::into_inner);
            if now.saturating_duration_since(*last) < MIN_REFRESH_INTERVAL {
                return None;
            }
            *last = now;
        }
        match loader().await {
            Ok(fresh) if &fresh == rejected => {
                warn!("PSP key re-read after an authentication failure: the secret still holds the refused key");
                None
            }
            Ok(fresh) => {
                *self.inner.key.write().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
                info!("PSP key re-read after an authentication failure: a new key is in use");
                Some(fresh)
            }
            Err(e) => {
                // The error names the secret's ARN and the failure, never the key.
                warn!(error = %ErrorChain(e.as_ref()), "re-reading the PSP key failed; keeping the loaded one");
                None
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // a test clock that moves forward
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Mutex;

    struct Fixture {
        secret: Arc<Mutex<String>>,
        calls: Arc<AtomicUsize>,
        offset_secs: Arc<AtomicU64>,
        key: CurrentKey,
    }

    fn key(s: &str) -> ApiKey {
        ApiKey::parse(s).unwrap()
    }

    impl Fixture {
        fn new() -> Self {
            let secret = Arc::new(Mutex::new("sk_test_old".to_owned()));
            let calls = Arc::new(AtomicUsize::new(0));
            let offset_secs = Arc::new(AtomicU64::new(0));
            let loader: KeyLoader = {
                let (secret, calls) = (secret.clone(), calls.clone());
                Arc::new(move || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let value = secret.lock().unwrap().clone();
                    Box::pin(async move {
                        if value == "fail" {
                            Err("AccessDenied".into())
                        } else {
                            Ok(ApiKey::from_secret_string(&value)?)
                        }
                    })
                })
            };
            let start = Instant::now();
            let clock: MonotonicClock = {
                let offset = offset_secs.clone();
                Arc::new(move || start + Duration::from_secs(offset.load(Ordering::SeqCst)))
            };
            let key = CurrentKey::refreshable(key("sk_test_old"), loader, clock);
            Self {
                secret,
                calls,
                offset_secs,
                key,
            }
        }
        fn at(&self, secs: u64) {
            self.offset_secs.store(secs, Ordering::SeqCst);
        }
        fn put(&self, value: &str) {
            *self.secret.lock().unwrap() = value.to_owned();
        }
        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn a_rejected_key_is_read_again_at_most_every_30_seconds_and_a_new_one_used() {
        let f = Fixture::new();
        let old = key("sk_test_old");
        f.put(r#"{"api_key": "sk_test_new"}"#);
        f.at(10);
        assert!(
            f.key.refresh_after_rejection(&old).await.is_none(),
            "within 30 s of the cold start"
        );
        assert_eq!(f.calls(), 0);
        f.at(30);
        assert_eq!(f.key.refresh_after_rejection(&old).await, Some(key("sk_test_new")));
        assert_eq!(f.key.get(), key("sk_test_new"));
        assert_eq!(f.calls(), 1);
        // Another call refused with the old key meanwhile: the new key, without a read.
        assert_eq!(f.key.refresh_after_rejection(&old).await, Some(key("sk_test_new")));
        assert_eq!(f.calls(), 1);
        // The new key refused too: the secret still holds it, nothing new, and the next read waits 30 s.
        let new = key("sk_test_new");
        f.at(60);
        assert!(f.key.refresh_after_rejection(&new).await.is_none());
        assert_eq!(f.calls(), 2);
        f.put("fail");
        for secs in [61, 89] {
            f.at(secs);
            assert!(f.key.refresh_after_rejection(&new).await.is_none(), "at {secs} s");
        }
        assert_eq!(f.calls(), 2, "no read within 30 s of the last");
        f.at(90);
        assert!(
            f.key.refresh_after_rejection(&new).await.is_none(),
            "a failed read keeps the key"
        );
        assert_eq!((f.calls(), f.key.get()), (3, new));
    }

    #[tokio::test]
    async fn a_key_from_the_environment_is_never_read_again_and_never_shown() {
        let fixed = CurrentKey::fixed(key("sk_test_very_secret"));
        assert!(fixed
            .refresh_after_rejection(&key("sk_test_very_secret"))
            .await
            .is_none());
        let f = Fixture::new();
        for text in [format!("{fixed:?}"), format!("{:?}", f.key)] {
            assert!(!text.contains("very_secret") && !text.contains("old"), "{text}");
        }
    }
}
