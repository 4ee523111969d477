//! Where the command reads and writes: the functions' own settings. `TABLE_NAME` through
//! `shared::Config` (the one strict reader), `QUEUE_URL`, `DLQ_URL` and `ESCALATION_QUEUE_URL` as the
//! functions get them from the template, or from the stack's outputs (`--stack`, [`crate::stack`]) over the
//! environment. Against the local stack (`AWS_ENDPOINT_URL_SQS` set) a URL that is
//! not given is looked up by the name the local stack creates (`<table>-events.fifo`,
//! `<table>-events-dlq.fifo`, `<table>-saga-escalations`), so `scripts/run-local`'s environment is enough.

use crate::target::Target;
use shared::{aws, Config, Env, PaymentStore};

/// The queues the command can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueRole {
    /// The payment events FIFO queue (`QUEUE_URL`).
    Events,
    /// Its dead-letter queue (`DLQ_URL`).
    EventsDlq,
    /// The saga escalation queue (`ESCALATION_QUEUE_URL`).
    Escalations,
}

impl QueueRole {
    fn variable(self) -> &'static str {
        match self {
            QueueRole::Events => "QUEUE_URL",
            QueueRole::EventsDlq => "DLQ_URL",
            QueueRole::Escalations => "ESCALATION_QUEUE_URL",
        }
    }

    fn local_name(self, table: &str) -> String {
        match self {
            QueueRole::Events => format!("{table}-events.fifo"),
            QueueRole::EventsDlq => format!("{table}-events-dlq.fifo"),
            QueueRole::Escalations => format!("{table}-saga-escalations"),
        }
    }
}

/// Clients and names, built once per run.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The variables every setting below was read from (the functions' own names).
    pub env: Env,
    pub sdk: aws_config::SdkConfig,
    pub config: Config,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// CloudWatch Logs, for the intake's Logs Insights query (`AWS_ENDPOINT_URL_CLOUDWATCH_LOGS` applies).
    pub logs: aws_sdk_cloudwatchlogs::Client,
    /// The account, region, stack and table this run acts on (printed before it acts).
    pub target: Target,
}

/// Where a run connects: `--stack`, `--region`, `--profile` (each unset: the environment's and the SDK's own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    /// The CloudFormation stack whose outputs give the settings the environment does not set.
    pub stack: Option<String>,
    pub region: Option<String>,
    pub profile: Option<String>,
}

impl Connection {
    /// The SDK's configuration: its own chain (variables, profile files, instance role), with the region and
    /// profile given here first.
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        if self.region.is_none() && self.profile.is_none() {
            return aws::sdk_config().await;
        }
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(region) = &self.region {
            loader = loader.region(aws_config::Region::new(region.clone()));
        }
        if let Some(profile) = &self.profile {
            loader = loader.profile_name(profile);
        }
        loader.load().await
    }
}

impl Ctx {
    /// The clients and settings the functions use: the stack's outputs with `--stack`, over the environment
    /// (a variable that disagrees is a conflict in [`Ctx::target`]).
    pub async fn connect(connection: &Connection) -> Result<Self, crate::Error> {
        let sdk = connection.sdk_config().await;
        let mut env = Env::process();
        let mut conflicts = Vec::new();
        if let Some(stack) = &connection.stack {
            let cloudformation = aws_sdk_cloudformation::Client::new(&sdk);
            let settings = crate::stack::read(&cloudformation, stack, &env).await?;
            conflicts = settings.conflicts(&env);
            env = settings.over(env);
        }
        let config = Config::from_env(&env)?;
        let account = crate::target::account(&sdk, &env).await;
        let target = Target {
            account: account.as_ref().ok().cloned(),
            account_unknown: account.err(),
            region: sdk.region().map(ToString::to_string),
            stack: connection.stack.clone(),
            table: config.table_name.clone(),
            conflicts,
        };
        Ok(Self {
            target,
            env,
            dynamodb: aws::dynamodb_client(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            logs: aws_sdk_cloudwatchlogs::Client::new(&sdk),
            sdk,
            config,
        })
    }

    /// A context on given clients (tests).
    pub fn new(sdk: aws_config::SdkConfig, dynamodb: aws_sdk_dynamodb::Client, config: Config) -> Self {
        Self {
            target: Target {
                account: None,
                account_unknown: Some("a test's context".to_owned()),
                region: sdk.region().map(ToString::to_string),
                stack: None,
                table: config.table_name.clone(),
                conflicts: Vec::new(),
            },
            env: Env::process(),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            logs: aws_sdk_cloudwatchlogs::Client::new(&sdk),
            sdk,
            dynamodb,
            config,
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.config.table_name
    }

    /// The payments store on the table.
    pub fn store(&self) -> PaymentStore {
        PaymentStore::new(self.dynamodb.clone(), self.table(), self.config.open_shards)
    }

    /// The queue's URL: `explicit`, else its variable, else (local stack only) looked up by its local name.
    pub async fn queue_url(&self, role: QueueRole, explicit: Option<&str>) -> Result<String, crate::Error> {
        if let Some(url) = explicit {
            return Ok(url.to_owned());
        }
        if let Some(url) = self.env.optional(role.variable()) {
            return Ok(url);
        }
        if self.env.optional("AWS_ENDPOINT_URL_SQS").is_none() {
            return Err(format!(
                "{} is not set (pass --stack NAME: the stack's outputs name the queue)",
                role.variable()
            )
            .into());
        }
        let name = role.local_name(self.table());
        let out = self.sqs.get_queue_url().queue_name(&name).send().await.map_err(|e| {
            crate::aws_error(
                format!(
                    "{} is not set and the local queue {name} was not found",
                    role.variable()
                ),
                e,
            )
        })?;
        out.queue_url()
            .map(str::to_owned)
            .ok_or_else(|| format!("no URL for the local queue {name}").into())
    }
}

#[cfg(test)]
mod tests {
    use super::Connection;
    use aws_sdk_dynamodb::config::ProvideCredentials;

    /// `--profile` picks the profile's region and keys from the SDK's files; `--region` wins over the profile's.
    /// (Changes this process's environment: the crate's unit tests read none of these variables.)
    #[tokio::test]
    async fn the_profile_and_the_region_given_are_the_ones_used() {
        let dir = std::env::temp_dir().join(format!("paymentsctl-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config");
        std::fs::write(
            &config,
            "[profile oncall]\nregion = ap-southeast-2\naws_access_key_id = AKIDONCALL\naws_secret_access_key = s\n",
        )
        .unwrap();
        std::env::set_var("AWS_CONFIG_FILE", &config);
        std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", dir.join("none"));
        for variable in [
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_PROFILE",
        ] {
            std::env::remove_var(variable);
        }
        let oncall = Connection {
            profile: Some("oncall".into()),
            ..Connection::default()
        };
        let sdk = oncall.sdk_config().await;
        assert_eq!(sdk.region().map(|r| r.as_ref()), Some("ap-southeast-2"));
        let credentials = sdk.credentials_provider().unwrap().provide_credentials().await.unwrap();
        assert_eq!(credentials.access_key_id(), "AKIDONCALL");

        let elsewhere = Connection {
            region: Some("eu-west-1".into()),
            ..oncall
        };
        assert_eq!(
            elsewhere.sdk_config().await.region().map(|r| r.as_ref()),
            Some("eu-west-1")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
