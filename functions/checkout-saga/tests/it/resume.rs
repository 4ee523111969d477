//! The sweeper function resumes one order on an operator's request (`paymentsctl escalations retry`): built as
//! in Lambda (`CheckoutSweeper::build` from the function's variables), invoked with `{"resume": {"order_id":
//! ..}}`, it runs the saga's next step with the function's own PSP key (here a status query to the simulator,
//! through recovery) and answers what the saga is now; a bad request or an unknown order is its error.

use crate::support::{world, TEST_KEY};
use checkout_saga::resume::{ResumeError, SweeperRequest};
use checkout_saga::runner::Settings as RunnerSettings;
use checkout_saga::saga::SagaStatus;
use checkout_saga::{CheckoutSweeper, Settings, SweeperError};
use shared::{Env, OrderId, PaymentStatus};
use std::time::Duration;

#[tokio::test]
async fn a_resume_request_runs_the_sagas_next_step_with_the_functions_key_and_says_where_it_is() {
    let w = world().await;
    // Long enough that the start itself (stock, payment, charge: about 1.5 s on a loaded 2-core machine) ends
    // before the deadline, so the start answers PaymentPending; the resume below comes after it.
    let timeout = Duration::from_secs(3);
    // A charge the PSP answers "processing" and then says nothing about: the saga waits past its deadline.
    let id = crate::support::order();
    let waiting = w
        .runner_as(
            "checkout-api",
            w.psp(),
            RunnerSettings {
                payment_timeout: timeout,
                ..crate::support::settings()
            },
        )
        .start(id.clone(), w.checkout("pm_silent", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    tokio::time::sleep(timeout + Duration::from_millis(100)).await;

    let env = Env::from_lookup(|_| None)
        .with("TABLE_NAME", w.ctx.table.clone())
        .with("PSP_BASE_URL", w.psp_url.clone())
        .with("PSP_API_KEY", TEST_KEY)
        .with("PSP_REDIRECTS", "never")
        .with("ESCALATION_QUEUE_URL", w.escalation_url.clone())
        .with("SAGA_PAYMENT_TIMEOUT_SECONDS", "1");
    let clients = shared::lambda::Clients {
        // Only Secrets Manager reads through it, and the key is in the variables here.
        sdk: integration_tests::local_sdk_config("http://127.0.0.1:9"),
        dynamodb: w.ctx.client.clone(),
        sqs: w.sqs.clone(),
    };
    let sweeper = CheckoutSweeper::build(&Settings::from_env(&env).unwrap(), clients)
        .await
        .unwrap();
    let answer = sweeper
        .invoke(SweeperRequest::resume_payload(&id), crate::support::later())
        .await
        .unwrap();
    assert_eq!(answer["resumed"]["order_id"], id.as_str(), "{answer}");
    let after = w.saga(&id).await;
    assert!(after.recovery_requested, "handed to recovery: {after:?}");
    assert_eq!(answer["resumed"]["version"], after.version, "{answer}");
    assert_eq!(answer["resumed"]["status"], after.status.to_string().as_str());
    assert!(
        answer["resumed"]["next"].as_str().is_some_and(|n| !n.is_empty()),
        "{answer}"
    );
    assert_eq!(
        w.payment_status(&after).await,
        PaymentStatus::Captured,
        "the PSP was asked with the function's key"
    );

    let unknown = OrderId::parse("order-nobody").unwrap();
    let err = sweeper
        .invoke(SweeperRequest::resume_payload(&unknown), crate::support::later())
        .await
        .unwrap_err();
    assert!(matches!(err, SweeperError::Resume(ResumeError::Unknown(_))), "{err:?}");
    let err = sweeper
        .invoke(
            serde_json::json!({ "resume": { "order": "x" } }),
            crate::support::later(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, SweeperError::Resume(ResumeError::Malformed)), "{err:?}");
}
