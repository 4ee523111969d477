//! Recovery asks only a payment's own PSP (invariant 13), and every loop it runs has an end (invariant 12):
//! payments with no PSP to ask expire after the configured age, a failed reconcile is backed off, and a
//! shard's unused share of a run goes to the others. Against DynamoDB Local and the Stripe simulator.

use crate::lambda::World;
use psp::{IntentStatus, PaymentIntent, StripeApi, StripeClient};
use recovery::{Recovery, RecoverySettings};
use shared::store::open_index::{due_items, shard_of, OpenKind, OpenShards};
use shared::PaymentStore;
use shared::{
    Channel, CorrelationId, EventKind, Money, NewPayment, Observation, OrderId, Outcome, PaymentId, PaymentStatus,
    PspName, PspReference,
};
use std::time::Duration;

const DAY_MS: i64 = 24 * 3600 * 1000;

fn recovery(w: &World) -> Recovery<StripeClient> {
    let settings = RecoverySettings {
        stale_after: Duration::ZERO,
        ..RecoverySettings::default()
    };
    Recovery::new(&w.ctx.client_for("reconciler"), &w.ctx.config(), w.psp(), settings)
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(30)
}

/// An open payment of 10.00 EUR for `provider`, created `age_ms` ago, bound to `reference` (then
/// `processing`) or left `pending` without one.
async fn open_payment(w: &World, name: &str, provider: &str, reference: Option<&str>, age_ms: i64) -> PaymentId {
    let id = PaymentId::parse(format!("pay_{name}_{}", uuid::Uuid::new_v4().simple())).unwrap();
    let new = NewPayment {
        id: id.clone(),
        order_id: OrderId::parse(format!("order-{name}")).unwrap(),
        money: Money::new(1000, shared::Currency::parse("EUR").unwrap()).unwrap(),
        provider: PspName::parse(provider).unwrap(),
        psp_reference: reference.map(|r| PspReference::parse(r).unwrap()),
        metadata: Default::default(),
        correlation_id: CorrelationId::parse("corr-setup").unwrap(),
        trace_context: None,
        now_ms: shared::clock::now_ms() - age_ms,
    };
    w.ctx.store.create(new).await.expect("create");
    if reference.is_some() {
        let processing = Observation::new(Channel::Sync, Outcome::Processing, CorrelationId::parse("c").unwrap());
        w.ctx.store.finalize(&id, &processing, None).await.expect("setup");
    }
    id
}

/// A payment of 10.00 EUR created `age_ms` ago through `POST /payments` and bound to `intent`, as the sync
/// answer left it (waiting for the customer's action, or after a decline for another card).
async fn bound_payment(w: &World, name: &str, intent: &PaymentIntent, age_ms: i64) -> PaymentId {
    let id = open_payment(w, name, "stripe", None, age_ms).await;
    let mut bound = intent
        .observation(Channel::Sync, CorrelationId::parse("c").unwrap())
        .unwrap()
        .unwrap_or_else(|| Observation::new(Channel::Sync, Outcome::Processing, CorrelationId::parse("c").unwrap()));
    bound.occurred_at_ms = Some(shared::clock::now_ms() - age_ms);
    w.ctx.store.finalize(&id, &bound, None).await.expect("bound");
    id
}

fn psp_calls(w: &World) -> u64 {
    w.sim.ledger.auth_counts().0
}

#[tokio::test]
async fn recovery_asks_only_the_payments_own_psp() {
    let w = World::new().await;
    let intent = w.intent("own_psp", "succeeded", 1000).await;
    assert_eq!(intent.status, IntentStatus::Succeeded);
    let stripe = open_payment(&w, "stripe", "stripe", Some(intent.id.as_str()), 0).await;
    let standard = open_payment(&w, "standard", "standard", Some("psp_sample_1"), 0).await;
    let opened = w.ctx.due_key(&standard).await.unwrap();
    let before = psp_calls(&w);

    let report = recovery(&w).run(deadline()).await.unwrap();

    assert_eq!(
        psp_calls(&w) - before,
        1,
        "only the Stripe payment is asked about, at Stripe"
    );
    assert_eq!(
        (report.errors, report.applied, report.no_client),
        (0, 1, 1),
        "{report:?}"
    );
    assert_eq!(w.get(&stripe).await.status, PaymentStatus::Captured);
    let p = w.get(&standard).await;
    assert_eq!(p.status, PaymentStatus::Processing, "nobody to ask: its webhooks tell");
    assert!(
        w.ctx.due_key(&standard).await.unwrap() > opened,
        "and it is looked at again later, not every run"
    );
}

