//! A function's environment as CloudFormation gives it, read from `infra/template.yaml` (or a packaged copy):
//! the `Globals` variables overlaid by the function's own, every intrinsic resolved against a [`Stack`] of
//! parameter values (over the template's defaults) and the local counterpart of each resource (a table's name,
//! a queue's URL), conditions decided on those values, `AWS::NoValue` dropped. Whatever it cannot resolve (a
//! parameter without a default that nobody gave, a resource with no local counterpart, an intrinsic it does
//! not know) is an error naming the variable: a function started locally gets exactly what AWS gives it, or
//! nothing starts. The one reader of function environments for everything that runs a function binary
//! locally (CI's cold start of the packaged arm64 `bootstrap`: the `cold-start` binary).

use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// CloudFormation's pseudo parameters, as a local stack in `us-east-1` of moto's account has them (the account
/// of every queue ARN moto gives, and of the envelopes the local EventBridge bus writes).
const PSEUDO_PARAMETERS: [(&str, &str); 4] = [
    ("AWS::Region", "us-east-1"),
    ("AWS::AccountId", crate::account::LOCAL_ACCOUNT),
    ("AWS::Partition", "aws"),
    ("AWS::URLSuffix", "amazonaws.com"),
];

/// What stands in for a deployed stack: parameter values given over the template's defaults (as a
/// samconfig's `parameter_overrides` would), and each resource's local counterpart, keyed as the template
/// refers to it: `PaymentsTable` for `!Ref PaymentsTable`, `PaymentsTable.StreamArn` for its `!GetAtt`.
#[derive(Debug, Clone, Default)]
pub struct Stack {
    pub parameters: BTreeMap<String, String>,
    pub resources: BTreeMap<String, String>,
}

/// A SAM template, parsed.
#[derive(Debug, Clone)]
pub struct Template {
    doc: Value,
}

