//! One CloudWatch Embedded Metric Format record per request: the provider, the result, and the counts the
//! alarms watch (anomalies, quarantines, unknown payments, 401s) plus lease deferrals, version conflicts and
//! events that are not ours (`ForeignEvents`, watched by no alarm: they are normal in a shared PSP account),
//! Stripe events rendered in another API version than the pinned one (`VersionMismatches`, alarmed), and
//! EventBridge deliveries refused for their source or account (`RefusedDeliveries`, alarmed).

use serde_json::json;

pub const NAMESPACE: &str = "Payments/Webhooks";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestMetrics {
    pub provider: String,
    pub result: String,
    pub status: u16,
    pub lease_deferrals: u32,
    pub version_conflicts: u32,
    pub anomalies: u32,
    pub quarantines: u32,
    pub unknown_payments: u32,
    pub unauthorized: u32,
    /// An event about an object that is not this deployment's (another stage's, or no marker of ours and
    /// bound to none of our payments): acknowledged as `ignored`, never parked or alarmed.
    pub foreign_events: u32,
    /// A Stripe event rendered in another API version than the client's pinned one
    /// (`crate::stripe::version`): parsed all the same, counted so the endpoint gets pinned.
    pub version_mismatches: u32,
    /// An EventBridge delivery not from Stripe's partner source for this account (`crate::eventbridge`):
    /// refused and acknowledged, alarmed.
    pub refused_deliveries: u32,
}

impl RequestMetrics {
    /// The EMF document. Metrics are published by stage (for alarms), by stage and provider, and by stage,
    /// provider and result (the stage is `shared::metrics`' own).
    pub fn to_emf(&self, now_ms: i64) -> serde_json::Value {
        shared::metrics::counts(
            NAMESPACE,
            &[&[], &["Provider"], &["Provider", "Result"]],
            &[
                "Requests",
                "LeaseDeferrals",
                "VersionConflicts",
                "Anomalies",
                "Quarantines",
                "UnknownPayments",
                "Unauthorized",
                "ForeignEvents",
                "VersionMismatches",
                "RefusedDeliveries",
            ],
            json!({
                "Provider": self.provider,
                "Result": self.result,
                "Status": self.status,
                "Requests": 1,
                "LeaseDeferrals": self.lease_deferrals,
                "VersionConflicts": self.version_conflicts,
                "Anomalies": self.anomalies,
                "Quarantines": self.quarantines,
                "UnknownPayments": self.unknown_payments,
                "Unauthorized": self.unauthorized,
                "ForeignEvents": self.foreign_events,
                "VersionMismatches": self.version_mismatches,
                "RefusedDeliveries": self.refused_deliveries,
            }),
            now_ms,
        )
    }

    /// Writes the record as one line to stdout, where Lambda's log pipeline extracts it.
    pub fn emit(&self) {
        shared::metrics::emit(&self.to_emf(shared::clock::now_ms()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dimension_set_of_a_request_s_record_starts_with_the_stage() {
        let r = RequestMetrics {
            provider: "stripe".into(),
            result: "applied".into(),
            ..RequestMetrics::default()
        }
        .to_emf(1);
        assert_eq!(
            r["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stage"], ["Stage", "Provider"], ["Stage", "Provider", "Result"]])
        );
        assert_eq!(r["Stage"].as_str(), Some(shared::metrics::stage()));
    }
}
