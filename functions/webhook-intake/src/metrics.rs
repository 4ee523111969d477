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
    ///
    /// `Requests` is always in it; each other count only when it is not 0. Every alarm on these sums them
    /// with missing data not breaching, so a 0 left out changes no alarm and no sum, and a webhook's record
    /// stays about 300 bytes instead of 830 (CloudWatch Logs bills every byte; issue 43).
    pub fn to_emf(&self, now_ms: i64) -> serde_json::Value {
        let counts = [
            ("Requests", 1),
            ("LeaseDeferrals", self.lease_deferrals),
            ("VersionConflicts", self.version_conflicts),
            ("Anomalies", self.anomalies),
            ("Quarantines", self.quarantines),
            ("UnknownPayments", self.unknown_payments),
            ("Unauthorized", self.unauthorized),
            ("ForeignEvents", self.foreign_events),
            ("VersionMismatches", self.version_mismatches),
            ("RefusedDeliveries", self.refused_deliveries),
        ];
        let published: Vec<(&str, u32)> = counts.into_iter().filter(|(_, n)| *n > 0).collect();
        let mut values = json!({ "Provider": self.provider, "Result": self.result, "Status": self.status });
        if let Some(values) = values.as_object_mut() {
            values.extend(published.iter().map(|(name, n)| ((*name).to_owned(), json!(n))));
        }
        let names: Vec<&str> = published.iter().map(|(name, _)| *name).collect();
        shared::metrics::counts(
            NAMESPACE,
            &[&[], &["Provider"], &["Provider", "Result"]],
            &names,
            values,
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

    #[test]
    fn a_record_publishes_requests_and_only_the_counts_that_are_not_zero() {
        let names = |r: &serde_json::Value| -> Vec<String> {
            r["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["Name"].as_str().unwrap().to_owned())
                .collect()
        };
        let applied = RequestMetrics {
            provider: "stripe".into(),
            result: "applied".into(),
            status: 200,
            ..RequestMetrics::default()
        };
        let record = applied.to_emf(1);
        assert_eq!(names(&record), ["Requests"]);
        assert_eq!(
            (record["Requests"].clone(), record.get("Quarantines")),
            (json!(1), None)
        );
        assert!(record.to_string().len() < 400, "{record}");
        let quarantined = RequestMetrics {
            quarantines: 1,
            version_conflicts: 2,
            ..applied
        }
        .to_emf(1);
        assert_eq!(names(&quarantined), ["Requests", "VersionConflicts", "Quarantines"]);
        assert_eq!(
            (
                quarantined["VersionConflicts"].clone(),
                quarantined["Quarantines"].clone()
            ),
            (json!(2), json!(1))
        );
    }
}
