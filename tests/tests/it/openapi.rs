//! `infra/openapi.yaml` against what really serves and routes the API. The description is written by hand, so
//! a route added, renamed or made public in one place only would make it wrong without anyone noticing:
//!
//! - every operation it documents is a route of a function's table (`Router::routes`) and every route is
//!   documented;
//! - every HttpApi event of `infra/template.yaml` is a documented operation and every operation an event, and
//!   an operation is public (`security: []`) exactly when its event has no authorizer (the others inherit
//!   SigV4, the API's IAM default);
//! - each operation's path parameters are exactly the `{names}` of its path;
//! - the payment and saga statuses and the saga's steps it lists are the code's;
//! - every operation documents the answers API Gateway gives before (or instead of) its function, in API
//!   Gateway's shape (`{"message": ...}`, never the functions' `ApiError`): 403 on a SigV4 route, 413 and 429
//!   on every route (`GATEWAY_ANSWERS`, as local/lambda's HTTP API answers them).
//!
//! The last test breaks a copy of the description and of the template in each of those ways and shows that
//! every check reports it. That the document is valid OpenAPI 3.1 is checked by scripts/test
//! (openapi-spec-validator).

use serde_yaml_ng::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// `(METHOD, path pattern)`, e.g. `("GET", "/payments/{id}")`.
type Operation = (String, String);

const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

