//! The reference stays true to the code, without DynamoDB or anything else running: every environment
//! variable the workspace's code reads (or `infra/template.yaml` sets for a function) is a row of
//! `docs/CONFIGURATION.md`, once; and every relative link of the README, `docs/` and the crates' READMEs
//! points at a file that exists (and, with a `#section`, at a heading of it).
//!
//! Variables are found by reading the sources, as a reviewer would: a name given as a literal to a reader
//! (`Env`'s `required`, `optional`, `number`, `seconds`, `millis`, `with`; `std::env::var`, `var_os`); and, in a
//! file that also reads a name it does not spell out there (a constant, a table of names, a wrapper such as
//! the simulator's `env_or`), every literal that looks like a variable name (`UPPER_CASE` with an underscore,
//! or any upper-case literal handed to a function of that file). Tests (`tests/` directories, `tests.rs`,
//! everything after a file's first `#[cfg(test)]`) are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CONFIGURATION: &str = "docs/CONFIGURATION.md";

/// The folders whose non-test Rust sources are read.
const SOURCE_ROOTS: [&str; 4] = ["functions", "shared", "tools", "local"];

/// The documents whose relative links must resolve.
const LINKED_DOCS: [&str; 6] = [
    "README.md",
    "tools/paymentsctl/README.md",
    "tools/protocol-model/README.md",
    "local/psp-simulator/README.md",
    "functions/README.md",
    "events/README.md",
];

/// Calls that read (or, for `with`, provide) a variable by the name given as their first argument.
const READERS: [&str; 8] = [
    ".required(",
    ".optional(",
    ".number(",
    ".seconds(",
    ".millis(",
    ".with(",
    "env::var(",
    "env::var_os(",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `name` is spelt like an environment variable: upper-case letters, digits and `_`, not starting with a
/// digit.
fn variable_like(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && name.len() >= 2
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The string literal that starts at `at` (just after its opening quote), if it is a simple one.
fn literal_at(text: &str, at: usize) -> Option<&str> {
    let rest = text.get(at..)?;
    let end = rest.find('"')?;
    Some(&rest[..end])
}

/// Every plain `"..."` literal of `text` with its start (the index after the opening quote); escapes are
/// skipped, and raw strings and `'"'` are not taken for literals.
fn literals(text: &str) -> Vec<(usize, &str)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let quote = bytes[i] == b'"';
        let char_literal = i > 0 && bytes[i - 1] == b'\'' && bytes.get(i + 1) == Some(&b'\'');
        let raw = i > 0 && (bytes[i - 1] == b'#' || bytes[i - 1] == b'r');
        if !quote || char_literal {
            i += 1;
            continue;
        }
        if raw {
            // Skip to the end of the raw string: a quote followed by the same `#`s (at most a few).
            let hashes = text[..i].chars().rev().take_while(|c| *c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            i = text[i + 1..]
                .find(&close)
                .map_or(bytes.len(), |end| i + 1 + end + close.len());
            continue;
        }
        let start = i + 1;
        let mut j = start;
        while j < bytes.len() && bytes[j] != b'"' {
            j += if bytes[j] == b'\\' { 2 } else { 1 };
        }
        if j >= bytes.len() {
            break;
        }
        if let Some(literal) = text.get(start..j) {
            out.push((start, literal));
        }
        i = j + 1;
    }
    out
}

/// The Rust source without its tests: everything from the first `#[cfg(test)]` on is cut.
fn without_tests(source: &str) -> &str {
    match source.find("#[cfg(test)]") {
        Some(at) => &source[..at],
        None => source,
    }
}

/// The names `source` (one Rust file, tests cut) reads from the environment.
fn variables_read(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut reads_by_other_means = false;
    for reader in READERS {
        for (at, _) in source.match_indices(reader) {
            let after = source[at + reader.len()..].trim_start();
            if let Some(rest) = after.strip_prefix('"') {
                let start = source.len() - rest.len();
                if let Some(name) = literal_at(source, start).filter(|n| variable_like(n)) {
                    names.insert(name.to_owned());
                }
            } else if reader != ".with(" && !after.starts_with(')') {
                // A name held elsewhere (a constant, a loop over names, a parameter).
                reads_by_other_means = true;
            }
        }
    }
    if reads_by_other_means {
        let local_functions = local_functions(source);
        for (start, literal) in literals(source) {
            if !variable_like(literal) {
                continue;
            }
            let before = source[..start - 1].trim_end();
            // Set for a child process or read at compile time: not this process's read.
            if before.ends_with(".env(") || before.ends_with("env!(") {
                continue;
            }
            let called = before.strip_suffix('(').map(|b| {
                b.rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")
            });
            let through_wrapper = called.is_some_and(|f| local_functions.contains(f));
            if literal.contains('_') || through_wrapper {
                names.insert(literal.to_owned());
            }
        }
    }
    names
}

/// The identifier `s` starts with.
fn ident(s: &str) -> &str {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("")
}

/// The functions and closures `source` defines (`fn name`, `let name = |`): the wrappers a file may read
/// the environment through.
fn local_functions(source: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for (at, _) in source.match_indices("fn ") {
        out.insert(ident(&source[at + 3..]));
    }
    for (at, _) in source.match_indices("let ") {
        let rest = &source[at + 4..];
        let name = ident(rest);
        if rest[name.len()..].trim_start().starts_with("= |") {
            out.insert(name);
        }
    }
    out.remove("");
    out
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "tests" | "target" | "proptest-regressions") && !name.starts_with('.') {
                rust_sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// Every variable the non-test Rust sources read, with the files that read it.
fn variables_in_code() -> BTreeMap<String, BTreeSet<String>> {
    let repo = repo();
    let mut files = Vec::new();
    for root in SOURCE_ROOTS {
        rust_sources(&repo.join(root), &mut files);
    }
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let source = read(&file);
        let relative = file.strip_prefix(&repo).unwrap_or(&file).display().to_string();
        for name in variables_read(without_tests(&source)) {
            found.entry(name).or_default().insert(relative.clone());
        }
    }
    found
}

/// The keys of every `Environment: Variables:` block of the template (the globals' and each function's).
fn variables_in_template(template: &str) -> BTreeSet<String> {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let lines: Vec<&str> = template.lines().collect();
    let mut names = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let opens = line.trim() == "Variables:" && i > 0 && lines[i - 1].trim() == "Environment:";
        if !opens {
            continue;
        }
        let block = indent(line);
        let mut key_indent = None;
        for next in &lines[i + 1..] {
            if next.trim().is_empty() || next.trim_start().starts_with('#') {
                continue;
            }
            let depth = indent(next);
            if depth <= block {
                break;
            }
            if *key_indent.get_or_insert(depth) == depth {
                if let Some((key, _)) = next.trim().split_once(':') {
                    names.insert(key.to_owned());
                }
            }
        }
    }
    names
}

