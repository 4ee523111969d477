//! Leaking a secret through the client view of a terminal payment does not compile.

#[test]
fn secrets_cannot_reach_a_terminal_view() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
