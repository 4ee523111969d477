//! How the trigger readers read a property: resolved against the stack (`template::Scope`), refused by name
//! when the local world does not emulate it, every error naming where it was read (`at`: the function, or
//! the function's event). The readers of each trigger kind (`route`, `mapping`, `scheduler`) are plain
//! functions over a [`Reader`].

use crate::template::{intrinsic, Scope};
use serde_yaml_ng::Value;

/// Reads one function's (or one event's, or the API's) properties, errors naming where (`at`).
pub(crate) struct Reader<'a> {
    pub(crate) doc: &'a Value,
    pub(crate) scope: &'a Scope<'a>,
    pub(crate) at: String,
}

impl Reader<'_> {
    /// Refuses any key of `map` not in `known`, naming it.
    pub(crate) fn only(&self, map: &Value, known: &[&str]) -> Result<(), String> {
        for key in map.as_mapping().into_iter().flatten().map(|(k, _)| k) {
            let key = key.as_str().unwrap_or_default();
            if !known.contains(&key) {
                return Err(format!("{}: the property {key} is not emulated locally", self.at));
            }
        }
        Ok(())
    }

    /// `DestinationConfig: {OnFailure: {Type: SQS, Destination: !GetAtt Queue.Arn}}`: the queue's logical id.
    pub(crate) fn on_failure(&self, config: &Value) -> Result<Option<String>, String> {
        self.only(config, &["OnFailure"])?;
        let on_failure = &config["OnFailure"];
        if on_failure.is_null() {
            return Ok(None);
        }
        self.only(on_failure, &["Type", "Destination"])?;
        match self.text(&on_failure["Type"])?.as_deref() {
            Some("SQS") => self.logical_id(&on_failure["Destination"], "Destination").map(Some),
            other => Err(format!(
                "{}: an on-failure destination of type {other:?} is not emulated locally",
                self.at
            )),
        }
    }

    /// The resource `!Ref X` or `!GetAtt X.Attribute` names: `X`.
    pub(crate) fn logical_id(&self, value: &Value, what: &str) -> Result<String, String> {
        let named = intrinsic(value).and_then(|(function, argument)| match (function.as_str(), argument) {
            ("Ref", Value::String(name)) => Some(name.clone()),
            ("Fn::GetAtt", Value::String(dotted)) => dotted.split('.').next().map(str::to_owned),
            ("Fn::GetAtt", Value::Sequence(parts)) => parts.first().and_then(Value::as_str).map(str::to_owned),
            _ => None,
        });
        named.ok_or_else(|| format!("{}: {what} names no resource of the template", self.at))
    }

    /// A value resolved to its text; `None` when absent or `AWS::NoValue`.
    pub(crate) fn text(&self, value: &Value) -> Result<Option<String>, String> {
        if value.is_null() {
            return Ok(None);
        }
        let resolved = self.scope.resolve(value).map_err(|why| format!("{}: {why}", self.at))?;
        Ok(resolved.and_then(|v| match v {
            Value::String(s) => Some(s),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }))
    }

    pub(crate) fn needed(&self, value: &Value, what: &str) -> Result<String, String> {
        self.text(value)?.ok_or_else(|| format!("{}: no {what}", self.at))
    }

    pub(crate) fn count(&self, value: &Value) -> Result<Option<u64>, String> {
        self.text(value)?
            .map(|t| {
                t.parse()
                    .map_err(|_| format!("{}: {t} is no count of seconds or items", self.at))
            })
            .transpose()
    }

    /// A number where -1 means unlimited (`None`), as the stream mapping's retries and record age.
    pub(crate) fn signed(&self, value: &Value) -> Result<Option<u64>, String> {
        match self.text(value)?.as_deref() {
            None | Some("-1") => Ok(None),
            Some(_) => self.count(value),
        }
    }
}
