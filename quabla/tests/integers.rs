//! Integer tensors through the facade (numerics.md §12): construction from Rust integers,
//! promotion with weak Rust numbers, arithmetic against Rust's own integer arithmetic (NumPy's
//! signs for `//` and `%`, wrapping, shifts), reductions, casts, printing, save/load, the same
//! bits eagerly and under `jit`, `vmap` against a loop, and no derivative for integers (`grad`
//! with respect to an integer tensor is a typed error naming the fix).

use qb::prelude::*;
use qb::Tensor;
use quabla as qb;

fn i64s(t: &Tensor) -> Vec<i64> {
    t.to_vec::<i64>().unwrap()
}

#[test]
fn rust_integers_build_integer_tensors() -> qb::Result<()> {
    assert_eq!(qb::array([1, 2, 3])?.dtype(), qb::I32);
    assert_eq!(qb::array(vec![1i64, -2])?.dtype(), qb::I64);
    assert_eq!(qb::array([7usize])?.dtype(), qb::I64);
    assert_eq!(qb::array([[1.5, 2.0]])?.dtype(), qb::F64);
    // int64 values beyond 2^53 are exact.
    let big = qb::array([i64::MAX, (1 << 53) + 1])?;
    assert_eq!(i64s(&big), vec![i64::MAX, (1 << 53) + 1]);
    assert_eq!(big.as_slice::<i64>()?, &[i64::MAX, (1 << 53) + 1]);
    // Integer ranges and fills are int64; float ones float64.
    let r = qb::arange(5)?;
    assert_eq!((r.dtype(), i64s(&r)), (qb::I64, vec![0, 1, 2, 3, 4]));
    assert_eq!(i64s(&qb::arange_from(10, -3, -4)?), vec![10, 6, 2, -2]);
    assert_eq!(qb::arange(5.0)?.dtype(), qb::F64);
    assert!(qb::arange_from(3, 3, 1).is_err());
    assert!(qb::arange_from(0, 3, 0).is_err());
    let f = qb::full([2], 3)?;
    assert_eq!((f.dtype(), i64s(&f)), (qb::I64, vec![3, 3]));
    assert_eq!(
        qb::I32.array([1.9, -1.9, f64::NAN])?.to_vec::<i32>()?,
        [1, -1, i32::MIN]
    );
    Ok(())
}

#[test]
fn promotion_follows_the_chain_and_weak_scalars() -> qb::Result<()> {
    let n32 = qb::array([1i32, 2])?;
    let n64 = qb::array([1i64, 2])?;
    let x32 = qb::F32.array([0.5, 1.5])?;
    assert_eq!((&n32 + &n64)?.dtype(), qb::I64);
    // int64 with float32 is float32, as in JAX.
    assert_eq!((&n64 * &x32)?.dtype(), qb::F32);
    // A weak integer adopts the array's dtype; a weak float meeting integers is float64.
    assert_eq!((&n32 + 1)?.dtype(), qb::I32);
    assert_eq!((&x32 + 1)?.dtype(), qb::F32);
    assert_eq!((&n32 * 0.5)?.dtype(), qb::F64);
    // `/` and the transcendentals promote integers to float64.
    assert_eq!((&n32 / &n32)?.dtype(), qb::F64);
    assert_eq!(n32.sin()?.dtype(), qb::F64);
    assert_eq!(qb::mean(&n32)?.dtype(), qb::F64);
    // Rounding is the identity on integers.
    assert_eq!(qb::floor(&n32)?.dtype(), qb::I32);
    Ok(())
}

