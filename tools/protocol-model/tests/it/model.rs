//! The model checked exhaustively (breadth-first, every reachable state), the broken variants that show the
//! checks are not vacuous, and what main still gets wrong. State counts are printed (`--no-capture` shows
//! them).
//!
//! The largest runs (main with faults, two runners with 3-D Secure) take 30 to 70 s each on this 2-core
//! machine (the crate and stateright are optimised in debug builds); nextest runs the tests two at a time.

use protocol_model::check::{check, Report};
use protocol_model::model::{
    BreakerMode, Refusals, SweeperMode, BREAKER_ON_THE_PSP, CALLS_BOUNDED, ESCALATED_ONCE, LIVENESS, LOOKED_ALL_DAY,
    MONEY_ON_FAILED_REFUNDED, NO_REFUND_BEYOND_LEFT, REFUNDABLE, REFUND_REFUSED_FOR_GOOD, SET_ASIDE,
};
use protocol_model::psp::Scenario;
use protocol_model::{CancelMode, Config};

const THREADS: usize = 2;
const CHARGED_TWICE: &str = "never charged twice for one order";
const ABANDONED_AND_CANCELED: &str = "abandoned and canceled at the PSP";

/// Every `always`/`eventually` property holds, every `sometimes` example is reached but those in
/// `out_of_reach` and the refusals' (a configuration without refusals cannot reach them, and must not).
fn assert_all_hold(report: &Report, out_of_reach: &[&str]) {
    let mut out_of_reach = out_of_reach.to_vec();
    out_of_reach.extend([SET_ASIDE, REFUND_REFUSED_FOR_GOOD, LOOKED_ALL_DAY]);
    assert_holds(report, &out_of_reach);
}

/// Every `always`/`eventually` property holds, every `sometimes` example is reached but exactly those in
/// `out_of_reach`.
fn assert_holds(report: &Report, out_of_reach: &[&str]) {
    println!("{}", report.summary());
    let traces: Vec<String> = report.failures().iter().map(|p| report.trace(p)).collect();
    assert!(traces.is_empty(), "counterexamples:\n{}", traces.join("\n"));
    assert_eq!(
        report.unreached_examples(),
        out_of_reach.to_vec(),
        "examples reached or not other than expected: the checks may be vacuous"
    );
}

/// `property` fails, and its counterexample is printed.
fn assert_fails(report: &Report, property: &str) {
    println!("{}", report.summary());
    assert!(
        report.failures().contains(&property),
        "expected a counterexample to {property:?}; failures: {:?}",
        report.failures()
    );
    println!("{}", report.trace(property));
}

/// Faults off: no crash, lost answer or duplicate webhook.
fn no_faults(config: Config) -> Config {
    Config {
        crashes: 0,
        losses: 0,
        duplicates: 0,
        ..config
    }
}

#[test]
fn main_keeps_every_property_under_crashes_lost_answers_and_duplicate_webhooks() {
    // Every scenario, one runner, a customer who acts, abandons or cancels, one crash, one lost answer, one
    // duplicate webhook: 1,063,058 states, every path to its end (depth 36). Main's cancel never fails a
    // payment whose PaymentIntent may still take money, so no money is ever taken on a failed payment.
    let report = check(Config::default(), THREADS, false);
    assert_all_hold(&report, &[MONEY_ON_FAILED_REFUNDED]);
    assert!(report.unique_states > 1_000_000, "{}", report.summary());
}

#[test]
fn two_runners_working_on_one_saga_at_once_keep_every_property_with_3ds() {
    // The inbox consumer and the sweeper on the same saga, 3-D Secure (the customer's act and cancel racing
    // both), no faults: 606,216 states.
    let config = no_faults(Config {
        runners: 2,
        scenarios: vec![Scenario::ThreeDs],
        ..Config::default()
    });
    let report = check(config, THREADS, false);
    assert_all_hold(&report, &[MONEY_ON_FAILED_REFUNDED]);
    assert!(report.unique_states > 500_000, "{}", report.summary());
}

