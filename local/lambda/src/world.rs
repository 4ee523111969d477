//! The local counterparts of the stack's resources that the functions' environments and triggers name: the
//! table (from its one definition, `local_testkit::table`) and its stream, the queues (`local_testkit::queues`)
//! in moto's SQS, the secrets the template takes by ARN (`WebhookSecretsArn`, `PspApiKeyArn`,
//! `AdyenApiKeyArn`) in moto's Secrets Manager, so a function binary reads them as it does in AWS, and the
//! Stripe partner event source `StripePartnerEventSource` names, offered to the account as Stripe offers it
//! (`eventbridge`). Returned as the [`Stack`] a [`crate::template::Template`] resolves against.

use crate::template::Stack;
use local_testkit::{queues, table};
use std::collections::BTreeMap;

/// The secrets the template takes by ARN: its parameter, the name of the secret and the variable of this
/// process whose value it holds (`scripts/lib.sh`: `local_env` sets the webhook secrets, `start_psp` the
/// simulator's keys). A variable that is not set leaves its parameter to the template's default (or to a
/// value given for it).
const SECRETS: [(&str, &str, &str); 3] = [
    ("WebhookSecretsArn", "webhook-secrets", "WEBHOOK_SECRETS"),
    ("PspApiKeyArn", "psp-api-key", "PSP_API_KEY"),
    ("AdyenApiKeyArn", "adyen-api-key", "ADYEN_API_KEY"),
];

/// Creates, on the endpoints of this process's environment (`AWS_ENDPOINT_URL_DYNAMODB`, `_SQS`,
/// `_SECRETS_MANAGER`), the table named `prefix`, the queues and the secrets under names starting with
/// `prefix`, and returns what stands in for them: `PaymentsTable` and `PaymentsTable.StreamArn`, each queue's
/// logical id to its URL, each secret's parameter to its ARN, then the `given` parameters over them. With
/// `StripePartnerEventSource` given and every other service on this machine (`AWS_ENDPOINT_URL`, as the
/// functions get it), the source is offered to the account.
pub async fn create(
    sdk: &aws_config::SdkConfig,
    prefix: &str,
    given: &BTreeMap<String, String>,
) -> Result<Stack, String> {
    let mut stack = Stack::default();
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    // A second start on the same DynamoDB Local finds its table.
    if dynamodb.describe_table().table_name(prefix).send().await.is_err() {
        table::TableDefinition::from_repo().create(&dynamodb, prefix).await;
    }
    stack.resources.insert(table::TABLE_RESOURCE.into(), prefix.into());
    let described = dynamodb.describe_table().table_name(prefix).send().await;
    let stream = described
        .map_err(|e| format!("describe the table {prefix}: {e:?}"))?
        .table()
        .and_then(|t| t.latest_stream_arn())
        .map(str::to_owned)
        .ok_or_else(|| format!("the table {prefix} has no stream"))?;
    stack
        .resources
        .insert(format!("{}.StreamArn", table::TABLE_RESOURCE), stream);
    for (resource, url) in create_queues(sdk, prefix).await {
        stack.resources.insert(resource.into(), url);
    }
    for (parameter, name, variable) in SECRETS {
        let Ok(value) = std::env::var(variable) else {
            continue;
        };
        let arn = store_secret(sdk, &format!("{prefix}-{name}"), &value).await?;
        stack.parameters.insert(parameter.into(), arn);
    }
    stack.parameters.extend(given.clone());
    let source = stack.parameters.get(PARTNER_SOURCE).filter(|s| !s.is_empty());
    let local = std::env::var("AWS_ENDPOINT_URL").is_ok_and(|url| !url.is_empty());
    if let (Some(source), true) = (source, local) {
        crate::eventbridge::offer_source(sdk, source).await?;
    }
    Ok(stack)
}

/// The parameter that names Stripe's partner event source (empty: the EventBridge way in is off).
const PARTNER_SOURCE: &str = "StripePartnerEventSource";

/// Every queue of the template, by logical id, to its local URL (what the triggers and destinations that name
/// it are given).
async fn create_queues(sdk: &aws_config::SdkConfig, prefix: &str) -> Vec<(&'static str, String)> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let events = queues::create(&sqs, prefix).await;
    let (stripe_events, stripe_events_dlq) = queues::create_stripe_events(&sqs, prefix).await;
    vec![
        (queues::QUEUE_RESOURCE, events.queue_url),
        (queues::DLQ_RESOURCE, events.dlq_url),
        (queues::ESCALATION_RESOURCE, events.escalation_url),
        (queues::RELAY_FAILURES_RESOURCE, events.relay_failures_url),
        (queues::STRIPE_EVENTS_RESOURCE, stripe_events),
        (queues::STRIPE_EVENTS_DLQ_RESOURCE, stripe_events_dlq),
        (
            queues::SCHEDULE_DLQ_RESOURCE,
            queues::create_schedule_dlq(&sqs, prefix).await,
        ),
    ]
}

/// Stores `value` as the secret `name` in the local Secrets Manager (`AWS_ENDPOINT_URL_SECRETS_MANAGER` of
/// `sdk`), as a new version when it exists (a second start on the same emulator), and returns its ARN, which a
/// function reads it by as in AWS.
pub async fn store_secret(sdk: &aws_config::SdkConfig, name: &str, value: &str) -> Result<String, String> {
    let secrets = aws_sdk_secretsmanager::Client::new(sdk);
    let created = secrets.create_secret().name(name).secret_string(value).send().await;
    let arn = match created {
        Ok(created) => created.arn().map(str::to_owned),
        Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_exists_exception()) => secrets
            .put_secret_value()
            .secret_id(name)
            .secret_string(value)
            .send()
            .await
            // The error names the secret, never its value.
            .map_err(|e| format!("put a new version of the secret {name}: {e:?}"))?
            .arn()
            .map(str::to_owned),
        Err(e) => return Err(format!("create the secret {name} in the local Secrets Manager: {e:?}")),
    };
    arn.ok_or_else(|| format!("the secret {name} has no ARN"))
}
