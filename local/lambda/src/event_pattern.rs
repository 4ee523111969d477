//! Lambda's event filtering (an event source mapping's `FilterCriteria`, the same grammar as EventBridge's
//! patterns): a pattern object whose keys follow the record's fields and whose leaves are lists of
//! alternatives: a value (equal to the field, or to one element of a list field), or one of the operators
//! `prefix`, `suffix`, `equals-ignore-case`, `anything-but`, `numeric`, `exists`. A pattern using anything else
//! is refused when it is read, naming the operator: the local world never guesses what a filter lets through.

use serde_json::{Map, Value};

/// The operators emulated; any other is refused by name.
const OPERATORS: [&str; 6] = [
    "prefix",
    "suffix",
    "equals-ignore-case",
    "anything-but",
    "numeric",
    "exists",
];

/// A filter pattern, checked to use only what is emulated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPattern(Map<String, Value>);

impl EventPattern {
    /// Parses `text` (a `FilterCriteria` `Pattern`); an error names what is not emulated.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("the filter pattern {text}: {e}"))?;
        let Value::Object(pattern) = value else {
            return Err(format!("the filter pattern {text} is no JSON object"));
        };
        check(&pattern, "")?;
        Ok(Self(pattern))
    }

    /// Whether `record` passes the filter.
    #[must_use]
    pub fn matches(&self, record: &Value) -> bool {
        object_matches(&self.0, record)
    }
}

/// Every leaf of `pattern` is a list of values or known operators; errors name the field (`at`).
fn check(pattern: &Map<String, Value>, at: &str) -> Result<(), String> {
    for (key, value) in pattern {
        let here = format!("{at}{key}");
        match value {
            Value::Object(inner) => check(inner, &format!("{here}."))?,
            Value::Array(alternatives) => {
                for alternative in alternatives {
                    let Value::Object(operator) = alternative else { continue };
                    let name = operator.keys().next().map_or("", String::as_str);
                    if operator.len() != 1 || !OPERATORS.contains(&name) {
                        return Err(format!(
                            "the filter operator {name:?} at {here} is not emulated locally"
                        ));
                    }
                }
            }
            other => {
                return Err(format!(
                    "the filter pattern's {here} is {other}, not a list of alternatives"
                ))
            }
        }
    }
    Ok(())
}

fn object_matches(pattern: &Map<String, Value>, record: &Value) -> bool {
    pattern.iter().all(|(key, wanted)| {
        let field = record.get(key);
        match wanted {
            Value::Object(inner) => field.is_some_and(|f| object_matches(inner, f)),
            Value::Array(alternatives) => alternatives.iter().any(|a| leaf_matches(a, field)),
            _ => false,
        }
    })
}

/// One alternative against the field (absent: `None`); a list field matches when one element does.
fn leaf_matches(alternative: &Value, field: Option<&Value>) -> bool {
    let Value::Object(operator) = alternative else {
        return values(field).any(|v| same(v, alternative));
    };
    let Some((name, argument)) = operator.iter().next() else {
        return false;
    };
    match name.as_str() {
        "exists" => argument.as_bool() == Some(field.is_some()),
        "anything-but" => field.is_some() && !values(field).any(|v| anything_but_hits(argument, v)),
        "numeric" => values(field).any(|v| v.as_f64().is_some_and(|n| numeric(argument, n))),
        _ => values(field).any(|v| v.as_str().is_some_and(|s| text_matches(name, argument, s))),
    }
}

/// The field's values: its elements when it is a list, else itself.
fn values(field: Option<&Value>) -> Box<dyn Iterator<Item = &Value> + '_> {
    match field {
        Some(Value::Array(items)) => Box::new(items.iter()),
        Some(value) => Box::new(std::iter::once(value)),
        None => Box::new(std::iter::empty()),
    }
}

/// Equal as the filter compares: numbers by value, everything else exactly.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() < f64::EPSILON,
        _ => a == b,
    }
}

fn text_matches(operator: &str, argument: &Value, text: &str) -> bool {
    let Some(wanted) = argument.as_str() else { return false };
    match operator {
        "prefix" => text.starts_with(wanted),
        "suffix" => text.ends_with(wanted),
        "equals-ignore-case" => text.eq_ignore_ascii_case(wanted),
        _ => false,
    }
}