#[test]
fn two_runners_working_on_one_saga_at_once_keep_every_property_in_the_other_scenarios() {
    // Captured at once, processing, declined: 304,257 states.
    let config = no_faults(Config {
        runners: 2,
        scenarios: vec![Scenario::Succeeds, Scenario::Processing, Scenario::Declined],
        ..Config::default()
    });
    let report = check(config, THREADS, false);
    assert_all_hold(&report, &[MONEY_ON_FAILED_REFUNDED]);
    assert!(report.unique_states > 250_000, "{}", report.summary());
}

/// Formerly "main's cancel compensates a payment captured meanwhile as if no money was taken" (closed by
/// af27798): main reads the PaymentIntent first and waits while it is processing, and after failing our
/// payment goes on with the status that write left.
#[test]
fn main_waits_for_a_processing_payment_intent_and_never_compensates_a_capture_as_no_money_taken() {
    let config = no_faults(Config {
        scenarios: vec![Scenario::Processing],
        ..Config::default()
    });
    assert_all_hold(
        &check(config, THREADS, false),
        &[MONEY_ON_FAILED_REFUNDED, ABANDONED_AND_CANCELED],
    );
}

/// Broken on purpose: main's cancel before af27798 fails a processing payment and goes on with the status it
/// read before that write; a capture in between is compensated as if no money was taken, and kept.
#[test]
fn mains_old_cancel_compensates_a_payment_captured_meanwhile_as_if_no_money_was_taken() {
    let config = no_faults(Config {
        scenarios: vec![Scenario::Processing],
        cancel: CancelMode::OldMain,
        ..Config::default()
    });
    assert_fails(&check(config, THREADS, true), LIVENESS);
}

/// Formerly "a late success seen by recovery and by its webhook is recorded twice" (closed by 17e8a4c):
/// money taken on a failed payment is recorded once whichever path reports it first, however often, the
/// payment stays open and recovery refunds it once (key `<payment>:anomaly-<n>:refund`) and records the
/// refund, the payment staying failed. Main's own cancel takes no such money any more, so a cancel that fails
/// a processing payment (`CancelMode::FailsWhileProcessing`) produces it here; with a lost answer (the
/// refund's too) and a duplicate webhook: 144,263 states.
#[test]
fn money_taken_on_a_failed_payment_is_recorded_once_and_given_back_once() {
    let config = Config {
        scenarios: vec![Scenario::Processing],
        cancel: CancelMode::FailsWhileProcessing,
        crashes: 0,
        ..Config::default()
    };
    assert_all_hold(&check(config, THREADS, false), &[ABANDONED_AND_CANCELED]);
}

/// Formerly "a late capture whose webhook never arrives is never refunded": with main's cancel no payment is
/// failed while its PaymentIntent may still take money, so webhooks the PSP gives up on lose nothing that
/// recovery (open payments) and the saga (the payment item past its deadline) do not read themselves.
#[test]
fn main_keeps_every_property_when_the_psp_gives_up_on_webhooks() {
    let config = Config {
        scenarios: vec![Scenario::Processing],
        crashes: 0,
        duplicates: 0,
        webhooks_lost: true,
        ..Config::default()
    };
    assert_all_hold(
        &check(config, THREADS, false),
        &[MONEY_ON_FAILED_REFUNDED, ABANDONED_AND_CANCELED],
    );
}

/// Still open (item 3 closes it partly): recovery looks at a failed payment only once a refund is due, which
/// only a report of the capture records. Money taken on a failed payment whose webhook the PSP gives up on is
/// never given back. Main's own cancel no longer produces such money; anything else that does (outside this
/// model) would keep it.
#[test]
fn money_taken_on_a_failed_payment_whose_webhook_never_arrives_is_never_given_back() {
    let config = Config {
        scenarios: vec![Scenario::Processing],
        cancel: CancelMode::FailsWhileProcessing,
        crashes: 0,
        duplicates: 0,
        webhooks_lost: true,
        ..Config::default()
    };
    assert_fails(&check(config, THREADS, true), LIVENESS);
}