/// The variables `docs/CONFIGURATION.md` has a row for (the backticked names of each table row's first
/// cell), each with how many rows name it.
fn documented(doc: &str) -> BTreeMap<String, usize> {
    let mut rows = BTreeMap::new();
    for line in doc.lines() {
        let Some(cells) = line.trim().strip_prefix('|') else {
            continue;
        };
        let first = cells.split('|').next().unwrap_or("");
        for (i, part) in first.split('`').enumerate() {
            if i % 2 == 1 && variable_like(part) {
                *rows.entry(part.to_owned()).or_insert(0) += 1;
            }
        }
    }
    rows
}

#[test]
fn every_variable_the_code_reads_or_the_template_sets_is_a_row_of_the_configuration_doc() {
    let repo = repo();
    let code = variables_in_code();
    let template = variables_in_template(&read(&repo.join("infra/template.yaml")));
    let rows = documented(&read(&repo.join(CONFIGURATION)));

    // Not vacuous: each way of reading a name is seen (a literal to `Env`, `std::env::var`, a constant, a
    // wrapper, a table of names), and the scans find as many names as the system has.
    for (name, how) in [
        ("TABLE_NAME", "Env::required"),
        ("OTEL_TRACES_SAMPLER_ARG", "std::env::var"),
        ("AWS_CALL_RECORD", "a constant"),
        ("CHECKOUTS", "the simulator's env_or"),
        ("MODEL_CRASHES", "the explorer's table of names"),
        ("INTAKE_LOG_GROUP", "paymentsctl's outputs table"),
    ] {
        assert!(
            code.contains_key(name),
            "the scan no longer finds {name} (read through {how})"
        );
    }
    assert!(
        code.len() >= 90,
        "only {} variables found in the code: {:?}",
        code.len(),
        code.keys()
    );
    assert!(
        template.len() >= 20,
        "only {} variables found in the template: {template:?}",
        template.len()
    );
    assert!(template.contains("RELAY_FAILURES_QUEUE_URL") && template.contains("STAGE"));
    assert!(rows.len() >= 100, "only {} rows in {CONFIGURATION}", rows.len());

    let mut missing: Vec<String> = code
        .iter()
        .filter(|(name, _)| !rows.contains_key(*name))
        .map(|(name, files)| {
            format!(
                "{name} (read in {})",
                files.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    missing.extend(
        template
            .iter()
            .filter(|name| !rows.contains_key(*name))
            .map(|name| format!("{name} (set by infra/template.yaml)")),
    );
    assert!(
        missing.is_empty(),
        "{} variable(s) missing from {CONFIGURATION}, add a row for each:\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
    let twice: Vec<_> = rows.iter().filter(|(_, n)| **n > 1).map(|(name, _)| name).collect();
    assert!(
        twice.is_empty(),
        "variables with more than one row in {CONFIGURATION}: {twice:?}"
    );
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), with GitHub's `-1`, `-2` for repeats.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let base = slug(line.trim_start_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of the Markdown links `[text](target)` of `markdown`, outside code blocks.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
            }
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_readme_and_the_docs_points_at_a_file_that_exists() {
    let repo = repo();
    let mut docs: Vec<PathBuf> = LINKED_DOCS.iter().map(|d| repo.join(d)).collect();
    let docs_dir = repo.join("docs");
    let listed = std::fs::read_dir(&docs_dir).unwrap_or_else(|e| panic!("{}: {e}", docs_dir.display()));
    docs.extend(
        listed
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    assert!(docs.len() >= 15, "only {} documents to check", docs.len());

    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = read(doc);
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap_or(&repo).join(file)
            };
            let name = doc.strip_prefix(&repo).unwrap_or(doc).display().to_string();
            if !path.exists() {
                broken.push(format!("{name}: {target} (no such file)"));
            } else if !anchor.is_empty()
                && path.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&path)).contains(anchor)
            {
                broken.push(format!("{name}: {target} (no such heading)"));
            }
        }
    }
    assert!(
        checked >= 50,
        "only {checked} relative links found: the link parser lost them"
    );
    assert!(broken.is_empty(), "broken links:\n  {}", broken.join("\n  "));
}
