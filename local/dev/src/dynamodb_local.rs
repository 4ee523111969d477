//! Where the tests find DynamoDB Local.
//!
//! If `AWS_ENDPOINT_URL_DYNAMODB` is set (the test script starts one instance for the whole run), that is
//! used. Otherwise the first test of the process installs and starts one through `scripts/dynamodb-local`,
//! bound to 127.0.0.1 on a free port, and it dies with the test process (`PR_SET_PDEATHSIG`).

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL_DYNAMODB";

/// The repository root (this crate lives in `local/dev/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The endpoint of a running DynamoDB Local, starting one if the environment names none.
pub fn endpoint() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT
        .get_or_init(|| match std::env::var(ENDPOINT_VAR) {
            Ok(url) if !url.is_empty() => url,
            _ => start_owned(),
        })
        .clone()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn start_owned() -> String {
    let port = free_port();
    let script = repo_root().join("scripts/dynamodb-local");
    // Spawn from a thread that lives as long as the process: PDEATHSIG fires when the spawning thread exits.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut cmd = Command::new(script);
        cmd.arg("run")
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn();
        let _ = tx.send(child.map(|c| c.id()));
        loop {
            std::thread::park();
        }
    });
    rx.recv()
        .expect("launcher thread")
        .expect("start scripts/dynamodb-local");
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "DynamoDB Local did not start on 127.0.0.1:{port}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    format!("http://127.0.0.1:{port}")
}
