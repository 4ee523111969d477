//! What the local world is started with: the template's parameters (a samconfig environment's
//! `parameter_overrides`, then the command line's `Parameter=value`, over the template's defaults), the
//! settings it adds to every function (`--set`: only the tests' compressed waits), how much faster its
//! schedules run (`--time-scale`), and where the functions' binaries and logs are (`--binaries`, `--logs`).

use clap::Parser;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `local-stack [OPTIONS] [Parameter=value ...]`: the template run on this machine.
#[derive(Debug, Parser)]
#[command(name = "local-stack")]
pub struct Args {
    /// Template parameters, as `sam deploy --parameter-overrides` takes them (over the samconfig
    /// environment's).
    pub parameters: Vec<String>,
    /// The samconfig.toml environment whose `deploy.parameters.parameter_overrides` come first.
    #[arg(long, default_value = "default")]
    pub config_env: String,
    /// `VARIABLE=value` added to every function's environment over the template's: the local world's only
    /// departure from it, for the tests' shorter waits; printed at the start.
    #[arg(long = "set")]
    pub sets: Vec<String>,
    /// Every schedule's period, Lambda's waits between asynchronous retries and their event age divided by
    /// this (60: a `rate(1 minute)` runs every second); the functions' own timeouts stay the template's.
    #[arg(long, default_value_t = 1)]
    pub time_scale: u32,
    /// Where the functions' host binaries are (default: `CARGO_TARGET_DIR`'s `debug`; `scripts/bench`: its
    /// `release`).
    #[arg(long)]
    pub binaries: Option<PathBuf>,
    /// Where each function's log goes, `<DIR>/<LogicalId>.log`, started anew (default: `.local/logs/<TABLE_NAME>`
    /// under the repository); the terminal gets only the requests and the functions' errors and warnings.
    #[arg(long)]
    pub logs: Option<PathBuf>,
}

/// The local world's settings, read once.
#[derive(Debug)]
pub struct Settings {
    /// The template's parameters given (the rest take their defaults).
    pub parameters: BTreeMap<String, String>,
    /// Added to every function's environment.
    pub sets: Vec<(String, String)>,
    pub time_scale: u32,
    /// The HTTP API's port on 127.0.0.1 (`LOCAL_API_PORT`).
    pub port: u16,
    /// The table's name and every other local resource's prefix (`TABLE_NAME`).
    pub table: String,
    /// Where the functions' host binaries are.
    pub binaries: PathBuf,
    /// Where each function's log file is.
    pub logs: PathBuf,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

impl Settings {
    /// The command line and this process's environment.
    pub fn read() -> Result<Self, Error> {
        let args = Args::parse();
        let root = local_testkit::service::repo_root();
        let mut parameters =
            local_lambda::template::samconfig_parameters(&root.join("samconfig.toml"), &args.config_env)?;
        parameters.extend(pairs(&args.parameters, "Parameter=value")?);
        let table = std::env::var("TABLE_NAME").unwrap_or_else(|_| "payments-local".into());
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        Ok(Self {
            parameters,
            sets: pairs(&args.sets, "--set VARIABLE=value")?,
            time_scale: args.time_scale.max(1),
            port: match std::env::var("LOCAL_API_PORT") {
                Ok(port) => port.parse().map_err(|e| format!("LOCAL_API_PORT={port}: {e}"))?,
                Err(_) => 3000,
            },
            binaries: args.binaries.unwrap_or_else(|| target.join("debug")),
            logs: args.logs.unwrap_or_else(|| root.join(".local/logs").join(&table)),
            table,
        })
    }
}

/// `KEY=value` words taken apart; `what` names the expected shape in the error.
fn pairs(words: &[String], what: &str) -> Result<Vec<(String, String)>, Error> {
    words
        .iter()
        .map(|word| {
            word.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| format!("{word}: not {what}").into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_without_equals_is_refused_by_name() {
        let err = pairs(&["Stage".into()], "Parameter=value").unwrap_err();
        assert!(err.to_string().contains("Stage: not Parameter=value"), "{err}");
    }
}
