//! Stripe's own description of the requests it accepts, for the operations our client calls: the subset of
//! Stripe's OpenAPI description vendored in `spec/stripe-subset.json` (pinned commit in `spec/README.md`).
//!
//! One source for two uses: the simulator refuses what the description does not declare (an unknown
//! parameter is Stripe's 400 `parameter_unknown`, a wrong type or a missing required parameter a 400 too),
//! and the tests check every request our `StripeClient` really sent against it. So a parameter the client
//! invents, misspells or sends with the wrong type fails here as it would fail at Stripe, not only when the
//! simulator's hand-written parsing happens to notice.
//!
//! Form keys are read as Stripe's form encoding writes them: `metadata[k]` is property `k` of the object
//! `metadata`, `expand[]` / `expand[0]` an item of the array `expand`, `created[gte]` a property of `created`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The vendored subset (see `spec/README.md`).
const SUBSET: &str = include_str!("../spec/stripe-subset.json");

/// Why a request is not one Stripe accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A form key the operation does not declare (`param` is the key up to the unknown part).
    Unknown { param: String },
    /// A declared parameter whose value does not have the declared type, enum or length.
    Invalid { param: String, expected: String },
    /// A required parameter (top level, or inside an object that was sent) is missing.
    Missing { param: String },
}

impl Violation {
    /// The form key the violation is about, as Stripe names it in `param`.
    pub fn param(&self) -> &str {
        match self {
            Self::Unknown { param } | Self::Invalid { param, .. } | Self::Missing { param } => param,
        }
    }
}

/// One operation of the subset: its query parameters (GET) or form body schema (POST).
#[derive(Debug, Clone, Copy)]
pub struct Operation<'a> {
    /// Stripe's `operationId` (`PostPaymentIntents`, ...).
    pub id: &'a str,
    method: &'a str,
    op: &'a Value,
}

/// The vendored subset, parsed once. `None` only if the file embedded at build time is not JSON (a test
/// catches that).
pub fn subset() -> Option<&'static Value> {
    static PARSED: OnceLock<Option<Value>> = OnceLock::new();
    PARSED.get_or_init(|| serde_json::from_str(SUBSET).ok()).as_ref()
}

/// Whether `path` matches the template `route` (`/v1/payment_intents/{intent}`).
fn matches(route: &str, path: &str) -> bool {
    let (r, p): (Vec<&str>, Vec<&str>) = (route.split('/').collect(), path.split('/').collect());
    r.len() == p.len()
        && r.iter()
            .zip(&p)
            .all(|(r, p)| r == p || (r.starts_with('{') && !p.is_empty()))
}

/// The operation serving `method` `path`, if the subset has it. A literal route wins over a template
/// (`/v1/payment_intents/search` is not the PaymentIntent `search`).
pub fn operation(method: &str, path: &str) -> Option<Operation<'static>> {
    let paths = subset()?.get("paths")?.as_object()?;
    let method = method.to_ascii_lowercase();
    let mut found: Vec<(&String, &Value)> = paths.iter().filter(|(route, _)| matches(route, path)).collect();
    found.sort_by_key(|(route, _)| route.contains('{'));
    let ops = found
        .into_iter()
        .map(|(_, ops)| ops)
        .find(|ops| ops.get(&method).is_some())?;
    let (method, op) = ops.as_object()?.get_key_value(&method)?;
    Some(Operation {
        id: op.get("operationId").and_then(Value::as_str).unwrap_or("unknown"),
        method,
        op,
    })
}

/// `a[b][]` as `("a", ["b", ""])`.
fn split_key(key: &str) -> (&str, Vec<&str>) {
    let Some(open) = key.find('[') else {
        return (key, Vec::new());
    };
    let (name, rest) = key.split_at(open);
    let parts = rest
        .split('[')
        .filter(|s| !s.is_empty())
        .map(|s| s.strip_suffix(']').unwrap_or(s))
        .collect();
    (name, parts)
}

