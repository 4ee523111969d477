//! The saga escalation queue: what the checkout saga could not fix by retrying (`checkout_saga::saga::Escalation`
//! writes `{"order_id", "action", "attempts", "error", "escalated_at_ms"}`).
//!
//! **Listing without consuming.** SQS has no browse: the command receives every message with a short
//! visibility timeout and then makes each visible again at once (`ChangeMessageVisibility` 0). The cost: each
//! listing raises the messages' `ApproximateReceiveCount` (the queue has no redrive policy, so nothing moves)
//! and, for a moment, another reader would not see them.
//!
//! **Retry** resumes the saga where the PSP key is: it invokes the deployed sweeper function (Lambda `Invoke`,
//! `RequestResponse`, `{"resume": {"order_id": ..}}`, `checkout_saga::resume`), which runs the saga's own
//! runner with its own settings and key and answers where the saga is now. `--local` runs the same
//! `CheckoutSweeper::resume_one` in this process instead (local stacks: the PSP settings of this shell). Either
//! way: the same steps, the same idempotency keys at the PSP, the same version token. After a resume that
//! returns, the order's escalation messages are deleted (they are answered); a resume that fails again
//! escalates anew.

use crate::settings::{Ctx, QueueRole};
use crate::when::format_ms;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use checkout_saga::resume::{ResumeError, Resumed, SweeperRequest};
use checkout_saga::saga::{Loaded, NextStep, SagaStore};
use serde::{Deserialize, Serialize};
use shared::OrderId;

/// How long a resume may run in this process (`--local`): the sweeper function's own timeout.
const LOCAL_RESUME_DEADLINE: std::time::Duration = std::time::Duration::from_secs(25);

/// How long a listing hides the messages before it gives them back explicitly.
const PEEK_VISIBILITY_SECONDS: i32 = 20;
/// A listing stops after this many messages.
const PEEK_LIMIT: usize = 1000;

/// One escalation as the saga wrote it, plus SQS's own facts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EscalationMessage {
    pub message_id: String,
    pub order_id: String,
    pub action: String,
    pub attempts: u32,
    pub error: String,
    pub escalated_at_ms: i64,
    pub receive_count: u32,
    #[serde(skip)]
    receipt_handle: String,
}

#[derive(Deserialize)]
struct Body {
    order_id: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    attempts: u32,
    #[serde(default)]
    error: String,
    #[serde(default)]
    escalated_at_ms: i64,
}

/// Every message of the queue (up to [`PEEK_LIMIT`]), left in the queue and visible again.
pub async fn peek(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Result<Vec<EscalationMessage>, crate::Error> {
    let mut found: Vec<EscalationMessage> = Vec::new();
    let result = receive_all(sqs, queue_url, &mut found).await;
    // Give every received message back, also when receiving failed halfway.
    for m in &found {
        let _ = sqs
            .change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(&m.receipt_handle)
            .visibility_timeout(0)
            .send()
            .await;
    }
    result?;
    found.sort_by_key(|m| m.escalated_at_ms);
    Ok(found)
}

async fn receive_all(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    found: &mut Vec<EscalationMessage>,
) -> Result<(), crate::Error> {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    while found.len() < PEEK_LIMIT {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(PEEK_VISIBILITY_SECONDS)
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| crate::aws_error("receiving from the escalation queue (ReceiveMessage)", e))?;
        if out.messages().is_empty() {
            return Ok(());
        }
        for m in out.messages() {
            if found.iter().any(|f| Some(f.message_id.as_str()) == m.message_id()) {
                continue;
            }
            let body: Option<Body> = m.body().and_then(|b| serde_json::from_str(b).ok());
            let body = body.unwrap_or(Body {
                order_id: String::new(),
                action: String::new(),
                attempts: 0,
                error: format!("unreadable escalation: {}", m.body().unwrap_or_default()),
                escalated_at_ms: 0,
            });
            found.push(EscalationMessage {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                order_id: body.order_id,
                action: body.action,
                attempts: body.attempts,
                error: body.error,
                escalated_at_ms: body.escalated_at_ms,
                receive_count: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0),
                receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
            });
        }
    }
    Ok(())
}

/// `escalations list`: every escalation, oldest first.
pub async fn list(ctx: &Ctx, queue: Option<&str>) -> Result<Vec<EscalationMessage>, crate::Error> {
    let url = ctx.queue_url(QueueRole::Escalations, queue).await?;
    peek(&ctx.sqs, &url).await
}

