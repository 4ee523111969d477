//! `paymentsctl`: thin entry point. Parses the command line ([`paymentsctl::cli`]), runs one command, and
//! prints an error with its whole cause chain once, at the edge, with its exit code ([`paymentsctl::Exit`]).

use clap::Parser;
use paymentsctl::cli::{run, Cli};
use paymentsctl::{Exit, UsageError};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    // clap answers a wrong command line itself, with exit 2 (Exit::Usage).
    match run(Cli::parse()).await {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("paymentsctl: {}", shared::telemetry::ErrorChain(e.as_ref()));
            let usage = e.downcast_ref::<UsageError>().is_some();
            (if usage { Exit::Usage } else { Exit::Error }).into()
        }
    }
}