impl Template {
    /// Reads and parses the template at `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let doc = serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self { doc })
    }

    /// The repository's `infra/template.yaml`.
    pub fn from_repo() -> Result<Self, String> {
        Self::load(&local_testkit::service::repo_root().join("infra/template.yaml"))
    }

    /// The binary `sam build` packages as `function`'s `bootstrap` (`Metadata.BuildProperties.Binary`, the
    /// cargo-lambda build's name of it).
    pub fn binary(&self, function: &str) -> Result<String, String> {
        self.doc["Resources"][function]["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{function} has no Metadata.BuildProperties.Binary"))
    }

    /// The logical ids of the template's `AWS::Serverless::Function` resources, in the template's order.
    pub fn functions(&self) -> Vec<String> {
        self.doc["Resources"]
            .as_mapping()
            .into_iter()
            .flatten()
            .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Serverless::Function"))
            .filter_map(|(name, _)| name.as_str().map(str::to_owned))
            .collect()
    }

    /// The parsed document (for `triggers`, which reads the same template's events).
    pub(crate) fn doc(&self) -> &Value {
        &self.doc
    }

    /// The parsed document, to change in a test.
    #[cfg(test)]
    pub(crate) fn doc_mut(&mut self) -> &mut Value {
        &mut self.doc
    }

    /// The property at `path` under the resource `resource` (`["Properties", "WarmThroughput",
    /// "WriteUnitsPerSecond"]`), every intrinsic in it resolved in a stack standing in as `stack`; `None` when
    /// absent or `AWS::NoValue`. For readers of the template's settings (the capacity model), never a second
    /// copy of them.
    pub fn property(&self, resource: &str, path: &[&str], stack: &Stack) -> Result<Option<Value>, String> {
        let mut value = self.doc["Resources"][resource].clone();
        if value.is_null() {
            return Err(format!("no resource {resource} in the template"));
        }
        let scope = Scope::new(&self.doc, stack);
        let at = |why: String| format!("{resource}.{}: {why}", path.join("."));
        // Each step resolved before it is entered: a `!If` between two settings picks one of them first.
        for key in path {
            let Some(resolved) = scope.resolve(&value).map_err(at)? else {
                return Ok(None);
            };
            value = resolved[*key].clone();
            if value.is_null() {
                return Ok(None);
            }
        }
        scope.resolve(&value).map_err(at)
    }

    /// The value of the stack's output `name` in a stack standing in as `stack`, resolved (a parameter it
    /// states, such as the Stripe rate limit the capacity model checks budgets against); `None` when absent.
    pub fn output(&self, name: &str, stack: &Stack) -> Result<Option<String>, String> {
        let value = &self.doc["Outputs"][name]["Value"];
        if value.is_null() {
            return Ok(None);
        }
        match Scope::new(&self.doc, stack).resolve(value) {
            Ok(Some(resolved)) => scalar(&resolved)
                .map(Some)
                .map_err(|why| format!("output {name}: {why}")),
            Ok(None) => Ok(None),
            Err(why) => Err(format!("output {name}: {why}")),
        }
    }

    /// The `Globals` `MemorySize` of every function, MB.
    pub fn global_memory_mb(&self) -> Option<f64> {
        self.doc["Globals"]["Function"]["MemorySize"].as_f64()
    }

    /// Whether the template's condition `name` holds in a stack standing in as `stack`.
    pub fn condition(&self, name: &str, stack: &Stack) -> Result<bool, String> {
        Scope::new(&self.doc, stack).condition(name)
    }

    /// The one variable `name` that `function` gets in a stack standing in as `stack` (its own, else the
    /// `Globals`'), resolved alone, so a reader of one setting (the capacity model) needs no value for the
    /// parameters the other variables name; `None` when the function does not get it.
    pub fn variable(&self, function: &str, name: &str, stack: &Stack) -> Result<Option<String>, String> {
        let resource = &self.doc["Resources"][function];
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            return Err(format!("{function} is no AWS::Serverless::Function of the template"));
        }
        let own = &resource["Properties"]["Environment"]["Variables"][name];
        let value = if own.is_null() {
            &self.doc["Globals"]["Function"]["Environment"]["Variables"][name]
        } else {
            own
        };
        if value.is_null() {
            return Ok(None);
        }
        match Scope::new(&self.doc, stack).resolve(value) {
            Ok(Some(resolved)) => scalar(&resolved)
                .map(Some)
                .map_err(|why| format!("{function}'s {name}: {why}")),
            Ok(None) => Ok(None),
            Err(why) => Err(format!("{function}'s {name}: {why}")),
        }
    }

    /// The environment `function` gets in a stack standing in as `stack`: `{variable: value}`.
    pub fn environment(&self, function: &str, stack: &Stack) -> Result<BTreeMap<String, String>, String> {
        let resource = &self.doc["Resources"][function];
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            return Err(format!("{function} is no AWS::Serverless::Function of the template"));
        }
        let scope = Scope::new(&self.doc, stack);
        let mut variables = BTreeMap::new();
        for source in [
            &self.doc["Globals"]["Function"]["Environment"]["Variables"],
            &resource["Properties"]["Environment"]["Variables"],
        ] {
            for (name, value) in source.as_mapping().into_iter().flatten() {
                let name = name
                    .as_str()
                    .ok_or_else(|| format!("{function}: a variable name is no string"))?;
                variables.insert(name.to_owned(), value);
            }
        }
        let mut env = BTreeMap::new();
        for (name, value) in variables {
            match scope.resolve(value) {
                Ok(Some(resolved)) => {
                    let value = scalar(&resolved).map_err(|why| format!("{function}'s {name}: {why}"))?;
                    env.insert(name, value);
                }
                Ok(None) => {}
                Err(why) => return Err(format!("{function}'s {name}: {why}")),
            }
        }
        Ok(env)
    }
}

/// The `parameter_overrides` of samconfig.toml's `[<env>.deploy.parameters]` (`Key=Value` words, quoted as a
/// shell would), as `sam deploy --config-env <env>` takes them; none when the file or the environment has none.
/// The one reader of them: the local world starts with them, the capacity model sizes with them.
pub fn samconfig_parameters(path: &Path, env: &str) -> Result<BTreeMap<String, String>, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(BTreeMap::new());
    };
    let config: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let overrides = config
        .get(env)
        .and_then(|e| e.get("deploy"))
        .and_then(|d| d.get("parameters"))
        .and_then(|p| p.get("parameter_overrides"))
        .and_then(toml::Value::as_str)
        .unwrap_or_default();
    let words = shlex::split(overrides).ok_or_else(|| format!("{}: {env}'s parameter_overrides", path.display()))?;
    words
        .iter()
        .map(|word| {
            word.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| {
                    format!(
                        "{}: {word} in {env}'s parameter_overrides is no Key=Value",
                        path.display()
                    )
                })
        })
        .collect()
}