/// The escalations for people.
pub fn render_list(messages: &[EscalationMessage]) -> String {
    if messages.is_empty() {
        return "no escalations\n".to_owned();
    }
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|m| {
            vec![
                format_ms(m.escalated_at_ms),
                m.order_id.clone(),
                m.action.clone(),
                m.attempts.to_string(),
                m.receive_count.to_string(),
                m.error.clone(),
            ]
        })
        .collect();
    format!(
        "{}\n{} escalation(s); `paymentsctl escalations retry <order> --dry-run` says what a retry would do.\n",
        crate::table::render(
            &["ESCALATED", "ORDER", "ACTION", "ATTEMPTS", "RECEIVED", "ERROR"],
            &rows
        ),
        messages.len()
    )
}

/// What a retry would run next for a saga: the step the runner takes (the core's one table, the name the
/// runner's logs and escalations use), then what that step does.
pub fn describe_next(next: NextStep) -> String {
    format!("{}: {}", next.name(), next.describe())
}

/// The step the runner takes for `loaded` now: the runner's own decision (`Settings::next_step`, the core's
/// `Loaded::step_at`) with the deployment's saga settings read from `env` as the saga's functions read them
/// (`checkout_saga::runner::Settings::from_env`), so a payment creation or a charge past its deadline is
/// told as given up, as the runner gives it up.
pub fn runner_step(env: &shared::Env, loaded: &Loaded) -> Result<NextStep, shared::ConfigError> {
    Ok(checkout_saga::runner::Settings::from_env(env)?.next_step(loaded))
}

/// A retry that failed; the cause is kept.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    #[error("the resume in this process")]
    Resume(#[source] ResumeError),
    #[error("the sweeper function {function} answered an error: {message}")]
    Function { function: String, message: String },
    #[error(
        "no sweeper function to invoke: pass --stack NAME (its output CheckoutSweeperFunctionName), set \
         CHECKOUT_SWEEPER_FUNCTION, or --local to run the saga here (local stacks)"
    )]
    NoFunction,
    #[error("deleting escalation {message_id}")]
    Delete {
        message_id: String,
        #[source]
        source: shared::store::SdkFailure,
    },
}

/// What `escalations retry` found and did.
#[derive(Debug, Clone, Serialize)]
pub struct RetryReport {
    pub order_id: String,
    pub dry_run: bool,
    /// The saga before the retry.
    pub status: String,
    pub version: u64,
    /// The order's escalation messages found in the queue.
    pub escalations: usize,
    /// What the saga runs next (before the retry).
    pub next: String,
    /// Where the resume runs: `function <name>` (the deployed sweeper), or `here` (`--local`).
    pub runs: String,
    /// After a retry that ran: the saga's status, version and next action.
    pub resumed: Option<Resumed>,
    /// Escalation messages deleted (answered by the retry).
    pub deleted: usize,
}

impl RetryReport {
    /// The report for people.
    pub fn render(&self) -> String {
        let mut out = format!(
            "saga {}: {} (version {}), {} escalation(s) in the queue\nnext: {}\nresume runs: {}\n",
            self.order_id, self.status, self.version, self.escalations, self.next, self.runs
        );
        match &self.resumed {
            _ if self.dry_run => out.push_str("dry run: nothing was run, nothing written, no message deleted\n"),
            Some(r) => out.push_str(&format!(
                "resumed: now {} (version {}); next: {}\n",
                r.status, r.version, r.next
            )),
            None => out.push_str("nothing to retry\n"),
        }
        if self.deleted > 0 {
            out.push_str(&format!(
                "{} escalation message(s) of {} deleted\n",
                self.deleted, self.order_id
            ));
        }
        out
    }
}

/// `escalations retry <order> [--dry-run] [--local]`: the resume runs in the deployed sweeper function, or
/// with `local` in this process.
pub async fn retry(
    ctx: &Ctx,
    order: &str,
    queue: Option<&str>,
    dry_run: bool,
    local: bool,
) -> Result<RetryReport, crate::Error> {
    let order_id = OrderId::parse(order)?;
    let sagas = SagaStore::new(ctx.dynamodb.clone(), ctx.table(), ctx.config.open_shards);
    let loaded = sagas
        .load(&order_id)
        .await?
        .ok_or_else(|| format!("no saga for order {order}"))?;
    let before = loaded.record().clone();
    let next = runner_step(&ctx.env, &loaded)?;
    let url = ctx.queue_url(QueueRole::Escalations, queue).await.ok();
    let escalations: Vec<EscalationMessage> = match &url {
        Some(url) => peek(&ctx.sqs, url)
            .await?
            .into_iter()
            .filter(|m| m.order_id == order)
            .collect(),
        None => Vec::new(),
    };
    let function = resume_function(ctx, local);
    let runs = match &function {
        _ if local => "here (--local)".to_owned(),
        Ok(function) => format!("function {function}"),
        Err(why) if dry_run => format!("nowhere: {why}"),
        Err(_) => return Err(RetryError::NoFunction.into()),
    };
    let mut report = RetryReport {
        order_id: order.to_owned(),
        dry_run,
        runs,
        status: before.status.to_string(),
        version: before.version,
        escalations: escalations.len(),
        next: describe_next(next),
        resumed: None,
        deleted: 0,
    };
    if dry_run {
        return Ok(report);
    }
    if next != NextStep::Done {
        report.resumed = Some(match function {
            Ok(function) if !local => invoke(ctx, &function, &order_id).await?,
            _ => resume_here(ctx, &order_id, url.as_deref()).await?,
        });
    }
    if let Some(url) = &url {
        delete(ctx, url, &escalations).await?;
        report.deleted = escalations.len();
    }
    Ok(report)
}