/// Formerly "a charge retried after Stripe pruned its key charges twice despite the saved payment id"
/// (closed by 4135762): a charge retried a day later (its payment created more than `PSP_KEY_TRUSTED_FOR`
/// ago) searches the PSP for the payment's first PaymentIntent and uses it. Every scenario, a crash and a
/// lost answer, no customer cancel (see the next test): 58,814 states.
#[test]
fn a_charge_retried_a_day_later_finds_its_first_payment_intent_and_charges_once() {
    let config = Config {
        customer: false,
        duplicates: 0,
        day_passes: true,
        ..Config::default()
    };
    assert_all_hold(
        &check(config, THREADS, false),
        &[
            "compensated after a refund",
            "a success raced the cancel",
            MONEY_ON_FAILED_REFUNDED,
        ],
    );
}

/// Broken on purpose: without the search, the retry a day later creates a second PaymentIntent.
#[test]
fn a_charge_retried_a_day_later_without_the_search_charges_twice() {
    let config = Config {
        scenarios: vec![Scenario::Succeeds],
        customer: false,
        crashes: 0,
        duplicates: 0,
        day_passes: true,
        search_after_a_day: false,
        ..Config::default()
    };
    assert_fails(&check(config, THREADS, true), CHARGED_TWICE);
}

/// The bug the model found on main (now fixed, the runner's `stripe::refund`), kept as a broken variant: the saga's refund
/// step asks for all that is left under `<order>:refund`. If its answer was lost and the retry comes a day
/// later, Stripe has forgotten the key, finds nothing left and refuses (`charge_already_refunded`); escalating
/// that, every resume by today's sweeper asks again and is refused again. The money is back, but the saga
/// never leaves `refunding_payment` (the stock is never released, the order never compensated). (With main's
/// sweeper it would be set aside after that one escalation: a person would be asked about money that is back.)
#[test]
fn a_refund_retried_a_day_later_without_the_read_back_never_ends() {
    let config = Config {
        scenarios: vec![Scenario::Succeeds],
        crashes: 0,
        duplicates: 0,
        day_passes: true,
        refused_refund_reads_back: false,
        sweeper: SweeperMode::Today,
        ..Config::default()
    };
    let report = check(config, THREADS, true);
    assert_fails(&report, LIVENESS);
}

/// Main (the runner's `stripe::refund`): a refused refund reads the PaymentIntent back, as recovery's `give_back` does.
/// Then only the refusal itself remains (harmless: nothing is refunded twice), captured at once or
/// processing, the customer, a day passing: 92,105 states.
#[test]
fn main_reads_a_refused_refund_back_and_ends_every_saga_a_day_later() {
    let config = Config {
        scenarios: vec![Scenario::Succeeds, Scenario::Processing],
        crashes: 0,
        duplicates: 0,
        day_passes: true,
        ..Config::default()
    };
    let report = check(config, THREADS, false);
    println!("{}", report.summary());
    assert_eq!(
        report.failures(),
        vec![NO_REFUND_BEYOND_LEFT],
        "{}",
        report.trace(LIVENESS)
    );
    assert_eq!(
        report.unreached_examples(),
        vec![
            MONEY_ON_FAILED_REFUNDED,
            ABANDONED_AND_CANCELED,
            SET_ASIDE,
            REFUND_REFUSED_FOR_GOOD,
            LOOKED_ALL_DAY
        ]
    );
}

#[test]
fn a_charge_retried_with_a_fresh_idempotency_key_charges_twice() {
    let config = Config {
        scenarios: vec![Scenario::Succeeds],
        crashes: 0,
        duplicates: 0,
        fresh_charge_key: true,
        ..Config::default()
    };
    assert_fails(&check(config, THREADS, true), CHARGED_TWICE);
}

#[test]
fn a_saga_that_never_abandons_waits_forever_for_a_customer_who_never_acts() {
    let config = no_faults(Config {
        scenarios: vec![Scenario::ThreeDs],
        never_abandon: true,
        ..Config::default()
    });
    assert_fails(&check(config, THREADS, true), LIVENESS);
}

