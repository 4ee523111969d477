//! `paymentsctl escalations retry --dry-run` (and `timeline`) tell the operator the step a retry runs: the
//! step the runner takes, for every state, set aside after an escalation or not (what an operator retries;
//! the runner's resume runs a set-aside saga's step as any other's), before and past the state's deadline
//! (an escalated saga is usually retried long after it: a payment creation or a charge past its deadline is
//! given up, not run). The first test needs no storage (both come from the saga as it loads from its stored
//! record, at the time the test runs); the second runs the retry itself on DynamoDB Local and the SQS
//! emulator and checks the step the runner took is the one the dry run printed.

use super::paymentsctl::ctl;
use checkout_saga::saga::{deadline, Loaded, Saga, SagaRecord, SagaStatus, SagaStore, Started};
use integration_tests::{fresh_queues, sqs_client, TestContext};
use payments_core::fixtures;
use payments_core::fixtures::saga_in;
use paymentsctl::escalations::{self, describe_next, runner_step};
use shared::{clock, Env, OrderId, PaymentId};

/// `record` as stored `age_ms` after its state's deadline (negative: before it), every time in it moved by
/// the same amount (so it loads as it did); an ended saga as it was.
fn aged(record: &SagaRecord, age_ms: i64, limits: &checkout_saga::saga::Deadlines) -> SagaRecord {
    let Some(d) = deadline(record, limits) else {
        return record.clone();
    };
    let shift = clock::now_ms() - age_ms - d.at_ms;
    let mut r = record.clone();
    r.started_at_ms += shift;
    r.updated_at_ms += shift;
    r.payment_deadline_ms += shift;
    if let Some(aside) = r.set_aside.as_mut() {
        aside.at_ms += shift;
    }
    r
}

/// The saga as `retry` and `timeline` read it: from its stored record.
fn stored(record: SagaRecord) -> Loaded {
    Loaded::from_record(record).expect("the stored saga loads")
}

#[test]
fn the_step_paymentsctl_prints_is_the_step_the_runner_takes_in_every_state_before_and_past_its_deadline() {
    // The deployment's saga settings, read as the saga's functions read them (defaults here).
    let env = Env::from_lookup(|name| (name == "CHECKOUT_ABANDON_AFTER_SECONDS").then(|| "900".to_owned()));
    let runner = checkout_saga::runner::Settings::from_env(&env).expect("the saga's settings");
    let limits = runner.deadlines();
    let mut given_up = Vec::new();
    for status in SagaStatus::ALL {
        let fresh = saga_in(status);
        // An ended saga is never set aside (it does not load so).
        let aside = (!status.is_terminal()).then(|| {
            fresh
                .clone()
                .set_aside("charge", "kept failing".into(), fresh.record().updated_at_ms + 1)
                .0
        });
        for saga in std::iter::once(fresh).chain(aside) {
            // An hour before the deadline, a minute past it, a day past it.
            for age_ms in [-3_600_000, 60_000, 86_400_000] {
                let loaded = stored(aged(saga.record(), age_ms, &limits));
                assert_eq!(loaded.record().status, status);
                let set_aside = loaded.record().set_aside.is_some();
                let printed = describe_next(runner_step(&env, &loaded).expect("the saga's settings"));
                let runs = checkout_saga::runner::action_name(&runner, &loaded);
                assert!(
                    printed.starts_with(&format!("{runs}:")),
                    "saga in {status} (set aside: {set_aside}, {age_ms} ms past its deadline): paymentsctl prints \
                     {printed:?}, the runner takes {runs}"
                );
                if age_ms > 0 && runs != loaded.next_step().name() {
                    given_up.push((status, runs));
                }
            }
        }
    }
    given_up.dedup();
    assert_eq!(
        given_up,
        [
            (SagaStatus::StockReserved, "payment_not_created"),
            (SagaStatus::Charging, "give_up_charge"),
        ],
        "past its deadline only a payment creation or a charge is given up"
    );
}

/// A charge escalated and retried past its deadline (the usual case: the charge's deadline is 10 minutes):
/// the dry run tells the operator the runner gives the charge up, and the retry does exactly that (the saga
/// moves to `cancelling_payment` with the charge's deadline as its reason). No payment item exists, so the
/// cancel that follows cannot run and is escalated: the retry's error comes after the step under test.
#[tokio::test]
async fn a_retry_past_the_charge_deadline_gives_the_charge_up_as_its_dry_run_said() {
    let ctx = TestContext::new().await;
    let queues = fresh_queues(&sqs_client(None)).await;
    let sagas = SagaStore::new(
        ctx.client.clone(),
        &ctx.table,
        shared::store::open_index::OpenShards::DEFAULT,
    );
    let order = OrderId::parse("order-late-charge").unwrap();
    // Charging since 11 minutes ago, set aside after its escalation.
    let t0 = clock::now_ms() - 11 * 60_000;
    let (s, e) = Saga::<Started>::begin(order.clone(), fixtures::checkout(), t0, 120_000);
    let create_order = checkout_saga::orders::create(&ctx.table, &order, t0).unwrap();
    sagas.save(&s, &e, vec![create_order]).await.unwrap();
    let (s, e) = s.stock_reserved(t0);
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.payment_created(PaymentId::parse("pay_late_charge").unwrap(), t0);
    sagas.save(&s, &e, vec![]).await.unwrap();
    let (s, e) = s.set_aside("charge", "PSP unavailable".into(), t0 + 60_000);
    sagas.save(&s, &e, vec![]).await.unwrap();
    // The retry's runner is built from the saga functions' settings (its table among them).
    let mut ctl = ctl(&ctx);
    ctl.env = ctl
        .env
        .with("TABLE_NAME", ctx.table.clone())
        .with("PSP_BASE_URL", "http://127.0.0.1:9")
        .with("PSP_API_KEY", "sk_test_unused")
        .with("PSP_REDIRECTS", "never");
    let dry = escalations::retry(&ctl, order.as_str(), Some(&queues.escalation_url), true, true)
        .await
        .unwrap();
    let retried = escalations::retry(&ctl, order.as_str(), Some(&queues.escalation_url), false, true).await;
    let after = sagas.load(&order).await.unwrap().expect("the saga");
    let r = after.record();
    assert_eq!(
        r.status,
        SagaStatus::CancellingPayment,
        "the runner gave the charge up: {r:?}, retry: {retried:?}"
    );
    assert!(
        r.failure
            .as_ref()
            .is_some_and(|f| f.reason.starts_with("no answer to the charge within")),
        "{r:?}"
    );
    assert!(
        dry.next.starts_with("give_up_charge:"),
        "saga in charging past the charge deadline: paymentsctl prints {:?}, the runner gives the charge up",
        dry.next
    );
}
