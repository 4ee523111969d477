//! Where tests find the local stand-ins for AWS services: DynamoDB Local and moto's SQS.
//!
//! If the service's SDK endpoint variable is set (`scripts/test` starts one instance of each for the whole
//! run), that is used. Otherwise the first test of the process starts one through the service's script,
//! bound to 127.0.0.1 on a free port, and it dies with the test process (`PR_SET_PDEATHSIG`).

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A local service: its name, the AWS SDK's endpoint variable for it, and the script that runs it.
#[derive(Debug)]
pub struct Service {
    pub name: &'static str,
    pub env_var: &'static str,
    pub script: &'static str,
    endpoint: OnceLock<String>,
}

pub static DYNAMODB: Service = Service {
    name: "DynamoDB Local",
    env_var: "AWS_ENDPOINT_URL_DYNAMODB",
    script: "scripts/dynamodb-local",
    endpoint: OnceLock::new(),
};

pub static SQS: Service = Service {
    name: "moto (SQS)",
    env_var: "AWS_ENDPOINT_URL_SQS",
    script: "scripts/moto-server",
    endpoint: OnceLock::new(),
};

/// The repository root (this crate lives in `local/testkit/`), without `..` in it: it is printed.
pub fn repo_root() -> PathBuf {
    let this_crate = Path::new(env!("CARGO_MANIFEST_DIR"));
    this_crate.ancestors().nth(2).unwrap_or(this_crate).to_path_buf()
}

impl Service {
    /// The endpoint of a running instance, starting one if the environment names none.
    pub fn endpoint(&'static self) -> String {
        self.endpoint
            .get_or_init(|| match std::env::var(self.env_var) {
                Ok(url) if !url.is_empty() => url,
                _ => self.start_owned(),
            })
            .clone()
    }

    fn start_owned(&'static self) -> String {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port on 127.0.0.1");
        let script = repo_root().join(self.script);
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
            let _ = tx.send(cmd.spawn().map(|c| c.id()));
            loop {
                std::thread::park();
            }
        });
        rx.recv()
            .expect("launcher thread")
            .unwrap_or_else(|e| panic!("start {}: {e}", self.script));
        let deadline = Instant::now() + Duration::from_secs(180);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{} did not start on 127.0.0.1:{port}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        format!("http://127.0.0.1:{port}")
    }
}
