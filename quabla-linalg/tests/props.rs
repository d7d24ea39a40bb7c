//! Property tests: no kernel panics on any value, and the factors reconstruct the input.

use proptest::prelude::*;
use quabla_linalg::{cholesky, eigh, qr, slogdet, solve, svd, triangular_solve};

fn any_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -10.0f64..10.0,
        1 => Just(0.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(1e300),
        1 => Just(-1e-300),
    ]
}

fn matrices(max_dim: usize) -> impl Strategy<Value = (usize, usize, usize, Vec<f64>)> {
    (1usize..3, 0usize..=max_dim, 0usize..=max_dim).prop_flat_map(|(batch, m, n)| {
        (
            Just(batch),
            Just(m),
            Just(n),
            prop::collection::vec(any_value(), batch * m * n),
        )
    })
}

fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

proptest! {
    // No regression files: integration tests have no lib.rs for proptest to place them by.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(96),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn nothing_panics_on_any_value((batch, m, n, a) in matrices(5)) {
        let _ = qr(&a, batch, m, n, false).unwrap();
        let _ = qr(&a, batch, m, n, true).unwrap();
        let _ = svd(&a, batch, m, n, false).unwrap();
        let _ = svd(&a, batch, m, n, true).unwrap();
        // Square kernels on the leading n x n blocks of the data.
        let k = m.min(n);
        let sq: Vec<f64> = a.iter().copied().take(batch * k * k).collect();
        if sq.len() == batch * k * k {
            let _ = slogdet(&sq, batch, k).unwrap();
            let _ = cholesky(&sq, batch, k).unwrap();
            let _ = eigh(&sq, batch, k).unwrap();
            let rhs = vec![1.0; batch * k * 2];
            let _ = solve(&sq, &rhs, batch, k, 2);
            for flags in 0..8 {
                let _ = triangular_solve(
                    &sq, &rhs, batch, k, 2, flags & 1 == 1, flags & 2 == 2, flags & 4 == 4,
                ).unwrap();
            }
        }
    }

    #[test]
    fn qr_and_svd_reconstruct(
        (m, n, a) in (1usize..7, 1usize..7).prop_flat_map(|(m, n)| {
            (Just(m), Just(n), prop::collection::vec(-1.0f64..1.0, m * n))
        })
    ) {
        let k = m.min(n);
        let (q, r) = qr(&a, 1, m, n, false).unwrap();
        let qr_a = matmul(&q, &r, m, k, n);
        for (x, y) in qr_a.iter().zip(&a) {
            prop_assert!((x - y).abs() < 1e-12);
        }
        for i in 0..k {
            prop_assert!(r[i * n + i] >= 0.0);
        }
        let (u, s, vh) = svd(&a, 1, m, n, false).unwrap();
        let mut us = u.clone();
        for i in 0..m {
            for j in 0..k {
                us[i * k + j] *= s[j];
            }
        }
        for (x, y) in matmul(&us, &vh, m, k, n).iter().zip(&a) {
            prop_assert!((x - y).abs() < 1e-12);
        }
    }

    #[test]
    fn solve_diagonally_dominant(
        (n, a, b) in (1usize..8).prop_flat_map(|n| {
            (Just(n), prop::collection::vec(-1.0f64..1.0, n * n), prop::collection::vec(-1.0f64..1.0, n))
        })
    ) {
        let mut a = a;
        for i in 0..n {
            a[i * n + i] += n as f64 + 1.0;
        }
        let x = solve(&a, &b, 1, n, 1).unwrap();
        for (x, y) in matmul(&a, &x, n, n, 1).iter().zip(&b) {
            prop_assert!((x - y).abs() < 1e-12);
        }
        let (sign, _) = slogdet(&a, 1, n).unwrap();
        prop_assert_eq!(sign[0], 1.0);
    }
}
