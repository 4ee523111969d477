//! Fresh tables for tests, from the one definition of the table: the `PaymentsTable` resource of
//! `infra/template.yaml`. Nothing here repeats the key schema, indexes, stream or TTL settings.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification,
};
use serde_yaml_ng::Value;
use std::path::Path;

pub const TABLE_RESOURCE: &str = "PaymentsTable";

/// The table as `infra/template.yaml` declares it.
#[derive(Debug, Clone)]
pub struct TableDefinition {
    pub attributes: Vec<AttributeDefinition>,
    pub key_schema: Vec<KeySchemaElement>,
    pub indexes: Vec<GlobalSecondaryIndex>,
    pub stream: Option<StreamViewType>,
    pub ttl_attribute: Option<String>,
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("template: {key} missing or not a string in {v:?}"))
}

fn key_schema(v: &Value) -> Vec<KeySchemaElement> {
    v.as_sequence()
        .expect("KeySchema is a list")
        .iter()
        .map(|k| {
            KeySchemaElement::builder()
                .attribute_name(s(k, "AttributeName"))
                .key_type(KeyType::from(s(k, "KeyType")))
                .build()
                .expect("key schema element")
        })
        .collect()
}

impl TableDefinition {
    pub fn from_template(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let doc: Value = serde_yaml_ng::from_str(&text).expect("template is YAML");
        let props = &doc["Resources"][TABLE_RESOURCE]["Properties"];
        assert!(props.is_mapping(), "template has no {TABLE_RESOURCE} with Properties");

        let attributes = props["AttributeDefinitions"]
            .as_sequence()
            .expect("AttributeDefinitions")
            .iter()
            .map(|a| {
                AttributeDefinition::builder()
                    .attribute_name(s(a, "AttributeName"))
                    .attribute_type(ScalarAttributeType::from(s(a, "AttributeType")))
                    .build()
                    .expect("attribute definition")
            })
            .collect();
        let indexes = props
            .get("GlobalSecondaryIndexes")
            .and_then(Value::as_sequence)
            .map(|list| {
                list.iter()
                    .map(|g| {
                        let projection = &g["Projection"];
                        let non_key: Option<Vec<String>> = projection
                            .get("NonKeyAttributes")
                            .and_then(Value::as_sequence)
                            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect());
                        GlobalSecondaryIndex::builder()
                            .index_name(s(g, "IndexName"))
                            .set_key_schema(Some(key_schema(&g["KeySchema"])))
                            .projection(
                                Projection::builder()
                                    .projection_type(ProjectionType::from(s(projection, "ProjectionType")))
                                    .set_non_key_attributes(non_key)
                                    .build(),
                            )
                            .build()
                            .expect("index")
                    })
                    .collect()
            })
            .unwrap_or_default();
        let stream = props
            .get("StreamSpecification")
            .map(|spec| StreamViewType::from(s(spec, "StreamViewType")));
        let ttl_attribute = props
            .get("TimeToLiveSpecification")
            .filter(|t| t.get("Enabled").and_then(Value::as_bool) == Some(true))
            .map(|t| s(t, "AttributeName").to_owned());
        Self {
            attributes,
            key_schema: key_schema(&props["KeySchema"]),
            indexes,
            stream,
            ttl_attribute,
        }
    }

    /// The definition in the repository's template.
    pub fn from_repo() -> Self {
        Self::from_template(&crate::service::repo_root().join("infra/template.yaml"))
    }

    /// Creates the table `name` (on demand, as the template), with its stream and TTL.
    pub async fn create(&self, client: &aws_sdk_dynamodb::Client, name: &str) {
        let mut req = client
            .create_table()
            .table_name(name)
            .billing_mode(BillingMode::PayPerRequest)
            .set_attribute_definitions(Some(self.attributes.clone()))
            .set_key_schema(Some(self.key_schema.clone()));
        if !self.indexes.is_empty() {
            req = req.set_global_secondary_indexes(Some(self.indexes.clone()));
        }
        if let Some(view) = &self.stream {
            req = req.stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(view.clone())
                    .build()
                    .expect("stream"),
            );
        }
        if let Err(e) = req.send().await {
            // A first attempt slower than the SDK's attempt timeout (DynamoDB Local on a busy machine) may have
            // created the table before the retry asked again: a table of this (fresh) name is ours.
            let exists = e.as_service_error().is_some_and(|se| se.is_resource_in_use_exception());
            assert!(exists, "create table {name}: {e:?}");
        }
        if let Some(attr) = &self.ttl_attribute {
            let enabled = client
                .update_time_to_live()
                .table_name(name)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .attribute_name(attr)
                        .enabled(true)
                        .build()
                        .expect("ttl"),
                )
                .send()
                .await;
            // As for the create: a first attempt slower than the attempt timeout may have enabled TTL before
            // the retry asked again, which DynamoDB then refuses as "already enabled".
            if let Err(e) = enabled {
                let already = e
                    .as_service_error()
                    .and_then(|se| se.meta().message())
                    .is_some_and(|m| m.contains("already enabled"));
                assert!(already, "enable TTL on {name}: {e:?}");
            }
        }
    }
}

/// Creates a table with a fresh random name and returns the name.
pub async fn create_fresh_table(client: &aws_sdk_dynamodb::Client) -> String {
    let name = format!("test-{}", uuid::Uuid::new_v4().simple());
    TableDefinition::from_repo().create(client, &name).await;
    name
}
