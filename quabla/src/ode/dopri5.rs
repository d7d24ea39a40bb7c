//! Dormand-Prince 5(4) (numerics.md §7.5.2): the standard tableau, first-same-as-last (the
//! last stage of an accepted step is the first of the next, carried in the loop state),
//! propagating the 5th-order solution with the difference of the 5th- and 4th-order solutions
//! as the error estimate, and Shampine's 4th-order continuous extension (§7.5.5).

use crate::{Result, Tensor};

const C2: f64 = 1.0 / 5.0;
const C3: f64 = 3.0 / 10.0;
const C4: f64 = 4.0 / 5.0;
const C5: f64 = 8.0 / 9.0;

const A21: f64 = 1.0 / 5.0;
const A31: f64 = 3.0 / 40.0;
const A32: f64 = 9.0 / 40.0;
const A41: f64 = 44.0 / 45.0;
const A42: f64 = -56.0 / 15.0;
const A43: f64 = 32.0 / 9.0;
const A51: f64 = 19372.0 / 6561.0;
const A52: f64 = -25360.0 / 2187.0;
const A53: f64 = 64448.0 / 6561.0;
const A54: f64 = -212.0 / 729.0;
const A61: f64 = 9017.0 / 3168.0;
const A62: f64 = -355.0 / 33.0;
const A63: f64 = 46732.0 / 5247.0;
const A64: f64 = 49.0 / 176.0;
const A65: f64 = -5103.0 / 18656.0;

/// The 5th-order weights (the last row of the tableau; `b2 = b7 = 0`).
const B1: f64 = 35.0 / 384.0;
const B3: f64 = 500.0 / 1113.0;
const B4: f64 = 125.0 / 192.0;
const B5: f64 = -2187.0 / 6784.0;
const B6: f64 = 11.0 / 84.0;

/// 5th- minus 4th-order weights (`e2 = 0`): `b - b*` with `b* = (5179/57600, 0, 7571/16695,
/// 393/640, -92097/339200, 187/2100, 1/40)`.
const E1: f64 = 71.0 / 57600.0;
const E3: f64 = -71.0 / 16695.0;
const E4: f64 = 71.0 / 1920.0;
const E5: f64 = -17253.0 / 339200.0;
const E6: f64 = 22.0 / 525.0;
const E7: f64 = -1.0 / 40.0;

/// Shampine's dense-output coefficients (numerics.md §7.5.5).
const D1: f64 = -12715105075.0 / 11282082432.0;
const D3: f64 = 87487479700.0 / 32700410799.0;
const D4: f64 = -10690763975.0 / 1880347072.0;
const D5: f64 = 701980252875.0 / 199316789632.0;
const D6: f64 = -1453857185.0 / 822651844.0;
const D7: f64 = 69997945.0 / 29380423.0;

/// `sum_i c_i k_i` in the order given.
pub(super) fn combine(terms: &[(f64, &Tensor)]) -> Result<Tensor> {
    let (c, k) = terms[0];
    let mut acc = (k * c)?;
    for &(c, k) in &terms[1..] {
        acc = (acc + k * c)?;
    }
    Ok(acc)
}

/// One attempted step and what its continuous extension needs.
pub(super) struct Step {
    pub y_new: Tensor,
    /// The local error estimate (a vector like `y`).
    pub err: Tensor,
    /// `f(y_new, t + h)`: the next step's first stage.
    pub f_new: Tensor,
    /// The stages 1, 3, 4, 5, 6, 7 (stage 2 has zero weight in the output and interpolant).
    pub k: [Tensor; 6],
}

/// One step of size `h` from `y` at `t`, with `k1 = f(y, t)`.
pub(super) fn step(
    f: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
    y: &Tensor,
    t: &Tensor,
    h: &Tensor,
    k1: &Tensor,
) -> Result<Step> {
    let stage = |terms: &[(f64, &Tensor)], c: f64| -> Result<Tensor> {
        let yi = (y + h * combine(terms)?)?;
        let ti = (t + h * c)?;
        f(&yi, &ti)
    };
    let k2 = stage(&[(A21, k1)], C2)?;
    let k3 = stage(&[(A31, k1), (A32, &k2)], C3)?;
    let k4 = stage(&[(A41, k1), (A42, &k2), (A43, &k3)], C4)?;
    let k5 = stage(&[(A51, k1), (A52, &k2), (A53, &k3), (A54, &k4)], C5)?;
    let k6 = {
        let terms = [(A61, k1), (A62, &k2), (A63, &k3), (A64, &k4), (A65, &k5)];
        let yi = (y + h * combine(&terms)?)?;
        f(&yi, &(t + h)?)?
    };
    let y_new = (y + h * combine(&[(B1, k1), (B3, &k3), (B4, &k4), (B5, &k5), (B6, &k6)])?)?;
    let k7 = f(&y_new, &(t + h)?)?;
    let err = (h * combine(&[
        (E1, k1),
        (E3, &k3),
        (E4, &k4),
        (E5, &k5),
        (E6, &k6),
        (E7, &k7),
    ])?)?;
    Ok(Step {
        y_new,
        err,
        f_new: k7.clone(),
        k: [k1.clone(), k3, k4, k5, k6, k7],
    })
}

/// Shampine's interpolant on the step `[t, t + h]` at the fractions `theta` (`[m, 1]`):
/// `[m, n]`. With `Q = r3 + theta (r4 + (1 - theta) r5)` the polynomial is
/// `y + theta (r2 + (1 - theta) Q)`; the equal form `y_new - (1 - theta)(r2 - theta Q)` is used
/// on the second half, so that the ends give `y` and `y_new` exactly.
pub(super) fn interpolate(s: &Step, y: &Tensor, h: &Tensor, theta: &Tensor) -> Result<Tensor> {
    let [k1, k3, k4, k5, k6, k7] = &s.k;
    let r2 = (&s.y_new - y)?;
    let r3 = ((h * k1)? - &r2)?;
    let r4 = ((&r2 - h * k7)? - &r3)?;
    let r5 = (h * combine(&[(D1, k1), (D3, k3), (D4, k4), (D5, k5), (D6, k6), (D7, k7)])?)?;
    let one_minus = (1.0 - theta)?;
    let q = (&r3 + theta * (&r4 + &one_minus * &r5)?)?;
    let theta_q = (theta * &q)?;
    let low = (y + theta * (&r2 + &one_minus * &q)?)?;
    let high = (&s.y_new - &one_minus * (&r2 - &theta_q)?)?;
    crate::where_(&theta.less(0.5)?, low, high)
}