impl Operation<'_> {
    /// The top-level parameters a request may send: `(name, schema, required)`.
    fn declared(&self) -> Vec<(&str, &Value, bool)> {
        if self.method == "get" {
            let params = self.op.get("parameters").and_then(Value::as_array);
            return params
                .into_iter()
                .flatten()
                .filter(|p| p.get("in").and_then(Value::as_str) == Some("query"))
                .filter_map(|p| {
                    let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
                    Some((p.get("name")?.as_str()?, p.get("schema")?, required))
                })
                .collect();
        }
        let body = self.op.get("requestBody");
        let required: Vec<&str> = body
            .and_then(|b| b.get("required"))
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let props = body.and_then(|b| b.get("properties")).and_then(Value::as_object);
        props
            .into_iter()
            .flatten()
            .map(|(name, schema)| (name.as_str(), schema, required.contains(&name.as_str())))
            .collect()
    }

    /// Every way `params` (form keys and values as sent) breaks this operation's description; empty when
    /// Stripe would accept the request's shape.
    pub fn check(&self, params: &BTreeMap<String, String>) -> Vec<Violation> {
        let declared = self.declared();
        let mut violations = Vec::new();
        for (key, value) in params {
            let (name, parts) = split_key(key);
            match declared.iter().find(|(n, _, _)| *n == name) {
                None => violations.push(Violation::Unknown { param: name.to_owned() }),
                Some((_, schema, _)) => {
                    if let Err(v) = walk(schema, name, &parts, value) {
                        violations.push(v);
                    }
                }
            }
        }
        for (name, schema, required) in declared {
            let sent: Vec<&str> = params
                .keys()
                .filter(|k| split_key(k).0 == name)
                .map(String::as_str)
                .collect();
            if required && sent.is_empty() {
                violations.push(Violation::Missing { param: name.to_owned() });
            }
            if !sent.is_empty() {
                missing_inside(schema, name, &sent, &mut violations);
            }
        }
        violations
    }
}

/// The object alternative of `schema` (itself, or one of its `anyOf`), if any.
fn object_of(schema: &Value) -> Option<&Value> {
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        return Some(schema);
    }
    schema
        .get("anyOf")
        .and_then(Value::as_array)?
        .iter()
        .find_map(object_of)
}

/// Required properties of an object that was sent (`automatic_payment_methods[enabled]`), one level down.
fn missing_inside(schema: &Value, name: &str, sent: &[&str], violations: &mut Vec<Violation>) {
    let Some(object) = object_of(schema) else {
        return;
    };
    if !sent.iter().any(|k| k.len() > name.len()) {
        return;
    }
    for req in object.get("required").and_then(Value::as_array).into_iter().flatten() {
        let Some(req) = req.as_str() else { continue };
        let key = format!("{name}[{req}]");
        if !sent.iter().any(|k| k.starts_with(&key)) {
            violations.push(Violation::Missing { param: key });
        }
    }
}

/// Checks `value` sent under `name[parts...]` against `schema`.
fn walk(schema: &Value, name: &str, parts: &[&str], value: &str) -> Result<(), Violation> {
    if let Some(alternatives) = schema.get("anyOf").and_then(Value::as_array) {
        let mut errors = Vec::new();
        for alt in alternatives {
            match walk(alt, name, parts, value) {
                Ok(()) => return Ok(()),
                Err(e) => errors.push(e),
            }
        }
        // A type mismatch says more than "unknown" from an alternative that has no such key.
        let invalid = errors.iter().position(|e| matches!(e, Violation::Invalid { .. }));
        return Err(match invalid {
            Some(i) => errors.swap_remove(i),
            None => errors
                .into_iter()
                .next()
                .unwrap_or(Violation::Unknown { param: name.to_owned() }),
        });
    }
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let Some((head, rest)) = parts.split_first() else {
        return leaf(schema, kind, name, value);
    };
    let here = format!("{name}[{head}]");
    match kind {
        "object" => {
            let inner = schema
                .get("properties")
                .and_then(|p| p.get(*head))
                .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
            match inner {
                Some(inner) => walk(inner, &here, rest, value),
                None => Err(Violation::Unknown { param: here }),
            }
        }
        "array" if head.is_empty() || head.bytes().all(|b| b.is_ascii_digit()) => {
            let items = schema.get("items").unwrap_or(&Value::Null);
            walk(items, &here, rest, value)
        }
        _ => Err(Violation::Unknown { param: here }),
    }
}

