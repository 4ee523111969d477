//! The event queue and its DLQ, created in the SQS emulator from the `PaymentEventsQueue` and
//! `PaymentEventsDlq` resources of `infra/template.yaml` (FIFO, visibility timeout, redrive).

use aws_sdk_sqs::types::QueueAttributeName;
use serde_yaml_ng::Value;
use std::collections::HashMap;

pub const ESCALATION_RESOURCE: &str = "SagaEscalationQueue";
pub const RELAY_FAILURES_RESOURCE: &str = "RelayFailuresQueue";
pub const QUEUE_RESOURCE: &str = "PaymentEventsQueue";
pub const DLQ_RESOURCE: &str = "PaymentEventsDlq";
pub const STRIPE_EVENTS_RESOURCE: &str = "StripeEventsQueue";
pub const STRIPE_EVENTS_DLQ_RESOURCE: &str = "StripeEventsDlq";
pub const SCHEDULE_DLQ_RESOURCE: &str = "ScheduleDlq";

/// URLs of a created queue pair.
#[derive(Debug, Clone)]
pub struct Queues {
    pub queue_url: String,
    pub dlq_url: String,
    /// The checkout saga's escalation queue (what retries could not fix).
    pub escalation_url: String,
    /// The relay's failures queue (notices of events SQS would refuse).
    pub relay_failures_url: String,
}

fn properties(name: &str) -> Value {
    let path = crate::service::repo_root().join("infra/template.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let doc: Value = serde_yaml_ng::from_str(&text).expect("template is YAML");
    let props = doc["Resources"][name]["Properties"].clone();
    assert!(props.is_mapping(), "template has no {name} with Properties");
    props
}

/// The SQS attributes the template sets on a queue (everything but its name and redrive target).
fn attributes(props: &Value) -> HashMap<QueueAttributeName, String> {
    let mut attrs = HashMap::new();
    let text = |v: &Value| match v {
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    };
    for (key, name) in [
        ("FifoQueue", QueueAttributeName::FifoQueue),
        (
            "ContentBasedDeduplication",
            QueueAttributeName::ContentBasedDeduplication,
        ),
        ("VisibilityTimeout", QueueAttributeName::VisibilityTimeout),
        ("MessageRetentionPeriod", QueueAttributeName::MessageRetentionPeriod),
    ] {
        if let Some(value) = props.get(key).and_then(text) {
            attrs.insert(name, value);
        }
    }
    attrs
}

/// Creates the DLQ and the queue (with the template's redrive) as `<prefix>-events-dlq.fifo` and
/// `<prefix>-events.fifo`, and the saga's escalation and the relay's failures queues; returns their URLs.
/// Creating an existing queue with the same attributes is a no-op.
pub async fn create(sqs: &aws_sdk_sqs::Client, prefix: &str) -> Queues {
    let dlq_props = properties(DLQ_RESOURCE);
    let dlq_name = format!("{prefix}-events-dlq{}", fifo_suffix(&dlq_props));
    let dlq_url = create_queue(sqs, dlq_name, attributes(&dlq_props), "DLQ").await;
    let props = properties(QUEUE_RESOURCE);
    let mut attrs = attributes(&props);
    attrs.insert(
        QueueAttributeName::RedrivePolicy,
        redrive_policy(&props, &queue_arn(sqs, &dlq_url).await),
    );
    let queue_name = format!("{prefix}-events{}", fifo_suffix(&props));
    let queue_url = create_queue(sqs, queue_name, attrs, "queue").await;
    let escalation_attrs = attributes(&properties(ESCALATION_RESOURCE));
    let escalation_name = format!("{prefix}-saga-escalations");
    let escalation_url = create_queue(sqs, escalation_name, escalation_attrs, "escalation queue").await;
    let failures_attrs = attributes(&properties(RELAY_FAILURES_RESOURCE));
    let failures_name = format!("{prefix}-relay-failures");
    let relay_failures_url = create_queue(sqs, failures_name, failures_attrs, "relay failures queue").await;
    Queues {
        queue_url,
        dlq_url,
        escalation_url,
        relay_failures_url,
    }
}

/// `.fifo` for a queue the template makes FIFO: SQS requires the suffix on a FIFO queue's name.
fn fifo_suffix(props: &Value) -> &'static str {
    if props.get("FifoQueue").and_then(Value::as_bool) == Some(true) {
        ".fifo"
    } else {
        ""
    }
}

/// Creates one queue and returns its URL; `what` names it in the panic of a failed set-up.
async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: String,
    attrs: HashMap<QueueAttributeName, String>,
    what: &str,
) -> String {
    let created = sqs
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(attrs))
        .send()
        .await
        .unwrap_or_else(|e| panic!("create {what}: {e:?}"));
    created.queue_url().unwrap_or_else(|| panic!("{what} url")).to_owned()
}

/// The ARN of the queue at `url`, which a redrive policy names (SQS wants the ARN, not the URL).
async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("DLQ attributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("DLQ arn")
}

/// The template's redrive policy of a queue (its `maxReceiveCount`) to the DLQ `dlq_arn`.
fn redrive_policy(props: &Value, dlq_arn: &str) -> String {
    let max_receive = props["RedrivePolicy"]["maxReceiveCount"]
        .as_i64()
        .expect("RedrivePolicy.maxReceiveCount");
    format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":{max_receive}}}"#)
}

/// The schedules' dead-letter queue and their runs' on-failure destination (`ScheduleDlq`) as
/// `<prefix>-schedule-dlq`; its URL.
pub async fn create_schedule_dlq(sqs: &aws_sdk_sqs::Client, prefix: &str) -> String {
    let attrs = attributes(&properties(SCHEDULE_DLQ_RESOURCE));
    create_queue(sqs, format!("{prefix}-schedule-dlq"), attrs, "schedule DLQ").await
}

/// The Stripe events queue of the EventBridge way in and its DLQ (`StripeEventsQueue`, `StripeEventsDlq` of the
/// template, with its redrive) as `<prefix>-stripe-events` and `<prefix>-stripe-events-dlq`; their URLs.
pub async fn create_stripe_events(sqs: &aws_sdk_sqs::Client, prefix: &str) -> (String, String) {
    let dlq_attrs = attributes(&properties("StripeEventsDlq"));
    let dlq_url = create_queue(
        sqs,
        format!("{prefix}-stripe-events-dlq"),
        dlq_attrs,
        "Stripe events DLQ",
    )
    .await;
    let props = properties("StripeEventsQueue");
    let mut attrs = attributes(&props);
    attrs.insert(
        QueueAttributeName::RedrivePolicy,
        redrive_policy(&props, &queue_arn(sqs, &dlq_url).await),
    );
    let url = create_queue(sqs, format!("{prefix}-stripe-events"), attrs, "Stripe events queue").await;
    (url, dlq_url)
}