#[test]
fn arithmetic_matches_rust_integer_arithmetic() -> qb::Result<()> {
    let a = [-7i64, 7, -7, 7, 5, i64::MIN, i64::MAX, 0];
    let c = [2i64, -2, -2, 2, 0, -1, 1, 3];
    let (ta, tc) = (qb::array(a)?, qb::array(c)?);
    let floor = |x: i64, y: i64| {
        if y == 0 {
            0
        } else {
            x.wrapping_div(y) - i64::from((x.wrapping_rem(y) != 0) && ((x < 0) != (y < 0)))
        }
    };
    let rem = |x: i64, y: i64| {
        if y == 0 {
            0
        } else {
            x.wrapping_sub(y.wrapping_mul(floor(x, y)))
        }
    };
    let want_floor: Vec<i64> = a.iter().zip(&c).map(|(&x, &y)| floor(x, y)).collect();
    let want_rem: Vec<i64> = a.iter().zip(&c).map(|(&x, &y)| rem(x, y)).collect();
    assert_eq!(i64s(&qb::floor_divide(&ta, &tc)?), want_floor);
    assert_eq!(i64s(&(&ta % &tc)?), want_rem);
    assert_eq!(want_floor[..4], [-4, -4, 3, 3]);
    assert_eq!(want_rem[..4], [1, -1, -1, 1]);
    let sum: Vec<i64> = a.iter().zip(&c).map(|(&x, &y)| x.wrapping_add(y)).collect();
    assert_eq!(i64s(&(&ta + &tc)?), sum);
    let product: Vec<i64> = a.iter().zip(&c).map(|(&x, &y)| x.wrapping_mul(y)).collect();
    assert_eq!(i64s(&(&ta * &tc)?), product);
    assert_eq!(
        i64s(&(&ta ^ &tc)?),
        a.iter().zip(&c).map(|(&x, &y)| x ^ y).collect::<Vec<_>>()
    );
    assert_eq!(
        i64s(&(&ta & 6)?),
        a.iter().map(|&x| x & 6).collect::<Vec<_>>()
    );
    assert_eq!(i64s(&(!&ta)?), a.iter().map(|&x| !x).collect::<Vec<_>>());
    assert_eq!(
        i64s(&(&ta >> 1)?),
        a.iter().map(|&x| x >> 1).collect::<Vec<_>>()
    );
    assert_eq!(i64s(&(&ta << 70)?), vec![0; 8]);
    // The named functions are the operators.
    let pairs: [(&str, Vec<i64>, Vec<i64>); 6] = [
        (
            "and",
            i64s(&qb::bitwise_and(&ta, &tc)?),
            a.iter().zip(&c).map(|(&x, &y)| x & y).collect(),
        ),
        (
            "or",
            i64s(&qb::bitwise_or(&ta, &tc)?),
            a.iter().zip(&c).map(|(&x, &y)| x | y).collect(),
        ),
        (
            "xor",
            i64s(&qb::bitwise_xor(&ta, &tc)?),
            a.iter().zip(&c).map(|(&x, &y)| x ^ y).collect(),
        ),
        (
            "not",
            i64s(&qb::bitwise_not(&ta)?),
            a.iter().map(|&x| !x).collect(),
        ),
        (
            "left_shift",
            i64s(&qb::left_shift(&ta, 3)?),
            a.iter().map(|&x| x.wrapping_shl(3)).collect(),
        ),
        (
            "right_shift",
            i64s(&qb::right_shift(&ta, 2)?),
            a.iter().map(|&x| x >> 2).collect(),
        ),
    ];
    for (name, got, want) in pairs {
        assert_eq!(got, want, "{name}");
    }
    // abs wraps at the minimum; sign and maximum stay integer.
    let m = qb::array([i32::MIN, -3, 0, 4])?;
    assert_eq!(qb::abs(&m)?.to_vec::<i32>()?, [i32::MIN, 3, 0, 4]);
    assert_eq!(qb::sign(&m)?.to_vec::<i32>()?, [-1, -1, 0, 1]);
    assert_eq!(qb::maximum(&m, 1)?.to_vec::<i32>()?, [1, 1, 1, 4]);
    assert_eq!(qb::relu(&m)?.to_vec::<i32>()?, [0, 0, 0, 4]);
    // int32 overflow wraps.
    assert_eq!((&m - 1)?.to_vec::<i32>()?[0], i32::MAX);
    Ok(())
}

#[test]
fn reductions_and_casts() -> qb::Result<()> {
    let m = qb::array([[i32::MAX, 1], [5, -7]])?;
    // int32 sums wrap in int32; widening first gives the exact sum.
    assert_eq!(qb::sum(&m)?.to_vec::<i32>()?, [i32::MAX.wrapping_add(-1)]);
    assert_eq!(i64s(&qb::sum(&m.astype(qb::I64)?)?), [i32::MAX as i64 - 1]);
    assert_eq!(m.max_axes(1)?.to_vec::<i32>()?, [i32::MAX, 5]);
    assert_eq!(qb::prod(&qb::array([3i64, -4, 5])?)?.item_i64()?, -60);
    let c = qb::cumsum(&qb::array([1i64, 2, 3])?).eval()?;
    assert_eq!(i64s(&c), [1, 3, 6]);
    let big = qb::array([(1i64 << 53) + 1])?;
    assert_eq!(big.astype(qb::F64)?.item()?, 9007199254740992.0);
    assert_eq!(big.astype(qb::I32)?.item_i64()?, 1);
    assert_eq!(
        qb::array([-2.5, 1e300])?.astype(qb::I64)?.to_vec::<i64>()?,
        [-2, i64::MIN]
    );
    assert!(qb::array([0i64, 3])?.astype(qb::BOOL)?.to_vec_bool()? == [false, true]);
    Ok(())
}

