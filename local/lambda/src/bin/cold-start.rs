//! `cold-start TEMPLATE BOOTSTRAPS EVENTS [Parameter=value ...] -- [PREFIX ...]`: cold-starts every function
//! of `TEMPLATE` (CI: the template `sam package` wrote) as Lambda would, from `BOOTSTRAPS/<LogicalId>/bootstrap`
//! (CI: the binaries taken out of the zips that deploy), run through `PREFIX` (CI: `qemu-aarch64 -L
//! /usr/aarch64-linux-gnu` for the arm64 build), against the local Lambda Runtime API, with exactly the
//! environment the template gives the function (the parameters given here over the defaults; the table,
//! queues and secrets created locally: `local_lambda::world`), and hands it its sample from `EVENTS` (a signed
//! copy of `events/`). It fails naming the function when one exits before its first poll (a cold start
//! failure, with the function's own log), does not poll within [`START_DEADLINE`], answers with an error, an
//! HTTP status other than 2xx or a batch item failure, or has no sample: the zip that deploys is the binary
//! that answered.

use local_lambda::runtime_api::{Answer, Output, RuntimeApi};
use local_lambda::template::{Stack, Template};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a cold start under an emulator may take before it counts as failed (qemu's arm64 start is
/// about a second here; Lambda's own init limit is 10 s, but emulation is slower than a Graviton).
const START_DEADLINE: Duration = Duration::from_secs(60);

/// How long one sample's answer may take under the emulator (the functions' own `Timeout`s are 10 to 120 s
/// on a Graviton; this checks that the binary answers, not how fast).
const INVOKE_DEADLINE: Duration = Duration::from_secs(30);

/// The sample of `events/` each function answers: one of the kind its trigger delivers.
const SAMPLES: [(&str, &str); 9] = [
    ("PaymentsApiFunction", "api-create-payment.json"),
    ("WebhookIntakeFunction", "webhook-stripe-payment_intent.succeeded.json"),
    ("WebhookEventBridgeFunction", "sqs-stripe-eventbridge.json"),
    ("OutboxRelayFunction", "stream-outbox-insert.json"),
    ("CheckoutApiFunction", "api-put-stock.json"),
    ("CheckoutEventsFunction", "sqs-payment-event.json"),
    ("CheckoutSweeperFunction", "schedule.json"),
    ("ReconcilerFunction", "schedule.json"),
    ("WebhookCatchupFunction", "schedule.json"),
];

const USAGE: &str = "usage: cold-start TEMPLATE BOOTSTRAPS EVENTS [Parameter=value ...] -- [PREFIX ...]";

/// The command line, taken apart.
struct Args {
    template: PathBuf,
    bootstraps: PathBuf,
    events: PathBuf,
    parameters: Vec<(String, String)>,
    prefix: Vec<OsString>,
}

fn args() -> Result<Args, BoxError> {
    let all: Vec<OsString> = std::env::args_os().skip(1).collect();
    let split = all.iter().position(|a| a == "--").ok_or(USAGE)?;
    let (named, prefix) = (&all[..split], all[split + 1..].to_vec());
    let [template, bootstraps, events, given @ ..] = named else {
        return Err(USAGE.into());
    };
    let parameters = given
        .iter()
        .map(|p| {
            let p = p.to_str().ok_or(USAGE)?;
            p.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| format!("{p}: not Parameter=value").into())
        })
        .collect::<Result<_, BoxError>>()?;
    Ok(Args {
        template: template.into(),
        bootstraps: bootstraps.into(),
        events: events.into(),
        parameters,
        prefix,
    })
}

