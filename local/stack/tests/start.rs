//! The local world refuses to start, naming the function, as a deployment's first invocation would fail: a
//! function whose binary is missing, and one whose cold start fails (its process exits before it polls the
//! Runtime API: Lambda's `Runtime.ExitError`), its own words in its log file and on the terminal. Against
//! DynamoDB Local and moto (`AWS_ENDPOINT_URL_*`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Runs the local world on `binaries`, its function logs in `logs`, until it ends; its exit status and
/// output.
fn start(binaries: &Path, logs: &Path) -> (bool, String) {
    let table = format!("start-{}", uuid_like());
    let out = Command::new(env!("CARGO_BIN_EXE_local-stack"))
        .arg("--binaries")
        .arg(binaries)
        .arg("--logs")
        .arg(logs)
        .arg("OrchestratorRoleArn=arn:aws:iam::123456789012:role/local-orchestrator")
        .env("TABLE_NAME", &table)
        .env("LOCAL_API_PORT", "0")
        .output()
        .expect("local-stack runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}

#[test]
fn a_missing_binary_stops_the_start_naming_the_function() {
    let empty = std::env::temp_dir().join(format!("local-stack-empty-{}", uuid_like()));
    std::fs::create_dir_all(&empty).unwrap();
    let (ok, out) = start(&empty, &empty.join("logs"));
    assert!(!ok, "{out}");
    assert!(
        out.contains("PaymentsApiFunction: no binary") && out.contains("payments-api"),
        "{out}"
    );
}

#[test]
fn a_function_whose_cold_start_fails_stops_the_start_with_lambdas_report() {
    let dir = std::env::temp_dir().join(format!("local-stack-exits-{}", uuid_like()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("payments-api");
    std::fs::write(&binary, "#!/bin/sh\necho 'refusing my configuration' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ok, out) = start(&dir, &dir.join("logs"));
    assert!(!ok, "{out}");
    assert!(out.contains("PaymentsApiFunction failed its cold start"), "{out}");
    assert!(
        out.contains("Runtime.ExitError") && out.contains("exit status: 3"),
        "{out}"
    );
    // Its own words: on the terminal (a line that is no log line below WARN), and in its log file as
    // CloudWatch would have them, with Lambda's report.
    assert!(out.contains("PaymentsApiFunction: refusing my configuration"), "{out}");
    let log = std::fs::read_to_string(dir.join("logs/PaymentsApiFunction.log")).unwrap();
    assert!(
        log.contains("refusing my configuration") && log.contains("Runtime.ExitError"),
        "{log}"
    );
}
