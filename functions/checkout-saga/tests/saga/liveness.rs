//! Every wait ends: a saga whose projection never hears of the payment's outcome reads the payment itself
//! past its deadline, and items that cannot be resolved in one shard of the open-items index never hide the
//! others from recovery.

use super::*;
use shared::store::open_index::{shard_of, OpenKind, OPEN_SHARDS};
use shared::{NewPayment, PaymentId};

#[tokio::test]
async fn a_lost_projection_event_cannot_hold_a_saga_past_its_deadline() {
    let w = world().await;
    // Before the deadline the saga waits for the queue (which, here, never delivers).
    let waiting = w
        .runner()
        .start(order(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(waiting.status, SagaStatus::PaymentPending);
    assert_eq!(w.payment_status(&waiting).await, PaymentStatus::Captured);
    // Past it, the payment item itself settles the wait.
    let runner = w.runner_with(
        w.ctx.client.clone(),
        w.psp(),
        Settings {
            payment_timeout: Duration::ZERO,
            backoff: fast_backoff(),
        },
    );
    let id = order();
    let done = runner
        .start(id.clone(), w.checkout("pm_succeeded", 1))
        .await
        .expect("start");
    assert_eq!(done.status, SagaStatus::Completed, "no event was delivered");
    assert_eq!(w.log(&id).await, HAPPY);
}

fn payment_in_shard(shard: u64, n: usize) -> PaymentId {
    (0..)
        .map(|i| format!("pay_s{shard}_{n}_{i}"))
        .find(|id| shard_of(OpenKind::Payment, id) == format!("PAYMENT#{shard}"))
        .and_then(|id| PaymentId::parse(id).ok())
        .expect("an id in the shard")
}

fn new_payment(id: PaymentId, reference: Option<PspReference>) -> NewPayment {
    NewPayment {
        order_id: OrderId::parse(format!("order-{id}")).unwrap(),
        id,
        money: fixture_money(),
        psp_reference: reference,
        metadata: Default::default(),
        correlation_id: CorrelationId::parse("corr-setup").unwrap(),
        trace_context: None,
        now_ms: shared::clock::now_ms(),
    }
}

#[tokio::test]
async fn two_hundred_unresolvable_payments_in_one_shard_do_not_hide_a_resolvable_one_in_another() {
    let w = world().await;
    // 200 open payments in shard 0 that recovery cannot resolve (no PSP reference, ever).
    for n in 0..200 {
        w.ctx
            .store
            .create(new_payment(payment_in_shard(0, n), None))
            .await
            .expect("create");
    }
    // One in the last shard whose money was taken at the PSP, silently.
    let last = OPEN_SHARDS - 1;
    let id = payment_in_shard(last, 0);
    let (order_id, money) = (OrderId::parse("order-shard").unwrap(), fixture_money());
    let request = shared::psp::ChargeRequest {
        payment_id: &id,
        order_id: &order_id,
        money: &money,
        payment_method: "pm_silent",
    };
    let intent = w.psp().charge("shard:charge", &request).await.expect("charged");
    let reference = PspReference::parse(intent.id.as_str()).unwrap();
    w.ctx
        .store
        .create(new_payment(id.clone(), Some(reference)))
        .await
        .expect("create");

    let runner = w.runner_with(
        w.ctx.client.clone(),
        w.psp(),
        Settings {
            backoff: fast_backoff(),
            ..Settings::default()
        },
    );
    let mut recovery = runner.recovery;
    recovery.settings.batch_limit = 200;
    let report = recovery.run().await.expect("run");
    assert_eq!(report.applied, 1, "{report:?}");
    assert!(
        report.no_reference <= 200 / OPEN_SHARDS as u32,
        "shard 0 got only its share: {report:?}"
    );
    assert_eq!(
        w.ctx.store.get(&id).await.unwrap().unwrap().status,
        PaymentStatus::Captured
    );
}