/// Refusals for good, one at a time, on main: no faults but the one the refusal needs, a second order in the
/// saga's shard that only the sweeper resumes, the breaker counting per request.
fn refusing(refusals: Refusals, scenarios: Vec<Scenario>) -> Config {
    no_faults(Config {
        scenarios,
        refusals,
        bystander: true,
        breaker: BreakerMode::PerRequest,
        ..Config::default()
    })
}

const COMPLETED: &str = "completed";
const AFTER_A_REFUND: &str = "compensated after a refund";
const RACED: &str = "a success raced the cancel";

/// A disputed charge (the customer cancels after the capture): the refund is refused for good, the
/// compensation ends without it ("refund impossible: disputed") with one escalation. And a PSP that answers
/// 401 for a while (a rejected key, a deployment fault): the saga waits, nothing escalates or fails.
#[test]
fn main_ends_a_disputed_refund_with_one_escalation_and_waits_out_a_rejected_key() {
    let refusals = Refusals {
        dispute: true,
        key_rejected: true,
        ..Refusals::default()
    };
    let report = check(refusing(refusals, vec![Scenario::Succeeds]), THREADS, false);
    assert_holds(
        &report,
        &[
            MONEY_ON_FAILED_REFUNDED,
            ABANDONED_AND_CANCELED,
            SET_ASIDE,
            LOOKED_ALL_DAY,
        ],
    );
}

/// The charge's answer is lost, a deploy changes the charge request, and the retry is refused
/// (`idempotency_error`) while the first PaymentIntent captures; the customer cancels. Main: the cancel step
/// finds the capture, the saga copies the payment's PSP reference, and the refund gives the money back.
#[test]
fn main_keeps_the_reference_of_a_capture_after_a_refused_charge_and_refunds_it() {
    let config = Config {
        losses: 1,
        ..refusing(
            Refusals {
                charge_refused: true,
                ..Refusals::default()
            },
            vec![Scenario::Succeeds],
        )
    };
    let report = check(config, THREADS, false);
    assert_holds(
        &report,
        &[
            ABANDONED_AND_CANCELED,
            SET_ASIDE,
            REFUND_REFUSED_FOR_GOOD,
            LOOKED_ALL_DAY,
        ],
    );
    assert!(
        report.discoveries.contains_key(RACED),
        "the refused charge's capture reached the cancel"
    );
}

/// Broken on purpose: the saga before the fix kept only the charge answer's reference; after a refused
/// charge whose PaymentIntent captured, it holds captured money with no reference to refund it (the refund
/// then fails `Invalid`, escalates and loops).
#[test]
fn a_saga_that_does_not_copy_the_reference_holds_captured_money_it_cannot_refund() {
    let config = Config {
        losses: 1,
        copies_reference: false,
        ..refusing(
            Refusals {
                charge_refused: true,
                ..Refusals::default()
            },
            vec![Scenario::Succeeds],
        )
    };
    assert_fails(&check(config, THREADS, true), REFUNDABLE);
}

/// The first charge fails with a 500 that Stripe saves for its key and replays to every retry: main escalates
/// once and sets the saga aside (the other order of the shard is swept), and the breaker, counting per request
/// and not counting replays, stays closed; the sweeper looks at it again on the core's schedule (5, 10, 20
/// minutes, ...), each look one PSP call at most. A search refused for good a day later: the same.
#[test]
fn main_sets_a_saga_aside_after_one_escalation_and_the_breaker_stays_closed_for_one_key() {
    let saved_500 = refusing(
        Refusals {
            saved_500: true,
            ..Refusals::default()
        },
        vec![Scenario::Succeeds, Scenario::ThreeDs],
    );
    let report = check(saved_500, THREADS, false);
    assert_holds(
        &report,
        &[
            COMPLETED,
            AFTER_A_REFUND,
            RACED,
            MONEY_ON_FAILED_REFUNDED,
            ABANDONED_AND_CANCELED,
            REFUND_REFUSED_FOR_GOOD,
        ],
    );
    let search_refused = Config {
        day_passes: true,
        losses: 1,
        customer: false,
        ..refusing(
            Refusals {
                search_refused: true,
                ..Refusals::default()
            },
            vec![Scenario::Succeeds],
        )
    };
    let report = check(search_refused, THREADS, false);
    assert_holds(
        &report,
        &[
            AFTER_A_REFUND,
            RACED,
            MONEY_ON_FAILED_REFUNDED,
            ABANDONED_AND_CANCELED,
            REFUND_REFUSED_FOR_GOOD,
        ],
    );
}

