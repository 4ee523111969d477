//! Where a running function's output goes, split as AWS splits it between CloudWatch and the person at the
//! terminal: every line a function writes lands in its own log file ([`FunctionLog`], `<dir>/<function>.log`,
//! its log group here), and the terminal ([`Console`]) gets only what must be seen: the HTTP API's requests,
//! one line each (`http_api`), a function's errors and warnings (a JSON log line at `ERROR` or `WARN`, or a
//! line that is no JSON log line below `WARN`: a panic, a configuration refused before the logger started),
//! and what Lambda itself reports (a timeout, a runtime that exited, a failed cold start), each with the
//! function's name. An idle world, whose schedules run every second, prints nothing.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Child;

/// The terminal: whole lines, one writer at a time.
#[derive(Clone)]
pub struct Console {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Console {
    /// This process's standard output.
    #[must_use]
    pub fn stdout() -> Self {
        Self::new(std::io::stdout())
    }

    /// Lines into `out` (a test's buffer).
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self {
            out: Arc::new(Mutex::new(Box::new(out))),
        }
    }

    /// Writes `text` as one line. A terminal that went away loses the line, never the world.
    pub fn line(&self, text: &str) {
        if let Ok(mut out) = self.out.lock() {
            let _ = writeln!(out, "{text}").and_then(|()| out.flush());
        }
    }
}

/// One function's log: a file for everything it writes, the console for what [`alarming`] picks.
pub struct FunctionLog {
    function: String,
    path: PathBuf,
    file: Mutex<std::fs::File>,
    console: Console,
}

impl std::fmt::Debug for FunctionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionLog")
            .field("function", &self.function)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The readers of one process's output; they end when the process and its pipes close.
pub struct Capture {
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl FunctionLog {
    /// The log of `function`, started anew at `<dir>/<function>.log` (the directory made if missing).
    pub fn create(dir: &Path, function: &str, console: Console) -> std::io::Result<Arc<Self>> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{function}.log"));
        let file = std::fs::File::create(&path)?;
        Ok(Arc::new(Self {
            function: function.to_owned(),
            path,
            file: Mutex::new(file),
            console,
        }))
    }

    /// Where the file is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One line the function wrote: into the file, and onto the console when it is [`alarming`].
    pub fn write(&self, line: &str) {
        // The console first: once a line is in the file, whatever it shows of it is shown.
        if alarming(line) {
            self.console.line(&format!("{}: {}", self.function, shown(line)));
        }
        self.append(line);
    }

    /// A line Lambda itself writes into the function's log (`Task timed out ...`): onto the console, always,
    /// and into the file.
    pub fn report(&self, line: &str) {
        self.console.line(&format!("{}: {line}", self.function));
        self.append(line);
    }

    fn append(&self, line: &str) {
        if let Ok(mut file) = self.file.lock() {
            // One write per line: the environments of one function share the file.
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }

    /// Reads `child`'s piped stdout and stderr, line by line, into this log until they close.
    pub fn capture(self: &Arc<Self>, child: &mut Child) -> Capture {
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(self.read(out));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(self.read(err));
        }
        Capture { readers }
    }

    fn read(self: &Arc<Self>, stream: impl AsyncRead + Unpin + Send + 'static) -> tokio::task::JoinHandle<()> {
        let log = self.clone();
        tokio::spawn(async move {
            // Bytes, not `lines()`: a line that is no UTF-8 would end that reader, and a pipe nobody reads any
            // more blocks the function's next write. Such a line is kept as lossy text; only the pipe's end or
            // its failure ends the reading.
            let mut stream = BufReader::new(stream);
            let mut line = Vec::new();
            while matches!(stream.read_until(b'\n', &mut line).await, Ok(n) if n > 0) {
                let text = String::from_utf8_lossy(&line);
                log.write(text.trim_end_matches(['\n', '\r']));
                line.clear();
            }
        })
    }
}

