//! The functions the generated code calls by symbol: every op that is not one IEEE
//! operation (`tanh`, `pow`, `powi`, `maximum`, the integer `pow`), the LU `solve` and the
//! matrix product, each computing exactly what the interpreter computes for that op by calling
//! the same function.
//! Nothing unwinds out of a shim: those that run kernels catch panics and return a failure
//! status, which sends the generated code to its failure exit.

use crate::buffer::{Pool, View, ViewMut};
use crate::kernels::lanes;
use crate::kernels::matmul::{matmul, Product};
use quabla_ir::eval::{binary_f64, maximum_ieee, minimum_ieee, pow_int, powi_f64, unary_f64};
use quabla_ir::{BinaryOp, UnaryOp};

pub(super) const POWI: &str = "quabla_powi";
pub(super) const SOLVE: &str = "quabla_solve";

/// `solve` as the CPU kernel computes it (`quabla_linalg`'s LU factors of `a`, then their
/// solve), on float64 arrays: `a` of `batch × n × n`, `b` and `x` of `batch × n × k`. Returns 0,
/// or 1 when a matrix is singular (or anything else went wrong: nothing unwinds out of here).
extern "C" fn solve_shim(
    a: *const f64,
    b: *const f64,
    x: *mut f64,
    batch: u64,
    n: u64,
    k: u64,
    transpose: u64,
) -> u32 {
    let solved = std::panic::catch_unwind(|| {
        let (batch, n, k) = (batch as usize, n as usize, k as usize);
        // SAFETY: the generated code passes stack arrays of exactly these lengths.
        let (a, b, x) = unsafe {
            (
                std::slice::from_raw_parts(a, batch * n * n),
                std::slice::from_raw_parts(b, batch * n * k),
                std::slice::from_raw_parts_mut(x, batch * n * k),
            )
        };
        let solution = quabla_linalg::lu_factor(a, batch, n)
            .and_then(|lu| lu.solve(b, k, transpose != 0))
            .ok()?;
        crate::kernels::matmul::clear_upper_vector_state();
        (solution.len() == x.len()).then(|| x.copy_from_slice(&solution))
    });
    match solved {
        Ok(Some(())) => 0,
        _ => 1,
    }
}
pub(super) const MATMUL: &str = "quabla_matmul";

/// A float64 `matmul` as the interpreter's step runs it (`kernels::matmul::matmul` on one
/// thread; the kernel's result does not depend on the thread count), of `a` by `b` into `c`.
/// `shapes` holds, for `a`, `b` and `c` in turn, the rank and then the extents. Returns 0, or
/// 1 when the kernel failed (nothing unwinds out of here).
extern "C" fn matmul_shim(a: *const f64, b: *const f64, c: *mut f64, shapes: *const u32) -> u32 {
    let done = std::panic::catch_unwind(|| {
        // SAFETY: the generated code passes the table it was compiled with (three ranks, each
        // followed by that many extents) and arrays of exactly those sizes.
        let dims = unsafe {
            let mut at = shapes;
            let mut take = || {
                let rank = *at as usize;
                let dims: Vec<usize> = (1..=rank).map(|d| *at.add(d) as usize).collect();
                at = at.add(rank + 1);
                dims
            };
            [take(), take(), take()]
        };
        let size = |d: &Vec<usize>| d.iter().product::<usize>();
        // SAFETY: see above.
        let (a, b, c) = unsafe {
            (
                std::slice::from_raw_parts(a, size(&dims[0])),
                std::slice::from_raw_parts(b, size(&dims[1])),
                std::slice::from_raw_parts_mut(c, size(&dims[2])),
            )
        };
        let how = Product {
            threads: 1,
            native_f32: false,
            lhs_transposed: false,
            rows_split: [false; 2],
        };
        // The pool widens float32 operands only: float64 ones never touch it.
        let mut pool = Pool::default();
        matmul(
            (View::F64(a), &dims[0]),
            (View::F64(b), &dims[1]),
            &dims[2],
            ViewMut::F64(c),
            how,
            &mut pool,
        )
        .is_ok()
    });
    match done {
        Ok(true) => 0,
        _ => 1,
    }
}

pub(super) const UNARY_LANES: &str = "quabla_unary_lanes";

/// The code of `op` for [`UNARY_LANES`]: its position in `UnaryOp::ALL`.
pub(super) fn unary_code(op: UnaryOp) -> Option<u32> {
    UnaryOp::ALL
        .iter()
        .position(|&u| u == op)
        .and_then(|k| u32::try_from(k).ok())
}

