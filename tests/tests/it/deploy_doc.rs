//! docs/DEPLOY.md's parameter table is the template's: every parameter of `infra/template.yaml` is a row,
//! once, with its default as the template states it, and no row names a parameter the template lacks (a
//! guided deploy asks for each one, so a row missing is a question the guide does not answer).

use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

const DEPLOY: &str = "docs/DEPLOY.md";
/// The table's header row: `| parameter | default | what to answer |`.
const HEADER: &str = "| parameter | default | what to answer |";
/// How the table writes a parameter without a default, and an empty default.
const REQUIRED: &str = "(none)";
const EMPTY: &str = "(empty)";

/// `{parameter: default}` as the table writes it, and the names of rows seen twice.
fn documented() -> (BTreeMap<String, String>, Vec<String>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(DEPLOY);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rows = BTreeMap::new();
    let mut twice = Vec::new();
    let table = text
        .lines()
        .skip_while(|line| line.trim() != HEADER)
        .skip(2)
        .take_while(|line| line.starts_with('|'));
    for line in table {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [name, default, ..] = cells[..] else {
            panic!("{DEPLOY}: a parameter row without a default: {line}");
        };
        let name = name.trim_matches('`').to_owned();
        if rows
            .insert(name.clone(), default.trim_matches('`').to_owned())
            .is_some()
        {
            twice.push(name);
        }
    }
    (rows, twice)
}

/// `{parameter: default}` of the template, in the table's spelling.
fn parameters() -> BTreeMap<String, String> {
    let template = super::openapi::template();
    let Some(Value::Mapping(parameters)) = template.get("Parameters") else {
        panic!("infra/template.yaml has no Parameters");
    };
    parameters
        .iter()
        .map(|(name, parameter)| {
            let default = match parameter.get("Default") {
                None => REQUIRED.to_owned(),
                Some(Value::String(s)) if s.is_empty() => EMPTY.to_owned(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(other) => panic!("parameter {name:?}: a default of another kind: {other:?}"),
            };
            (name.as_str().unwrap_or_default().to_owned(), default)
        })
        .collect()
}

#[test]
fn the_deploy_guide_lists_every_parameter_of_the_template_with_its_default() {
    let (documented, twice) = documented();
    let template = parameters();
    assert!(
        template.len() >= 30,
        "only {} parameters in the template",
        template.len()
    );
    assert!(twice.is_empty(), "{DEPLOY}: rows given twice: {twice:?}");
    let missing: Vec<_> = template.keys().filter(|p| !documented.contains_key(*p)).collect();
    assert!(missing.is_empty(), "{DEPLOY}: parameters without a row: {missing:?}");
    let unknown: Vec<_> = documented.keys().filter(|p| !template.contains_key(*p)).collect();
    assert!(
        unknown.is_empty(),
        "{DEPLOY}: rows for no parameter of the template: {unknown:?}"
    );
    let wrong: Vec<_> = template
        .iter()
        .filter(|(p, default)| documented[*p] != **default)
        .map(|(p, default)| format!("{p}: the guide says {:?}, the template {default:?}", documented[p]))
        .collect();
    assert!(wrong.is_empty(), "{DEPLOY}: defaults that differ: {wrong:#?}");
}
