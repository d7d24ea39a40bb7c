//! Allocation failure and cancellation as the facade reports them: typed errors, and every
//! tensor the caller holds intact afterwards.

use quabla as qb;
use quabla::prelude::*;

/// 2^40 float64 elements (8 TiB): refused by the allocator on any machine this runs on.
const HUGE: [usize; 2] = [1 << 20, 1 << 20];

#[test]
fn creating_a_tensor_larger_than_memory_is_out_of_memory() {
    for result in [
        qb::zeros(HUGE),
        qb::ones(HUGE),
        qb::full(HUGE, 2.5),
        qb::F32.zeros(HUGE),
        qb::F64.eye(1 << 20),
    ] {
        match result {
            Err(qb::Error::OutOfMemory { bytes, what }) => {
                assert!(bytes >= 1 << 40, "{bytes}");
                assert!(what.contains("1099511627776"), "{what}");
            }
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }
    // The process goes on allocating normally.
    assert_eq!(qb::zeros([3]).unwrap().to_vec::<f64>().unwrap(), [0.0; 3]);
}

#[test]
fn an_element_count_that_overflows_is_a_shape_error_not_an_allocation() {
    let err = qb::zeros([usize::MAX, 3]).unwrap_err();
    assert!(matches!(err, qb::Error::Shape { .. }), "{err:?}");
    let err = qb::F64.eye_rect(usize::MAX, 2).unwrap_err();
    assert!(matches!(err, qb::Error::Shape { .. }), "{err:?}");
}

#[test]
fn a_cancelled_token_stops_an_eager_while_loop() {
    let token = qb::CancelToken::new();
    let init = qb::array([1.0, 2.0]).unwrap();
    let steps = std::cell::Cell::new(0usize);
    let result = qb::with_token(&token, || {
        qb::while_loop(
            |_c: &qb::Tensor, _: &[qb::Tensor]| qb::array(true),
            |c: qb::Tensor, _: &[qb::Tensor]| {
                steps.set(steps.get() + 1);
                if steps.get() == 5 {
                    token.cancel();
                }
                c.add(1.0)
            },
            &init,
        )
        .eval()
    });
    assert!(matches!(result, Err(qb::Error::Cancelled)), "{result:?}");
    assert_eq!(steps.get(), 5, "the loop stops at the next iteration");
    assert_eq!(init.to_vec::<f64>().unwrap(), [1.0, 2.0]);
    // A fresh token runs the same loop to completion.
    let done = qb::with_token(&qb::CancelToken::new(), || {
        qb::fori_loop(
            0,
            3,
            |_i, c: qb::Tensor, _: &[qb::Tensor]| c.add(1.0),
            &init,
        )
        .eval()
    })
    .unwrap();
    assert_eq!(done.to_vec::<f64>().unwrap(), [4.0, 5.0]);
}

#[test]
fn a_cancelled_token_stops_a_compiled_call() {
    let f = qb::jit(|x: qb::Tensor| x.sin()?.mul(2.0));
    let x = qb::array([0.5, 1.0]).unwrap();
    let expected = f.call(&x).unwrap();
    let token = qb::CancelToken::new();
    token.cancel();
    let result = qb::with_token(&token, || f.call(&x));
    assert!(matches!(result, Err(qb::Error::Cancelled)), "{result:?}");
    // The executable is intact and runs again under no token.
    let again = f.call(&x).unwrap();
    assert_eq!(
        again.to_vec::<f64>().unwrap(),
        expected.to_vec::<f64>().unwrap()
    );
}

#[test]
fn eager_outputs_reuse_the_memory_of_released_tensors_without_changing_values() {
    // 2^16 float64 values (512 KiB): large enough for the cache of released buffers.
    let n = 1 << 16;
    let x = qb::linspace(-3.0, 3.0, n).unwrap();
    quabla_ir::recycle::clear();
    let first = x.sin().unwrap();
    let want = first.to_vec::<f64>().unwrap();
    drop(first);
    assert_eq!(quabla_ir::recycle::cached_bytes(), n * 8);
    // The next output of that size and dtype takes the released buffer.
    let again = x.sin().unwrap();
    assert_eq!(quabla_ir::recycle::cached_bytes(), 0);
    assert_eq!(again.to_vec::<f64>().unwrap(), want);
    // A chain of eager operations, each output's memory recycled from a dropped one, gives
    // what the jitted function gives, bit for bit.
    let chain = |x: &qb::Tensor| x.sin().powi(2).add(x.cos()).mul(0.5);
    let bits = |t: qb::Tensor| -> Vec<u64> {
        t.to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let jitted = qb::jit(move |x: qb::Tensor| chain(&x));
    let reference = bits(jitted.call(&x).unwrap());
    for _ in 0..4 {
        assert_eq!(bits(chain(&x).unwrap()), reference);
    }
    // A buffer still referenced elsewhere is not taken: the tensor keeps its values.
    let kept = x.cos().unwrap();
    let view = kept.clone();
    drop(kept);
    let _other = x.sin().unwrap();
    assert_eq!(
        view.to_vec::<f64>().unwrap(),
        x.cos().unwrap().to_vec::<f64>().unwrap()
    );
}
