//! `paymentsctl`: thin entry point. Parses the command line, builds the clients once from the functions'
//! settings, runs one command, prints a table (or `--json`), and prints an error with its whole cause chain
//! once, at the edge.

use clap::{Args, Parser, Subcommand};
use paymentsctl::settings::Ctx;
use paymentsctl::{breaker, escalations, parked, replay, timeline, when};
use std::process::ExitCode;

/// The on-call engineer's command for the payments system: a payment's or order's whole story, parked
/// webhooks, escalations, replays, the PSP breaker.
///
/// Reads the same settings as the functions: TABLE_NAME, QUEUE_URL, DLQ_URL, ESCALATION_QUEUE_URL and the
/// AWS SDK's own variables (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, AWS_REGION, credentials).
/// Against the local stack (`source scripts/lib.sh && local_env 8000 9324`) the queues are found by name.
#[derive(Parser)]
#[command(name = "paymentsctl", version, propagate_version = true)]
struct Cli {
    /// Print JSON for machines instead of tables for people.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Everything known about a payment or order, in time order, with gaps and anomalies called out.
    ///
    /// Takes a payment id, an order id, a PSP reference (e.g. pi_...), a parked webhook's event id, or an
    /// applied PSP event id (found by a table scan). Shows the payment's events (path, correlation id, trace
    /// context, PSP event id, reason), the checkout saga's steps and compensations, each consumer's cursor,
    /// the order projection, the lease, parked webhooks naming the payment, and escalations of the order.
    Timeline(TimelineArgs),
    /// Webhooks parked as quarantined or for an unknown payment.
    #[command(subcommand)]
    Parked(ParkedCommand),
    /// The checkout saga's escalation queue.
    #[command(subcommand)]
    Escalations(EscalationsCommand),
    /// Republish payment events to the events queue (consumers apply each once).
    #[command(subcommand)]
    Replay(ReplayCommand),
    /// Move the events DLQ's messages back to the events queue.
    RedriveDlq(RedriveArgs),
    /// The PSP circuit breaker shared by every function.
    #[command(subcommand)]
    Breaker(BreakerCommand),
}

