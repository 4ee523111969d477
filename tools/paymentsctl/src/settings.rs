//! Where the command reads and writes: the functions' own settings. `TABLE_NAME` through
//! `shared::Config` (the one strict reader), `QUEUE_URL`, `DLQ_URL` and `ESCALATION_QUEUE_URL` as the
//! functions get them from the template. Against the local stack (`AWS_ENDPOINT_URL_SQS` set) a URL that is
//! not given is looked up by the name the local stack creates (`<table>-events.fifo`,
//! `<table>-events-dlq.fifo`, `<table>-saga-escalations`), so `scripts/run-local`'s environment is enough.

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
}

impl Ctx {
    /// The clients and settings the functions use, from the environment.
    pub async fn from_env() -> Result<Self, crate::Error> {
        let env = Env::process();
        let config = Config::from(&env)?;
        let sdk = aws::sdk_config().await;
        Ok(Self {
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
        PaymentStore::new(self.dynamodb.clone(), self.table())
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
            return Err(format!("{} is not set (the stack's outputs name the queue)", role.variable()).into());
        }
        let name = role.local_name(self.table());
        let out = self.sqs.get_queue_url().queue_name(&name).send().await.map_err(|e| {
            format!(
                "{} is not set and the local queue {name} was not found: {e}",
                role.variable()
            )
        })?;
        out.queue_url()
            .map(str::to_owned)
            .ok_or_else(|| format!("no URL for the local queue {name}").into())
    }
}
