//! The local counterparts of the stack's resources that the functions' environments name: the table (from
//! its one definition, `table.rs`), the queues (`queues.rs`) in moto's SQS, and the secrets the template
//! takes by ARN (`WebhookSecretsArn`, `PspApiKeyArn`) in moto's Secrets Manager, so a function binary reads
//! them as it does in AWS. Returned as the [`Stack`] a [`crate::template::Template`] resolves against.

use crate::template::Stack;

/// The secrets the template takes by ARN: its parameter, the name of the secret and the variable of this
/// process whose value it holds (`scripts/lib.sh`: `local_env` sets the webhook secrets, `start_psp` the
/// simulator's key).
const SECRETS: [(&str, &str, &str); 2] = [
    ("WebhookSecretsArn", "webhook-secrets", "WEBHOOK_SECRETS"),
    ("PspApiKeyArn", "psp-api-key", "PSP_API_KEY"),
];

/// Creates, under names starting with `prefix`, the table, the queues and the secrets, on the endpoints of
/// this process's environment (`AWS_ENDPOINT_URL_DYNAMODB`, `_SQS`, `_SECRETS_MANAGER`), and returns what
/// stands in for them.
pub async fn create(sdk: &aws_config::SdkConfig, prefix: &str) -> Result<Stack, String> {
    let mut stack = Stack::default();
    let table = format!("{prefix}-payments");
    crate::table::TableDefinition::from_repo()
        .create(&aws_sdk_dynamodb::Client::new(sdk), &table)
        .await;
    stack.resources.insert(crate::table::TABLE_RESOURCE.into(), table);
    let queues = crate::queues::create(&aws_sdk_sqs::Client::new(sdk), prefix).await;
    for (resource, url) in [
        (crate::queues::QUEUE_RESOURCE, queues.queue_url),
        (crate::queues::DLQ_RESOURCE, queues.dlq_url),
        (crate::queues::ESCALATION_RESOURCE, queues.escalation_url),
        (crate::queues::RELAY_FAILURES_RESOURCE, queues.relay_failures_url),
    ] {
        stack.resources.insert(resource.into(), url);
    }
    for (parameter, name, variable) in SECRETS {
        let value = std::env::var(variable).map_err(|_| format!("{variable} is not set: the secret {name}'s value"))?;
        let arn = store_secret(sdk, &format!("{prefix}-{name}"), &value).await?;
        stack.parameters.insert(parameter.into(), arn);
    }
    Ok(stack)
}

/// Creates the secret `name` holding `value` in the local Secrets Manager (`AWS_ENDPOINT_URL_SECRETS_MANAGER`
/// of `sdk`) and returns its ARN, which a function reads it by as in AWS.
pub async fn store_secret(sdk: &aws_config::SdkConfig, name: &str, value: &str) -> Result<String, String> {
    let created = aws_sdk_secretsmanager::Client::new(sdk)
        .create_secret()
        .name(name)
        .secret_string(value)
        .send()
        .await
        // The error names the secret, never its value.
        .map_err(|e| format!("create the secret {name} in the local Secrets Manager: {e:?}"))?;
    created
        .arn()
        .map(str::to_owned)
        .ok_or_else(|| format!("the secret {name} has no ARN"))
}
