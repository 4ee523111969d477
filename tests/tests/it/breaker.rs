//! The PSP circuit breaker against DynamoDB Local and the PSP simulator (Stripe's answers, idempotency and
//! saved failures, a PSP that hangs): it trips on the PSP, not on one request, and an open state always ends.
//!
//! The hanging-PSP test runs at 1:25 of production's times (request timeout 5 s -> 200 ms, the window and the
//! cool-down likewise), so the proportions that decide whether timeouts can open the breaker are the real ones.

use aws_sdk_dynamodb::types::AttributeValue;
use integration_tests::TestContext;
use psp::breaker::BreakerState;
use psp::{ApiKey, BreakerSettings, ChargeRequest, CircuitBreaker, PspError, StripeApi, StripeClient, StripeSettings};
use psp_simulator::client::HttpClient;
use psp_simulator::delivery::DeliveryOptions;
use psp_simulator::ledger::{Ledger, Timings};
use psp_simulator::server::Simulator;
use shared::retry::Backoff;
use shared::{clock, Currency, Money, OrderId, PaymentId, PspReference, SigningSecret};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const KEY: &str = "sk_test_breaker";
/// Production's times divided by this in the hanging-PSP test.
const SCALE: u32 = 25;

struct World {
    ctx: TestContext,
    sim: Arc<Simulator>,
    url: String,
}

