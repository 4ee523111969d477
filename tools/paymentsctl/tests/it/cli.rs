//! The command as operators run it: the built binary (`CARGO_BIN_EXE_paymentsctl`) against DynamoDB Local and
//! moto (SQS, and CloudFormation for `--stack`), its exit codes, its refusal of bulk changes without a terminal
//! or `--yes`, the service's error code in its errors, its completions; and the parsing of what operators type.

use aws_sdk_dynamodb::types::AttributeValue;
use clap::Parser;
use integration_tests::{fresh_queues, sqs_client, TestContext};
use payments_core::fixtures;
use paymentsctl::cli::{is_yes, Cli, Command};
use paymentsctl::settings::Connection;
use shared::{Channel, Outcome};
use std::process::{Output, Stdio};

/// Runs the binary with `args` on `table` (the test's environment gives the endpoints), stdin not a terminal.
fn paymentsctl(table: Option<&str>, args: &[&str]) -> Output {
    paymentsctl_with(table, &[], args)
}

/// A captured payment with its three events, `damaged`: version 2's event item deleted (a gap).
async fn payment(ctx: &TestContext, id: &str, damaged: bool) {
    let p = ctx.store.create(fixtures::new_payment(id, 1000)).await.unwrap();
    for outcome in [Outcome::Processing, Outcome::Succeeded] {
        ctx.store
            .finalize(&p.id, &fixtures::observe(Channel::Sync, outcome), None)
            .await
            .unwrap();
    }
    // No relay runs here: the history archived as it would archive it.
    ctx.events(&p.id).await.unwrap();
    if damaged {
        ctx.client
            .delete_item()
            .table_name(&ctx.table)
            .key("pk", AttributeValue::S(format!("PAYMENT#{id}")))
            .key("sk", AttributeValue::S("EVENT#0000000002".into()))
            .send()
            .await
            .unwrap();
    }
}

async fn messages(sqs: &aws_sdk_sqs::Client, url: &str) -> usize {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    out.messages().len()
}

#[tokio::test]
async fn timeline_exits_3_on_a_gap_and_0_on_a_clean_payment() {
    let ctx = TestContext::new().await;
    payment(&ctx, "pay_exit_gap", true).await;
    payment(&ctx, "pay_exit_clean", false).await;

    let gap = paymentsctl(Some(&ctx.table), &["timeline", "pay_exit_gap"]);
    assert_eq!(gap.status.code(), Some(3), "{}{}", text(&gap.stdout), text(&gap.stderr));
    assert!(text(&gap.stdout).contains("GAP"), "{}", text(&gap.stdout));
    let clean = paymentsctl(Some(&ctx.table), &["timeline", "pay_exit_clean"]);
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}{}",
        text(&clean.stdout),
        text(&clean.stderr)
    );
}

#[tokio::test]
async fn a_range_replay_without_a_terminal_needs_yes_and_publishes_nothing_until_given() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    payment(&ctx, "pay_bulk", false).await;
    let range = ["replay", "range", "--last", "1h", "--queue", queues.queue_url.as_str()];

    let refused = paymentsctl(Some(&ctx.table), &range);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("would publish 2 event(s)") && stderr.contains("--yes"),
        "{stderr}"
    );
    assert_eq!(
        messages(&sqs, &queues.queue_url).await,
        0,
        "nothing published without --yes"
    );

    let dry = paymentsctl(Some(&ctx.table), &[&range[..], &["--dry-run"]].concat());
    assert_eq!(
        dry.status.code(),
        Some(0),
        "a dry run asks nothing: {}",
        text(&dry.stderr)
    );

    let done = paymentsctl(Some(&ctx.table), &[&range[..], &["--yes"]].concat());
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert!(
        text(&done.stdout).contains("published 2 event(s)"),
        "{}",
        text(&done.stdout)
    );
    assert!(messages(&sqs, &queues.queue_url).await > 0);
}

