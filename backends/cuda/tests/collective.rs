//! The rank-order fold of the NCCL all-reduce (`quabla_cuda::collective::fold_program`), run
//! on the host model of the device (see `emulated.rs`) against a fold written here: for every
//! reduction, both element types, one to five ranks, lengths around a block, and values with
//! NaNs, infinities, signed zeros and cancellations, the bits of the left fold in rank order
//! computed in float64 and rounded once (what every transport of the facade must give).

mod common;

use common::host::{self, HostKernels};
use quabla_conformance::{tensor, Rng};
use quabla_cuda::collective::{fold_program, Fold};
use quabla_cuda::program::Elem;
use quabla_ir::{DType, HostData};

/// The reference: element `i` of the fold of `ranks` parts of `len` values.
fn reference(fold: Fold, parts: &[f64], ranks: usize, len: usize, elem: Elem) -> Vec<f64> {
    (0..len)
        .map(|i| {
            let mut acc = parts[i];
            for r in 1..ranks {
                let x = parts[r * len + i];
                acc = match fold {
                    Fold::Sum | Fold::Mean => acc + x,
                    Fold::Max => {
                        if acc.is_nan() || acc > x {
                            acc
                        } else {
                            x
                        }
                    }
                    Fold::Min => {
                        if acc.is_nan() || acc < x {
                            acc
                        } else {
                            x
                        }
                    }
                };
            }
            if fold == Fold::Mean {
                acc /= ranks as f64;
            }
            match elem {
                Elem::F32 => acc as f32 as f64,
                _ => acc,
            }
        })
        .collect()
}

#[test]
fn the_rank_order_fold_gives_the_bits_of_the_left_fold_in_float64() {
    let folds = [Fold::Sum, Fold::Mean, Fold::Max, Fold::Min];
    let mut cases = Vec::new();
    for elem in [Elem::F32, Elem::F64] {
        for fold in folds {
            for ranks in 1..=5 {
                for len in [1, 7, 1024, 1031] {
                    cases.push((elem, fold, ranks, len, fold_program(elem, fold, ranks, len)));
                }
            }
        }
    }
    let kernels = HostKernels::compile(cases.iter().flat_map(|c| &c.4.kernels));
    let mut rng = Rng::new(5);
    let specials = [f64::NAN, f64::INFINITY, -0.0, 0.0, 1e30, -1e30, 3.0e-8];
    for (elem, fold, ranks, len, program) in &cases {
        let dtype = match elem {
            Elem::F32 => DType::F32,
            _ => DType::F64,
        };
        let n = ranks * len;
        let parts: Vec<f64> = (0..n)
            .map(|k| {
                let v = if k % 13 == 5 {
                    specials[(k / 13) % specials.len()]
                } else {
                    rng.finite() * 10f64.powi((k % 7) as i32 - 3)
                };
                // Stored in the element type, as the gathered bytes are.
                if *elem == Elem::F32 {
                    v as f32 as f64
                } else {
                    v
                }
            })
            .collect();
        let input = tensor(dtype, &[n], &parts);
        let out = host::run(&kernels, program, &[input])
            .unwrap_or_else(|e| panic!("{elem} {fold:?} {ranks}x{len}: {e}"));
        let got: Vec<f64> = match &out[0].data {
            HostData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::F64(v) => v.to_vec(),
            other => panic!("{other:?}"),
        };
        let expected = reference(*fold, &parts, *ranks, *len, *elem);
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                "{elem} {fold:?} {ranks} ranks of {len}: element {i} is {g}, expected {e}"
            );
        }
    }
}