pub(crate) fn repo_yaml(relative: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn openapi() -> Value {
    repo_yaml("infra/openapi.yaml")
}

pub(crate) fn template() -> Value {
    repo_yaml("infra/template.yaml")
}

/// What the functions' route tables serve.
fn served() -> BTreeSet<Operation> {
    payments_api::route_table()
        .iter()
        .chain(webhook_intake::route_table())
        .chain(checkout_saga::api::route_table())
        .map(|(method, pattern)| {
            // A catch-all (`any`) route never matches a documented method: it is reported.
            let method = method.as_ref().map_or("ANY", |m| m.as_str());
            (method.to_owned(), pattern.clone())
        })
        .collect()
}

/// Every documented operation and its object.
fn operations(doc: &Value) -> BTreeMap<Operation, &Value> {
    let mut found = BTreeMap::new();
    for (path, item) in doc["paths"].as_mapping().into_iter().flatten() {
        let path = path.as_str().unwrap_or_default();
        for method in METHODS {
            if let Some(operation) = item.get(method) {
                found.insert((method.to_uppercase(), path.to_owned()), operation);
            }
        }
    }
    found
}

/// Whether an operation is public: its own `security` is empty; without one it inherits the document's.
fn is_public(doc: &Value, operation: &Value) -> bool {
    let security = operation.get("security").unwrap_or(&doc["security"]);
    security.as_sequence().is_none_or(Vec::is_empty)
}

/// The lines of `a` missing from `b`, as `"<METHOD> <path>: <message>"`.
fn missing(a: &BTreeSet<Operation>, b: &BTreeSet<Operation>, message: &str) -> Vec<String> {
    a.difference(b)
        .map(|(method, path)| format!("{method} {path}: {message}"))
        .collect()
}

/// The description against the route tables, both ways.
fn route_problems(doc: &Value, served: &BTreeSet<Operation>) -> Vec<String> {
    let documented: BTreeSet<Operation> = operations(doc).into_keys().collect();
    let mut problems = missing(&documented, served, "documented, but no function's route table has it");
    problems.extend(missing(served, &documented, "served, but not in infra/openapi.yaml"));
    problems
}

/// Every HttpApi event of the template: its operation and whether it is public (`Auth.Authorizer: NONE`).
fn template_events(template: &Value) -> BTreeMap<Operation, bool> {
    let mut events = BTreeMap::new();
    for (_, resource) in template["Resources"].as_mapping().into_iter().flatten() {
        for (_, event) in resource["Properties"]["Events"].as_mapping().into_iter().flatten() {
            if event["Type"].as_str() != Some("HttpApi") {
                continue;
            }
            let properties = &event["Properties"];
            let method = properties["Method"].as_str().unwrap_or("?").to_uppercase();
            let path = properties["Path"].as_str().unwrap_or("?").to_owned();
            let public = properties["Auth"]["Authorizer"].as_str() == Some("NONE");
            events.insert((method, path), public);
        }
    }
    events
}

/// The description against the template's HttpApi events, both ways, with the authorization of each.
fn template_problems(doc: &Value, template: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let apis: Vec<&Value> = template["Resources"]
        .as_mapping()
        .into_iter()
        .flatten()
        .map(|(_, resource)| resource)
        .filter(|r| r["Type"].as_str() == Some("AWS::Serverless::HttpApi"))
        .collect();
    // Only then does "no `Authorizer: NONE`" mean SigV4, which the description's default says.
    if apis.len() != 1 || apis[0]["Properties"]["Auth"]["DefaultAuthorizer"].as_str() != Some("AWS_IAM") {
        problems.push("the template has not exactly one HttpApi with DefaultAuthorizer AWS_IAM".to_owned());
    }
    let events = template_events(template);
    let documented: BTreeMap<Operation, bool> = operations(doc)
        .into_iter()
        .map(|(key, operation)| (key, is_public(doc, operation)))
        .collect();
    let (in_template, in_doc): (BTreeSet<Operation>, BTreeSet<Operation>) =
        (events.keys().cloned().collect(), documented.keys().cloned().collect());
    problems.extend(missing(
        &in_doc,
        &in_template,
        "documented, but no HttpApi event routes it",
    ));
    problems.extend(missing(
        &in_template,
        &in_doc,
        "an HttpApi event, but not in infra/openapi.yaml",
    ));
    for (key, public) in &documented {
        if let Some(event_public) = events.get(key) {
            if public != event_public {
                problems.push(format!(
                    "{} {}: public in {}, not in {}",
                    key.0,
                    key.1,
                    if *public { "infra/openapi.yaml" } else { "the template" },
                    if *public { "the template" } else { "infra/openapi.yaml" },
                ));
            }
        }
    }
    problems
}

/// A parameter object, through its `$ref` (`#/components/parameters/<name>`) if it has one.
fn resolved<'a>(doc: &'a Value, parameter: &'a Value) -> &'a Value {
    match parameter["$ref"].as_str() {
        Some(reference) => {
            let name = reference.trim_start_matches("#/components/parameters/");
            &doc["components"]["parameters"][name]
        }
        None => parameter,
    }
}

/// Each operation's path parameters (its path item's and its own) against the `{names}` of its path.
fn parameter_problems(doc: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for ((method, path), operation) in operations(doc) {
        let in_path: BTreeSet<&str> = path
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let shared_parameters = doc["paths"][path.as_str()]["parameters"].as_sequence();
        let own_parameters = operation["parameters"].as_sequence();
        let declared: BTreeSet<&str> = shared_parameters
            .into_iter()
            .chain(own_parameters)
            .flatten()
            .map(|p| resolved(doc, p))
            .filter(|p| p["in"].as_str() == Some("path") && p["required"].as_bool() == Some(true))
            .filter_map(|p| p["name"].as_str())
            .collect();
        if in_path != declared {
            problems.push(format!(
                "{method} {path}: path parameters {declared:?}, the path has {in_path:?}"
            ));
        }
    }
    problems
}

/// API Gateway's own answers an operation can meet, `(status, message, on public routes too)`: an unsigned or
/// refused SigV4 request (IAM routes only), a body over the 10 MB payload quota, a throttled request (the
/// stage's, the route's or the account's limit). `local_lambda::http_api` answers the same bodies. Its 404
/// `{"message":"Not Found"}` is for a request no route takes, so no operation meets it.
const GATEWAY_ANSWERS: [(&str, &str, bool); 3] = [
    ("403", "Forbidden", false),
    ("413", "Request Entity Too Large", true),
    ("429", "Too Many Requests", true),
];

/// A response object, through its `$ref` (`#/components/responses/<name>`) if it has one.
fn response<'a>(doc: &'a Value, response: &'a Value) -> &'a Value {
    match response["$ref"].as_str() {
        Some(reference) => {
            let name = reference.trim_start_matches("#/components/responses/");
            &doc["components"]["responses"][name]
        }
        None => response,
    }
}

/// Each operation's documentation of API Gateway's answers: the status, an example with API Gateway's exact
/// body, and a schema that admits it (`GatewayError`, alone or in a `oneOf`).
fn gateway_problems(doc: &Value) -> Vec<String> {
    let gateway_schema = Value::String("#/components/schemas/GatewayError".into());
    let mut problems = Vec::new();
    for ((method, path), operation) in operations(doc) {
        let public = is_public(doc, operation);
        for (status, message, on_public) in GATEWAY_ANSWERS {
            if public && !on_public {
                continue;
            }
            let json = &response(doc, &operation["responses"][status])["content"]["application/json"];
            let schema = &json["schema"];
            let admits = schema["$ref"] == gateway_schema
                || schema["oneOf"]
                    .as_sequence()
                    .is_some_and(|one| one.iter().any(|s| s["$ref"] == gateway_schema));
            let body = serde_yaml_ng::to_value(serde_json::json!({ "message": message })).unwrap();
            let shown = json["examples"]
                .as_mapping()
                .is_some_and(|examples| examples.values().any(|e| e["value"] == body));
            if !admits || !shown {
                problems.push(format!(
                    "{method} {path}: {status} from API Gateway ({{\"message\":\"{message}\"}}) is not documented \
                     (schema GatewayError: {admits}, example: {shown})"
                ));
            }
        }
    }
    problems
}

#[test]
fn every_operation_documents_api_gateways_own_answers() {
    let problems = gateway_problems(&openapi());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_route_of_the_functions_is_documented_and_every_documented_operation_served() {
    let problems = route_problems(&openapi(), &served());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_template_routes_exactly_the_documented_operations_with_their_authorization() {
    let problems = template_problems(&openapi(), &template());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_operation_declares_exactly_the_parameters_of_its_path() {
    let problems = parameter_problems(&openapi());
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The values of a documented enum schema (`components.schemas.<name>.enum`).
fn documented_enum(doc: &Value, name: &str) -> Vec<String> {
    let values = doc["components"]["schemas"][name]["enum"].as_sequence();
    values
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_documented_statuses_and_steps_are_those_of_the_code() {
    use payments_core::saga::{SagaStatus, Step};
    use payments_core::PaymentStatus;
    let doc = openapi();
    let payment: Vec<&str> = PaymentStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(documented_enum(&doc, "PaymentStatus"), payment);
    let saga: Vec<&str> = SagaStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(documented_enum(&doc, "SagaStatus"), saga);
    let steps: Vec<&str> = Step::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(documented_enum(&doc, "SagaStep"), steps);
}

#[test]
fn the_checks_catch_a_missing_an_extra_and_a_misauthorized_operation() {
    let routes = served();
    assert!(
        routes.contains(&("POST".into(), "/webhooks/{provider}".into())) && routes.len() > 10,
        "the route tables are read: {routes:?}"
    );
    let mut doc = openapi();
    let paths = doc["paths"].as_mapping_mut().unwrap();
    paths["/payments/{id}/events"].as_mapping_mut().unwrap().remove("get");
    let create = paths["/payments"]["post"].clone();
    paths["/inventory/{sku}"]
        .as_mapping_mut()
        .unwrap()
        .insert("delete".into(), create);
    paths["/payments"]["post"]
        .as_mapping_mut()
        .unwrap()
        .insert("security".into(), Value::Sequence(vec![]));
    paths["/checkouts/{id}"]["parameters"] = Value::Sequence(vec![]);

    let problems = route_problems(&doc, &routes);
    assert!(problems.contains(&"GET /payments/{id}/events: served, but not in infra/openapi.yaml".to_owned()));
    assert!(problems.contains(&"DELETE /inventory/{sku}: documented, but no function's route table has it".to_owned()));

    let mut template = template();
    let events = template["Resources"]["WebhookIntakeFunction"]["Properties"]["Events"]["Webhook"]
        .as_mapping_mut()
        .unwrap();
    events["Properties"].as_mapping_mut().unwrap().remove("Auth");
    let problems = template_problems(&doc, &template);
    for expected in [
        "GET /payments/{id}/events: an HttpApi event, but not in infra/openapi.yaml",
        "DELETE /inventory/{sku}: documented, but no HttpApi event routes it",
        "POST /payments: public in infra/openapi.yaml, not in the template",
        "POST /webhooks/{provider}: public in infra/openapi.yaml, not in the template",
    ] {
        assert!(problems.contains(&expected.to_owned()), "{expected} in {problems:#?}");
    }

    let problems = parameter_problems(&doc);
    assert_eq!(
        problems,
        [r#"GET /checkouts/{id}: path parameters {}, the path has {"id"}"#],
        "the events and cancel routes keep theirs"
    );

    // API Gateway's answers: the functions' shape alone on one route, none at all on another.
    let mut doc = openapi();
    doc["paths"]["/payments/{id}"]["get"]["responses"]["403"] =
        serde_yaml_ng::from_str("content: {application/json: {schema: {$ref: '#/components/schemas/ApiError'}}}")
            .unwrap();
    doc["paths"]["/webhooks/{provider}"]["post"]["responses"]
        .as_mapping_mut()
        .unwrap()
        .remove("429");
    let problems = gateway_problems(&doc);
    for expected in ["GET /payments/{id}: 403", "POST /webhooks/{provider}: 429"] {
        assert!(
            problems.iter().any(|p| p.starts_with(expected)),
            "{expected} in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), 2, "{problems:#?}");
}