#[test]
fn printing_and_files() -> qb::Result<()> {
    assert_eq!(
        format!("{}", qb::array([1i64, -2, 10])?),
        "Tensor([ 1, -2, 10], dtype=int64)"
    );
    assert_eq!(format!("{}", qb::array(7i32)?), "Tensor(7, dtype=int32)");
    let tree = (qb::array([i64::MIN, 3])?, qb::array([[1i32, 2]])?);
    let mut bytes = Vec::new();
    qb::save(&mut bytes, &tree)?;
    let (a, b): (Tensor, Tensor) = qb::load_as(&mut bytes.as_slice())?;
    assert_eq!((a.dtype(), i64s(&a)), (qb::I64, vec![i64::MIN, 3]));
    assert_eq!((b.dtype(), b.shape()), (qb::I32, &[1usize, 2][..]));
    Ok(())
}

/// Every integer function eagerly and under `jit`: the same bits.
#[test]
fn jit_gives_the_eager_bits() -> qb::Result<()> {
    let f = |(a, c): (Tensor, Tensor)| -> qb::Result<Vec<Tensor>> {
        Ok(vec![
            qb::floor_divide(&a, &c)?,
            (&a % &c)?,
            (&a + &c)?,
            (&a * &c)?,
            (&a ^ &c)?,
            (&a << &c)?,
            (&a >> &c)?,
            qb::right_shift_logical(&a, &c)?,
            qb::sum(&a)?,
            a.max()?,
            qb::abs(&a)?,
            a.astype(qb::F32)?,
            qb::less(&a, &c)?.astype(qb::I64)?,
        ])
    };
    let a = qb::array([i64::MIN, -9, 0, 9, i64::MAX])?;
    let c = qb::array([-1i64, 4, 3, -4, 63])?;
    let eager = f((a.clone(), c.clone()))?;
    let jitted: Vec<Tensor> = qb::jit(f).call(&(a, c))?;
    for (k, (e, j)) in eager.iter().zip(&jitted).enumerate() {
        assert_eq!(e.dtype(), j.dtype(), "output {k}");
        assert_eq!(e.to_vec::<f64>()?, j.to_vec::<f64>()?, "output {k}");
        if e.dtype().is_integer() {
            assert_eq!(i64s(e), i64s(j), "output {k}");
        }
    }
    Ok(())
}

#[test]
fn vmap_of_integer_functions_matches_a_loop() -> qb::Result<()> {
    let f = |x: Tensor| -> qb::Result<Tensor> { (qb::floor_divide(&x, 3)? * &x)?.sum() };
    let xs = qb::array([[-7i64, 2, 9], [4, -5, 11]])?;
    let batched: Tensor = qb::vmap(f).call(&xs)?;
    for i in 0..2 {
        let row = f(xs.index(qb::s![i])?)?;
        assert_eq!(batched.index(qb::s![i])?.item_i64()?, row.item_i64()?);
    }
    Ok(())
}

#[test]
fn integers_carry_no_derivative() -> qb::Result<()> {
    // `grad` with respect to an integer tensor: a typed error naming the fix.
    let f = |x: Tensor| -> qb::Result<Tensor> { x.astype(qb::F64)?.sin()?.sum() };
    let err = qb::grad(f)
        .call::<Tensor, Tensor>(&qb::array([1i64, 2])?)
        .unwrap_err();
    assert!(matches!(err, qb::Error::Type { .. }), "{err:?}");
    assert!(err.to_string().contains("astype"), "{err}");
    // An integer value inside a differentiated function contributes nothing: the gradient
    // through `x * n` is `n`, and through `floor_divide(x as int, 1)` it is zero.
    let g = |x: Tensor| -> qb::Result<Tensor> {
        let n = qb::array([3i64, -2])?;
        let through_int = x.astype(qb::I64)?.astype(qb::F64)?;
        ((&x * &n)? + through_int)?.sum()
    };
    let dx: Tensor = qb::grad(g).call(&qb::array([0.5, 2.5])?)?;
    assert_eq!(dx.to_vec::<f64>()?, [3.0, -2.0]);
    Ok(())
}
