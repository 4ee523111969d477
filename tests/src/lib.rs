//! The test harness: a real DynamoDB Local (started once per test process unless the environment points at
//! one), a fresh table per test created from `infra/template.yaml`, and typed helpers around the store.
//!
//! ```no_run
//! # async fn t() {
//! let ctx = integration_tests::TestContext::new().await;
//! // ctx.store, ctx.leases and ctx.client talk to a table no other test sees.
//! # }
//! ```

pub mod calls;
pub mod capacity;
pub mod faults;
pub mod hook;
pub mod http_stub;
pub mod intercept;
pub mod kill;
pub mod logs;
pub mod sqs_faults;

use aws_sdk_dynamodb::config::{Credentials, Region};
use shared::lease::{LeaseConfig, Leases};
use shared::store::open_index::OpenShards;
use shared::store::PaymentStore;
use std::time::Duration;

pub use local_testkit::aws_calls::CallRecorder;
pub use local_testkit::{dynamodb_local, table};

pub use calls::CallCounter;
pub use capacity::{CapacityMeter, Units};
pub use faults::{Fault, FaultInjector};
pub use hook::BeforeCall;
pub use kill::{dying_client, KillSwitch};
pub use logs::LogCapture;
pub use sqs_faults::SqsEntryFaults;

/// SDK settings for a local emulator: its endpoint, a region and dummy credentials.
pub fn local_sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
            Credentials::new("local", "local", None, None, "harness"),
        ))
        .endpoint_url(endpoint)
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build()
}

/// SDK settings for the local Secrets Manager: moto's, the server that also plays SQS.
pub fn secrets_manager_sdk_config() -> aws_config::SdkConfig {
    local_sdk_config(&local_testkit::service::SQS.endpoint())
}

/// A DynamoDB Streams client on DynamoDB Local.
pub fn streams_client() -> aws_sdk_dynamodbstreams::Client {
    aws_sdk_dynamodbstreams::Client::new(&local_sdk_config(&dynamodb_local::endpoint()))
}

/// The DynamoDB Streams client `function`'s event source mapping reads with (its role in AWS): its calls are
/// recorded under `function` when `AWS_CALL_RECORD` is set.
pub fn function_streams_client(function: &str) -> aws_sdk_dynamodbstreams::Client {
    let sdk = local_sdk_config(&dynamodb_local::endpoint());
    let mut config = aws_sdk_dynamodbstreams::config::Builder::from(&sdk);
    if let Some(recorder) = CallRecorder::from_env(function) {
        config = config.interceptor(recorder);
    }
    aws_sdk_dynamodbstreams::Client::from_conf(config.build())
}

/// An SQS client on the SQS emulator (moto), optionally failing chosen batch entries.
pub fn sqs_client(faults: Option<SqsEntryFaults>) -> aws_sdk_sqs::Client {
    sqs_client_with(faults, None)
}

/// `function`'s SQS client: as [`sqs_client`], its calls recorded under `function` when `AWS_CALL_RECORD`
/// is set (for `scripts/check_permissions.py`).
pub fn function_sqs_client(function: &str, faults: Option<SqsEntryFaults>) -> aws_sdk_sqs::Client {
    sqs_client_with(faults, CallRecorder::from_env(function))
}

fn sqs_client_with(faults: Option<SqsEntryFaults>, recorder: Option<CallRecorder>) -> aws_sdk_sqs::Client {
    let sdk = local_sdk_config(&local_testkit::service::SQS.endpoint());
    let mut config = aws_sdk_sqs::config::Builder::from(&sdk);
    if let Some(faults) = faults {
        config = config.interceptor(faults);
    }
    if let Some(recorder) = recorder {
        config = config.interceptor(recorder);
    }
    aws_sdk_sqs::Client::from_conf(config.build())
}

/// A fresh FIFO queue and DLQ on the SQS emulator, from the template's definitions.
pub async fn fresh_queues(sqs: &aws_sdk_sqs::Client) -> local_testkit::queues::Queues {
    local_testkit::queues::create(sqs, &format!("test-{}", uuid::Uuid::new_v4().simple())).await
}

