//! `runtime-probe`: the smallest function that speaks the Lambda Runtime API, for the tests of the local
//! Lambda (`local/lambda/tests`): the real functions take minutes to build and cannot be told to hang or fail.
//! Its init does what `PROBE_INIT` says (`error`: reports an init error then exits, `exit`: exits with 3,
//! otherwise polls); each event's order `{"sleep_ms": n, "fail": bool, "answer": ...}` (the event itself, or
//! the JSON body of an HTTP API event) makes it wait `n` ms, then report an error, answer `answer`, or answer
//! `{"pid": its process id, "event": the event}`; a batch (`Records`) is answered with its failed records as
//! `batchItemFailures` (an SQS message whose body holds `"fail":true`, a stream record whose `NewImage` has
//! `probe` = `fail`, or an SQS message whose body says `"fail_until_ms": t` until then), and a record marked
//! so with `crash` makes it report an error. With `PROBE_RECORD` set to
//! a file, each event is appended to it as one JSON line (what the tests read to see the batches it got).
//! An order's `"stdout"` and `"stderr"` lines are written there first, as a function's log lines.
//! Std only: no runtime crate to hide what goes over the wire.

use std::io::{Read, Write};
use std::net::TcpStream;

type BoxError = Box<dyn std::error::Error>;

/// One HTTP/1.1 exchange with the runtime API (a connection each, closed by the server's answer): the
/// answer's headers and body.
fn exchange(api: &str, method: &str, path: &str, body: &str) -> Result<(String, String), BoxError> {
    let mut stream = TcpStream::connect(api)?;
    write!(
        stream,
        "{method} /2018-06-01/runtime/{path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no end of headers")?;
    Ok((head.to_owned(), body.to_owned()))
}

/// The value of `name` in `head` (case-insensitive, as HTTP headers are).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// Whether a batch record is marked `what` (`fail` or `crash`): an SQS body holding `"<what>":true`, a
/// stream record whose `NewImage` has `probe` = `<what>`.
fn marked(record: &serde_json::Value, what: &str) -> bool {
    let in_body = record["body"]
        .as_str()
        .is_some_and(|b| b.contains(&format!(r#""{what}":true"#)));
    in_body || record["dynamodb"]["NewImage"]["probe"]["S"] == what || (what == "fail" && failing_still(record))
}

/// Whether an SQS message's body says `"fail_until_ms": t` with `t` (milliseconds since the epoch) still ahead:
/// a message that fails for a while, then succeeds.
fn failing_still(record: &serde_json::Value) -> bool {
    let body: serde_json::Value = record["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    body["fail_until_ms"]
        .as_u64()
        .is_some_and(|until| u128::from(until) > now)
}

/// The batch item identifier of a record: an SQS message's id, a stream record's sequence number.
fn identifier(record: &serde_json::Value) -> &serde_json::Value {
    match &record["messageId"] {
        serde_json::Value::Null => &record["dynamodb"]["SequenceNumber"],
        id => id,
    }
}

fn main() -> Result<(), BoxError> {
    let api = std::env::var("AWS_LAMBDA_RUNTIME_API")?;
    match std::env::var("PROBE_INIT").as_deref() {
        Ok("error") => {
            let report = r#"{"errorType":"Probe.InitRefused","errorMessage":"PROBE_INIT says no"}"#;
            exchange(&api, "POST", "init/error", report)?;
            std::process::exit(1);
        }
        Ok("exit") => std::process::exit(3),
        _ => {}
    }
    loop {
        let (head, event) = exchange(&api, "GET", "invocation/next", "")?;
        let id = header(&head, "lambda-runtime-aws-request-id").ok_or("no request id")?;
        let parsed: serde_json::Value = serde_json::from_str(&event)?;
        let order = match parsed["body"].as_str() {
            Some(body) if parsed["version"] == "2.0" => serde_json::from_str(body).unwrap_or_default(),
            _ => parsed.clone(),
        };
        if let Ok(file) = std::env::var("PROBE_RECORD") {
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(file)?;
            // One write of the whole line: a reader never sees half an event followed by another.
            file.write_all(format!("{parsed}\n").as_bytes())?;
        }
        let records = parsed["Records"].as_array().into_iter().flatten();
        let failed_items: Vec<serde_json::Value> = records
            .clone()
            .filter(|r| marked(r, "fail"))
            .map(|r| serde_json::json!({"itemIdentifier": identifier(r)}))
            .collect();
        for line in order["stdout"].as_array().into_iter().flatten() {
            println!("{}", line.as_str().unwrap_or_default());
        }
        for line in order["stderr"].as_array().into_iter().flatten() {
            eprintln!("{}", line.as_str().unwrap_or_default());
        }
        let sleep = order["sleep_ms"].as_u64().unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(sleep));
        let crash = records.clone().any(|r| marked(r, "crash"));
        if order["fail"].as_bool() == Some(true) || crash {
            let report = r#"{"errorType":"Probe.Failed","errorMessage":"the event said fail"}"#;
            exchange(&api, "POST", &format!("invocation/{id}/error"), report)?;
        } else if parsed["Records"].is_array() {
            let answer = serde_json::json!({"batchItemFailures": failed_items});
            exchange(&api, "POST", &format!("invocation/{id}/response"), &answer.to_string())?;
        } else if !order["answer"].is_null() {
            exchange(
                &api,
                "POST",
                &format!("invocation/{id}/response"),
                &order["answer"].to_string(),
            )?;
        } else {
            let answer = serde_json::json!({"pid": std::process::id(), "event": parsed});
            exchange(&api, "POST", &format!("invocation/{id}/response"), &answer.to_string())?;
        }
    }
}
