//! The records of the crates beside `shared` publish per stage, as every record of `shared::metrics` does
//! (its unit test checks its own): each dimension set starts with `Stage`, and the record holds the stage.

use serde_json::Value;

fn assert_staged(r: &Value) {
    let sets = r["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!sets.is_empty(), "{r}");
    for set in &sets {
        assert_eq!(set[0], "Stage", "{r}");
    }
    assert_eq!(r["Stage"].as_str(), Some(shared::metrics::stage()), "{r}");
}

#[test]
fn the_breaker_and_recovery_records_carry_the_stage() {
    assert_staged(&psp::breaker::emf("stripe", 1));
    assert_staged(&recovery::emf(&recovery::RecoveryReport::default(), 1));
}
