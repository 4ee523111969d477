//! The event queue and its DLQ, created in the SQS emulator from the `PaymentEventsQueue` and
//! `PaymentEventsDlq` resources of `infra/template.yaml` (FIFO, visibility timeout, redrive).

use aws_sdk_sqs::types::QueueAttributeName;
use serde_yaml_ng::Value;
use std::collections::HashMap;

const ESCALATION_RESOURCE: &str = "SagaEscalationQueue";
const RELAY_FAILURES_RESOURCE: &str = "RelayFailuresQueue";
const QUEUE_RESOURCE: &str = "PaymentEventsQueue";
pub const DLQ_RESOURCE: &str = "PaymentEventsDlq";

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
/// `<prefix>-events.fifo`; returns their URLs. Creating an existing queue with the same attributes is a no-op.
pub async fn create(sqs: &aws_sdk_sqs::Client, prefix: &str) -> Queues {
    let suffix = |props: &Value| {
        if props.get("FifoQueue").and_then(Value::as_bool) == Some(true) {
            ".fifo"
        } else {
            ""
        }
    };
    let dlq_props = properties(DLQ_RESOURCE);
    let dlq = sqs
        .create_queue()
        .queue_name(format!("{prefix}-events-dlq{}", suffix(&dlq_props)))
        .set_attributes(Some(attributes(&dlq_props)))
        .send()
        .await
        .expect("create DLQ");
    let dlq_url = dlq.queue_url().expect("DLQ url").to_owned();
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("DLQ attributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("DLQ arn");

    let props = properties(QUEUE_RESOURCE);
    let mut attrs = attributes(&props);
    let max_receive = props["RedrivePolicy"]["maxReceiveCount"]
        .as_i64()
        .expect("RedrivePolicy.maxReceiveCount");
    attrs.insert(
        QueueAttributeName::RedrivePolicy,
        format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":{max_receive}}}"#),
    );
    let queue = sqs
        .create_queue()
        .queue_name(format!("{prefix}-events{}", suffix(&props)))
        .set_attributes(Some(attrs))
        .send()
        .await
        .expect("create queue");
    let escalation_props = properties(ESCALATION_RESOURCE);
    let escalation = sqs
        .create_queue()
        .queue_name(format!("{prefix}-saga-escalations"))
        .set_attributes(Some(attributes(&escalation_props)))
        .send()
        .await
        .expect("create escalation queue");
    let relay_failures = sqs
        .create_queue()
        .queue_name(format!("{prefix}-relay-failures"))
        .set_attributes(Some(attributes(&properties(RELAY_FAILURES_RESOURCE))))
        .send()
        .await
        .expect("create relay failures queue");
    Queues {
        queue_url: queue.queue_url().expect("queue url").to_owned(),
        dlq_url,
        escalation_url: escalation.queue_url().expect("escalation queue url").to_owned(),
        relay_failures_url: relay_failures.queue_url().expect("relay failures queue url").to_owned(),
    }
}