/// Interceptors a test client may carry.
#[derive(Debug, Clone, Default)]
pub struct Interceptors {
    pub faults: Option<FaultInjector>,
    pub calls: Option<CallCounter>,
    pub hook: Option<BeforeCall>,
    pub kill: Option<KillSwitch>,
    /// Records the calls as one Lambda function's (`AWS_CALL_RECORD`).
    pub record: Option<CallRecorder>,
    /// Adds up the capacity units DynamoDB Local reports for each call.
    pub capacity: Option<CapacityMeter>,
}

/// A real DynamoDB client pointed at DynamoDB Local, with the same retry and timeout settings as production.
pub fn client(endpoint: &str, with: Interceptors) -> aws_sdk_dynamodb::Client {
    let mut config = shared::aws::dynamodb_config(&local_sdk_config(endpoint));
    if let Some(faults) = with.faults {
        config = config.interceptor(faults);
    }
    if let Some(calls) = with.calls {
        config = config.interceptor(calls);
    }
    if let Some(hook) = with.hook {
        config = config.interceptor(hook);
    }
    if let Some(kill) = with.kill {
        config = config.interceptor(kill);
    }
    if let Some(record) = with.record {
        config = config.interceptor(record);
    }
    if let Some(capacity) = with.capacity {
        config = config.interceptor(capacity);
    }
    aws_sdk_dynamodb::Client::from_conf(config.build())
}

/// One test's world: its own table in DynamoDB Local, a store and leases on it.
pub struct TestContext {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub store: PaymentStore,
    pub leases: Leases,
    /// Every DynamoDB call this context's client made, by operation.
    pub calls: CallCounter,
    faults: Option<FaultInjector>,
    /// The table's stream as [`TestContext::events`] archives it, read from where it last stopped.
    history: tokio::sync::Mutex<Option<local_lambda::stream_pump::StreamPump>>,
}

/// Lease settings for tests: short enough to expire within a test.
pub fn test_lease_config(ttl: Duration) -> LeaseConfig {
    LeaseConfig::new(ttl, ttl / 2).expect("ttl longer than half of itself")
}

impl TestContext {
    pub async fn new() -> Self {
        Self::build(None).await
    }

    /// A context whose client passes every call through `injector` (faults in front of the real DynamoDB Local).
    pub async fn with_faults(injector: FaultInjector) -> Self {
        Self::build(Some(injector)).await
    }

    async fn build(injector: Option<FaultInjector>) -> Self {
        let endpoint = dynamodb_local::endpoint();
        let admin = client(&endpoint, Interceptors::default());
        let table = table::create_fresh_table(&admin).await;
        let calls = CallCounter::new();
        let client = client(
            &endpoint,
            Interceptors {
                faults: injector.clone(),
                calls: Some(calls.clone()),
                ..Interceptors::default()
            },
        );
        Self {
            faults: injector,
            store: PaymentStore::new(client.clone(), &table, OpenShards::DEFAULT),
            leases: Leases::new(client.clone(), &table, test_lease_config(Duration::from_secs(30))),
            client,
            table,
            calls,
            history: tokio::sync::Mutex::new(None),
        }
    }

    /// The client a Lambda function's code gets: as [`TestContext::client`] (faults, counted calls), and its
    /// calls recorded under `function` (its name in `infra/template.yaml`) when `AWS_CALL_RECORD` is set, for
    /// `scripts/check_permissions.py`. The test's own reads and writes go through `client` and are not
    /// recorded.
    pub fn client_for(&self, function: &str) -> aws_sdk_dynamodb::Client {
        let with = Interceptors {
            faults: self.faults.clone(),
            calls: Some(self.calls.clone()),
            record: CallRecorder::from_env(function),
            ..Interceptors::default()
        };
        client(&dynamodb_local::endpoint(), with)
    }

    /// The settings every function shares, on this context's table (the lease as `leases`').
    pub fn config(&self) -> shared::Config {
        shared::Config {
            table_name: self.table.clone(),
            lease: test_lease_config(Duration::from_secs(30)),
            open_shards: OpenShards::DEFAULT,
        }
    }

