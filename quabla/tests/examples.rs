//! The examples run as tests: their printed values are checked here against the spec's
//! expected outputs.

#[path = "../examples/quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

#[test]
fn quickstart_prints_the_expected_values() {
    let mut out = Vec::new();
    quickstart::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let expected = [
        "sum(sin(x)**2)      = Tensor(0.93792227, dtype=float64)",
        "0.5 * r (float32)   = Tensor([0.5, 1. , 1.5], dtype=float32)",
        "f64 + f32           -> error: tensor + operands have mismatched dtypes f64 and f32; float32 and float64 never mix implicitly, convert one side with astype",
        "mask                = Tensor([False,  True, False], dtype=bool)",
        "where(mask, r, 0)   = Tensor([0., 2., 0.], dtype=float32)",
        "x23[::-1, 0]        = Tensor([4., 1.], dtype=float64)",
        "x23.gather([2, 0])  = Tensor([[3., 1.],",
        "scatter_add         = Tensor([4., 0., 2.], dtype=float64)",
        "sum over axis 0     = Tensor([5., 7., 9.], dtype=float64)",
        "log10(0), sqrt(-1)  = Tensor(-inf, dtype=float64) Tensor(nan, dtype=float64)",
    ];
    for line in expected {
        assert!(text.contains(line), "missing line {line:?} in:\n{text}");
    }
}