/// A value sent for a schema with no further structure.
fn leaf(schema: &Value, kind: &str, name: &str, value: &str) -> Result<(), Violation> {
    let invalid = |expected: String| {
        Err(Violation::Invalid {
            param: name.to_owned(),
            expected,
        })
    };
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.iter().any(|a| a.as_str() == Some(value)) {
            let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
            return invalid(format!("one of {}", names.join(", ")));
        }
    }
    let max = schema.get("maxLength").and_then(Value::as_u64);
    match kind {
        "integer" if value.parse::<i64>().is_err() => invalid("an integer".into()),
        "number" if value.parse::<f64>().is_err() => invalid("a number".into()),
        "boolean" if value != "true" && value != "false" => invalid("a boolean (true or false)".into()),
        "object" | "array" => invalid(format!("an {kind}, sent as {name}[...]")),
        "string" if max.is_some_and(|m| value.chars().count() as u64 > m) => {
            invalid(format!("a string of at most {} characters", max.unwrap_or(0)))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_subset_parses_and_holds_every_operation_the_simulator_serves() {
        assert!(subset().is_some(), "spec/stripe-subset.json is JSON");
        for (method, path, id) in [
            ("POST", "/v1/payment_intents", "PostPaymentIntents"),
            ("GET", "/v1/payment_intents/pi_1", "GetPaymentIntentsIntent"),
            ("GET", "/v1/payment_intents/search", "GetPaymentIntentsSearch"),
            (
                "POST",
                "/v1/payment_intents/pi_1/cancel",
                "PostPaymentIntentsIntentCancel",
            ),
            ("POST", "/v1/refunds", "PostRefunds"),
            ("GET", "/v1/refunds", "GetRefunds"),
            ("GET", "/v1/refunds/re_1", "GetRefundsRefund"),
            ("GET", "/v1/events", "GetEvents"),
        ] {
            assert_eq!(operation(method, path).map(|o| o.id), Some(id), "{method} {path}");
        }
        assert!(operation("DELETE", "/v1/refunds").is_none());
        assert!(operation("GET", "/v1/customers").is_none());
    }

    #[test]
    fn declared_parameters_with_their_types_pass() {
        let create = operation("POST", "/v1/payment_intents").unwrap();
        let ok = params(&[
            ("amount", "1000"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("payment_method", "pm_card_visa"),
            ("metadata[payment_id]", "pay_1"),
            ("automatic_payment_methods[enabled]", "true"),
            ("automatic_payment_methods[allow_redirects]", "never"),
            ("payment_method_types[]", "card"),
            ("expand[0]", "latest_charge"),
        ]);
        assert_eq!(create.check(&ok), vec![]);
        let events = operation("GET", "/v1/events").unwrap();
        let ok = params(&[
            ("created[gte]", "1700000000"),
            ("types[]", "refund.failed"),
            ("limit", "100"),
        ]);
        assert_eq!(events.check(&ok), vec![]);
    }

    #[test]
    fn unknown_mistyped_and_missing_parameters_are_violations() {
        let create = operation("POST", "/v1/payment_intents").unwrap();
        let bad = params(&[
            ("amount", "10.50"),
            ("confirm", "yes"),
            ("colour", "red"),
            ("metadata", "x"),
            ("automatic_payment_methods[allow_redirects]", "sometimes"),
            ("automatic_payment_methods[color]", "red"),
        ]);
        let got = create.check(&bad);
        let expect = [
            Violation::Invalid {
                param: "amount".into(),
                expected: "an integer".into(),
            },
            Violation::Invalid {
                param: "confirm".into(),
                expected: "a boolean (true or false)".into(),
            },
            Violation::Unknown { param: "colour".into() },
            Violation::Invalid {
                param: "automatic_payment_methods[allow_redirects]".into(),
                expected: "one of always, never".into(),
            },
            Violation::Unknown {
                param: "automatic_payment_methods[color]".into(),
            },
            Violation::Missing {
                param: "currency".into(),
            },
            Violation::Missing {
                param: "automatic_payment_methods[enabled]".into(),
            },
        ];
        for v in &expect {
            assert!(got.contains(v), "{v:?} in {got:?}");
        }
        // `metadata=x`: a string where Stripe wants an object, or "" to unset it.
        assert!(got.iter().any(|v| v.param() == "metadata"), "{got:?}");
        let search = operation("GET", "/v1/payment_intents/search").unwrap();
        assert_eq!(
            search.check(&params(&[])),
            vec![Violation::Missing { param: "query".into() }]
        );
        let cancel = operation("POST", "/v1/payment_intents/pi_1/cancel").unwrap();
        assert_eq!(
            cancel.check(&params(&[("cancellation_reason", "bored")])).len(),
            1,
            "not one of Stripe's reasons"
        );
    }
}