#[tokio::test]
async fn payments_with_no_psp_to_ask_expire_after_the_configured_age() {
    let w = World::new().await;
    let abandoned = open_payment(&w, "abandoned", "stripe", None, 8 * DAY_MS).await;
    let standard = open_payment(&w, "old_standard", "standard", Some("psp_sample_2"), 8 * DAY_MS).await;
    let young = open_payment(&w, "young", "standard", Some("psp_sample_3"), 0).await;
    // Stripe answers 404 about it: once, then it expires like the others.
    let unknown = open_payment(&w, "old_unknown", "stripe", Some("pi_unknown_old"), 8 * DAY_MS).await;
    let before = psp_calls(&w);

    let report = recovery(&w).run(deadline()).await.unwrap();

    assert_eq!(
        (report.found, report.expired, report.no_client),
        (4, 3, 1),
        "{report:?}"
    );
    let record = recovery::emf(&report, shared::clock::now_ms());
    assert_eq!(record["Expired"].as_u64(), Some(3), "the alarmed metric: {record}");
    for id in [&abandoned, &standard, &unknown] {
        assert_expired(&w, id).await;
    }
    assert_eq!(w.get(&young).await.status, PaymentStatus::Processing, "not old enough");
    assert_eq!(
        psp_calls(&w) - before,
        1,
        "only the Stripe payment with a reference was asked about"
    );
    let again = recovery(&w).run(deadline()).await.unwrap();
    // The expired ones left the index; only the young one may be due again (its back-off is seconds here).
    assert!(again.found <= 1 && again.expired == 0, "expired once: {again:?}");
}

#[tokio::test]
async fn a_failed_reconcile_is_backed_off_not_retried_every_run() {
    let w = World::new().await;
    // A PaymentIntent id Stripe does not know (another account's, a typo): 404 on every ask.
    let unknown = open_payment(&w, "unknown", "stripe", Some("pi_unknown_to_stripe"), 0).await;
    let opened = w.ctx.due_key(&unknown).await.unwrap();
    let recovery = recovery(&w);
    let before = psp_calls(&w);

    let first = recovery.run(deadline()).await.unwrap();
    assert_eq!((first.found, first.errors, first.no_client), (1, 0, 1), "{first:?}");
    assert_eq!(psp_calls(&w) - before, 1);
    assert!(w.ctx.due_key(&unknown).await.unwrap() > opened, "backed off");
    let again = recovery.run(deadline()).await.unwrap();
    assert_eq!(again.found, 0, "{again:?}");
    assert_eq!(psp_calls(&w) - before, 1, "not asked again on the next run");
    assert_eq!(
        w.get(&unknown).await.status,
        PaymentStatus::Processing,
        "young: not expired"
    );
}

#[tokio::test]
async fn a_reconcile_that_fails_is_backed_off_too() {
    let w = World::new().await;
    let intent = w.intent("down", "succeeded", 1000).await;
    let id = open_payment(&w, "down", "stripe", Some(intent.id.as_str()), 0).await;
    let opened = w.ctx.due_key(&id).await.unwrap();
    // The PSP unreachable (nothing listens on the port): the reconcile fails after the client's retries.
    let mut down = recovery(&w);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let settings = psp::StripeSettings::local(&url, "sk_test_down").unwrap();
    down.psp = StripeClient::new(&settings, psp::ApiKey::parse("sk_test_down").unwrap()).unwrap();

    let report = down.run(deadline()).await.unwrap();
    assert_eq!((report.found, report.errors), (1, 1), "{report:?}");
    assert!(
        w.ctx.due_key(&id).await.unwrap() > opened,
        "backed off, not retried every run"
    );
    assert_eq!(down.run(deadline()).await.unwrap().found, 0);
    assert_eq!(w.get(&id).await.status, PaymentStatus::Processing);
}