async fn world() -> World {
    let sim = Arc::new(Simulator {
        ledger: Ledger::new(KEY, Timings::default(), None),
        webhook_url: "http://127.0.0.1:9/webhooks/stripe".into(),
        secret: SigningSecret::parse("whsec_test").expect("secret"),
        delivery: DeliveryOptions {
            max_attempts: 1,
            ..DeliveryOptions::default()
        },
        client: HttpClient::default(),
        storm_rate: 0.0,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(sim.clone().serve(listener));
    World {
        ctx: TestContext::new().await,
        sim,
        url,
    }
}

impl World {
    /// The Stripe client as the functions build it, with retries in milliseconds and `timeout` per attempt.
    fn client(&self, timeout: Duration) -> StripeClient {
        let mut settings = StripeSettings::local(&self.url, KEY).expect("settings");
        settings.retries = Backoff::new(3, Duration::from_millis(10), Duration::from_millis(40));
        settings.request_timeout = timeout;
        StripeClient::new(&settings, ApiKey::parse(KEY).unwrap()).expect("client")
    }

    /// The reconciler's breaker (its function's DynamoDB client) over the client.
    fn breaker(&self, settings: BreakerSettings) -> CircuitBreaker<StripeClient> {
        CircuitBreaker::new(
            self.client(Duration::from_secs(5)),
            self.ctx.client_for("reconciler"),
            &self.ctx.table,
            psp::BREAKER_NAME,
            settings,
        )
    }

    /// A succeeded PaymentIntent, made past the breaker.
    async fn intent(&self) -> PspReference {
        let pi = charge(&self.client(Duration::from_secs(5)), "setup:charge", "pay_setup")
            .await
            .expect("charged");
        PspReference::parse(pi.id).unwrap()
    }

    /// Writes the breaker's item as someone left it (the damage the test inflicts on purpose).
    async fn put_breaker(&self, attributes: &[(&str, AttributeValue)]) {
        let mut put = self
            .ctx
            .client
            .put_item()
            .table_name(&self.ctx.table)
            .item("pk", AttributeValue::S("BREAKER#stripe".into()))
            .item("sk", AttributeValue::S("BREAKER".into()));
        for (name, value) in attributes {
            put = put.item(*name, value.clone());
        }
        put.send().await.expect("put breaker item");
    }
}

async fn charge(psp: &impl StripeApi, key: &str, payment: &str) -> Result<psp::PaymentIntent, PspError> {
    let money = Money::new(1500, Currency::parse("EUR").unwrap()).unwrap();
    let (payment, order) = (
        PaymentId::parse(payment).unwrap(),
        OrderId::parse("order-breaker").unwrap(),
    );
    let request = ChargeRequest {
        payment_id: &payment,
        order_id: &order,
        money: &money,
        payment_method: "pm_succeeded",
    };
    psp.charge(key, &request).await
}

fn settings() -> BreakerSettings {
    BreakerSettings {
        cache_ttl: Duration::ZERO,
        ..BreakerSettings::default()
    }
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

#[tokio::test]
async fn one_saga_replaying_a_saved_500_on_its_key_never_opens_the_breaker() {
    let w = world().await;
    let breaker = w.breaker(settings());
    // The saga's first charge fails after Stripe began the work: Stripe saves the 500 under the key and
    // replays it for 24 hours, to every retry of that saga.
    w.sim.ledger.fail_saved(1);
    for attempt in 0..8 {
        let failed = charge(&breaker, "order-poisoned:charge", "pay_poisoned").await;
        assert!(
            matches!(&failed, Err(e) if e.is_transient()),
            "call {attempt}: the saved 500 again, the breaker still closed: {failed:?}"
        );
    }
    assert_eq!(breaker.state().await.unwrap(), BreakerState::Closed);
    // Everyone else's calls go on.
    charge(&breaker, "order-healthy:charge", "pay_healthy")
        .await
        .expect("another order's charge goes through");
}

#[tokio::test]
async fn failures_spread_over_requests_open_it_and_every_instance_sees_it_open() {
    let w = world().await;
    let breaker = w.breaker(settings());
    w.sim.ledger.storm(503, 1000);
    let mut calls = 0;
    while breaker.state().await.unwrap() == BreakerState::Closed && calls < 5 {
        calls += 1;
        let failed = charge(&breaker, &format!("order-{calls}:charge"), &format!("pay_{calls}")).await;
        assert!(matches!(&failed, Err(e) if e.is_transient()), "{failed:?}");
    }
    // Three attempts per call, at most two counted per request: the third request opens it.
    assert_eq!(calls, 3, "opened by three failing requests");
    let other_instance = w.breaker(settings());
    let before = w.sim.ledger.auth_counts().0;
    assert!(matches!(
        charge(&other_instance, "order-9:charge", "pay_9").await,
        Err(PspError::CircuitOpen { .. })
    ));
    assert_eq!(w.sim.ledger.auth_counts().0, before, "no call while open");
}

/// Stripe's 429 (`rate_limit`; `lock_timeout` when a webhook and our call touch one object) is Stripe asking
/// us to slow down, not Stripe failing: retried with back-off and jitter by the client, never counted by the
/// breaker. As many throttled requests as open it under a 503 storm leave it closed.
#[tokio::test]
async fn throttling_429s_are_retried_and_not_counted_by_the_breaker() {
    let w = world().await;
    let breaker = w.breaker(settings());
    w.sim.ledger.storm(429, 1000);
    for n in 1..=4 {
        let throttled = charge(&breaker, &format!("order-429-{n}:charge"), &format!("pay_429_{n}")).await;
        assert!(matches!(&throttled, Err(e) if e.is_transient()), "{throttled:?}");
    }
    assert_eq!(
        breaker.state().await.unwrap(),
        BreakerState::Closed,
        "throttling is not an outage"
    );
    // Throttled twice, then answered: the client's retries get through.
    w.sim.ledger.storm(429, 2);
    charge(&breaker, "order-429-ok:charge", "pay_429_ok")
        .await
        .expect("retried after the 429s");
}

/// Stripe's `lock_timeout` (a webhook's handler and our call on one PaymentIntent): a 429 with its error object
/// (`invalid_request_error`, code `lock_timeout`) and `Stripe-Should-Retry: true`. The client retries it with
/// back-off and jitter, as Stripe's libraries do, and the breaker never counts it: as many locked reads as
/// open it under a 5xx storm leave it closed, and a read that finds the lock released on its third attempt
/// succeeds.
#[tokio::test]
async fn a_lock_timeout_429_is_retried_and_succeeds_and_the_breaker_stays_closed() {
    let w = world().await;
    let reference = w.intent().await;
    let breaker = w.breaker(settings());
    w.sim.ledger.lock(reference.as_str(), 1000);
    for _ in 0..4 {
        let locked = breaker.retrieve(&reference).await;
        assert!(
            matches!(&locked, Err(PspError::Unavailable(e)) if e.to_string().contains("lock_timeout")),
            "{locked:?}"
        );
    }
    assert_eq!(
        breaker.state().await.unwrap(),
        BreakerState::Closed,
        "a lock is not an outage"
    );
    w.sim.ledger.lock(reference.as_str(), 2);
    let before = w.sim.ledger.requests().len();
    let read = breaker
        .retrieve(&reference)
        .await
        .expect("retried until the lock was released");
    assert_eq!(read.id, reference.as_str());
    assert_eq!(
        w.sim.ledger.requests().len() - before,
        3,
        "two locked attempts, then the answer"
    );
    assert_eq!(breaker.state().await.unwrap(), BreakerState::Closed);
}

#[tokio::test]
async fn a_hanging_psp_opens_the_breaker_within_its_window() {
    let w = world().await;
    let reference = w.intent().await;
    let scaled = BreakerSettings {
        window: BreakerSettings::default().window / SCALE,
        cool_down: BreakerSettings::default().cool_down / SCALE,
        probe_timeout: BreakerSettings::default().probe_timeout / SCALE,
        cache_ttl: Duration::ZERO,
        ..BreakerSettings::default()
    };
    let breaker = CircuitBreaker::new(
        w.client(Duration::from_secs(5) / SCALE),
        w.ctx.client_for("reconciler"),
        &w.ctx.table,
        psp::BREAKER_NAME,
        scaled,
    );
    // Every request is held far past the client's timeout: one instance's calls, one after another.
    w.sim.ledger.hang(Duration::from_secs(30), 1000);
    let mut calls = 0;
    while breaker.state().await.unwrap() == BreakerState::Closed && calls < 8 {
        calls += 1;
        let failed = breaker.retrieve(&reference).await;
        assert!(matches!(&failed, Err(e) if e.is_transient()), "{failed:?}");
    }
    assert!(
        matches!(breaker.state().await.unwrap(), BreakerState::Open { .. }),
        "a PSP that hangs opens the breaker ({calls} calls made)"
    );
    assert!(
        calls <= 3,
        "each timed-out attempt counted: opened by the third call, not {calls}"
    );
}

#[tokio::test]
async fn an_open_item_without_a_readable_end_time_ends_after_the_cool_down_and_is_probed() {
    let w = world().await;
    let reference = w.intent().await;
    let breaker = w.breaker(settings());
    let cool_down = i64::try_from(settings().cool_down.as_millis()).unwrap();
    let now = clock::now_ms();
    // No end time at all, changed two cool-downs ago.
    w.put_breaker(&[("state", s("open")), ("changed_at_ms", n(now - 2 * cool_down))])
        .await;
    breaker.retrieve(&reference).await.expect("the probe went through");
    assert_eq!(
        breaker.state().await.unwrap(),
        BreakerState::Closed,
        "the probe closed it"
    );

    // An end that is not a number and a probe time that is not one either.
    w.put_breaker(&[
        ("state", s("open")),
        ("open_until_ms", s("tomorrow")),
        ("probe_until_ms", s("later")),
        ("changed_at_ms", n(now - 2 * cool_down)),
    ])
    .await;
    breaker.retrieve(&reference).await.expect("probed and closed");
    assert_eq!(breaker.state().await.unwrap(), BreakerState::Closed);

    // Neither an end nor a change time.
    w.put_breaker(&[("state", s("open"))]).await;
    breaker.retrieve(&reference).await.expect("probed and closed");
    assert_eq!(breaker.state().await.unwrap(), BreakerState::Closed);
}

#[tokio::test]
async fn an_end_time_far_in_the_future_is_capped_but_a_fresh_open_state_holds() {
    let w = world().await;
    let reference = w.intent().await;
    let breaker = w.breaker(settings());
    let cool_down = i64::try_from(settings().cool_down.as_millis()).unwrap();
    let now = clock::now_ms();
    let next_year = now + 365 * 86_400_000;
    // Written eleven cool-downs ago to end next year: the cap (ten cool-downs after the change) has passed.
    w.put_breaker(&[
        ("state", s("open")),
        ("open_until_ms", n(next_year)),
        ("changed_at_ms", n(now - 11 * cool_down)),
    ])
    .await;
    breaker.retrieve(&reference).await.expect("the cap has passed: probed");
    assert_eq!(breaker.state().await.unwrap(), BreakerState::Closed);

    // Written now to end next year: open until the cap, ten cool-downs from now.
    w.put_breaker(&[
        ("state", s("open")),
        ("open_until_ms", n(next_year)),
        ("changed_at_ms", n(now)),
    ])
    .await;
    match breaker.retrieve(&reference).await {
        Err(PspError::CircuitOpen { until_ms }) => assert_eq!(until_ms, now + 10 * cool_down),
        other => panic!("open until the cap: {other:?}"),
    }
}

#[tokio::test]
async fn a_probe_that_gets_only_a_replayed_answer_hands_the_probe_to_another_call() {
    let w = world().await;
    let reference = w.intent().await;
    let breaker = w.breaker(settings());
    w.sim.ledger.fail_saved(1);
    assert!(charge(&breaker, "order-poisoned:charge", "pay_poisoned").await.is_err());
    // Open, its cool-down over: the next call is the probe.
    let cool_down = i64::try_from(settings().cool_down.as_millis()).unwrap();
    let now = clock::now_ms();
    w.put_breaker(&[
        ("state", s("open")),
        ("open_until_ms", n(now - cool_down)),
        ("changed_at_ms", n(now - 2 * cool_down)),
    ])
    .await;
    // The poisoned saga's retry is the probe: Stripe only replays the saved 500, which says nothing of Stripe now.
    let replayed = charge(&breaker, "order-poisoned:charge", "pay_poisoned").await;
    assert!(matches!(&replayed, Err(e) if e.is_transient()), "{replayed:?}");
    // Not opened again for another cool-down: the next call probes, and Stripe answers it.
    breaker.retrieve(&reference).await.expect("the next call is the probe");
    assert_eq!(breaker.state().await.unwrap(), BreakerState::Closed);
}