/// Broken on purpose: today's sweeper resumes an escalated saga at every run (it stays due, the oldest of its
/// shard): it escalates again and again, calls the PSP each time, and the other order of the shard is never
/// swept.
#[test]
fn todays_sweeper_escalates_a_saga_again_at_every_run_and_starves_its_shard() {
    let config = Config {
        sweeper: SweeperMode::Today,
        ..refusing(
            Refusals {
                saved_500: true,
                ..Refusals::default()
            },
            vec![Scenario::Succeeds],
        )
    };
    let report = check(config, THREADS, false);
    for property in [ESCALATED_ONCE, CALLS_BOUNDED, LIVENESS] {
        assert_fails(&report, property);
    }
}

/// Broken on purpose: today's breaker counts every failure: one saga's retries of one key, whose 500 Stripe
/// replays, open it for everyone.
#[test]
fn todays_breaker_opens_on_one_keys_replayed_failures() {
    let config = Config {
        breaker: BreakerMode::Today,
        ..refusing(
            Refusals {
                saved_500: true,
                ..Refusals::default()
            },
            vec![Scenario::Succeeds],
        )
    };
    assert_fails(&check(config, THREADS, true), BREAKER_ON_THE_PSP);
}

/// A 3-D Secure PaymentIntent offers, with its client secret, a redirect URL our `RedirectPolicy` refuses
/// (a refusal for good). Main's client (`CustomerAction::offered`, the core's decision that the Stripe client
/// takes) drops the URL and keeps the secret: the customer acts with it, nothing escalates, every saga ends.
#[test]
fn main_hands_on_the_secret_of_a_refused_redirect_and_the_customer_acts() {
    let refusals = Refusals {
        redirect_refused: true,
        ..Refusals::default()
    };
    let report = check(refusing(refusals, vec![Scenario::ThreeDs]), THREADS, false);
    assert_holds(
        &report,
        &[
            MONEY_ON_FAILED_REFUNDED,
            SET_ASIDE,
            REFUND_REFUSED_FOR_GOOD,
            LOOKED_ALL_DAY,
        ],
    );
}

/// Broken on purpose: the client before 60fbc53 dropped the whole action with the refused URL, so the
/// charge's answer (and the webhook) is unreadable (`PspError::BadAnswer`): the step is escalated, the
/// customer never gets the secret (no order completes) and the saga, set aside, never ends; today's sweeper
/// escalates it again at every run.
#[test]
fn the_old_client_drops_the_action_of_a_refused_redirect_and_the_customer_cannot_act() {
    let config = Config {
        redirect_drops_action: true,
        ..refusing(
            Refusals {
                redirect_refused: true,
                ..Refusals::default()
            },
            vec![Scenario::ThreeDs],
        )
    };
    let report = check(config.clone(), THREADS, false);
    assert_fails(&report, LIVENESS);
    let unreached = report.unreached_examples();
    assert!(unreached.contains(&COMPLETED), "the customer acted: {unreached:?}");
    assert!(!unreached.contains(&SET_ASIDE), "nothing escalated: {unreached:?}");

    let today = Config {
        sweeper: SweeperMode::Today,
        ..config
    };
    assert_fails(&check(today, THREADS, false), ESCALATED_ONCE);
}