/// What is wrong with `answer` (none when the function did its job): an error report, an HTTP status other
/// than 2xx (an API or webhook answer), or an item the function reports failed (a stream or queue batch).
fn fault(answer: &Answer) -> Option<String> {
    if answer.is_error {
        return Some(format!("it answered with an error: {}", answer.body));
    }
    if let Some(status) = answer.body.get("statusCode").and_then(serde_json::Value::as_u64) {
        return (!(200..300).contains(&status)).then(|| format!("it answered HTTP {status}: {}", answer.body));
    }
    let failures = answer
        .body
        .get("batchItemFailures")
        .and_then(serde_json::Value::as_array);
    failures
        .filter(|f| !f.is_empty())
        .map(|f| format!("it reported {} failed item(s): {}", f.len(), answer.body))
}

/// The last lines of the function's log, for a failure's message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Cold-starts `function` and hands it `event`; the cold start's duration and the answer's summary.
async fn cold_start(
    function: &str,
    command: &[&std::ffi::OsStr],
    env: &[(String, String)],
    event: serde_json::Value,
) -> Result<(Duration, String), String> {
    let mut api = RuntimeApi::start(INVOKE_DEADLINE).await.map_err(|e| e.to_string())?;
    let log = local_testkit::service::repo_root().join(format!(".local/cold-start-{function}.log"));
    let started = Instant::now();
    let mut child = api
        .spawn(command, function, env, Output::File(&log))
        .map_err(|e| format!("spawn {command:?}: {e}"))?;
    // A function that refuses its configuration exits (or reports an init error) before it polls: that is
    // its cold start failure.
    if let Err(failed) = api.ready(&mut child, "cold-start", START_DEADLINE).await {
        let why = failed.payload;
        return Err(format!(
            "cold start failed: {why}; its log ({}):\n{}",
            log.display(),
            log_tail(&log)
        ));
    }
    let cold = started.elapsed();
    let answer = api.invoke(event).await.map_err(|e| format!("no answer: {e}"))?;
    child.kill().await.ok();
    match fault(&answer) {
        Some(why) => Err(format!("{why}; its log ({}):\n{}", log.display(), log_tail(&log))),
        None => Ok((
            cold,
            answer
                .body
                .get("statusCode")
                .map_or_else(|| "ok".into(), |s| format!("HTTP {s}")),
        )),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = args()?;
    let template = Template::load(&args.template)?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let prefix = format!("cold-{}", std::process::id());
    let given = args.parameters.iter().cloned().collect();
    let stack: Stack = local_lambda::world::create(&sdk, &prefix, &given).await?;
    let mut failed = Vec::new();
    for function in template.functions() {
        let sample = SAMPLES
            .iter()
            .find(|(f, _)| *f == function)
            .map(|(_, s)| args.events.join(s));
        let outcome = match sample {
            None => Err(format!("no sample event for {function} (SAMPLES in cold-start.rs)")),
            Some(sample) => run(&args, &template, &stack, &function, &sample).await,
        };
        match outcome {
            Ok(line) => println!("{function}: {line}"),
            Err(why) => {
                eprintln!("{function}: {why}");
                failed.push(function);
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("cold start failed: {}", failed.join(", ")).into())
    }
}

/// One function: its environment from the template, its bootstrap, its sample; a line saying what it did.
async fn run(args: &Args, template: &Template, stack: &Stack, function: &str, sample: &Path) -> Result<String, String> {
    let env: Vec<(String, String)> = template.environment(function, stack)?.into_iter().collect();
    let bootstrap = args.bootstraps.join(function).join("bootstrap");
    if !bootstrap.is_file() {
        return Err(format!("no {}", bootstrap.display()));
    }
    let text = std::fs::read_to_string(sample).map_err(|e| format!("{}: {e}", sample.display()))?;
    let event = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", sample.display()))?;
    let mut command: Vec<&std::ffi::OsStr> = args.prefix.iter().map(OsString::as_os_str).collect();
    command.push(bootstrap.as_os_str());
    let (cold, answer) = cold_start(function, &command, &env, event).await?;
    let name = sample.file_name().unwrap_or_default().to_string_lossy();
    Ok(format!("cold start {cold:.1?}, answered {answer} to {name}"))
}
