//! Running the checkout saga's steps out of order does not compile.

#[test]
fn saga_steps_cannot_run_out_of_order() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/saga_ui/*.rs");
}
