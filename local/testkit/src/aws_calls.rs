//! Which AWS calls each Lambda function's code makes, written down for `scripts/check_permissions.py`.
//!
//! Why: DynamoDB Local and moto enforce no IAM, so a call the template does not grant (an `UpdateItem` on a
//! key prefix the role leaves out) passes every local test and fails only in AWS. An SDK interceptor on each
//! function's clients records every call: the function, the service, the operation, and what IAM decides on
//! (the table, index, stream, queue or secret, and for DynamoDB the leading key's prefix of every item, one
//! entry per item of a transaction or batch). The check then compares the records with the function's role
//! in the SAM-expanded template, both ways.
//!
//! Recording is on only when `AWS_CALL_RECORD` names a file: each call appends one JSON line to it (one
//! `write` per line in append mode, so the test processes of one run can share the file).

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// The environment variable naming the file the records are appended to.
pub const RECORD_VAR: &str = "AWS_CALL_RECORD";

/// Records every call of the clients it is added to as made by one Lambda function (its name as in
/// `infra/template.yaml`'s `FunctionName`, without the `payments-<stage>-` prefix: `webhook-intake`, ...).
#[derive(Debug, Clone)]
pub struct CallRecorder {
    function: Arc<str>,
    file: Arc<PathBuf>,
}

impl CallRecorder {
    /// A recorder for `function` when `AWS_CALL_RECORD` names a file, else `None` (nothing is recorded).
    pub fn from_env(function: &str) -> Option<Self> {
        let path = std::env::var_os(RECORD_VAR).filter(|p| !p.is_empty())?;
        Some(Self::to_file(function, PathBuf::from(path)))
    }

    /// A recorder for `function` appending to `file`.
    pub fn to_file(function: &str, file: PathBuf) -> Self {
        Self {
            function: function.into(),
            file: Arc::new(file),
        }
    }

    /// The function the calls are recorded for.
    pub fn function(&self) -> &str {
        &self.function
    }

    fn append(&self, record: &Value) -> std::io::Result<()> {
        let mut line = record.to_string();
        line.push('\n');
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.file.as_path())?
            .write_all(line.as_bytes())
    }
}

impl Intercept for CallRecorder {
    fn name(&self) -> &'static str {
        "CallRecorder"
    }

    // After serialization: once per call (not per retry), with the request body that names the resources.
    fn read_after_serialization(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, operation) = match cfg.load::<Metadata>() {
            Some(m) => (service_prefix(m.service()), m.name().to_owned()),
            None => return Ok(()),
        };
        let body = context
            .request()
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .unwrap_or(Value::Null);
        let record = json!({
            "function": self.function(),
            "service": service,
            "operation": operation,
            "accesses": accesses(&service, &operation, &body),
        });
        // A lost record would hide a call from the check: fail the call (and so the test) instead.
        self.append(&record)
            .map_err(|e| format!("recording the call to {}: {e}", self.file.display()).into())
    }
}

/// The SDK's service name as a lowercase word: `DynamoDB Streams` -> `dynamodbstreams`.
fn service_prefix(service: &str) -> String {
    service
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_lowercase()
}

/// What IAM is asked about for one call: one entry per resource (and per item for DynamoDB), each with the
/// operation IAM checks (`TransactWriteItems` is checked as the `PutItem`, `UpdateItem`, ... of its items).
fn accesses(service: &str, operation: &str, body: &Value) -> Vec<Value> {
    let text = |key: &str| body.get(key).and_then(Value::as_str);
    match service {
        "dynamodb" => dynamodb_accesses(operation, body),
        "dynamodbstreams" => {
            vec![json!({ "operation": operation, "stream": text("StreamArn"), "table": text("TableName") })]
        }
        "sqs" => vec![json!({ "operation": operation, "queue": text("QueueUrl"), "queue_name": text("QueueName") })],
        "secretsmanager" => vec![json!({ "operation": operation, "secret": text("SecretId") })],
        "eventbridge" => vec![json!({ "operation": operation, "event_source": text("Name") })],
        _ => vec![json!({ "operation": operation })],
    }
}

