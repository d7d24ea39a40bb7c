//! `TensorView`: zero-copy strided views against an independent host reference, for many shapes,
//! offsets and strides (negative steps included), composed slices, views as operands, the
//! traced selection, and the errors of `slice`.

use qb::prelude::*;
use qb::{Error, Tensor};
use quabla as qb;
use quabla_random::testing::TestRng;

/// A dense row-major array on the host: the reference a view is checked against.
#[derive(Clone, Debug)]
struct Dense {
    shape: Vec<usize>,
    values: Vec<f64>,
}

impl Dense {
    fn strides(&self) -> Vec<usize> {
        let mut s = vec![1; self.shape.len()];
        for k in (0..self.shape.len().saturating_sub(1)).rev() {
            s[k] = s[k + 1] * self.shape[k + 1];
        }
        s
    }

    /// The selection `start + k * step`, `k < length`, along `axis`, by explicit copying.
    fn slice(&self, axis: usize, start: usize, length: usize, step: isize) -> Dense {
        let strides = self.strides();
        let mut shape = self.shape.clone();
        shape[axis] = length;
        let n: usize = shape.iter().product();
        let mut values = Vec::with_capacity(n);
        for flat in 0..n {
            let mut rest = flat;
            let mut pos = 0;
            for k in (0..shape.len()).rev() {
                let i = rest % shape[k];
                rest /= shape[k];
                let src = if k == axis {
                    (start as isize + i as isize * step) as usize
                } else {
                    i
                };
                pos += src * strides[k];
            }
            values.push(self.values[pos]);
        }
        Dense { shape, values }
    }
}

/// A random valid slice of an axis of extent `n`: (start as given, start, length, step).
fn random_slice(rng: &mut TestRng, n: usize) -> (isize, usize, usize, isize) {
    let first = rng.below(n);
    let step = loop {
        let s = rng.signed(-3, 3);
        if s != 0 {
            break s;
        }
    };
    // Largest length keeping every index in range.
    let max_len = if step > 0 {
        (n - 1 - first) / step as usize + 1
    } else {
        first / (-step) as usize + 1
    };
    let length = rng.range(1, max_len);
    let given = if rng.chance(0.3) {
        first as isize - n as isize
    } else {
        first as isize
    };
    (given, first, length, step)
}

#[test]
fn views_match_copies_for_many_strides_and_offsets() -> qb::Result<()> {
    let mut rng = TestRng::new(2026);
    for case in 0..300 {
        let rank = rng.range(1, 4);
        let shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 6)).collect();
        let n: usize = shape.iter().product();
        let values: Vec<f64> = (0..n).map(|i| i as f64 + 0.25).collect();
        let x = Tensor::from_vec(&shape, values.clone())?;
        let mut reference = Dense {
            shape: shape.clone(),
            values,
        };
        let mut view = x.slice(0, 0, shape[0]).eval()?;
        for _ in 0..rng.range(1, 4) {
            let axis = rng.below(rank);
            let (given, first, length, step) = random_slice(&mut rng, reference.shape[axis]);
            let signed_axis = if rng.chance(0.5) {
                axis as isize
            } else {
                axis as isize - rank as isize
            };
            view = view.slice(signed_axis, given, length).step(step).eval()?;
            reference = reference.slice(axis, first, length, step);
        }
        assert_eq!(view.shape(), reference.shape.as_slice(), "case {case}");
        assert_eq!(view.to_vec::<f64>()?, reference.values, "case {case}");
        let copy = view.to_tensor()?;
        assert_eq!(copy.shape(), reference.shape.as_slice());
        assert_eq!(copy.to_vec::<f64>()?, reference.values, "case {case}");
    }
    Ok(())
}