#[tokio::test]
async fn a_dlq_redrive_without_a_terminal_needs_yes() {
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    let (dlq, queue) = (queues.dlq_url.as_str(), queues.queue_url.as_str());
    let refused = paymentsctl(Some(&ctx.table), &["redrive-dlq", "--dlq", dlq, "--queue", queue]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("pass --yes"),
        "{}",
        text(&refused.stderr)
    );
    let done = paymentsctl(
        Some(&ctx.table),
        &["redrive-dlq", "--dlq", dlq, "--queue", queue, "--yes"],
    );
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
}

#[tokio::test]
async fn aws_errors_show_the_service_code_and_message_not_service_error() {
    let ctx = TestContext::new().await;
    let missing = paymentsctl(Some("no-such-table"), &["timeline", "pay_x"]);
    assert_eq!(missing.status.code(), Some(1));
    let stderr = text(&missing.stderr);
    assert!(stderr.contains("ResourceNotFoundException"), "{stderr}");

    let queue = format!("{}/123456789012/no-such-queue", local_testkit::service::SQS.endpoint());
    let listed = paymentsctl(Some(&ctx.table), &["escalations", "list", "--queue", &queue]);
    assert_eq!(listed.status.code(), Some(1));
    let stderr = text(&listed.stderr);
    assert!(!stderr.contains("service error"), "{stderr}");
    assert!(
        stderr.contains("NonExistentQueue") || stderr.contains("QueueDoesNotExist"),
        "{stderr}"
    );

    // A source the timeline could not read is a note that carries the code too.
    payment(&ctx, "pay_err", false).await;
    let noted = paymentsctl(Some(&ctx.table), &["timeline", "pay_err", "--escalation-queue", &queue]);
    let stdout = text(&noted.stdout);
    assert!(stdout.contains("escalations not checked"), "{stdout}");
    assert!(
        stdout.contains("NonExistentQueue") || stdout.contains("QueueDoesNotExist"),
        "{stdout}"
    );
}