fn dynamodb_accesses(operation: &str, body: &Value) -> Vec<Value> {
    let table = body.get("TableName").and_then(Value::as_str);
    let items = |key: &str| body.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
    match operation {
        "GetItem" | "UpdateItem" | "DeleteItem" => vec![item_access(operation, table, body.get("Key"))],
        "PutItem" => vec![item_access(operation, table, body.get("Item"))],
        "Query" => vec![query_access(body)],
        "TransactWriteItems" | "TransactGetItems" => {
            items("TransactItems").iter().filter_map(transact_access).collect()
        }
        "BatchWriteItem" | "BatchGetItem" => batch_accesses(operation, body),
        _ => vec![json!({ "operation": operation, "table": table })],
    }
}

/// One item of a transaction: `{"Put": {...}}` is a `PutItem`, `{"ConditionCheck": ...}` a
/// `ConditionCheckItem`, `{"Get": ...}` a `GetItem`.
fn transact_access(entry: &Value) -> Option<Value> {
    let (kind, inner) = entry.as_object()?.iter().next()?;
    let operation = match kind.as_str() {
        "Put" => "PutItem",
        "Update" => "UpdateItem",
        "Delete" => "DeleteItem",
        "ConditionCheck" => "ConditionCheckItem",
        "Get" => "GetItem",
        other => other,
    };
    let key = inner.get("Key").or_else(|| inner.get("Item"));
    Some(item_access(
        operation,
        inner.get("TableName").and_then(Value::as_str),
        key,
    ))
}