#[derive(Subcommand)]
enum BreakerCommand {
    /// Its state, what opened it (failed attempts and requests), when it changed and when an open state ends.
    Show,
    /// Close it now (after the PSP's outage is over): asks first, unless --yes.
    ///
    /// Written only if the breaker is still as shown; if a function changed it meanwhile, nothing is written
    /// and the command fails (exit 1).
    Reset {
        /// Do not ask (scripts; needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Args)]
struct TimelineArgs {
    /// Payment id, order id, PSP reference or PSP event id.
    id: String,
    /// A consumer whose cursor to show (repeatable; default: order-projection).
    #[arg(long = "consumer")]
    consumers: Vec<String>,
    /// The saga escalation queue (default: ESCALATION_QUEUE_URL, or the local stack's).
    #[arg(long)]
    escalation_queue: Option<String>,
    /// The webhook intake's log group (default: INTAKE_LOG_GROUP): its Logs Insights query for the payment's
    /// deliveries (duplicates, stale, 503s) is run and its rows merged (billed per GB scanned over the
    /// payment's life); without it the query is only printed.
    #[arg(long)]
    log_group: Option<String>,
    /// How long the Logs Insights query may run before it is stopped (30s, 2m).
    #[arg(long, default_value = "30s", value_parser = when::parse_duration)]
    logs_timeout: std::time::Duration,
    /// The local stack's log file: its webhook lines for the payment instead of Logs Insights.
    #[arg(long, conflicts_with = "log_group")]
    log: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum ParkedCommand {
    /// List parked webhooks, oldest first.
    List {
        /// quarantined or unknown_payment (default: both).
        #[arg(long, value_parser = parked::parse_kind)]
        kind: Option<shared::store::ParkedKind>,
        /// Only those parked since this time (2026-12-01T10:00Z) or this long ago (2h).
        #[arg(long)]
        since: Option<String>,
    },
    /// Re-run one parked webhook through the intake's parser, check and the one finalize.
    ///
    /// The parked body is redacted and its signature cannot be checked again: events carrying a customer
    /// action or retry token are refused (recovery fetches those from the PSP). See the README.
    Replay {
        /// The key from `parked list` (<provider>#<event key>).
        key: String,
        /// quarantined or unknown_payment (default: whichever holds the key).
        #[arg(long, value_parser = parked::parse_kind)]
        kind: Option<shared::store::ParkedKind>,
        /// Say what would happen; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum EscalationsCommand {
    /// List the escalations (received and given back at once; raises their receive count).
    List {
        /// The escalation queue (default: ESCALATION_QUEUE_URL, or the local stack's).
        #[arg(long)]
        queue: Option<String>,
    },
    /// Resume an order's saga through the saga runner, then delete its escalation messages.
    ///
    /// Needs the checkout functions' settings (PSP_BASE_URL, PSP_API_KEY or PSP_API_KEY_ARN, ...).
    Retry {
        /// The order whose saga to resume.
        order: String,
        /// The escalation queue (default: ESCALATION_QUEUE_URL, or the local stack's).
        #[arg(long)]
        queue: Option<String>,
        /// Say what the saga would run next; run nothing, write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum ReplayCommand {
    /// One payment's events, in version order.
    Payment {
        /// The payment id.
        id: String,
        #[command(flatten)]
        common: ReplayCommon,
    },
    /// Every event recorded in a window (scans the table).
    Range {
        /// Start: 2026-12-01T10:00Z, 2026-12-01, or epoch milliseconds.
        #[arg(long)]
        from: Option<String>,
        /// End, exclusive (default: now).
        #[arg(long)]
        to: Option<String>,
        /// Instead of --from: this long back from now (2h, 90m, 3d).
        #[arg(long)]
        last: Option<String>,
        #[command(flatten)]
        common: ReplayCommon,
    },
}

#[derive(Args)]
struct ReplayCommon {
    /// The events queue (default: QUEUE_URL, or the local stack's).
    #[arg(long)]
    queue: Option<String>,
    /// Count what would be published; send nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args)]
struct RedriveArgs {
    /// The events DLQ (default: DLQ_URL, or the local stack's).
    #[arg(long)]
    dlq: Option<String>,
    /// The events queue (default: QUEUE_URL, or the local stack's).
    #[arg(long)]
    queue: Option<String>,
    /// Count the DLQ's messages; move nothing.
    #[arg(long)]
    dry_run: bool,
}

fn print<T: serde::Serialize>(
    json: bool,
    value: &T,
    text: impl FnOnce(&T) -> String,
) -> Result<(), paymentsctl::Error> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{}", text(value));
    }
    Ok(())
}

async fn run(cli: Cli) -> Result<(), paymentsctl::Error> {
    let ctx = Ctx::from_env().await?;
    let json = cli.json;
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    match cli.command {
        Command::Timeline(args) => {
            let mut opts = timeline::Options::from_env(&ctx.env, shared::clock::now_ms())?;
            if !args.consumers.is_empty() {
                opts.consumers = args.consumers;
            }
            opts.escalation_queue = args.escalation_queue;
            if args.log_group.is_some() {
                opts.log_group = args.log_group;
            }
            opts.logs_deadline = args.logs_timeout;
            opts.progress = progress;
            opts.local_log = args.log;
            let t = timeline::build(&ctx, &args.id, &opts).await?;
            print(json, &t, timeline::render)
        }
        Command::Parked(ParkedCommand::List { kind, since }) => {
            let since_ms = match since {
                None => None,
                Some(s) => Some(match when::parse_duration(&s) {
                    Ok(d) => shared::clock::now_ms() - i64::try_from(d.as_millis())?,
                    Err(_) => when::parse_instant(&s)?,
                }),
            };
            let items = parked::list(&ctx, kind, since_ms).await?;
            print(json, &items, |i| parked::render_list(i))
        }
        Command::Parked(ParkedCommand::Replay { key, kind, dry_run }) => {
            let report = parked::replay(&ctx, &key, kind, dry_run).await?;
            print(json, &report, parked::render_replay)
        }
        Command::Escalations(EscalationsCommand::List { queue }) => {
            let messages = escalations::list(&ctx, queue.as_deref()).await?;
            print(json, &messages, |m| escalations::render_list(m))
        }
        Command::Escalations(EscalationsCommand::Retry { order, queue, dry_run }) => {
            let report = escalations::retry(&ctx, &order, queue.as_deref(), dry_run).await?;
            print(json, &report, escalations::RetryReport::render)
        }
        Command::Replay(ReplayCommand::Payment { id, common }) => {
            let report = replay::payment(&ctx, &id, common.queue.as_deref(), common.dry_run).await?;
            print(json, &report, replay::ReplayReport::render)
        }
        Command::Replay(ReplayCommand::Range { from, to, last, common }) => {
            let (from_ms, to_ms) =
                when::window(from.as_deref(), to.as_deref(), last.as_deref(), shared::clock::now_ms())?;
            let report = replay::range(&ctx, from_ms, to_ms, common.queue.as_deref(), common.dry_run, progress).await?;
            print(json, &report, replay::ReplayReport::render)
        }
        Command::Breaker(BreakerCommand::Show) => {
            let view = breaker::show(&ctx).await?;
            print(json, &view, breaker::BreakerView::render)
        }
        Command::Breaker(BreakerCommand::Reset { yes }) => {
            let view = breaker::show(&ctx).await?;
            if !json {
                print!("{}", view.render());
            }
            if view.resettable() && !yes && !confirmed("Reset the PSP breaker (close it now)?")? {
                return Err("not reset (answer y, or pass --yes)".into());
            }
            let outcome = breaker::reset(&ctx, &view).await?;
            print(json, &outcome, breaker::ResetOutcome::render)
        }
        Command::RedriveDlq(args) => {
            let report = replay::redrive(&ctx, args.dlq.as_deref(), args.queue.as_deref(), args.dry_run).await?;
            print(json, &report, replay::RedriveReport::render)
        }
    }
}

/// Asks `question` on the terminal; only `y` or `yes` is a yes. Without a terminal there is no one to ask.
fn confirmed(question: &str) -> Result<bool, paymentsctl::Error> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Err("stdin is not a terminal: pass --yes to reset without asking".into());
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paymentsctl: {}", shared::telemetry::ErrorChain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