    /// The clients a function is built on (`<Function>::build`), as `function`'s: its DynamoDB client is
    /// [`TestContext::client_for`]. Its SQS client does not reach the SQS emulator (most tests need none, and
    /// naming its endpoint would start one): a test that needs the function's queue sets `sqs` to
    /// [`function_sqs_client`].
    pub fn clients_for(&self, function: &str) -> shared::lambda::Clients {
        let sdk = local_sdk_config(&dynamodb_local::endpoint());
        shared::lambda::Clients {
            sqs: aws_sdk_sqs::Client::new(&sdk),
            dynamodb: self.client_for(function),
            sdk,
        }
    }

    /// A store on this context's table on `function`'s client ([`TestContext::client_for`]).
    pub fn store_for(&self, function: &str) -> PaymentStore {
        PaymentStore::new(self.client_for(function), &self.table, OpenShards::DEFAULT)
    }

    /// Leases on this context's table (as `leases`) on `function`'s client ([`TestContext::client_for`]).
    pub fn leases_for(&self, function: &str) -> Leases {
        Leases::new(
            self.client_for(function),
            &self.table,
            test_lease_config(Duration::from_secs(30)),
        )
    }

    /// A second store on this context's table whose client runs `hook` before chosen calls (its calls are
    /// counted in `calls` too).
    pub fn store_with_hook(&self, hook: BeforeCall) -> PaymentStore {
        let with = Interceptors {
            hook: Some(hook),
            calls: Some(self.calls.clone()),
            ..Default::default()
        };
        PaymentStore::new(
            client(&dynamodb_local::endpoint(), with),
            &self.table,
            OpenShards::DEFAULT,
        )
    }

    /// A store on this context's table whose calls are not counted (for writes a test makes on the side).
    pub fn uncounted_store(&self) -> PaymentStore {
        PaymentStore::new(
            client(&dynamodb_local::endpoint(), Interceptors::default()),
            &self.table,
            OpenShards::DEFAULT,
        )
    }

    /// Payment `id` as stored now (a consistent read; it must exist): what a lease is taken at
    /// (`Leases::acquire` takes the payment as just read).
    pub async fn read(&self, id: &shared::PaymentId) -> shared::Payment {
        self.store
            .get(id)
            .await
            .expect("read the payment")
            .expect("the payment exists")
    }

    /// Leases on this context's table with another TTL.
    pub fn leases_with_ttl(&self, ttl: Duration) -> Leases {
        Leases::new(self.client.clone(), &self.table, test_lease_config(ttl))
    }

    /// Payment `id`'s key in the open-items index recovery scans (`opened_at_ms`: when it is next due, less
    /// the scanner's threshold), read consistently; `None` once the payment left the index (its loop ended).
    pub async fn due_key(&self, id: &shared::PaymentId) -> Option<i64> {
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(shared::keys::payment(id)))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem on DynamoDB Local")
            .item
            .expect("the payment exists");
        item.get("opened_at_ms")
            .map(|v| v.as_n().expect("a number").parse().expect("an integer"))
    }

    /// Payment `id`'s events, oldest first ([`PaymentStore::events`]), after archiving what the table's stream
    /// holds as the relay does (every payment change record that carries a transition, through the relay's
    /// own reading of records and [`PaymentStore::archive`]): a test that runs no relay reads the whole
    /// history. The archive's calls are not counted in `calls`.
    pub async fn events(&self, id: &shared::PaymentId) -> Result<Vec<shared::PaymentEvent>, shared::StoreError> {
        let mut history = self.history.lock().await;
        if history.is_none() {
            let admin = client(&dynamodb_local::endpoint(), Interceptors::default());
            let pump = local_lambda::stream_pump::StreamPump::for_table(&admin, streams_client(), &self.table)
                .await
                .expect("the table's stream");
            *history = Some(pump);
        }
        let pump = history.as_mut().expect("the pump, made above");
        let mut transitions = Vec::new();
        pump.poll_once(|batch: aws_lambda_events::event::dynamodb::Event| {
            for record in &batch.records {
                if let Some(Ok(shared::outbox::OutboxRecord::Transition(e))) =
                    shared::outbox::outbox_record(&record.event_name, &record.change.new_image)
                {
                    transitions.push(e);
                }
            }
            std::future::ready(Default::default())
        })
        .await
        .expect("read the table's stream");
        let store = self.uncounted_store();
        store.archive(&transitions).await.expect("archive the history");
        self.store.events(id).await
    }
}