/// A resolved value as an environment variable holds it.
fn scalar(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(format!("{other:?} is no scalar")),
    }
}

/// The parameters (defaults, then the stack's values, then the pseudo parameters), the resources and the
/// conditions one resolution sees (also `triggers`' for the properties of a function's events).
pub(crate) struct Scope<'a> {
    parameters: BTreeMap<String, Option<String>>,
    resources: &'a BTreeMap<String, String>,
    conditions: &'a Value,
}

impl<'a> Scope<'a> {
    pub(crate) fn new(doc: &'a Value, stack: &'a Stack) -> Self {
        let mut parameters: BTreeMap<String, Option<String>> = doc["Parameters"]
            .as_mapping()
            .into_iter()
            .flatten()
            .filter_map(|(name, p)| Some((name.as_str()?.to_owned(), p.get("Default").and_then(|d| scalar(d).ok()))))
            .collect();
        for (name, value) in &stack.parameters {
            parameters.insert(name.clone(), Some(value.clone()));
        }
        for (name, value) in PSEUDO_PARAMETERS {
            parameters.insert(name.to_owned(), Some(value.to_owned()));
        }
        Self {
            parameters,
            resources: &stack.resources,
            conditions: &doc["Conditions"],
        }
    }

    /// `value` with every intrinsic applied; `None` for `AWS::NoValue`.
    pub(crate) fn resolve(&self, value: &Value) -> Result<Option<Value>, String> {
        let Some((function, argument)) = intrinsic(value) else {
            return Ok(Some(value.clone()));
        };
        match function.as_str() {
            "Ref" => {
                let name = argument.as_str().ok_or("Ref of no name")?;
                if name == "AWS::NoValue" {
                    return Ok(None);
                }
                self.reference(name).map(|v| Some(Value::String(v)))
            }
            "Fn::GetAtt" => {
                let key = match argument {
                    Value::String(dotted) => dotted.clone(),
                    Value::Sequence(parts) => parts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("."),
                    other => return Err(format!("GetAtt of {other:?}")),
                };
                self.resource(&key).map(|v| Some(Value::String(v)))
            }
            "Fn::If" => {
                let [name, then, otherwise] = argument.as_sequence().map(Vec::as_slice).unwrap_or_default() else {
                    return Err("Fn::If takes [condition, then, else]".into());
                };
                let name = name.as_str().ok_or("Fn::If names no condition")?;
                self.resolve(if self.condition(name)? { then } else { otherwise })
            }
            "Fn::Sub" => self.sub(argument).map(|s| Some(Value::String(s))),
            other => Err(format!("the intrinsic {other} is not resolved locally")),
        }
    }

    /// A `Ref`: a parameter's value, or a resource's local counterpart.
    fn reference(&self, name: &str) -> Result<String, String> {
        match self.parameters.get(name) {
            Some(Some(value)) => Ok(value.clone()),
            Some(None) => Err(format!("the parameter {name} has no default and no value was given")),
            None => self.resource(name),
        }
    }

    fn resource(&self, key: &str) -> Result<String, String> {
        self.resources
            .get(key)
            .cloned()
            .ok_or_else(|| format!("the resource {key} has no local counterpart"))
    }