impl Capture {
    /// Waits, at most `within`, for everything the exited process wrote: its last words (why it refused to
    /// start) come before Lambda's report of the failure.
    pub async fn drained(self, within: Duration) {
        let all = async {
            for reader in self.readers {
                let _ = reader.await;
            }
        };
        let _ = tokio::time::timeout(within, all).await;
    }
}

/// Whether a person must see `line`: a JSON log line at `ERROR` or `WARN`; a line that is no JSON object and
/// no text log line at `INFO`, `DEBUG` or `TRACE` (a panic, an error printed before the logger started). JSON
/// without a level (an EMF metric) and log lines below `WARN` stay in the file.
#[must_use]
pub fn alarming(line: &str) -> bool {
    let line = line.trim();
    if line.is_empty() {
        return false;
    }
    if line.starts_with('{') {
        // Cheap first: most lines are INFO or metrics, and this runs for every line under load.
        if !line.contains("\"level\"") {
            return false;
        }
        let level = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v["level"].as_str().map(str::to_ascii_uppercase));
        return matches!(level.as_deref(), Some("ERROR" | "WARN"));
    }
    let quiet = ["INFO", "DEBUG", "TRACE"];
    !line.split_whitespace().take(3).any(|word| quiet.contains(&word))
}

/// `line` as the console shows it: a JSON log line as its level, message and fields (the time, the spans
/// and the target are in the file); any other line as written.
fn shown(line: &str) -> String {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(line) else {
        return line.to_owned();
    };
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let mut shown = format!(
        "{} {}",
        fields.get("level").map(text).unwrap_or_default(),
        fields.get("message").map(text).unwrap_or_default()
    );
    let skipped = ["level", "message", "timestamp", "spans", "span", "target"];
    for (key, value) in fields.iter().filter(|(k, _)| !skipped.contains(&k.as_str())) {
        shown.push_str(&format!(" {key}={}", text(value)));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_warnings_and_crashes_are_alarming_the_rest_is_not() {
        assert!(alarming(
            r#"{"timestamp":"t","level":"ERROR","message":"store failed"}"#
        ));
        assert!(alarming(r#"{"level":"WARN","message":"deferred"}"#));
        assert!(!alarming(r#"{"timestamp":"t","level":"INFO","message":"sweep done"}"#));
        assert!(!alarming(r#"{"_aws":{"CloudWatchMetrics":[]},"SweeperLagSeconds":0}"#));
        assert!(alarming("thread 'main' panicked at src/main.rs:3:5:"));
        assert!(alarming("Error: TABLE_NAME is not set"));
        assert!(!alarming("2026-01-01T00:00:00Z  INFO intake: accepted"));
        assert!(alarming("2026-01-01T00:00:00Z  WARN intake: deferred"));
        assert!(!alarming("   "));
    }

    #[tokio::test]
    async fn a_line_that_is_no_utf8_is_kept_and_the_lines_after_it_are_still_read() {
        let dir = std::env::temp_dir().join(format!("console-{}", std::process::id()));
        let terminal = dir.join("terminal");
        std::fs::create_dir_all(&dir).unwrap();
        let console = Console::new(std::fs::File::create(&terminal).unwrap());
        let log = FunctionLog::create(&dir, "Fn", console).unwrap();
        let output: &[u8] = b"raw \xff\xfe bytes\n{\"level\":\"ERROR\",\"message\":\"after\"}\n";
        log.read(output).await.unwrap();
        let file = std::fs::read_to_string(log.path()).unwrap();
        assert_eq!(
            file,
            "raw \u{fffd}\u{fffd} bytes\n{\"level\":\"ERROR\",\"message\":\"after\"}\n"
        );
        let shown = std::fs::read_to_string(&terminal).unwrap();
        assert!(shown.contains("Fn: ERROR after"), "{shown}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_json_line_is_shown_as_its_level_message_and_fields() {
        let line = r#"{"timestamp":"t","level":"WARN","message":"deferred","payment_id":"pay_1","attempt":2,"spans":[{"name":"x"}]}"#;
        assert_eq!(shown(line), "WARN deferred attempt=2 payment_id=pay_1");
        assert_eq!(shown("plain text"), "plain text");
    }
}