/// The sweeper function a resume invokes (`CHECKOUT_SWEEPER_FUNCTION`, `--stack`'s output); none is an error
/// unless the resume runs here (`local`).
pub fn resume_function(ctx: &Ctx, local: bool) -> Result<String, RetryError> {
    match ctx.env.optional("CHECKOUT_SWEEPER_FUNCTION") {
        Some(function) => Ok(function),
        None if local => Ok(String::new()),
        None => Err(RetryError::NoFunction),
    }
}

/// Asks the deployed sweeper function to resume `order` (`RequestResponse`: its answer is the saga after the
/// resume); the PSP key stays with the function.
async fn invoke(ctx: &Ctx, function: &str, order: &OrderId) -> Result<Resumed, crate::Error> {
    #[derive(Deserialize)]
    struct Answer {
        resumed: Resumed,
    }
    let payload = serde_json::to_vec(&SweeperRequest::resume_payload(order))?;
    let out = aws_sdk_lambda::Client::new(&ctx.sdk)
        .invoke()
        .function_name(function)
        .invocation_type(InvocationType::RequestResponse)
        .payload(Blob::new(payload))
        .send()
        .await
        .map_err(|e| crate::aws_error(format!("invoking {function} (lambda:InvokeFunction)"), e))?;
    let body = out.payload().map(|p| p.as_ref().to_vec()).unwrap_or_default();
    if out.function_error().is_some() {
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let message = answer["errorMessage"]
            .as_str()
            .map_or_else(|| String::from_utf8_lossy(&body).into_owned(), str::to_owned);
        return Err(RetryError::Function {
            function: function.to_owned(),
            message,
        }
        .into());
    }
    let answer: Answer = serde_json::from_slice(&body)
        .map_err(|e| format!("the sweeper function {function} answered what is not a resume: {e}"))?;
    Ok(answer.resumed)
}

/// Resumes the saga in this process (`--local`), through the sweeper's own `resume_one`, from this shell's
/// settings (PSP, escalation queue, timeouts) and the table this run reads.
async fn resume_here(ctx: &Ctx, order_id: &OrderId, url: Option<&str>) -> Result<Resumed, crate::Error> {
    let env = match url {
        Some(url) if ctx.env.optional("ESCALATION_QUEUE_URL").is_none() => {
            ctx.env.clone().with("ESCALATION_QUEUE_URL", url)
        }
        _ => ctx.env.clone(),
    };
    // The saga's table is the one this run reads (the environment's, or the stack's output), whatever the
    // environment says.
    let env = env.with("TABLE_NAME", ctx.config.table_name.clone());
    let settings = checkout_saga::Settings::from_env(&env)?;
    let clients = shared::lambda::Clients {
        sdk: ctx.sdk.clone(),
        dynamodb: ctx.dynamodb.clone(),
        sqs: ctx.sqs.clone(),
    };
    let sweeper = checkout_saga::CheckoutSweeper::build(&settings, clients).await?;
    let deadline = tokio::time::Instant::now() + LOCAL_RESUME_DEADLINE;
    Ok(sweeper
        .resume_one(order_id, deadline)
        .await
        .map_err(RetryError::Resume)?)
}

/// Deletes answered escalation messages.
async fn delete(ctx: &Ctx, url: &str, messages: &[EscalationMessage]) -> Result<(), crate::Error> {
    for m in messages {
        ctx.sqs
            .delete_message()
            .queue_url(url)
            .receipt_handle(&m.receipt_handle)
            .send()
            .await
            .map_err(|e| RetryError::Delete {
                message_id: m.message_id.clone(),
                source: e.into(),
            })?;
    }
    Ok(())
}