    /// `Fn::Sub` of a string, `${Name}` and `${Resource.Attribute}` replaced (`${!Literal}` kept literal).
    fn sub(&self, argument: &Value) -> Result<String, String> {
        let text = argument
            .as_str()
            .ok_or("Fn::Sub with a variable map is not resolved locally")?;
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let tail = &rest[start + 2..];
            let end = tail.find('}').ok_or_else(|| format!("unclosed ${{ in {text}"))?;
            let name = &tail[..end];
            match name.strip_prefix('!') {
                Some(literal) => out.push_str(&format!("${{{literal}}}")),
                None if name.contains('.') => out.push_str(&self.resource(name)?),
                None => out.push_str(&self.reference(name)?),
            }
            rest = &tail[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The template's condition `name`, decided on the parameters.
    pub(crate) fn condition(&self, name: &str) -> Result<bool, String> {
        let expression = self
            .conditions
            .get(name)
            .ok_or_else(|| format!("no condition {name} in the template"))?;
        self.truth(expression)
    }

    fn truth(&self, expression: &Value) -> Result<bool, String> {
        let (function, argument) = intrinsic(expression).ok_or_else(|| format!("{expression:?} is no condition"))?;
        let items = || argument.as_sequence().map(Vec::as_slice).unwrap_or_default();
        match function.as_str() {
            "Fn::Equals" => {
                let [a, b] = items() else {
                    return Err("Fn::Equals takes two values".into());
                };
                let side = |v| {
                    self.resolve(v)?
                        .as_ref()
                        .map(scalar)
                        .transpose()
                        .map(Option::unwrap_or_default)
                };
                Ok(side(a)? == side(b)?)
            }
            "Fn::Not" => Ok(!self.truth(items().first().ok_or("Fn::Not of nothing")?)?),
            "Fn::And" => items().iter().try_fold(true, |all, e| Ok(all && self.truth(e)?)),
            "Fn::Or" => items().iter().try_fold(false, |any, e| Ok(any || self.truth(e)?)),
            "Condition" => self.condition(argument.as_str().ok_or("Condition of no name")?),
            other => Err(format!("the condition function {other} is not decided locally")),
        }
    }
}

/// An intrinsic function call in either form (`!Ref X` or `{Ref: X}`; `!If` or `{Fn::If: ...}`): its full
/// name and argument.
pub(crate) fn intrinsic(value: &Value) -> Option<(String, &Value)> {
    match value {
        Value::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            let short = tag.trim_start_matches('!');
            let full = if matches!(short, "Ref" | "Condition") {
                short.to_owned()
            } else {
                format!("Fn::{short}")
            };
            Some((full, &tagged.value))
        }
        Value::Mapping(map) if map.len() == 1 => {
            let (key, argument) = map.iter().next()?;
            let key = key.as_str()?;
            (key == "Ref" || key == "Condition" || key.starts_with("Fn::")).then(|| (key.to_owned(), argument))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
Parameters:
  Stage: {Type: String, Default: dev}
  Mode: {Type: String, Default: off}
  SecretArn: {Type: String}
Conditions:
  IsProd: !Equals [!Ref Stage, prod]
  ModeOn: !Not [!Equals [!Ref Mode, "off"]]
  Either: !Or [!Condition IsProd, !Condition ModeOn]
Globals:
  Function:
    Environment:
      Variables:
        TABLE_NAME: !Ref Table
        STAGE: !Ref Stage
        TIMEOUT: 10
Resources:
  Table: {Type: AWS::DynamoDB::Table}
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          TIMEOUT: "25"
          SECRET: !Ref SecretArn
          LIVE: !If [IsProd, "true", "false"]
          EXTRA: !If [ModeOn, !Ref Mode, !Ref AWS::NoValue]
          EITHER: !If [Either, yes-either, no-either]
          STREAM: !GetAtt Table.StreamArn
          NAME: !Sub "payments-${Stage}-${AWS::Region}"
          LONG: {"Fn::If": ["IsProd", {"Ref": "Stage"}, "not-prod"]}
  Other:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          PICKED: !Select [0, [a, b]]
"#;

    fn template() -> Template {
        Template {
            doc: serde_yaml_ng::from_str(TEMPLATE).expect("test template"),
        }
    }

    fn stack(parameters: &[(&str, &str)]) -> Stack {
        let own = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Stack {
            parameters: own(parameters),
            resources: own(&[("Table", "local-table"), ("Table.StreamArn", "arn:local:stream")]),
        }
    }

    #[test]
    fn globals_then_the_functions_own_variables_resolved_at_the_defaults() {
        let env = template()
            .environment("Fn", &stack(&[("SecretArn", "arn:secret")]))
            .expect("resolved");
        let expected: BTreeMap<String, String> = [
            ("TABLE_NAME", "local-table"),
            ("STAGE", "dev"),
            ("TIMEOUT", "25"),
            ("SECRET", "arn:secret"),
            ("LIVE", "false"),
            ("EITHER", "no-either"),
            ("STREAM", "arn:local:stream"),
            ("NAME", "payments-dev-us-east-1"),
            ("LONG", "not-prod"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(env, expected, "EXTRA is AWS::NoValue with Mode off: absent");
    }

    #[test]
    fn given_parameters_decide_the_conditions() {
        let env = template()
            .environment(
                "Fn",
                &stack(&[("SecretArn", "arn:secret"), ("Stage", "prod"), ("Mode", "fast")]),
            )
            .expect("resolved");
        assert_eq!(env["LIVE"], "true");
        assert_eq!(env["EXTRA"], "fast");
        assert_eq!(env["EITHER"], "yes-either");
        assert_eq!(env["LONG"], "prod");
        assert_eq!(env["NAME"], "payments-prod-us-east-1");
    }

    #[test]
    fn what_cannot_be_resolved_is_named() {
        let t = template();
        let err = t.environment("Fn", &stack(&[])).expect_err("SecretArn has no default");
        assert!(
            err.contains("Fn's SECRET") && err.contains("SecretArn has no default"),
            "{err}"
        );
        let mut no_table = stack(&[("SecretArn", "arn:secret")]);
        no_table.resources.remove("Table");
        let err = t.environment("Fn", &no_table).expect_err("no table");
        assert!(
            err.contains("TABLE_NAME") && err.contains("Table has no local counterpart"),
            "{err}"
        );
        let err = t.environment("Other", &stack(&[])).expect_err("Fn::Select");
        assert!(err.contains("Other's PICKED") && err.contains("Fn::Select"), "{err}");
        let err = t.environment("Table", &stack(&[])).expect_err("no function");
        assert!(err.contains("no AWS::Serverless::Function"), "{err}");
        assert_eq!(t.functions(), ["Fn", "Other"]);
    }

    #[test]
    fn samconfig_environments_give_their_overrides() {
        let path = local_testkit::service::repo_root().join("samconfig.toml");
        let dev = samconfig_parameters(&path, "dev").unwrap();
        assert_eq!(dev.get("Stage").map(String::as_str), Some("dev"));
        assert_eq!(dev.get("LogRetentionDays").map(String::as_str), Some("14"));
        let prod = samconfig_parameters(&path, "prod").unwrap();
        assert_eq!(prod.get("Stage").map(String::as_str), Some("prod"));
        assert!(samconfig_parameters(&path, "nowhere").unwrap().is_empty());
    }

    #[test]
    fn a_property_is_read_with_its_intrinsics_resolved() {
        let t = template();
        let none = stack(&[]);
        assert_eq!(t.property("Fn", &["Properties", "Missing"], &none).unwrap(), None);
        let live = t.property("Fn", &["Properties", "Environment", "Variables", "LIVE"], &none);
        assert_eq!(live.unwrap(), Some(Value::String("false".into())));
        assert!(t.property("Nothing", &["Properties"], &none).is_err());
        assert!(t.condition("IsProd", &stack(&[("Stage", "prod")])).unwrap());
    }

    #[test]
    fn the_repositorys_payments_api_gets_its_providers_by_stage() {
        // Issue 32: the payments API once had no WEBHOOK_PROVIDERS in the template and ran on a built-in
        // default; the environment read here is the template's, so it shows the stage's providers.
        let t = Template::from_repo().expect("infra/template.yaml");
        let mut stack = Stack::default();
        stack.parameters.insert(
            "OrchestratorRoleArn".into(),
            "arn:aws:iam::123456789012:role/checkout-orchestrator".into(),
        );
        stack.resources.insert("PaymentsTable".into(), "payments-local".into());
        let dev = t.environment("PaymentsApiFunction", &stack).expect("dev");
        assert_eq!(
            dev["WEBHOOK_PROVIDERS"],
            r#"[{"name":"stripe","scheme":"stripe","livemode":false}]"#
        );
        assert_eq!(dev["TABLE_NAME"], "payments-local");
        assert_eq!(dev["STAGE"], "dev");
        stack.parameters.insert("Stage".into(), "prod".into());
        let prod = t.environment("PaymentsApiFunction", &stack).expect("prod");
        assert_eq!(
            prod["WEBHOOK_PROVIDERS"],
            r#"[{"name":"stripe","scheme":"stripe","livemode":true}]"#
        );
        assert!(t.functions().len() >= 8, "{:?}", t.functions());
    }
}