/// Whether `value` is one `anything-but` excludes: one of its values, or (`{"prefix": p}`) one starting so.
fn anything_but_hits(argument: &Value, value: &Value) -> bool {
    match argument {
        Value::Array(excluded) => excluded.iter().any(|e| same(e, value)),
        Value::Object(inner) => inner
            .get("prefix")
            .and_then(Value::as_str)
            .is_some_and(|p| value.as_str().is_some_and(|s| s.starts_with(p))),
        single => same(single, value),
    }
}

/// `[">", 0, "<=", 5]`: every comparison holds.
fn numeric(argument: &Value, n: f64) -> bool {
    let Some(terms) = argument.as_array() else { return false };
    terms.chunks(2).all(|pair| match pair {
        [Value::String(op), bound] => bound.as_f64().is_some_and(|b| match op.as_str() {
            "=" => (n - b).abs() < f64::EPSILON,
            ">" => n > b,
            ">=" => n >= b,
            "<" => n < b,
            "<=" => n <= b,
            _ => false,
        }),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The outbox relay's filter in infra/template.yaml.
    const OUTBOX: &str = r#"{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"entity": {"S": ["event"]}}}}"#;

    fn record(name: &str, entity: &str) -> Value {
        json!({"eventName": name, "dynamodb": {"NewImage": {"entity": {"S": entity}, "pk": {"S": "PAY#1"}}}})
    }

    #[test]
    fn the_outbox_filter_passes_inserted_events_only() {
        let pattern = EventPattern::parse(OUTBOX).expect("the template's pattern");
        assert!(pattern.matches(&record("INSERT", "event")));
        assert!(!pattern.matches(&record("MODIFY", "event")));
        assert!(!pattern.matches(&record("INSERT", "payment")));
        assert!(!pattern.matches(&json!({"eventName": "REMOVE", "dynamodb": {"OldImage": {}}})));
    }

    #[test]
    fn each_operator_as_lambda_applies_it() {
        let cases = [
            (
                r#"{"a": [{"prefix": "pay_"}]}"#,
                json!({"a": "pay_1"}),
                json!({"a": "ord_1"}),
            ),
            (
                r#"{"a": [{"suffix": ".json"}]}"#,
                json!({"a": "x.json"}),
                json!({"a": "x.txt"}),
            ),
            (
                r#"{"a": [{"equals-ignore-case": "ok"}]}"#,
                json!({"a": "OK"}),
                json!({"a": "no"}),
            ),
            (
                r#"{"a": [{"anything-but": ["x", "y"]}]}"#,
                json!({"a": "z"}),
                json!({"a": "y"}),
            ),
            (
                r#"{"a": [{"anything-but": {"prefix": "t"}}]}"#,
                json!({"a": "s"}),
                json!({"a": "t1"}),
            ),
            (
                r#"{"a": [{"numeric": [">", 0, "<=", 5]}]}"#,
                json!({"a": 5}),
                json!({"a": 6}),
            ),
            (r#"{"a": [{"exists": true}]}"#, json!({"a": null}), json!({"b": 1})),
            (r#"{"a": [{"exists": false}]}"#, json!({"b": 1}), json!({"a": 1})),
            (r#"{"a": ["x", 2]}"#, json!({"a": ["w", "x"]}), json!({"a": ["w"]})),
            (r#"{"a": [2]}"#, json!({"a": 2.0}), json!({"a": "2"})),
        ];
        for (text, passes, stopped) in cases {
            let pattern = EventPattern::parse(text).expect(text);
            assert!(pattern.matches(&passes), "{text} should pass {passes}");
            assert!(!pattern.matches(&stopped), "{text} should stop {stopped}");
        }
    }

    #[test]
    fn an_operator_not_emulated_is_refused_by_name() {
        let err = EventPattern::parse(r#"{"dynamodb": {"Keys": [{"cidr": "10.0.0.0/24"}]}}"#).expect_err("cidr");
        assert!(err.contains("\"cidr\" at dynamodb.Keys is not emulated"), "{err}");
        let err = EventPattern::parse(r#"{"a": "INSERT"}"#).expect_err("no list");
        assert!(err.contains("not a list of alternatives"), "{err}");
        assert!(EventPattern::parse("[1]").is_err());
    }
}