/// `n` payment ids whose open-items shard is `shard`.
fn ids_in_shard(shard: &str, n: usize) -> Vec<PaymentId> {
    (0..)
        .map(|i| format!("pay_shard_{i}"))
        .filter(|id| shard_of(OpenKind::Payment, id, OpenShards::DEFAULT) == shard)
        .take(n)
        .map(|id| PaymentId::parse(id).unwrap())
        .collect()
}

#[tokio::test]
async fn a_shard_gives_its_unused_share_of_a_run_to_the_others() {
    let w = World::new().await;
    assert_eq!(OpenShards::DEFAULT.get(), 8);
    let crowded = ids_in_shard("PAYMENT#3", 12);
    let quiet = ids_in_shard("PAYMENT#5", 2);
    for id in crowded.iter().chain(&quiet) {
        let mut new = payments_core::fixtures::new_payment(id.as_str(), 1000);
        new.now_ms = shared::clock::now_ms() - 60_000;
        w.ctx.store.create(new).await.unwrap();
    }
    let due = due_items(
        &w.ctx.client,
        &w.ctx.table,
        OpenShards::DEFAULT,
        OpenKind::Payment,
        shared::clock::now_ms(),
        8,
    )
    .await
    .unwrap();
    assert_eq!(
        due.keys.len(),
        8,
        "six shards have nothing: their share goes to the crowded one"
    );
    for id in &quiet {
        assert!(
            due.keys.contains(&shared::keys::payment_pk(id)),
            "the quiet shard still gets its own"
        );
    }
    let unique: std::collections::HashSet<_> = due.keys.iter().collect();
    assert_eq!(unique.len(), 8, "no payment twice");
}

/// Issue 44: the shard count is raised ahead of a peak (`OpenItemsShards`), never lowered. Payments written
/// under the old count stay under their old shard until their next write; a scanner on the new count finds
/// them and the ones written under the new count alike, and a recovery run on the new count reconciles them.
#[tokio::test]
async fn raising_the_open_items_shards_keeps_the_items_written_under_the_old_count_found() {
    let w = World::new().await;
    let (old, new) = (OpenShards::DEFAULT, OpenShards::new(24).unwrap());
    let store_at = |shards| PaymentStore::new(w.ctx.client.clone(), &w.ctx.table, shards);
    let mut written = std::collections::BTreeMap::new();
    for (shards, prefix) in [(old, "pay_old"), (new, "pay_new")] {
        for i in 0..40 {
            let mut payment = payments_core::fixtures::new_payment(&format!("{prefix}_{i}"), 1000);
            payment.now_ms = shared::clock::now_ms() - 60_000;
            let created = store_at(shards).create(payment).await.unwrap();
            written.insert(shared::keys::payment_pk(&created.id), shards);
        }
    }
    // Under the new count some are in shards the old count never had: the raise spreads new writes.
    let above_old = (0..40)
        .filter(|i| {
            let shard = shard_of(OpenKind::Payment, &format!("pay_new_{i}"), new);
            shard.rsplit('#').next().and_then(|n| n.parse::<u64>().ok()).unwrap() >= old.get()
        })
        .count();
    assert!(above_old > 0, "the new count is in use");
    let due = |shards| {
        let (client, table) = (w.ctx.client.clone(), w.ctx.table.clone());
        async move {
            due_items(
                &client,
                &table,
                shards,
                OpenKind::Payment,
                shared::clock::now_ms(),
                1000,
            )
            .await
            .unwrap()
            .keys
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
        }
    };
    let found_new = due(new).await;
    assert_eq!(
        found_new,
        written.keys().cloned().collect(),
        "every item, whichever count wrote it"
    );
    // What lowering would do: a scanner on the old count misses the items above it.
    let found_old = due(old).await;
    assert_eq!(found_new.len() - found_old.len(), above_old);
    // The scanner itself, built on the new count, looks at every one of them.
    let config = shared::Config {
        open_shards: new,
        ..w.ctx.config()
    };
    let settings = RecoverySettings {
        stale_after: Duration::ZERO,
        batch_limit: 200,
        ..RecoverySettings::default()
    };
    let report = Recovery::new(&w.ctx.client, &config, w.psp(), settings)
        .run(deadline())
        .await
        .unwrap();
    assert_eq!(report.found as usize, written.len(), "{report:?}");
}