#[test]
fn slicing_composes_strides_without_copying() -> qb::Result<()> {
    let x = qb::arange(24.0)?.reshape([4, 6])?;
    let v = x.slice(1, 5, 3).step(-2).eval()?; // columns 5, 3, 1
    assert_eq!(
        (v.offset(), v.strides(), v.shape()),
        (5, vec![6, -2], &[4usize, 3][..])
    );
    let w = v.slice(0, -1, 2).step(-3).eval()?; // rows 3, 0
    assert_eq!((w.offset(), w.strides()), (23, vec![-18, -2]));
    assert_eq!(w.to_vec::<f64>()?, [23.0, 21.0, 19.0, 5.0, 3.0, 1.0]);
    // The storage is shared: the view's base is the tensor itself (no copy was made).
    assert_eq!(x.to_vec::<f64>()?[23], 23.0);
    Ok(())
}

#[test]
fn a_view_is_an_operand_and_arithmetic_gives_a_fresh_tensor() -> qb::Result<()> {
    let x = qb::F32.arange(6.0)?.reshape([2, 3])?;
    let v = x.slice(1, 2, 2).step(-1).eval()?; // columns 2, 1
    let y = qb::add(&v, 1.0)?;
    assert_eq!(y.dtype(), qb::F32);
    assert_eq!(y.to_vec::<f32>()?, [3.0, 2.0, 6.0, 5.0]);
    let z = qb::matmul(&v, qb::F32.ones([2, 1])?)?;
    assert_eq!(z.to_vec::<f32>()?, [3.0, 9.0]);
    let b = qb::array([true, false, true])?
        .slice(0, 2, 2)
        .step(-2)
        .eval()?;
    assert_eq!(b.to_vec::<bool>()?, [true, true]);
    Ok(())
}

#[test]
fn under_a_trace_the_same_selection_is_a_traced_value() -> qb::Result<()> {
    let x = qb::arange(12.0)?.reshape([3, 4])?;
    let select = |t: Tensor| -> qb::Result<Tensor> {
        let v = t
            .slice(1, 3, 2)
            .step(-2)
            .eval()?
            .slice(0, -1, 2)
            .step(-1)
            .eval()?;
        v.to_tensor()?.mul(2.0)
    };
    let eager = select(x.clone())?;
    let jitted = qb::jit(select).call(&x)?;
    assert_eq!(eager.to_vec::<f64>()?, jitted.to_vec::<f64>()?);
    assert_eq!(eager.to_vec::<f64>()?, [22.0, 18.0, 14.0, 10.0]);
    // And it differentiates: d/dx of sum(slice) scatters ones into the selected places.
    let g: Tensor =
        qb::grad(|t: Tensor| t.slice(0, 1, 2).eval()?.to_tensor()?.sum()).call(&qb::zeros([4])?)?;
    assert_eq!(g.to_vec::<f64>()?, [0.0, 1.0, 1.0, 0.0]);
    Ok(())
}

#[test]
fn bad_slices_are_typed_errors() -> qb::Result<()> {
    let x = qb::arange(5.0)?;
    let cases: Vec<(qb::Result<qb::TensorView>, &str)> = vec![
        (
            x.slice(0, 5, 1).eval(),
            "index 5 is out of range for axis 0 with extent 5",
        ),
        (x.slice(0, -6, 1).eval(), "out of range"),
        (x.slice(0, 3, 3).eval(), "index 5 is out of range"),
        (x.slice(0, 1, 2).step(-2).eval(), "index -1 is out of range"),
        (x.slice(0, 0, 2).step(0).eval(), "step must not be zero"),
        (x.slice(0, 0, 0).eval(), "empty slices are not supported"),
        (
            x.slice(1, 0, 1).eval(),
            "axis 1 is out of range for a tensor of rank 1",
        ),
        (
            x.slice(0, 0, usize::MAX).step(isize::MAX).eval(),
            "out of range",
        ),
    ];
    for (result, want) in cases {
        let err = result.unwrap_err();
        assert!(err.to_string().contains(want), "{err} lacks {want}");
        assert!(
            matches!(
                err,
                Error::Index { .. } | Error::InvalidArgument { .. } | Error::Shape { .. }
            ),
            "{err:?}"
        );
    }
    Ok(())
}