#[test]
fn a_wrong_command_line_exits_2() {
    let out = paymentsctl(None, &["timeline"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = paymentsctl(None, &["replay", "payment", "pay_1", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "one payment's replay is not a bulk change: no --yes"
    );
}

#[test]
fn completions_are_printed_for_each_shell_without_aws() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = paymentsctl(None, &["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(
            script.contains("redrive-dlq") && script.contains("stack"),
            "{shell}: {script}"
        );
    }
}

#[test]
fn the_stack_region_and_profile_are_global_flags() {
    let cli = Cli::try_parse_from([
        "paymentsctl",
        "--stack",
        "payments-prod",
        "timeline",
        "pay_1",
        "--region",
        "eu-west-1",
        "--profile",
        "oncall",
    ])
    .unwrap();
    assert_eq!(
        cli.connection(),
        Connection {
            stack: Some("payments-prod".into()),
            region: Some("eu-west-1".into()),
            profile: Some("oncall".into()),
        }
    );
    assert!(matches!(cli.command, Command::Timeline(_)));
    let plain = Cli::try_parse_from(["paymentsctl", "breaker", "show"]).unwrap();
    assert_eq!(plain.connection(), Connection::default());
    let wrong = Cli::try_parse_from(["paymentsctl", "--stack"]).unwrap_err();
    assert_eq!(wrong.exit_code(), 2);
}

#[test]
fn only_y_or_yes_confirms() {
    for answer in ["y\n", "YES\n", " yes "] {
        assert!(is_yes(answer), "{answer:?}");
    }
    for answer in ["\n", "n\n", "yep\n", "ja\n", ""] {
        assert!(!is_yes(answer), "{answer:?}");
    }
}

/// A stack in moto's CloudFormation whose outputs name this test's table and queues.
pub(crate) async fn stack(table: &str, queues: &local_testkit::queues::Queues) -> String {
    let endpoint = local_testkit::service::SQS.endpoint();
    let sdk = integration_tests::local_sdk_config(&endpoint);
    let cloudformation = aws_sdk_cloudformation::Client::new(&sdk);
    let name = format!("payments-{}", uuid::Uuid::new_v4().simple());
    let template = serde_json::json!({
        "Resources": { "Placeholder": { "Type": "AWS::SQS::Queue" } },
        "Outputs": {
            "PaymentsTableName": { "Value": table },
            "EventsQueueUrl": { "Value": queues.queue_url },
            "EventsDlqUrl": { "Value": queues.dlq_url },
            "SagaEscalationQueueUrl": { "Value": queues.escalation_url },
            "IntakeLogGroupName": { "Value": "/aws/lambda/payments-test-webhook-intake" },
        }
    });
    cloudformation
        .create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .send()
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn stack_reads_the_table_and_the_queues_from_the_stack_outputs() {
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;
    payment(&ctx, "pay_stack", true).await;
    let name = stack(&ctx.table, &queues).await;

    let timeline = paymentsctl(None, &["--stack", &name, "timeline", "pay_stack", "--json"]);
    assert_eq!(timeline.status.code(), Some(3), "{}", text(&timeline.stderr));
    assert!(text(&timeline.stdout).contains("pay_stack"));

    let dry = paymentsctl(
        None,
        &["--stack", &name, "replay", "range", "--last", "1h", "--dry-run"],
    );
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry.stderr));
    assert!(text(&dry.stdout).contains(&queues.queue_url), "{}", text(&dry.stdout));
    assert_eq!(messages(&sqs, &queues.queue_url).await, 0);

    let unknown = paymentsctl(None, &["--stack", "no-such-stack", "breaker", "show"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        text(&unknown.stderr).contains("stack no-such-stack not found"),
        "{}",
        text(&unknown.stderr)
    );
}

/// Opens the breaker `name` for a minute, through the functions' own writer.
pub(crate) async fn open_breaker(ctx: &TestContext, name: &str) {
    let now = shared::clock::now_ms();
    let opening = payments_core::breaker::Opening {
        failures: 5,
        requests: 3,
    };
    psp::breaker::item::BreakerItem::new(ctx.client.clone(), ctx.table.clone(), name)
        .open(Some(opening), now, now + 60_000)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_breaker_reset_without_a_terminal_needs_yes_and_leaves_the_breaker_open_until_given() {
    let ctx = TestContext::new().await;
    open_breaker(&ctx, psp::BREAKER_NAME).await;
    let state =
        |out: Output| serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["result"]["state"].clone();

    let refused = paymentsctl(Some(&ctx.table), &["breaker", "reset", "--psp", "stripe"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("pass --yes"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(
        state(paymentsctl(
            Some(&ctx.table),
            &["breaker", "show", "--psp", "stripe", "--json"]
        )),
        "open"
    );

    let done = paymentsctl(Some(&ctx.table), &["breaker", "reset", "--psp", "stripe", "--yes"]);
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert_eq!(
        state(paymentsctl(
            Some(&ctx.table),
            &["breaker", "show", "--psp", "stripe", "--json"]
        )),
        "closed"
    );
}

/// Each PSP has its own breaker (`BREAKER#stripe`, `BREAKER#adyen`): `show` shows both unless `--psp` names
/// one, and `reset` needs the name and closes that one only.
#[tokio::test]
async fn breaker_show_and_reset_take_the_psp_and_leave_the_other_breaker_alone() {
    let ctx = TestContext::new().await;
    open_breaker(&ctx, psp::set::ADYEN_BREAKER).await;
    let json = |out: Output| {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["result"].clone()
    };
    let state = |psp: &str| {
        json(paymentsctl(
            Some(&ctx.table),
            &["breaker", "show", "--psp", psp, "--json"],
        ))["state"]
            .clone()
    };

    let both = json(paymentsctl(Some(&ctx.table), &["breaker", "show", "--json"]));
    let shown: Vec<(&str, &str)> = both
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b["state"].as_str().unwrap()))
        .collect();
    assert_eq!(shown, [("stripe", "closed"), ("adyen", "open")]);
    let text_both = text(&paymentsctl(Some(&ctx.table), &["breaker", "show"]).stdout);
    assert!(
        text_both.contains("breaker stripe") && text_both.contains("breaker adyen"),
        "{text_both}"
    );
    assert_eq!((state("adyen"), state("stripe")), ("open".into(), "closed".into()));

    let unnamed = paymentsctl(Some(&ctx.table), &["breaker", "reset", "--yes"]);
    assert_eq!(unnamed.status.code(), Some(2), "{}", text(&unnamed.stderr));
    assert!(text(&unnamed.stderr).contains("--psp"), "{}", text(&unnamed.stderr));
    let unknown = paymentsctl(Some(&ctx.table), &["breaker", "show", "--psp", "paypal"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown.stderr));
    assert_eq!(state("adyen"), "open", "a reset refused changes nothing");

    let stripe = paymentsctl(Some(&ctx.table), &["breaker", "reset", "--psp", "stripe", "--yes"]);
    assert_eq!(stripe.status.code(), Some(0), "{}", text(&stripe.stderr));
    assert_eq!(state("adyen"), "open", "Stripe's reset leaves Adyen's breaker open");
    let adyen = paymentsctl(Some(&ctx.table), &["breaker", "reset", "--psp", "adyen", "--yes"]);
    assert_eq!(adyen.status.code(), Some(0), "{}", text(&adyen.stderr));
    assert_eq!(state("adyen"), "closed");
}

/// The binary with `args` on `table` and `env`, stdin not a terminal. Only what the test names: a stray
/// `QUEUE_URL`, `INTAKE_LOG_GROUP` or PSP setting of the caller's shell must not leak in.
pub(crate) fn paymentsctl_with(table: Option<&str>, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_paymentsctl"));
    command.args(args).stdin(Stdio::null());
    for variable in [
        "TABLE_NAME",
        "QUEUE_URL",
        "DLQ_URL",
        "ESCALATION_QUEUE_URL",
        "INTAKE_LOG_GROUP",
        "CHECKOUT_SWEEPER_FUNCTION",
        "PSP_BASE_URL",
        "PSP_API_KEY",
        "PSP_API_KEY_ARN",
        "PSP_REDIRECTS",
        "AWS_ENDPOINT_URL_CLOUDWATCH",
        "RECOVERY_STALE_AFTER_SECONDS",
        "SAGA_STUCK_AFTER_SECONDS",
    ] {
        command.env_remove(variable);
    }
    if let Some(table) = table {
        command.env("TABLE_NAME", table);
    }
    // moto serves CloudFormation (for `--stack`) on the same port as SQS.
    command.env(
        "AWS_ENDPOINT_URL_CLOUDFORMATION",
        local_testkit::service::SQS.endpoint(),
    );
    command.envs(env.iter().copied());
    command.output().expect("the binary runs")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `--stack` wins over a `TABLE_NAME` left in the shell, which is named in a warning and refuses a write; every
/// run names the account (moto's STS), region, stack and table, in `--json` as the `target` field.
#[tokio::test]
async fn a_conflicting_table_name_is_warned_about_and_refused_for_a_write() {
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    open_breaker(&ctx, psp::BREAKER_NAME).await;
    let name = stack(&ctx.table, &queues).await;
    let sts = [("AWS_ENDPOINT_URL_STS", local_testkit::service::SQS.endpoint())];
    let sts: Vec<(&str, &str)> = sts.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let clean = paymentsctl_with(
        None,
        &sts,
        &["--stack", &name, "breaker", "show", "--psp", "stripe", "--json"],
    );
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean.stderr));
    let target = &serde_json::from_slice::<serde_json::Value>(&clean.stdout).unwrap()["target"];
    assert_eq!(target["account"], "123456789012", "moto's STS answers for the caller");
    assert_eq!(target["stack"], name.as_str());
    assert_eq!(target["table"], ctx.table.as_str());
    assert!(
        text(&clean.stderr).contains(&format!(
            "account 123456789012  region us-east-1  stack {name}  table {}",
            ctx.table
        )),
        "{}",
        text(&clean.stderr)
    );

    let read = paymentsctl_with(
        Some("payments-elsewhere"),
        &sts,
        &["--stack", &name, "breaker", "show", "--psp", "stripe", "--json"],
    );
    assert_eq!(read.status.code(), Some(0), "a read goes on: {}", text(&read.stderr));
    let document = serde_json::from_slice::<serde_json::Value>(&read.stdout).unwrap();
    assert_eq!(
        document["target"]["table"],
        ctx.table.as_str(),
        "the explicit --stack wins"
    );
    assert_eq!(document["result"]["state"], "open", "read from the stack's table");
    assert_eq!(document["target"]["conflicts"][0]["variable"], "TABLE_NAME");
    assert!(
        text(&read.stderr).contains(&format!(
            "warning: TABLE_NAME=payments-elsewhere in the environment disagrees with the stack's output PaymentsTableName={}",
            ctx.table
        )),
        "{}",
        text(&read.stderr)
    );

    let write = paymentsctl_with(
        Some("payments-elsewhere"),
        &sts,
        &["--stack", &name, "breaker", "reset", "--psp", "stripe", "--yes"],
    );
    assert_eq!(write.status.code(), Some(2), "{}", text(&write.stderr));
    assert!(
        text(&write.stderr).contains("refusing to write: TABLE_NAME=payments-elsewhere"),
        "{}",
        text(&write.stderr)
    );
    let after = paymentsctl(Some(&ctx.table), &["breaker", "show", "--psp", "stripe", "--json"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&after.stdout).unwrap()["result"]["state"],
        "open",
        "nothing written"
    );
    let local = paymentsctl(Some(&ctx.table), &["breaker", "show", "--psp", "stripe"]);
    assert!(
        text(&local.stderr).contains("account unknown (local endpoints, no AWS_ENDPOINT_URL_STS)")
            && text(&local.stderr).contains("stack none (environment)"),
        "{}",
        text(&local.stderr)
    );
}

/// `parked replay` and `escalations retry` show their dry run and ask: without a terminal and without `--yes`
/// they refuse (exit 2) and change nothing; with `--yes` they act.
#[tokio::test]
async fn a_retry_and_a_replay_without_yes_and_without_a_terminal_are_refused_and_change_nothing() {
    use crate::paymentsctl::{park, stripe_body};
    use checkout_saga::saga::SagaStore;
    let ctx = TestContext::new().await;
    let sqs = sqs_client(None);
    let queues = fresh_queues(&sqs).await;

    let body = stripe_body("payment_intent.succeeded", "pay_ask", 1000);
    let key = park(&ctx, shared::store::ParkedKind::UnknownPayment, &body).await;
    let created = ctx.store.create(fixtures::new_payment("pay_ask", 1000)).await.unwrap();
    let refused = paymentsctl(Some(&ctx.table), &["parked", "replay", &key]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("would_apply") && stderr.contains("pass --yes"),
        "the dry run, then the refusal: {stderr}"
    );
    assert_eq!(
        ctx.store.get(&created.id).await.unwrap().unwrap().version,
        1,
        "nothing applied"
    );

    let order = crate::paymentsctl::escalated_before_stock_release(&ctx, &queues.escalation_url, "order-ask").await;
    let sagas = SagaStore::new(
        ctx.client.clone(),
        &ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let version = |loaded: Option<checkout_saga::saga::Loaded>| loaded.unwrap().record().version;
    let before = version(sagas.load(&order).await.unwrap());
    let retry = [
        "escalations",
        "retry",
        "order-ask",
        "--local",
        "--queue",
        queues.escalation_url.as_str(),
    ];
    let refused = paymentsctl(Some(&ctx.table), &retry);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("next: ") && stderr.contains("pass --yes"), "{stderr}");
    assert_eq!(
        version(sagas.load(&order).await.unwrap()),
        before,
        "the saga did not move"
    );
    let waiting = paymentsctl(
        Some(&ctx.table),
        &["escalations", "list", "--queue", &queues.escalation_url, "--json"],
    );
    let listed = serde_json::from_slice::<serde_json::Value>(&waiting.stdout).unwrap();
    assert_eq!(
        listed["result"].as_array().map(Vec::len),
        Some(1),
        "the escalation is still there"
    );

    let replayed = paymentsctl(Some(&ctx.table), &["parked", "replay", &key, "--yes", "--json"]);
    assert_eq!(replayed.status.code(), Some(0), "{}", text(&replayed.stderr));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&replayed.stdout).unwrap()["result"]["result"],
        "applied"
    );
    assert_eq!(ctx.store.get(&created.id).await.unwrap().unwrap().version, 2);
}