/// A batch is checked as itself (`dynamodb:BatchWriteItem`), once per item for its leading key.
fn batch_accesses(operation: &str, body: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let Some(tables) = body.get("RequestItems").and_then(Value::as_object) else {
        return out;
    };
    for (table, requests) in tables {
        let keys: Vec<&Value> = match requests {
            // BatchWriteItem: [{"PutRequest": {"Item": ...}}, {"DeleteRequest": {"Key": ...}}]
            Value::Array(list) => list
                .iter()
                .filter_map(|r| r.as_object()?.values().next())
                .filter_map(|r| r.get("Item").or_else(|| r.get("Key")))
                .collect(),
            // BatchGetItem: {"Keys": [...]}
            other => other
                .get("Keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().collect())
                .unwrap_or_default(),
        };
        out.extend(keys.into_iter().map(|k| item_access(operation, Some(table), Some(k))));
    }
    out
}

fn item_access(operation: &str, table: Option<&str>, key: Option<&Value>) -> Value {
    let pk = key
        .and_then(|k| k.get("pk"))
        .and_then(|v| v.get("S"))
        .and_then(Value::as_str);
    json!({ "operation": operation, "table": table, "prefix": pk.map(leading_prefix) })
}

/// A Query: its table and index, and the prefix of the partition key's value when the key condition names
/// one (`#pk = :pk`).
fn query_access(body: &Value) -> Value {
    let index = body.get("IndexName").and_then(Value::as_str);
    let names = body.get("ExpressionAttributeNames").and_then(Value::as_object);
    let values = body.get("ExpressionAttributeValues").and_then(Value::as_object);
    let condition = body
        .get("KeyConditionExpression")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let prefix = equalities(condition)
        .into_iter()
        .map(|(name, value)| (resolve(names, &name), value))
        // On the table the partition key is `pk`; an index's equality comes first.
        .find(|(name, _)| index.is_some() || name == "pk")
        .and_then(|(_, value)| values?.get(&value)?.get("S")?.as_str().map(leading_prefix));
    json!({
        "operation": "Query",
        "table": body.get("TableName").and_then(Value::as_str),
        "index": index,
        "prefix": prefix,
    })
}

/// `a = :b` terms of a key condition, in order.
fn equalities(condition: &str) -> Vec<(String, String)> {
    condition
        .replace(" and ", " AND ")
        .split(" AND ")
        .filter_map(|term| {
            let (left, right) = term.split_once('=')?;
            let (left, right) = (left.trim(), right.trim());
            let comparison = left.ends_with(['<', '>', '!']);
            (!comparison && right.starts_with(':')).then(|| {
                let left = left.trim_start_matches('(').to_owned();
                (left, right.trim_end_matches(')').to_owned())
            })
        })
        .collect()
}

fn resolve(names: Option<&Map<String, Value>>, name: &str) -> String {
    names
        .and_then(|n| n.get(name))
        .and_then(Value::as_str)
        .unwrap_or(name)
        .to_owned()
}

/// The leading key up to and including its first `#` (`PAYMENT#pay_1` -> `PAYMENT#`); the whole key if it
/// has none.
pub fn leading_prefix(key: &str) -> String {
    match key.find('#') {
        Some(i) => key.get(..=i).unwrap_or(key).to_owned(),
        None => key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_is_checked_item_by_item() {
        let body = json!({ "TransactItems": [
            { "Put": { "TableName": "t", "Item": { "pk": { "S": "PAYMENT#p1" } } } },
            { "Update": { "TableName": "t", "Key": { "pk": { "S": "LEASE#p1" }, "sk": { "S": "LEASE" } } } },
            { "ConditionCheck": { "TableName": "t", "Key": { "pk": { "S": "IDEMPOTENCY#k" } } } },
        ]});
        let got = dynamodb_accesses("TransactWriteItems", &body);
        let ops: Vec<(&str, &str)> = got
            .iter()
            .map(|a| (a["operation"].as_str().unwrap(), a["prefix"].as_str().unwrap()))
            .collect();
        assert_eq!(
            ops,
            [
                ("PutItem", "PAYMENT#"),
                ("UpdateItem", "LEASE#"),
                ("ConditionCheckItem", "IDEMPOTENCY#")
            ]
        );
    }

    #[test]
    fn a_query_names_its_index_and_the_partition_keys_prefix() {
        let body = json!({ "TableName": "t", "IndexName": "open-items",
            "KeyConditionExpression": "#s = :s AND #o <= :due",
            "ExpressionAttributeNames": { "#s": "open_shard", "#o": "opened_at_ms" },
            "ExpressionAttributeValues": { ":s": { "S": "PAYMENT#3" }, ":due": { "N": "5" } } });
        let got = query_access(&body);
        assert_eq!(
            (got["index"].as_str(), got["prefix"].as_str()),
            (Some("open-items"), Some("PAYMENT#"))
        );
        let on_table = json!({ "TableName": "t", "KeyConditionExpression": "sk = :s AND pk = :p",
            "ExpressionAttributeValues": { ":p": { "S": "SAGA#o1" }, ":s": { "S": "x" } } });
        assert_eq!(query_access(&on_table)["prefix"], "SAGA#");
    }

    #[test]
    fn a_batch_records_each_items_prefix() {
        let body = json!({ "RequestItems": { "t": [
            { "PutRequest": { "Item": { "pk": { "S": "SKU#a" } } } },
            { "DeleteRequest": { "Key": { "pk": { "S": "ORDER#b" } } } },
        ]}});
        let prefixes: Vec<Value> = batch_accesses("BatchWriteItem", &body)
            .iter()
            .map(|a| a["prefix"].clone())
            .collect();
        assert_eq!(prefixes, [json!("SKU#"), json!("ORDER#")]);
    }

    #[test]
    fn the_prefix_ends_at_the_first_hash() {
        assert_eq!(leading_prefix("PAYMENT#pay_1#x"), "PAYMENT#");
        assert_eq!(leading_prefix("plain"), "plain");
    }
}
