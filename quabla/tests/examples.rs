//! The examples run as tests: their printed values are checked here against the spec's
//! expected outputs.

#[path = "../examples/quickstart.rs"]
#[allow(dead_code)]
mod quickstart;

#[path = "../examples/retrace.rs"]
#[allow(dead_code)]
mod retrace;

#[path = "../examples/lower.rs"]
#[allow(dead_code)]
mod lower;

#[path = "../examples/fd_check.rs"]
#[allow(dead_code)]
mod fd_check;

#[path = "../examples/derivatives.rs"]
#[allow(dead_code)]
mod derivatives;

#[test]
fn fd_check_agrees_to_1e8_relative() {
    let mut out = Vec::new();
    fd_check::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 3);
    for line in text.lines() {
        let field = |key: &str| -> f64 {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key))
                .unwrap()
                .parse()
                .unwrap()
        };
        let (a, n) = (field("analytic="), field("numeric="));
        assert!((a - n).abs() <= 1e-8 * a.abs(), "{line}");
    }
}

#[test]
fn derivatives_match_the_closed_form() {
    let mut out = Vec::new();
    derivatives::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let xs = [0.0f64, 0.5, 1.0, 2.0];
    for (line, x) in text.lines().zip(xs) {
        let d2: f64 = line.split("d2=").nth(1).unwrap().parse().unwrap();
        assert!((d2 - 2.0 * (2.0 * x).cos()).abs() <= 1e-14, "{line}");
        assert!(line.starts_with(&format!("x={x} ")));
    }
}

#[path = "../examples/seed_graph_size.rs"]
#[allow(dead_code)]
mod seed_graph_size;

#[test]
fn seed_graph_size_table() {
    let mut out = Vec::new();
    seed_graph_size::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let rows: Vec<(usize, usize, usize)> = text
        .lines()
        .map(|l| {
            let nums: Vec<usize> = l
                .split_whitespace()
                .map(|kv| kv.split('=').nth(1).unwrap().parse().unwrap())
                .collect();
            (nums[0], nums[1], nums[2])
        })
        .collect();
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![4, 8, 16, 64]
    );
    let vmap_lines: Vec<usize> = rows.iter().map(|r| r.2).collect();
    assert!(
        vmap_lines.iter().all(|&v| v == vmap_lines[0] && v <= 35),
        "{text}"
    );
    // The loop grows affinely: equal increments per point.
    let per_point = (rows[1].1 - rows[0].1) / 4;
    for r in &rows {
        assert_eq!(r.1, rows[0].1 + per_point * (r.0 - 4), "{text}");
    }
    assert!(rows[0].1 > rows[0].2);
}

#[test]
fn retrace_prints_one_warning_then_the_error() {
    let mut out = Vec::new();
    retrace::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "RetraceWarning: jit(double) exceeded max_traces=8; evicted the least recently used trace:"
    );
    assert_eq!(lines[1], "  (float64[1],)");
    assert_eq!(lines[3], "  (float64[9],)");
    assert_eq!(lines[4], "changed: arg 0 leaf arg0: shape [1] -> [9]");
    assert_eq!(text.matches("RetraceWarning:").count(), 1);
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("error policy: Err(\"jit(double) exceeded max_traces=8"),
        "{last}"
    );
}

#[test]
fn lower_prints_the_plan_and_its_line_count() {
    let mut out = Vec::new();
    lower::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text,
        "%0 = input[name=x] : tensor<16xf64>\n\
         %1 = sin(%0) : tensor<16xf64>\n\
         %2 = mul(%1, %0) : tensor<16xf64>\n\
         %3 = sum(%2) : tensor<f64>\n\
         outputs: [[]]\n\
         lines=5\n"
    );
}

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

#[path = "../examples/linalg.rs"]
#[allow(dead_code)]
mod linalg;

#[test]
fn linalg_example_prints_e73_to_e82() {
    let mut out = Vec::new();
    linalg::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "{text}");
    for (i, line) in lines.iter().enumerate() {
        assert!(line.starts_with(&format!("E{} ", 73 + i)), "{line}");
    }
    assert!(lines[1].contains(
        "Q=[3, 2] R=[2, 2] U=[3, 2] S=[2] Vh=[2, 2] complete_Q=[3, 3] r=[2, 2] s_only=[2]"
    ));
    assert!(lines[3].contains("[2, 2] [2, 2, 3]"));
    assert!(lines[6].contains("matrix is singular"));
    assert!(lines[8].contains("not supported"), "{}", lines[8]);
}

