//! The `custom_rules` example run as a test: its values and gradients equal the plain
//! functions'.

#[path = "../examples/custom_rules.rs"]
#[allow(dead_code)]
mod custom_rules;

#[test]
fn custom_rules_example_matches_the_plain_functions() {
    let mut out = Vec::new();
    custom_rules::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let plain = custom_rules::plain_cases().unwrap();
    assert_eq!(text.lines().count(), plain.len());
    for (line, expected) in text.lines().zip(&plain) {
        let field = |key: &str| -> &str {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key))
                .unwrap()
        };
        assert_eq!(field("name="), expected.name);
        let value: f64 = field("value=").parse().unwrap();
        assert!(
            (value - expected.value).abs() <= 1e-12 * expected.value.abs().max(1.0),
            "{line}"
        );
        let grad: Vec<f64> = field("grad=")
            .split(',')
            .map(|g| g.parse().unwrap())
            .collect();
        assert_eq!(grad.len(), expected.grad.len(), "{line}");
        for (g, e) in grad.iter().zip(&expected.grad) {
            assert!((g - e).abs() <= 1e-12 * e.abs().max(1.0), "{line}");
        }
    }
}
