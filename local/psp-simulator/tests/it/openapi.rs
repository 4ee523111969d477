//! Every request our `StripeClient` sends is valid by Stripe's OpenAPI description (`spec/stripe-subset.json`,
//! pinned in `spec/README.md`): each operation is driven through the real client against the simulator, the
//! requests the simulator received are read back from its log, and each is checked against the description:
//! every parameter declared, with a matching type, and every required one sent.

use crate::support::{params, served, KEY};
use psp::stripe::EventQuery;
use psp::{ChargeRequest, StripeApi};
use psp_simulator::ledger::LoggedRequest;
use psp_simulator::spec::{self, Violation};
use shared::{Currency, Money, OrderId, PaymentId, PspReference};
use std::collections::BTreeSet;

/// Each operation the client calls, by Stripe's `operationId`.
const CALLED: [&str; 7] = [
    "GetEvents",
    "PostPaymentIntents",
    "GetPaymentIntentsIntent",
    "GetRefundsRefund",
    "GetPaymentIntentsSearch",
    "PostPaymentIntentsIntentCancel",
    "PostRefunds",
];

/// Every violation of the description in `requests`, with the request it was found in.
fn violations(requests: &[LoggedRequest]) -> Vec<(String, Vec<Violation>)> {
    requests
        .iter()
        .filter_map(|r| {
            let found = match spec::operation(&r.method, &r.path) {
                Some(op) => op.check(&r.params),
                None => vec![Violation::Unknown {
                    param: format!("{} {} (no such operation)", r.method, r.path),
                }],
            };
            (!found.is_empty()).then(|| (format!("{} {}", r.method, r.path), found))
        })
        .collect()
}

/// The requests of one pass through every operation our client calls.
async fn every_operation() -> Vec<LoggedRequest> {
    let s = served().await;
    let client = s.client(KEY);
    let money = Money::new(2500, Currency::parse("EUR").unwrap()).unwrap();
    let charge = |payment: &'static str, method: &'static str| {
        let (payment, order) = (PaymentId::parse(payment).unwrap(), OrderId::parse("order_1").unwrap());
        let client = client.clone();
        async move {
            let request = ChargeRequest {
                payment_id: &payment,
                order_id: &order,
                money: &money,
                payment_method: method,
            };
            client.charge(&format!("{payment}:charge"), &request).await
        }
    };
    let paid = charge("pay_paid", "pm_succeeded").await.expect("charge");
    let paid = PspReference::parse(paid.id).unwrap();
    client.retrieve(&paid).await.expect("retrieve");
    let found = client.find_for_payment(&PaymentId::parse("pay_paid").unwrap()).await;
    assert!(found.expect("search").is_some());
    client.refund("r1", &paid, Some(500)).await.expect("partial refund");
    let rest = client.refund("r2", &paid, None).await.expect("refund of the rest");
    let read = client.retrieve_refund(&rest.id).await.expect("refund read back");
    assert_eq!(
        (read.id.as_str(), read.status.as_str()),
        (rest.id.as_str(), "succeeded")
    );
    let waiting = charge("pay_waiting", "pm_abandoned_action").await.expect("charge");
    let waiting = PspReference::parse(waiting.id).unwrap();
    client.cancel("c1", &waiting).await.expect("cancel");
    // The catch-up job's read of the Events API, a first page and the one after it.
    let types = ["payment_intent.succeeded", "charge.refunded"];
    let mut query = EventQuery {
        created_gte: 0,
        created_lte: i64::from(u32::MAX),
        types: &types,
        starting_after: None,
        limit: 1,
    };
    let first = client.list_events(&query).await.expect("events");
    let last = first
        .data
        .last()
        .and_then(|e| e["id"].as_str())
        .expect("an event was listed")
        .to_owned();
    query.starting_after = Some(&last);
    client.list_events(&query).await.expect("the next page of events");
    s.sim.ledger.requests()
}

#[tokio::test]
async fn every_request_our_client_sends_is_valid_by_stripes_openapi_description() {
    let requests = every_operation().await;
    let seen: BTreeSet<&str> = requests
        .iter()
        .filter_map(|r| spec::operation(&r.method, &r.path).map(|o| o.id))
        .collect();
    assert_eq!(
        seen,
        CALLED.into_iter().collect(),
        "each operation the client calls was checked"
    );
    assert_eq!(violations(&requests), vec![]);
}

#[tokio::test]
async fn the_check_fails_on_a_bad_parameter_in_a_real_request() {
    let requests = every_operation().await;
    let create = requests
        .iter()
        .find(|r| r.method == "POST" && r.path == "/v1/payment_intents")
        .expect("a charge was sent");
    let spoiled = |change: &dyn Fn(&mut LoggedRequest)| {
        let mut r = create.clone();
        change(&mut r);
        violations(std::slice::from_ref(&r))
            .into_iter()
            .flat_map(|(_, v)| v)
            .collect::<Vec<_>>()
    };
    let unknown = spoiled(&|r| {
        r.params.insert("return_uri".into(), "https://shop.example".into());
    });
    assert_eq!(
        unknown,
        vec![Violation::Unknown {
            param: "return_uri".into()
        }]
    );
    let mistyped = spoiled(&|r| {
        r.params.insert("confirm".into(), "yes".into());
    });
    assert_eq!(mistyped.iter().map(Violation::param).collect::<Vec<_>>(), ["confirm"]);
    let missing = spoiled(&|r| {
        r.params.remove("currency");
    });
    assert_eq!(
        missing,
        vec![Violation::Missing {
            param: "currency".into()
        }]
    );
    let nested = spoiled(&|r| {
        r.params.remove("automatic_payment_methods[enabled]");
        r.params
            .insert("automatic_payment_methods[allow_redirect]".into(), "never".into());
    });
    assert_eq!(
        nested.iter().map(Violation::param).collect::<BTreeSet<_>>(),
        [
            "automatic_payment_methods[allow_redirect]",
            "automatic_payment_methods[enabled]"
        ]
        .into_iter()
        .collect()
    );
    // The simulator, checking the same description, refuses such a request as Stripe does.
    let ledger = psp_simulator::ledger::Ledger::new(KEY, psp_simulator::ledger::Timings::default(), None);
    let mut bad = create.params.clone();
    bad.extend(params(&[("return_uri", "https://shop.example")]));
    let answer = ledger
        .handle("POST", &create.path, Some("Bearer sk_test_rules"), Some("k"), &bad)
        .answer
        .unwrap();
    assert_eq!(
        (answer.status, answer.body["error"]["code"].as_str()),
        (400, Some("parameter_unknown"))
    );
}
