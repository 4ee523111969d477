//! The command line and what each command runs: parsed here (so the tests parse what operators type), run by
//! [`run`], which answers with the [`Exit`] code. `main` only parses, runs and prints the error once.
//!
//! Every run first says where it points ([`crate::target`]) on stderr. Changes that move money or state
//! (`parked replay`, `escalations retry`, `replay range`, `redrive-dlq`, `breaker reset`) show their dry run
//! and ask first; with no terminal to ask they refuse (exit 2) unless `--yes` says the caller already decided.
//! With `--json`, stdout is one document: `{"target": ..., "result": ...}`.

use crate::settings::{Connection, Ctx};
use crate::{breaker, doctor, escalations, parked, replay, stripe, timeline, when, Exit, UsageError};
use clap::{Args, CommandFactory, Parser, Subcommand};

/// The on-call engineer's command for the payments system: a payment's or order's whole story, parked
/// webhooks, escalations, replays, the PSP breaker, and one health check of a stack (`doctor`).
///
/// Finds the table, the queues and the intake's log group from the stack's outputs (`--stack NAME`, with
/// `--region` and `--profile`), or from the functions' own variables: TABLE_NAME, QUEUE_URL, DLQ_URL,
/// ESCALATION_QUEUE_URL, INTAKE_LOG_GROUP (with --stack the stack's output wins; a variable that disagrees is
/// named in a warning and refuses every write). Every run first prints the account, region, stack and table
/// it acts on (stderr; with --json the `target` of the one document `{"target", "result"}`). The AWS SDK's
/// own variables apply (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, AWS_REGION, AWS_PROFILE, credentials).
/// Against the local stack (`source scripts/lib.sh && local_env 8000 9324`) the queues are found by name.
///
/// Exit codes: 0 done; 1 an error (nothing more was done); 2 a usage error, a change without a terminal and
/// without --yes, or a write with a variable that disagrees with --stack; 3 done, with findings to look at
/// (timeline: a gap or an anomaly; doctor: something needs a person).
#[derive(Parser, Debug)]
#[command(name = "paymentsctl", version, propagate_version = true)]
pub struct Cli {
    /// Print JSON for machines instead of tables for people.
    #[arg(long, global = true)]
    pub json: bool,
    /// The CloudFormation stack whose outputs name the table, queues and log group (e.g. payments-prod).
    #[arg(long, global = true, value_name = "NAME")]
    pub stack: Option<String>,
    /// The AWS region (default: the SDK's, AWS_REGION or the profile's).
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// The AWS profile of ~/.aws/config and ~/.aws/credentials (default: AWS_PROFILE, else `default`).
    #[arg(long, global = true)]
    pub profile: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Where this run connects.
    pub fn connection(&self) -> Connection {
        Connection {
            stack: self.stack.clone(),
            region: self.region.clone(),
            profile: self.profile.clone(),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
    /// Is the stack healthy: alarms in ALARM, DLQ, escalations, parked webhooks, breakers, the oldest open
    /// payment and saga, the Stripe webhook endpoint (with PSP_API_KEY). Exit 3 when anything needs a person.
    Doctor,
    /// Stripe account settings made through Stripe's API (PSP_API_KEY, PSP_BASE_URL); no AWS access needed.
    #[command(subcommand)]
    Stripe(StripeCommand),
    /// Print the shell completion script (e.g. `paymentsctl completions bash > /etc/bash_completion.d/paymentsctl`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand, Debug)]
pub enum StripeCommand {
    /// Create the webhook endpoint for --url with the client's pinned API version (events then render in
    /// it, whatever the account's default) and the event types the intake handles.
    ///
    /// The signing secret (shown by Stripe at creation only) is written to --secret-file, a new file of
    /// mode 0600, never printed. A rerun with the same URL within 24 hours gets the same endpoint back.
    Setup {
        /// Where Stripe delivers: the stack's `https://.../webhooks/stripe`.
        #[arg(long)]
        url: String,
        /// A new file for the endpoint's signing secret (put it into the intake's webhook secret).
        #[arg(long, value_name = "PATH")]
        secret_file: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum BreakerCommand {
    /// Its state, what opened it (failed attempts and requests), when it changed and when an open state ends.
    Show {
        /// stripe or adyen (default: both; with --json an array).
        #[arg(long, value_parser = breaker::parse_psp)]
        psp: Option<&'static str>,
    },
    /// Close one PSP's breaker now (after its outage is over): asks first, unless --yes.
    ///
    /// Written only if the breaker is still as shown; if a function changed it meanwhile, nothing is written
    /// and the command fails (exit 1). Without a terminal and without --yes it refuses (exit 2).
    Reset {
        /// stripe or adyen: the breaker to close.
        #[arg(long, value_parser = breaker::parse_psp)]
        psp: &'static str,
        /// Do not ask (scripts; needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Args, Debug)]
pub struct TimelineArgs {
    /// Payment id, order id, PSP reference or PSP event id.
    pub id: String,
    /// A consumer whose cursor to show (repeatable; default: order-projection).
    #[arg(long = "consumer")]
    pub consumers: Vec<String>,
    /// The saga escalation queue (default: ESCALATION_QUEUE_URL, or the local stack's).
    #[arg(long)]
    pub escalation_queue: Option<String>,
    /// The webhook intake's log group (default: INTAKE_LOG_GROUP): its Logs Insights query for the payment's
    /// deliveries (duplicates, stale, 503s) is run and its rows merged (billed per GB scanned over the
    /// payment's life); without it the query is only printed.
    #[arg(long)]
    pub log_group: Option<String>,
    /// How long the Logs Insights query may run before it is stopped (30s, 2m).
    #[arg(long, default_value = "30s", value_parser = when::parse_duration)]
    pub logs_timeout: std::time::Duration,
    /// The local stack's log file: its webhook lines for the payment instead of Logs Insights.
    #[arg(long, conflicts_with = "log_group")]
    pub log: Option<std::path::PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ParkedCommand {
    /// List parked webhooks, oldest first.
    List {
        /// quarantined or unknown_payment (default: both).
        #[arg(long, value_parser = parked::parse_kind)]
        kind: Option<shared::store::ParkedKind>,
        /// Only those parked since this time (2026-12-01T10:00Z) or this long ago (2h).
        #[arg(long)]
        since: Option<String>,
    },
    /// Re-run one parked webhook through the intake's parser, check and the one finalize: shows the dry run
    /// and asks first, unless --yes.
    ///
    /// The parked body is redacted and its signature cannot be checked again: events carrying a customer
    /// action or retry token are refused (recovery fetches those from the PSP). See the README. Without a
    /// terminal and without --yes it refuses (exit 2).
    Replay {
        /// The key from `parked list` (<provider>#<event key>).
        key: String,
        /// quarantined or unknown_payment (default: whichever holds the key).
        #[arg(long, value_parser = parked::parse_kind)]
        kind: Option<shared::store::ParkedKind>,
        /// Say what would happen; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Do not ask (scripts; needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum EscalationsCommand {
    /// List the escalations (received and given back at once; raises their receive count).
    List {
        /// The escalation queue (default: ESCALATION_QUEUE_URL, or the local stack's).
        #[arg(long)]
        queue: Option<String>,
    },
    /// Resume an order's saga through the saga runner, then delete its escalation messages: shows the dry run
    /// and asks first, unless --yes.
    ///
    /// The resume runs in the deployed sweeper function (Lambda Invoke of CHECKOUT_SWEEPER_FUNCTION, from
    /// --stack's output CheckoutSweeperFunctionName): the PSP key stays in AWS. --local runs it in this process
    /// instead (local stacks; needs PSP_BASE_URL, PSP_API_KEY, ... here). Without a terminal and without --yes
    /// it refuses (exit 2).
    Retry {
        /// The order whose saga to resume.
        order: String,
        /// The escalation queue (default: ESCALATION_QUEUE_URL, or the local stack's).
        #[arg(long)]
        queue: Option<String>,
        /// Say what the saga would run next; run nothing, write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Do not ask (scripts; needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
        /// Run the saga in this process with this shell's PSP settings (local stacks), not in the sweeper
        /// function.
        #[arg(long)]
        local: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ReplayCommand {
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
        /// Do not ask before publishing (scripts; needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Args, Debug)]
pub struct ReplayCommon {
    /// The events queue (default: QUEUE_URL, or the local stack's).
    #[arg(long)]
    pub queue: Option<String>,
    /// Count what would be published; send nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct RedriveArgs {
    /// The events DLQ (default: DLQ_URL, or the local stack's).
    #[arg(long)]
    pub dlq: Option<String>,
    /// The events queue (default: QUEUE_URL, or the local stack's).
    #[arg(long)]
    pub queue: Option<String>,
    /// Count the DLQ's messages; move nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask before moving (scripts; needed when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,
}

impl Command {
    /// Whether the command, as given, writes (a dry run does not): refused when a variable disagrees with
    /// `--stack`.
    pub fn writes(&self) -> bool {
        match self {
            Command::Parked(ParkedCommand::Replay { dry_run, .. })
            | Command::Escalations(EscalationsCommand::Retry { dry_run, .. })
            | Command::RedriveDlq(RedriveArgs { dry_run, .. }) => !dry_run,
            Command::Replay(ReplayCommand::Payment { common, .. } | ReplayCommand::Range { common, .. }) => {
                !common.dry_run
            }
            Command::Breaker(BreakerCommand::Reset { .. }) => true,
            _ => false,
        }
    }
}

/// What a command prints, on stdout: its text, or with `--json` one document naming the target too.
#[derive(serde::Serialize)]
struct Document<'a, T> {
    target: &'a crate::target::Target,
    result: &'a T,
}

fn print<T: serde::Serialize>(
    ctx: &Ctx,
    json: bool,
    value: &T,
    text: impl FnOnce(&T) -> String,
) -> Result<(), crate::Error> {
    if json {
        let document = Document {
            target: &ctx.target,
            result: value,
        };
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        print!("{}", text(value));
    }
    Ok(())
}

/// Runs the parsed command: 0 done, 3 done with findings; an error is the caller's to print (exit 1, or 2
/// for a [`UsageError`]).
pub async fn run(cli: Cli) -> Result<Exit, crate::Error> {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "paymentsctl", &mut std::io::stdout());
        return Ok(Exit::Fine);
    }
    if let Command::Stripe(StripeCommand::Setup { url, secret_file }) = &cli.command {
        let endpoint = stripe::setup(&shared::Env::process(), url, secret_file.as_deref()).await?;
        if cli.json {
            println!("{}", serde_json::to_string_pretty(&endpoint)?);
        } else {
            print!("{}", stripe::render(&endpoint, secret_file.as_deref()));
        }
        return Ok(Exit::Fine);
    }
    let ctx = Ctx::connect(&cli.connection()).await?;
    eprintln!("paymentsctl: {}", ctx.target.line());
    for warning in ctx.target.warnings() {
        eprintln!("paymentsctl: {warning}");
    }
    if let Some(refusal) = ctx.target.refuse_write().filter(|_| cli.command.writes()) {
        return Err(UsageError(refusal).into());
    }
    let json = cli.json;
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    match cli.command {
        Command::Timeline(args) => return timeline_command(&ctx, args, json, progress).await,
        Command::Parked(command) => parked_command(&ctx, command, json).await?,
        Command::Escalations(command) => escalations_command(&ctx, command, json).await?,
        Command::Replay(command) => replay_command(&ctx, command, json, progress).await?,
        Command::RedriveDlq(args) => redrive_command(&ctx, args, json).await?,
        Command::Breaker(command) => breaker_command(&ctx, command, json).await?,
        Command::Doctor => {
            let report = doctor::run(&ctx).await?;
            print(&ctx, json, &report, doctor::render)?;
            if report.needs_attention() {
                return Ok(Exit::Findings);
            }
        }
        Command::Completions { .. } | Command::Stripe(_) => {}
    }
    Ok(Exit::Fine)
}

/// `timeline`: exit 3 when it finds a gap or an anomaly, so a script can tell "look at this" from "fine".
async fn timeline_command(ctx: &Ctx, args: TimelineArgs, json: bool, progress: bool) -> Result<Exit, crate::Error> {
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
    let t = timeline::build(ctx, &args.id, &opts).await?;
    print(ctx, json, &t, timeline::render)?;
    Ok(if t.needs_attention() {
        Exit::Findings
    } else {
        Exit::Fine
    })
}

async fn parked_command(ctx: &Ctx, command: ParkedCommand, json: bool) -> Result<(), crate::Error> {
    match command {
        ParkedCommand::List { kind, since } => {
            let since_ms = match since {
                None => None,
                Some(s) => Some(match when::parse_duration(&s) {
                    Ok(d) => shared::clock::now_ms() - i64::try_from(d.as_millis())?,
                    Err(_) => when::parse_instant(&s)?,
                }),
            };
            let items = parked::list(ctx, kind, since_ms).await?;
            print(ctx, json, &items, |i| parked::render_list(i))
        }
        ParkedCommand::Replay {
            key,
            kind,
            dry_run,
            yes,
        } => {
            if !dry_run {
                eprint!(
                    "{}",
                    parked::render_replay(&parked::replay(ctx, &key, kind, true).await?)
                );
                confirm(yes, &format!("Replay {key}?"), "replay a parked webhook")?;
            }
            let report = parked::replay(ctx, &key, kind, dry_run).await?;
            print(ctx, json, &report, parked::render_replay)
        }
    }
}

async fn escalations_command(ctx: &Ctx, command: EscalationsCommand, json: bool) -> Result<(), crate::Error> {
    match command {
        EscalationsCommand::List { queue } => {
            let messages = escalations::list(ctx, queue.as_deref()).await?;
            print(ctx, json, &messages, |m| escalations::render_list(m))
        }
        EscalationsCommand::Retry {
            order,
            queue,
            dry_run,
            yes,
            local,
        } => {
            if !dry_run {
                // Nowhere to run it: said before the question, not after the answer.
                escalations::resume_function(ctx, local)?;
                let plan = escalations::retry(ctx, &order, queue.as_deref(), true, local).await?;
                eprint!("{}", plan.render());
                confirm(yes, &format!("Resume the saga of {order}?"), "retry an escalation")?;
            }
            let report = escalations::retry(ctx, &order, queue.as_deref(), dry_run, local).await?;
            print(ctx, json, &report, escalations::RetryReport::render)
        }
    }
}

/// `replay`: one payment's events are published at once; a range (a bulk change) is scanned, shown as a dry
/// run would show it, and published once confirmed.
async fn replay_command(ctx: &Ctx, command: ReplayCommand, json: bool, progress: bool) -> Result<(), crate::Error> {
    let report = match command {
        ReplayCommand::Payment { id, common } => {
            replay::payment(ctx, &id, common.queue.as_deref(), common.dry_run).await?
        }
        ReplayCommand::Range {
            from,
            to,
            last,
            common,
            yes,
        } => {
            let (from_ms, to_ms) =
                when::window(from.as_deref(), to.as_deref(), last.as_deref(), shared::clock::now_ms())?;
            let events = replay::range_events(ctx, from_ms, to_ms, progress).await?;
            let queue = common.queue.as_deref();
            if !common.dry_run && !events.is_empty() {
                let plan = replay::publish(ctx, events.clone(), queue, true).await?;
                eprint!("{}", plan.render());
                confirm(yes, "Publish these events?", "replay a range")?;
            }
            replay::publish(ctx, events, queue, common.dry_run).await?
        }
    };
    print(ctx, json, &report, replay::ReplayReport::render)
}

/// `redrive-dlq`: a bulk move, shown as its dry run first and done once confirmed.
async fn redrive_command(ctx: &Ctx, args: RedriveArgs, json: bool) -> Result<(), crate::Error> {
    let (dlq, queue) = (args.dlq.as_deref(), args.queue.as_deref());
    if !args.dry_run {
        let plan = replay::redrive(ctx, dlq, queue, true).await?;
        eprint!("{}", plan.render());
        confirm(args.yes, "Move the DLQ's messages back?", "redrive the DLQ")?;
    }
    let report = replay::redrive(ctx, dlq, queue, args.dry_run).await?;
    print(ctx, json, &report, replay::RedriveReport::render)
}

async fn breaker_command(ctx: &Ctx, command: BreakerCommand, json: bool) -> Result<(), crate::Error> {
    match command {
        BreakerCommand::Show { psp: Some(name) } => print(
            ctx,
            json,
            &breaker::show(ctx, name).await?,
            breaker::BreakerView::render,
        ),
        BreakerCommand::Show { psp: None } => {
            let mut views = Vec::new();
            for name in breaker::BREAKERS {
                views.push(breaker::show(ctx, name).await?);
            }
            print(ctx, json, &views, |views| {
                views
                    .iter()
                    .map(breaker::BreakerView::render)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        }
        BreakerCommand::Reset { psp, yes } => {
            let view = breaker::show(ctx, psp).await?;
            if !json {
                print!("{}", view.render());
            }
            if view.resettable() {
                let question = format!("Reset the {psp} breaker (close it now)?");
                confirm(yes, &question, "reset the breaker")?;
            }
            let outcome = breaker::reset(ctx, &view).await?;
            print(ctx, json, &outcome, breaker::ResetOutcome::render)
        }
    }
}

/// Goes on when `yes` was given or the operator answers `y`/`yes` to `question` on the terminal. Without a
/// terminal there is no one to ask: a [`UsageError`] (exit 2) naming `--yes`; any other answer is an error
/// (exit 1), nothing done.
fn confirm(yes: bool, question: &str, what: &str) -> Result<(), crate::Error> {
    use std::io::{BufRead, IsTerminal, Write};
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(UsageError(format!("stdin is not a terminal: pass --yes to {what} without asking")).into());
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if is_yes(&answer) {
        Ok(())
    } else {
        Err(format!("nothing done: answer y to {what}, or pass --yes").into())
    }
}

/// Only `y` or `yes` (any case, surrounding blanks ignored) is a yes: a stray Enter is a no.
pub fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}