/// The expired payment's end: failed as expired, by recovery, out of the index.
async fn assert_expired(w: &World, id: &PaymentId) {
    let p = w.get(id).await;
    assert_eq!(p.status, PaymentStatus::Failed, "{id}");
    assert!(
        p.reason.as_deref().unwrap_or_default().starts_with("expired"),
        "{id}: {:?}",
        p.reason
    );
    let events = w.ctx.events(id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.kind, last.path),
        (EventKind::PaymentFailed, Channel::Recovery),
        "{id}"
    );
    assert_eq!(w.ctx.due_key(id).await, None, "{id} is out of the index");
}

async fn intent_status(w: &World, intent: &PaymentIntent) -> IntentStatus {
    let reference = PspReference::parse(intent.id.as_str()).unwrap();
    w.psp().retrieve(&reference).await.unwrap().status
}

#[tokio::test]
async fn an_abandoned_payment_whose_intent_still_waits_for_the_customer_is_canceled_at_the_psp_and_expires() {
    let w = World::new().await;
    let challenge = w.intent("abandoned_challenge", "abandoned_action", 1000).await;
    assert_eq!(challenge.status, IntentStatus::RequiresAction);
    // Declined, and the customer never comes back with another card (within the test's hour).
    let declined = w.intent("abandoned_decline", "decline_then_retry", 1000).await;
    assert_eq!(declined.status, IntentStatus::RequiresPaymentMethod);
    let processing = w.intent("old_processing", "slow_processing", 1000).await;
    let young_challenge = w.intent("young_challenge", "abandoned_action", 1000).await;
    let in_challenge = bound_payment(&w, "in_challenge", &challenge, 8 * DAY_MS).await;
    assert_eq!(w.get(&in_challenge).await.status, PaymentStatus::RequiresAction);
    let after_decline = bound_payment(&w, "after_decline", &declined, 8 * DAY_MS).await;
    assert_eq!(w.get(&after_decline).await.status, PaymentStatus::AttemptFailed);
    let still_processing = bound_payment(&w, "still_processing", &processing, 8 * DAY_MS).await;
    let young = bound_payment(&w, "young", &young_challenge, DAY_MS).await;
    let opened = w.ctx.due_key(&still_processing).await.unwrap();

    let report = recovery(&w).run(deadline()).await.unwrap();

    assert_eq!((report.found, report.errors, report.expired), (4, 0, 2), "{report:?}");
    let record = recovery::emf(&report, shared::clock::now_ms());
    assert_eq!(record["Expired"].as_u64(), Some(2), "the alarmed metric: {record}");
    for (id, intent) in [(&in_challenge, &challenge), (&after_decline, &declined)] {
        assert_expired(&w, id).await;
        assert_eq!(
            intent_status(&w, intent).await,
            IntentStatus::Canceled,
            "{id}: canceled at Stripe"
        );
        // Stripe replays a key's first answer: the same key gets the cancel back, so it was `<payment>:expire`.
        let reference = PspReference::parse(intent.id.as_str()).unwrap();
        let replayed = w.psp().cancel(&format!("{id}:expire"), &reference).await;
        assert!(replayed.is_ok(), "{id}: canceled under <payment>:expire: {replayed:?}");
    }
    // Stripe settles a processing PaymentIntent itself (a bank debit takes days): it is waited for.
    assert_eq!(w.get(&still_processing).await.status, PaymentStatus::Processing);
    assert_eq!(intent_status(&w, &processing).await, IntentStatus::Processing);
    assert!(w.ctx.due_key(&still_processing).await.unwrap() > opened, "backed off");
    assert_eq!(
        w.get(&young).await.status,
        PaymentStatus::RequiresAction,
        "not old enough"
    );
    assert_eq!(intent_status(&w, &young_challenge).await, IntentStatus::RequiresAction);

    let again = recovery(&w).run(deadline()).await.unwrap();
    assert_eq!(again.expired, 0, "expired once: {again:?}");
}