#[test]
fn third_order_cholesky_plans_do_not_grow_with_n() {
    let mut out = Vec::new();
    linalg::plan_sizes(&mut out, &[4, 16]).unwrap();
    let text = String::from_utf8(out).unwrap();
    let field = |l: &str, key: &str| -> usize {
        l.split(key)
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let first: Vec<usize> = text
        .lines()
        .map(|l| field(l, "first_order_nodes="))
        .collect();
    let third: Vec<usize> = text
        .lines()
        .map(|l| field(l, "third_order_nodes="))
        .collect();
    // Each level differentiates one op (cholesky, then cholesky_ad), so the plan is a fixed
    // number of nodes whatever n (docs/linalg.md records 180, 194, 195 for n = 4, 16, 64).
    assert!(third[1] * 5 <= third[0] * 6, "{text}");
    assert!(third[1] <= 6 * first[1], "{text}");
}

#[path = "../examples/random_and_checkpoint.rs"]
#[allow(dead_code)]
mod random_and_checkpoint;

#[test]
fn random_and_checkpoint_prints_e64_and_an_identical_round_trip() {
    let path = std::env::temp_dir().join(format!("quabla-example-{}.qb", std::process::id()));
    let mut out = Vec::new();
    random_and_checkpoint::run(&mut out, &path).unwrap();
    std::fs::remove_file(&path).ok();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "split(key(0), 3) = [12141488642634205887, 11746937539006808163, 1638637292813414338]"
    );
    assert_eq!(
        lines[1],
        "uniform(key(42), (4,)) = [0.7415648787718233, 0.1599103928769201, 0.27860113025513866, 0.34419071652363753]"
    );
    assert!(
        lines[2].starts_with("normal(key(0), (3,)) = [-0.45275774021745"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].ends_with("3 layers, step=1200, activation=tanh, identical=true"),
        "{}",
        lines[3]
    );
}

#[path = "../examples/profile_step.rs"]
#[allow(dead_code)]
mod profile_step;

#[test]
fn profile_step_breaks_a_training_step_down_by_step_kind() {
    let mut out = Vec::new();
    profile_step::run(&mut out, 2).unwrap();
    let text = String::from_utf8(out).unwrap();
    let tables: Vec<&str> = text.split("step ").filter(|t| !t.is_empty()).collect();
    assert_eq!(tables.len(), 3, "{text}");
    for table in tables {
        // Value-and-gradient steps of tanh networks: matmuls and fused tanh groups.
        for kind in ["GEMM (matmul)", "fused elementwise", "outside the steps"] {
            assert!(table.contains(kind), "{table}");
        }
    }
    assert!(text.starts_with("step float64: "), "{text}");
    assert!(
        text.contains("step float32 at precision(\"float32\"): "),
        "{text}"
    );
    assert!(text.contains("step PINN float64: "), "{text}");
}

#[path = "../examples/loop_memory.rs"]
#[allow(dead_code)]
mod loop_memory;

#[test]
fn loop_derivative_memory_grows_sublinearly_to_third_order() {
    let mut out = Vec::new();
    let table = loop_memory::run(&mut out, &[100, 10_000]).unwrap();
    let text = String::from_utf8(out).unwrap();
    let tape = 10_000 * loop_memory::WIDTH * 8;
    for (order, row) in table.iter().enumerate().skip(1) {
        // 100 times the trips: √ checkpointing gives about 10 times the memory, a tape 100.
        let growth = row[1] as f64 / row[0] as f64;
        assert!(growth < 20.0, "order {order} grew {growth}x:\n{text}");
        assert!(row[1] < tape / 2, "order {order} holds a tape:\n{text}");
    }
}

#[path = "../examples/nan_hunt.rs"]
#[allow(dead_code)]
mod nan_hunt;

#[test]
fn nan_hunt_names_the_sqrt_line_and_the_fix_is_finite() {
    let mut out = Vec::new();
    nan_hunt::run(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("gradient = NaN"), "{text}");
    assert!(
        text.contains("made by the vjp rule of sqrt, differentiating the sqrt at ")
            && text.contains("examples/nan_hunt.rs:17:"),
        "{text}"
    );
    let fixed = text.lines().last().unwrap();
    let g: f64 = fixed.rsplit("gradient = ").next().unwrap().parse().unwrap();
    // d/dw of the mean over 5 samples of sqrt(w x - 1), defined at x = 1, 1.5, 2 for w = 1.5.
    let want = [1.0f64, 1.5, 2.0]
        .iter()
        .map(|x| x / (2.0 * (1.5 * x - 1.0).sqrt()))
        .sum::<f64>()
        / 5.0;
    assert!((g - want).abs() < 1e-6, "{g} vs {want}");
}

#[path = "../examples/dropout.rs"]
#[allow(dead_code)]
mod dropout;

#[test]
fn dropout_trains_inside_the_jitted_trainer_step() {
    let mut out = Vec::new();
    let report = dropout::run(&mut out).unwrap();
    // The fit improves fivefold although every step drops a fifth of the hidden units.
    assert!(
        report.trained < report.initial / 5.0,
        "{} -> {}",
        report.initial,
        report.trained
    );
    // The compiled step draws the masks an eager call with the same key draws.
    assert_eq!(
        report.step_loss.to_vec::<f64>().unwrap()[0].to_bits(),
        report.eager_loss.to_vec::<f64>().unwrap()[0].to_bits(),
        "{} vs {}",
        report.step_loss,
        report.eager_loss
    );
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("loss without dropout: "), "{text}");
}
