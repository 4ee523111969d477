//! The local stand-in for Stripe's event destination of type `amazon_eventbridge`, the partner event bus and
//! the rule on it (`StripeEventBus`, `StripeEventsRule` and `StripeEventsQueue` of `infra/template.yaml`): a
//! Stripe event wrapped as EventBridge delivers it ([`envelope`]: `detail` the Stripe event, `detail-type` its
//! type, `source` the partner event source, `account` the AWS account), matched against the rule's pattern
//! read from the template (its `detail-type` list; the source is the bus's own), and sent to the rule's
//! target queue as EventBridge sends to an SQS target: the whole event as the message body. Stripe's side of
//! the source itself ([`offer_source`]) is moto's partner event source, which the catch-up describes.

use crate::account::{LOCAL_ACCOUNT, LOCAL_REGION};
use serde_json::{json, Value};
use serde_yaml_ng::Value as Yaml;

/// The partner event source (and bus) of the local world, as Stripe names one: `aws.partner/stripe.com/`
/// followed by the event destination's id.
pub const LOCAL_SOURCE: &str = "aws.partner/stripe.com/ed_test_local_world";

/// A Stripe `event` as EventBridge delivers it from the partner event source `source` in `account`.
pub fn envelope(source: &str, account: &str, event: &Value) -> Value {
    json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": event["type"],
        "source": source,
        "account": account,
        "time": "1970-01-01T00:00:00Z",
        "region": LOCAL_REGION,
        "resources": [format!("arn:aws:events:{LOCAL_REGION}::event-source/{source}")],
        "detail": event,
    })
}

/// Stripe's side of the partner event source: offers `name` to the local account, as configuring an
/// `amazon_eventbridge` event destination in Stripe does (moto's `CreatePartnerEventSource` on `sdk`'s
/// endpoint; a second offer finds the same source), so the account's `DescribeEventSource` finds it `ACTIVE`.
pub async fn offer_source(sdk: &aws_config::SdkConfig, name: &str) -> Result<(), String> {
    aws_sdk_eventbridge::Client::new(sdk)
        .create_partner_event_source()
        .name(name)
        .account(LOCAL_ACCOUNT)
        .send()
        .await
        .map_err(|e| format!("offer the partner event source {name}: {e:?}"))?;
    Ok(())
}

/// The rule's resource in the template.
pub const RULE_RESOURCE: &str = "StripeEventsRule";

/// The `detail-type` values the template's rule matches (the event types the intake takes).
pub fn rule_types() -> Vec<String> {
    let path = local_testkit::service::repo_root().join("infra/template.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let doc: Yaml = serde_yaml_ng::from_str(&text).expect("template is YAML");
    let types = &doc["Resources"][RULE_RESOURCE]["Properties"]["EventPattern"]["detail-type"];
    types
        .as_sequence()
        .unwrap_or_else(|| panic!("{RULE_RESOURCE} has no EventPattern detail-type list"))
        .iter()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect()
}

/// The bus and its rule, delivering to the queue at `queue_url`.
#[derive(Debug, Clone)]
pub struct Bus {
    pub sqs: aws_sdk_sqs::Client,
    pub queue_url: String,
    pub source: String,
    pub account: String,
    /// The rule's `detail-type` list.
    pub types: Vec<String>,
}

impl Bus {
    /// The local world's bus ([`LOCAL_SOURCE`], [`LOCAL_ACCOUNT`]) with the template's rule.
    pub fn local(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            sqs,
            queue_url: queue_url.into(),
            source: LOCAL_SOURCE.to_owned(),
            account: LOCAL_ACCOUNT.to_owned(),
            types: rule_types(),
        }
    }

    /// Puts one Stripe event on the bus: sent to the queue when the rule matches its type (true), else
    /// dropped as EventBridge drops an event no rule matches (false).
    pub async fn put(&self, event: &Value) -> Result<bool, aws_sdk_sqs::Error> {
        let matched = event["type"]
            .as_str()
            .is_some_and(|t| self.types.iter().any(|k| k == t));
        if !matched {
            return Ok(false);
        }
        let body = envelope(&self.source, &self.account, event).to_string();
        self.sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .send()
            .await?;
        Ok(true)
    }
}
