//! A load profile: the traffic the model sizes for, as a shop at its peak sends it. Orders a second, and per
//! order the webhooks the PSPs send (how many change the payment, how many say again what it already knows),
//! the extra deliveries a PSP makes (duplicates of applied events, retries of events not applied yet, events
//! about objects that are not ours), and the checkout mix (how many orders go through the checkout saga, how
//! many of those through Stripe, how often the shop polls a checkout). Named profiles live in
//! `benchmarks/load-profiles.toml`; the command line overrides any field.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One load profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Orders a second.
    pub orders_per_s: f64,
    /// First deliveries of webhooks per order (a large merchant: about 4).
    pub webhooks_per_order: f64,
    /// Of those, the ones that change the payment (applied: read, lease, transaction); the rest change
    /// nothing (read, lease, release).
    pub applied_per_order: f64,
    /// Extra deliveries of an applied event, per first delivery (the PSP's duplicates): one read each.
    pub duplicate_share: f64,
    /// Extra deliveries of an event not applied yet, per first delivery (a PSP's retry after a 503, a
    /// timeout): as dear as a new one.
    pub retry_share: f64,
    /// Extra deliveries about objects that are not ours (another system on the same PSP account), per
    /// first delivery: one index query each.
    pub not_ours_share: f64,
    /// Orders that go through the checkout saga (`POST /checkouts`); the rest only bring webhooks.
    pub checkout_share: f64,
    /// Of the checkouts, those charged through Stripe (the rest Adyen).
    pub stripe_share: f64,
    /// `GET /checkouts/{id}` a checkout's caller makes.
    pub polls_per_checkout: f64,
    /// The Stripe account's rate limit, requests a second (default: the limits table's live figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe_rate_limit: Option<f64>,
}

impl Profile {
    /// Webhook deliveries a second, first and extra, per order.
    pub fn deliveries_per_order(&self) -> f64 {
        self.webhooks_per_order * (1.0 + self.duplicate_share + self.retry_share + self.not_ours_share)
    }

    /// Deliveries per order of each webhook kind of `benchmarks/costs.json`.
    pub fn deliveries_by_kind(&self) -> [(&'static str, f64); 4] {
        let first = self.webhooks_per_order;
        [
            ("new", self.applied_per_order + first * self.retry_share),
            ("no_change", (first - self.applied_per_order).max(0.0)),
            ("duplicate", first * self.duplicate_share),
            ("not_ours", first * self.not_ours_share),
        ]
    }

    /// Checks the shares and counts make sense.
    pub fn check(&self) -> Result<(), String> {
        let shares = [
            ("checkout_share", self.checkout_share),
            ("stripe_share", self.stripe_share),
        ];
        for (name, share) in shares {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("{name} {share} is not between 0 and 1"));
            }
        }
        if self.applied_per_order > self.webhooks_per_order {
            return Err("applied_per_order exceeds webhooks_per_order".into());
        }
        let counts = [
            self.orders_per_s,
            self.webhooks_per_order,
            self.applied_per_order,
            self.duplicate_share,
            self.retry_share,
            self.not_ours_share,
            self.polls_per_checkout,
        ];
        if counts.iter().any(|c| *c < 0.0 || !c.is_finite()) {
            return Err("a count or share of the profile is negative".into());
        }
        Ok(())
    }
}

/// `benchmarks/load-profiles.toml` of the repository.
pub fn path() -> PathBuf {
    local_testkit::service::repo_root().join("benchmarks/load-profiles.toml")
}

/// The named profiles of the file at `path`.
pub fn load(path: &Path) -> Result<BTreeMap<String, Profile>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repositorys_profiles_read_and_make_sense() {
        let profiles = load(&path()).unwrap();
        let peak = &profiles["peak"];
        peak.check().unwrap();
        assert_eq!(peak.orders_per_s, 1000.0);
        let by_kind: f64 = peak.deliveries_by_kind().iter().map(|(_, n)| n).sum();
        assert!((by_kind - peak.deliveries_per_order()).abs() < 1e-9);
    }
}