/// A payments-API merchant captures days after the authorization (manual capture): past the expiry age,
/// with days left before the charge's `capture_before`, recovery records the authorization and releases
/// nothing (the age alone is no reason to end money the merchant may still take).
#[tokio::test]
async fn an_authorization_with_days_left_is_never_released_for_its_age() {
    let w = World::new().await;
    let mut settings = psp::StripeSettings::local(&w.psp_url, crate::lambda::KEY).unwrap();
    settings.capture = psp::CaptureMethod::Manual;
    let manual = StripeClient::new(&settings, psp::ApiKey::parse(crate::lambda::KEY).unwrap()).unwrap();
    let (payment, order) = (PaymentId::parse("pay_held").unwrap(), OrderId::parse("o-held").unwrap());
    let money = Money::new(1000, shared::Currency::parse("EUR").unwrap()).unwrap();
    let request = psp::ChargeRequest {
        payment_id: &payment,
        order_id: &order,
        money: &money,
        payment_method: "pm_succeeded",
    };
    let intent = manual.charge("held:charge", &request).await.unwrap();
    assert_eq!(intent.status, IntentStatus::RequiresCapture);
    let until = intent.capture_before_ms().expect("the charge says until when");
    assert!(until > shared::clock::now_ms() + DAY_MS, "days left: {until}");
    let id = bound_payment(&w, "held", &intent, 8 * DAY_MS).await;
    assert_eq!(w.get(&id).await.status, PaymentStatus::Authorized);

    let report = recovery(&w).run(deadline()).await.unwrap();

    assert_eq!((report.found, report.errors, report.expired), (1, 0, 0), "{report:?}");
    assert_eq!(
        w.get(&id).await.status,
        PaymentStatus::Authorized,
        "still the merchant's to capture"
    );
    assert_eq!(
        intent_status(&w, &intent).await,
        IntentStatus::RequiresCapture,
        "nothing released at Stripe"
    );
}

#[tokio::test]
async fn an_expiring_cancel_refused_because_the_payment_succeeded_meanwhile_records_the_capture() {
    let slow = Duration::from_secs(8);
    let w = World::with_slow(slow).await;
    let created = tokio::time::Instant::now();
    let intent = w.intent("late_success", "slow_action", 1000).await;
    assert_eq!(intent.status, IntentStatus::RequiresAction);
    let id = bound_payment(&w, "late_success", &intent, 8 * DAY_MS).await;
    // Each PSP request is held 4 s: the read (answered about 5 s after the create, before the customer
    // completes the challenge at 8 s) finds it open, the cancel (answered after 9 s) finds it succeeded. The
    // run's own store calls before the read may take up to 3 s.
    tokio::time::sleep_until(created + Duration::from_secs(1)).await;
    w.sim.ledger.hang(Duration::from_secs(4), 2);
    let before = w.sim.ledger.requests().len();

    let report = recovery(&w).run(deadline()).await.unwrap();

    let requests: Vec<_> = w.sim.ledger.requests()[before..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        requests,
        [
            format!("GET /v1/payment_intents/{}", intent.id),
            format!("POST /v1/payment_intents/{}/cancel", intent.id)
        ],
        "read open, then the cancel"
    );
    let p = w.get(&id).await;
    assert_eq!(
        p.status,
        PaymentStatus::Captured,
        "the refusal's PaymentIntent is recorded"
    );
    assert_eq!((report.applied, report.expired, report.errors), (1, 0, 0), "{report:?}");
}