/// The per-state deadlines (the core's `saga::deadline`, as `Runner::drive` and `escalate::waiting`
/// read them), every scenario, a lost answer, no customer (with one, 592,354 states and 32 s): a charge
/// unanswered past its deadline is given up and the cancel searches for what it made; a cancel waiting for a
/// processing PaymentIntent past its deadline is escalated once and set aside, and the sweeper looks at it
/// again on its schedule.
///
/// A finding against main: Stripe's search is eventually consistent, and the model lets it miss a
/// PaymentIntent made that day. The charge given up at its deadline (its answer lost, no webhook yet) then
/// fails our payment while the PaymentIntent takes the money: money on a failed payment, recorded once and
/// given back by recovery (and alarmed), which main's cancel otherwise never produces.
#[test]
fn main_gives_up_a_charge_past_its_deadline_and_cancels_or_gives_back_what_it_made() {
    let config = Config {
        deadlines: true,
        customer: false,
        crashes: 0,
        duplicates: 0,
        ..Config::default()
    };
    let report = check(config, THREADS, false);
    assert_holds(&report, &[AFTER_A_REFUND, REFUND_REFUSED_FOR_GOOD]);
    assert!(
        report.discoveries.contains_key(MONEY_ON_FAILED_REFUNDED),
        "the search missed the PaymentIntent of a charge given up"
    );
    println!("{}", report.trace(MONEY_ON_FAILED_REFUNDED));
}

/// The config of a charge whose search Stripe refuses for good, with each state's deadline.
fn search_refused_past_the_charge_deadline() -> Config {
    Config {
        day_passes: true,
        losses: 1,
        customer: false,
        deadlines: true,
        ..refusing(
            Refusals {
                search_refused: true,
                ..Refusals::default()
            },
            vec![Scenario::Succeeds],
        )
    }
}

/// A charge whose search Stripe refuses for good (a day later) is escalated and set aside; past the charge's
/// deadline the sweeper's look gives the charge up (`Saga::charge_given_up`) and the cancel's search is
/// refused again. Giving up at a deadline is no news: the saga stays set aside, escalated once.
#[test]
fn a_refused_search_is_escalated_once_though_the_charge_is_given_up_at_its_deadline() {
    let report = check(search_refused_past_the_charge_deadline(), THREADS, false);
    // No capture to refund or give back, and no customer to abandon or cancel: the looks at the set-aside
    // saga all day are reached.
    assert_holds(
        &report,
        &[
            AFTER_A_REFUND,
            MONEY_ON_FAILED_REFUNDED,
            ABANDONED_AND_CANCELED,
            REFUND_REFUSED_FOR_GOOD,
        ],
    );
}

/// A finding against main before the fix (`deadline_clears_set_aside`, broken on purpose): giving the charge
/// up at its deadline (`charge_failed`, a move) ended the set-aside, so the cancel's refused search was a
/// second escalation of the same saga; the fair run ends set aside after two escalations.
#[test]
fn before_the_fix_a_refused_search_is_escalated_again_once_the_charge_is_given_up() {
    let config = Config {
        deadline_clears_set_aside: true,
        ..search_refused_past_the_charge_deadline()
    };
    let report = check(config, THREADS, false);
    for property in [ESCALATED_ONCE, LIVENESS] {
        assert_fails(&report, property);
    }
}

/// A PSP that answers 401 until the key is fixed (a deployment fault), with each state's deadline: the saga
/// waits for the fix, but not past its state's deadline (the sweeper's `Runner::act_on_deadline`): a charge
/// is given up (compensated, its reason naming the fault) and a cancel still waiting is escalated once and
/// set aside; nothing is taken for the customer's refusal, every property holds.
#[test]
fn main_acts_on_the_deadline_of_a_saga_waiting_for_a_fixed_key() {
    let config = Config {
        customer: false,
        deadlines: true,
        ..refusing(
            Refusals {
                key_rejected: true,
                ..Refusals::default()
            },
            vec![Scenario::Succeeds, Scenario::Processing],
        )
    };
    // The sweeper does not look at a set-aside saga that waits for the key (its loads are deferred).
    assert_holds(
        &check(config, THREADS, false),
        &[
            AFTER_A_REFUND,
            RACED,
            MONEY_ON_FAILED_REFUNDED,
            ABANDONED_AND_CANCELED,
            REFUND_REFUSED_FOR_GOOD,
            LOOKED_ALL_DAY,
        ],
    );
}
