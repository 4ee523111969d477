//! Maps that cannot go stale (issue 45 item 6): every file, function and type the actor table of
//! `src/actors.rs` names, and every `file CONSTANT` pair `scripts/check_template.py` cites, exists in the
//! repository. A move that leaves one of them naming what is gone fails here instead of misleading a reader.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every Rust source of the code the maps point into (not the model itself, not build output).
fn sources() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![
        repo_root().join("functions"),
        repo_root().join("shared"),
        repo_root().join("local"),
    ];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() && name != "target" && !name.starts_with('.') {
                dirs.push(path);
            } else if name.ends_with(".rs") {
                out.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out
}

/// The backticked words of `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `A::b` or `b`: an item path of Rust names.
fn item_path(word: &str) -> Option<&str> {
    let named = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let last = word.rsplit("::").next()?;
    (word.split("::").all(named) && !last.chars().all(|c| c.is_ascii_digit())).then_some(last)
}

/// Whether `name` is declared in `code`: a function, type, constant, module, or an enum's variant or a
/// struct's field (`name,` / `name {` / `name(` / `name:` at a line's start).
fn declares(code: &str, name: &str) -> bool {
    let keywords = ["fn", "struct", "enum", "trait", "type", "const", "static", "mod"];
    code.lines().map(str::trim_start).any(|line| {
        let line = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .unwrap_or(line);
        let line = line.strip_prefix("async ").unwrap_or(line);
        let declared = keywords.iter().any(|k| {
            line.strip_prefix(k)
                .and_then(|rest| rest.strip_prefix(' '))
                .is_some_and(|rest| {
                    rest.starts_with(name) && !rest[name.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                })
        });
        let member = line
            .strip_prefix(name)
            .is_some_and(|rest| rest.starts_with([',', ' ', '(', ':', '{']) && !rest.starts_with("::"));
        declared || member
    })
}

#[test]
fn every_file_function_and_type_the_actor_table_names_exists() {
    let actors = std::fs::read_to_string(repo_root().join("tools/protocol-model/src/actors.rs")).unwrap();
    let table: Vec<&str> = actors
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .filter(|l| l.starts_with("//! | ") && !l.contains("|---|"))
        .collect();
    assert!(table.len() > 5, "the actor table is gone from actors.rs");
    let code = sources();
    let mut missing = Vec::new();
    for row in &table {
        let steps = row.splitn(3, '|').nth(2).unwrap_or_default();
        let words = quoted(steps);
        let is_path = |w: &str| w.ends_with(".rs") || (w.contains('/') && !w.contains(' '));
        // A name is looked for in the crates of the row's files (their `src/`), else everywhere.
        let crates: Vec<PathBuf> = words
            .iter()
            .filter(|w| is_path(w))
            .filter_map(|w| {
                w.split_once("/src/")
                    .map(|(krate, _)| repo_root().join(krate).join("src"))
            })
            .collect();
        let in_row = |path: &Path| crates.is_empty() || crates.iter().any(|c| path.starts_with(c));
        for word in words {
            if is_path(word) {
                if !repo_root().join(word).exists() {
                    missing.push(format!("file {word}"));
                }
            } else if let Some(name) = item_path(word) {
                if !code.iter().any(|(path, c)| in_row(path) && declares(c, name)) {
                    missing.push(word.to_owned());
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the actor table names what is not there: {missing:?}"
    );
}

#[test]
fn every_file_and_constant_check_template_cites_exists() {
    let script = std::fs::read_to_string(repo_root().join("scripts/check_template.py")).unwrap();
    let words: Vec<&str> = script.split_whitespace().collect();
    let cited: Vec<(&str, &str)> = words
        .windows(2)
        .filter(|w| w[0].ends_with(".rs") && w[1].chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(
        !cited.is_empty(),
        "check_template.py cites no constant any more: drop this test"
    );
    for (file, constant) in cited {
        let code = std::fs::read_to_string(repo_root().join(file))
            .unwrap_or_else(|e| panic!("check_template.py cites {file}: {e}"));
        assert!(
            declares(&code, constant),
            "check_template.py cites {constant} in {file}, which does not declare it"
        );
    }
}

#[test]
fn the_check_finds_what_is_gone() {
    let code = "pub struct Runner;\nimpl Runner {\n    pub async fn drive(&self) {}\n}\nenum Pc {\n    Idle,\n}\n";
    assert!(declares(code, "drive") && declares(code, "Runner") && declares(code, "Idle"));
    assert!(!declares(code, "leased") && !declares(code, "driv") && !declares(code, "Run"));
    assert_eq!(item_path("Runner::drive"), Some("drive"));
    assert_eq!(item_path("POST /checkouts"), None);
}