#[tokio::test]
async fn a_reference_its_psp_does_not_know_backs_off_then_expires() {
    let w = World::new().await;
    // The simulator answers 404 `resource_missing` about it, as Stripe does.
    let unknown = open_payment(&w, "unknown_ref", "stripe", Some("pi_unknown_ref"), 3_600_000).await;
    let opened = w.ctx.due_key(&unknown).await.unwrap();
    let before = psp_calls(&w);

    let first = recovery(&w).run(deadline()).await.unwrap();
    assert_eq!(
        (first.found, first.errors, first.no_client, first.expired),
        (1, 0, 1, 0),
        "{first:?}"
    );
    assert_eq!(
        w.get(&unknown).await.status,
        PaymentStatus::Processing,
        "younger than the age"
    );
    assert!(w.ctx.due_key(&unknown).await.unwrap() > opened, "backed off");
    assert_eq!(
        recovery(&w).run(deadline()).await.unwrap().found,
        0,
        "not asked every run"
    );

    // Its back-off over, and past a (shorter) expiry age: asked once more, then expired.
    shared::store::open_index::defer(&w.ctx.client, &w.ctx.table, shared::keys::payment(&unknown), 0)
        .await
        .unwrap();
    let mut short = recovery(&w);
    short.settings.expire_after = Duration::from_secs(1800);
    let last = short.run(deadline()).await.unwrap();
    assert_eq!((last.found, last.expired), (1, 1), "{last:?}");
    assert_expired(&w, &unknown).await;
    let reason = w.get(&unknown).await.reason.unwrap();
    assert!(reason.contains("its PSP does not know its reference"), "{reason}");
    assert_eq!(psp_calls(&w) - before, 2, "one question a look");
}

#[tokio::test]
async fn a_reconcile_that_fails_before_the_payment_is_read_is_backed_off() {
    let w = World::new().await;
    let id = open_payment(&w, "unreadable", "stripe", Some("pi_unreadable"), 3_600_000).await;
    // A payment item no release can read (its status lost to a hand edit): every read of it fails.
    w.ctx
        .client
        .update_item()
        .table_name(&w.ctx.table)
        .set_key(Some(shared::keys::payment(&id)))
        .update_expression("REMOVE #s")
        .expression_attribute_names("#s", "status")
        .send()
        .await
        .unwrap();
    assert!(w.ctx.store.get(&id).await.is_err(), "the item cannot be read");
    let opened = w.ctx.due_key(&id).await.unwrap();
    let before = psp_calls(&w);

    let first = recovery(&w).run(deadline()).await.unwrap();
    assert_eq!((first.found, first.errors), (1, 1), "{first:?}");
    assert!(
        w.ctx.due_key(&id).await.unwrap() > opened,
        "backed off, not read every run"
    );
    assert_eq!(recovery(&w).run(deadline()).await.unwrap().found, 0);
    assert_eq!(psp_calls(&w), before, "nothing asked about a payment not read");
}

/// Adyen refuses our key (a deployment fault: deferred) while Stripe works: the Adyen payments are not asked
/// beyond the first refusal and back off, and the Stripe payment whose capture was lost here is recovered in
/// the same run, wherever the shards put it.
#[tokio::test]
async fn one_psp_deferred_stops_only_its_own_calls_in_the_run() {
    use psp::adyen::{AdyenClient, AdyenSettings};
    use psp::set::{guarded, ADYEN_BREAKER};
    use psp::PspSet;
    use psp_simulator::adyen::{self as sim_adyen, ledger::AdyenLedger, AdyenSimulator};
    let w = World::new().await;
    // Adyen's account knows another key than ours: every call is answered 401.
    let hmac =
        webhook_signatures::adyen::HmacKey::from_hex(webhook_signatures::adyen::Mode::Test, sim_adyen::DEV_HMAC_KEY)
            .unwrap();
    let ledger = AdyenLedger::new("AQE_the_rolled_key", sim_adyen::DEV_MERCHANT_ACCOUNT);
    let sim = AdyenSimulator::new(ledger, hmac, None, Default::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sim.serve(listener));
    let adyen =
        AdyenClient::new(&AdyenSettings::local(&url, "AQE_our_old_key", sim_adyen::DEV_MERCHANT_ACCOUNT).unwrap())
            .unwrap();
    let adyen = guarded(adyen, w.ctx.client_for("reconciler"), &w.ctx.table, ADYEN_BREAKER);
    // Past the expiry age (and not a day past it) Adyen's payments are ended at Adyen, a call; three of them,
    // in whichever shards.
    let mut adyens = Vec::new();
    for n in 0..3 {
        let id = open_payment(
            &w,
            &format!("adyen{n}"),
            "adyen",
            Some(&format!("ADYENREF000000{n:02}")),
            7 * DAY_MS + 3_600_000,
        )
        .await;
        adyens.push((w.ctx.due_key(&id).await.unwrap(), id));
    }
    let intent = w.intent("lost_capture", "succeeded", 1000).await;
    let stripe = open_payment(&w, "stripe", "stripe", Some(intent.id.as_str()), 0).await;
    let settings = RecoverySettings {
        stale_after: Duration::ZERO,
        expire_after: Duration::from_secs(7 * 24 * 3600),
        ..RecoverySettings::default()
    };
    let psps = PspSet::new(Some(w.psp()), Some(adyen));
    let recovery = Recovery::new(&w.ctx.client_for("reconciler"), &w.ctx.config(), psps, settings);

    let report = recovery.run(deadline()).await.unwrap();

    assert_eq!(
        (report.found, report.applied, report.deferred, report.errors),
        (4, 1, 3, 0),
        "{report:?}"
    );
    assert_eq!(
        w.get(&stripe).await.status,
        PaymentStatus::Captured,
        "Stripe's recovered in the same run"
    );
    for (opened, id) in &adyens {
        assert_eq!(
            w.get(id).await.status,
            PaymentStatus::Processing,
            "nothing ended at Adyen"
        );
        assert!(
            w.ctx.due_key(id).await.unwrap() > *opened,
            "backed off, not first in its shard again"
        );
    }
}