/// A unary op with vector lanes (`kernels::lanes`) over the `n` float64 elements of `x` into
/// `out`, as the interpreter's fused programs run it (the results rounded to float32 when
/// `round_f32`): the bits of the scalar routine, several elements per instruction.
extern "C" fn unary_lanes_shim(code: u32, x: *const f64, out: *mut f64, n: u64, round_f32: u32) {
    let Some(&op) = UnaryOp::ALL.get(code as usize) else {
        return;
    };
    // SAFETY: the generated code passes arrays of `n` elements; `x` and `out` are distinct
    // arrays (the result is a fresh scratch array).
    let (x, out) = unsafe {
        (
            std::slice::from_raw_parts(x, n as usize),
            std::slice::from_raw_parts_mut(out, n as usize),
        )
    };
    // The lanes neither allocate nor panic on any argument; a panic would still not unwind
    // through the generated code.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        lanes::unary(op, x, out, round_f32 != 0);
    }));
}

pub(super) const MAXIMUM: &str = "quabla_maximum";
pub(super) const MINIMUM: &str = "quabla_minimum";

extern "C" fn maximum_shim(a: f64, b: f64) -> f64 {
    maximum_ieee(a, b)
}

extern "C" fn minimum_shim(a: f64, b: f64) -> f64 {
    minimum_ieee(a, b)
}

extern "C" fn powi_shim(x: f64, n: i32) -> f64 {
    powi_f64(x, n)
}

pub(super) const POW_INT: &str = "quabla_pow_int";

/// `pow` of integers (wrapping square-and-multiply; a negative exponent gives 0).
extern "C" fn pow_int_shim(x: i64, n: i64) -> i64 {
    pow_int(x, n)
}

/// The symbol of a binary op that is not one IEEE operation.
pub(super) fn binary_symbol(op: BinaryOp) -> Option<&'static str> {
    Some(match op {
        BinaryOp::Pow => "quabla_pow",
        BinaryOp::Atan2 => "quabla_atan2",
        BinaryOp::Fmod => "quabla_fmod",
        _ => return None,
    })
}

macro_rules! binary_shim {
    ($name:ident, $op:ident) => {
        extern "C" fn $name(x: f64, y: f64) -> f64 {
            binary_f64(BinaryOp::$op, x, y)
        }
    };
}
binary_shim!(pow_shim, Pow);
binary_shim!(atan2_shim, Atan2);
binary_shim!(fmod_shim, Fmod);

/// For every unary op: its symbol, and a C-ABI function evaluating it with
/// `quabla_ir::eval::unary_f64` (the match is exhaustive, so a new op must be added here).
macro_rules! unary_shims {
    ($($op:ident => $symbol:literal),* $(,)?) => {
        pub(super) fn unary_symbol(op: UnaryOp) -> &'static str {
            match op {
                $(UnaryOp::$op => $symbol,)*
            }
        }

        pub(super) fn unary_symbols() -> Vec<(&'static str, *const u8)> {
            vec![$(($symbol, {
                extern "C" fn shim(x: f64) -> f64 {
                    unary_f64(UnaryOp::$op, x)
                }
                shim as *const u8
            }),)*]
        }
    };
}

unary_shims! {
    Neg => "quabla_neg", Tanh => "quabla_tanh", Exp => "quabla_exp", Log => "quabla_log",
    Log1p => "quabla_log1p", Expm1 => "quabla_expm1", Sqrt => "quabla_sqrt",
    Sin => "quabla_sin", Cos => "quabla_cos", Erf => "quabla_erf", Erfc => "quabla_erfc",
    Tan => "quabla_tan", Arcsin => "quabla_arcsin", Arccos => "quabla_arccos",
    Arctan => "quabla_arctan", Sinh => "quabla_sinh", Cosh => "quabla_cosh",
    Arcsinh => "quabla_arcsinh", Arccosh => "quabla_arccosh", Arctanh => "quabla_arctanh",
    Log2 => "quabla_log2", Log10 => "quabla_log10", Cbrt => "quabla_cbrt",
    Floor => "quabla_floor", Ceil => "quabla_ceil", Round => "quabla_round",
    BitNot => "quabla_bitwise_not",
}

/// Every symbol the generated code may call, with its address.
pub(super) struct Symbols(Vec<(&'static str, *const u8)>);

// SAFETY: the addresses are of functions, which are immutable and callable from any thread.
unsafe impl Send for Symbols {}
// SAFETY: see `Send`.
unsafe impl Sync for Symbols {}

impl std::ops::Deref for Symbols {
    type Target = [(&'static str, *const u8)];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

pub(super) static SYMBOLS: std::sync::LazyLock<Symbols> = std::sync::LazyLock::new(|| {
    let mut all = unary_symbols();
    all.push((POWI, powi_shim as *const u8));
    all.push((POW_INT, pow_int_shim as *const u8));
    all.push((SOLVE, solve_shim as *const u8));
    all.push((MATMUL, matmul_shim as *const u8));
    all.push((UNARY_LANES, unary_lanes_shim as *const u8));
    all.push(("quabla_pow", pow_shim as *const u8));
    all.push(("quabla_atan2", atan2_shim as *const u8));
    all.push(("quabla_fmod", fmod_shim as *const u8));
    all.push((MAXIMUM, maximum_shim as *const u8));
    all.push((MINIMUM, minimum_shim as *const u8));
    Symbols(all)
});