/// Recovery is a scanner: with `PSP_SCAN_RATE_PER_SECOND` = 5, as the reconciler reads its settings, a run over
/// 6 due payments spaces its Stripe requests (each retrieve, by the simulator's clock of their arrival) at
/// least 200 ms apart, so the scan of `n` requests spans at least `(n - 1) / 5` s; without the pace they come
/// as fast as the simulator answers.
#[tokio::test]
async fn a_run_keeps_to_the_scan_rate_at_the_psp() {
    let w = World::new().await;
    let mut payments = Vec::new();
    for n in 0..6 {
        let intent = w.intent(&format!("paced_{n}"), "succeeded", 1000).await;
        payments.push(open_payment(&w, "paced", "stripe", Some(intent.id.as_str()), 0).await);
    }
    let env = shared::Env::from_lookup(|_| None)
        .with("TABLE_NAME", w.ctx.table.as_str())
        .with("PSP_BASE_URL", w.psp_url.as_str())
        .with("PSP_API_KEY", crate::lambda::KEY)
        .with("PSP_REDIRECTS", "never")
        .with("PSP_SCAN_RATE_PER_SECOND", "5");
    let settings = recovery::Settings::from_env(&env).expect("the reconciler's settings");
    let stripe = settings.psps.stripe.as_ref().expect("Stripe configured");
    let client = StripeClient::new(stripe, psp::ApiKey::parse(crate::lambda::KEY).unwrap()).unwrap();
    let recovery = Recovery::new(
        &w.ctx.client_for("reconciler"),
        &w.ctx.config(),
        client,
        RecoverySettings {
            stale_after: Duration::ZERO,
            ..settings.recovery
        },
    );
    let before = w.sim.ledger.requests().len();

    let report = recovery.run(deadline()).await.unwrap();

    assert_eq!(report.applied, 6, "{report:?}");
    for id in &payments {
        assert_eq!(w.get(id).await.status, PaymentStatus::Captured);
    }
    let arrived: Vec<i64> = w.sim.ledger.requests()[before..].iter().map(|r| r.at_ms).collect();
    assert!(arrived.len() >= 6, "one read per payment at least: {arrived:?}");
    let span = arrived[arrived.len() - 1] - arrived[0];
    let n = i64::try_from(arrived.len()).unwrap();
    // Sent 200 ms apart; their arrival may differ by the loopback's delay (a few ms on a busy machine), far
    // less than the pace: unpaced, the whole run takes about as long as one period.
    assert!(
        span >= (n - 1) * 200 - 20,
        "{n} requests in {span} ms at 5/s: {arrived:?}"
    );
}
