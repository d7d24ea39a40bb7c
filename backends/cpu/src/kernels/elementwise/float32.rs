//! The float32 tile loop: a group whose members are all float32 nodes with an op that is
//! exact in float32, or a function with a lane form ([`lanes`]), runs in float32 registers.
//!
//! numerics.md §1.5 evaluates a float32 node in float64 and rounds its result to float32. For
//! `+ - * /` and `sqrt` that is bit for bit the native float32 operation (float64 carries more
//! than twice float32's significand, so the second rounding never differs from one); `x²` is
//! one product, and negation and the identity produce no new value. A group made only of such
//! nodes (the backward `g·(1 - h²)` of a `tanh` layer, an optimizer's update) therefore gives
//! the reference bits computed natively: it reads and writes its float32 operands as they are
//! and drops the widening, and the rounding after every node, that the float64 loop needs.
//! [`Program::build`] decides it ([`Program::in_f32`]); any other member keeps the group on
//! the float64 loop. A NaN result is NaN either way (numerics.md §4.1 specifies no payload for
//! arithmetic).
//!
//! The functions with a lane form (`sin`, `cos`, `exp`, `expm1`, `tanh`, `log`, `log1p`) are
//! computed as every float32 node is, in float64 and rounded once, but a block at a time
//! inside the float32 loop ([`lanes::unary_f32`]): the group's other nodes stay native and its
//! registers float32.

use super::{gather_strided, Access, EwOp, Instr, Program, Src, TILE};
use crate::buffer::{View, ViewMut};
use crate::kernels::lanes;
use quabla_ir::eval::unary_f64;
use quabla_ir::{BinaryOp, UnaryOp};

/// Whether a float32 node with `op` runs in the float32 loop: natively ([`exact_in_f32`]),
/// or, for a function with a lane form, widened and rounded block by block inside the loop.
pub(super) fn runs_in_f32(op: EwOp) -> bool {
    exact_in_f32(op) || matches!(op, EwOp::Unary(u) if lanes::has_lanes(u))
}

/// Whether a float32 node with `op` has the same bits computed natively in float32 as in
/// float64 and rounded (see the module docs).
fn exact_in_f32(op: EwOp) -> bool {
    matches!(
        op,
        EwOp::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div)
            | EwOp::Unary(UnaryOp::Neg | UnaryOp::Sqrt)
            | EwOp::Powi(2)
            | EwOp::Copy
    )
}

/// An operand of a float32 tile kernel: a tile of values or one broadcast value.
#[derive(Clone, Copy)]
enum Arg<'a> {
    Slice(&'a [f32]),
    Scalar(f32),
}

/// Indexed access specialized per operand kind, so each combination compiles to its own loop.
trait Get: Copy {
    fn prefix(self, n: usize) -> Self;
    fn get(&self, i: usize) -> f32;
}

impl Get for &[f32] {
    #[inline(always)]
    fn prefix(self, n: usize) -> Self {
        &self[..n]
    }
    #[inline(always)]
    fn get(&self, i: usize) -> f32 {
        self[i]
    }
}

impl Get for f32 {
    #[inline(always)]
    fn prefix(self, _: usize) -> Self {
        self
    }
    #[inline(always)]
    fn get(&self, _: usize) -> f32 {
        *self
    }
}

#[inline(always)]
fn map1<A: Get>(d: &mut [f32], a: A, f: impl Fn(f32) -> f32) {
    let a = a.prefix(d.len());
    for (i, d) in d.iter_mut().enumerate() {
        *d = f(a.get(i));
    }
}

#[inline(always)]
fn map2<A: Get, B: Get>(d: &mut [f32], a: A, b: B, f: impl Fn(f32, f32) -> f32) {
    let n = d.len();
    let (a, b) = (a.prefix(n), b.prefix(n));
    for (i, d) in d.iter_mut().enumerate() {
        *d = f(a.get(i), b.get(i));
    }
}

/// Expands `$body` once per operand-kind combination of the given `Arg`s.
macro_rules! with_args {
    ($a:expr => $x:ident, $body:expr) => {
        match $a {
            Arg::Slice($x) => $body,
            Arg::Scalar($x) => $body,
        }
    };
    ($a:expr, $b:expr => $x:ident, $y:ident, $body:expr) => {
        match ($a, $b) {
            (Arg::Slice($x), Arg::Slice($y)) => $body,
            (Arg::Slice($x), Arg::Scalar($y)) => $body,
            (Arg::Scalar($x), Arg::Slice($y)) => $body,
            (Arg::Scalar($x), Arg::Scalar($y)) => $body,
        }
    };
}

/// Runs one instruction of an [`exact_in_f32`] op over one tile.
#[inline(always)]
fn compute<'a>(op: EwOp, args: &[Src; 3], arg: impl Fn(Src) -> Arg<'a>, d: &mut [f32]) {
    let binary = |f: fn(f32, f32) -> f32, d: &mut [f32]| {
        let (a0, a1) = (arg(args[0]), arg(args[1]));
        with_args!(a0, a1 => x, y, map2(d, x, y, f))
    };
    match op {
        EwOp::Binary(BinaryOp::Add) => binary(|x, y| x + y, d),
        EwOp::Binary(BinaryOp::Sub) => binary(|x, y| x - y, d),
        EwOp::Binary(BinaryOp::Mul) => binary(|x, y| x * y, d),
        EwOp::Binary(BinaryOp::Div) => binary(|x, y| x / y, d),
        EwOp::Unary(UnaryOp::Neg) => with_args!(arg(args[0]) => x, map1(d, x, |v| -v)),
        EwOp::Unary(UnaryOp::Sqrt) => with_args!(arg(args[0]) => x, map1(d, x, f32::sqrt)),
        EwOp::Powi(2) => with_args!(arg(args[0]) => x, map1(d, x, |v| v * v)),
        EwOp::Copy => with_args!(arg(args[0]) => x, map1(d, x, |v| v)),
        EwOp::Unary(u) if lanes::has_lanes(u) => match arg(args[0]) {
            Arg::Slice(x) => lanes::unary_f32(u, x, d),
            Arg::Scalar(v) => d.fill(unary_f64(u, f64::from(v)) as f32),
        },
        // `Program::build` sets `in_f32` only when every op is one of the above.
        _ => d.fill(f32::NAN),
    }
}

/// The operand `s` over the tile of `len` elements at flat position `t`.
#[inline(always)]
fn tile_arg<'a>(
    regs: &'a [Vec<f32>],
    exts: &'a [View<'_>],
    s: Src,
    t: usize,
    len: usize,
) -> Arg<'a> {
    match s {
        Src::Reg(r) => Arg::Slice(&regs[r][..len]),
        Src::Direct(e) => match exts[e] {
            View::F32(v) => Arg::Slice(&v[t..t + len]),
            // A float32 program reads only float32 externals in place.
            _ => Arg::Scalar(f32::NAN),
        },
        // The element is a float32 value: narrowing it back is exact.
        Src::Scalar(e) => Arg::Scalar(exts[e].get_f64(0) as f32),
    }
}

impl Program {
    /// [`Program::run_range`] for an [`Program::in_f32`] program, in float32 registers: the
    /// AVX2 build where the processor has it, else the baseline build.
    pub(super) fn run_range_f32(
        &self,
        exts: &[View<'_>],
        outs: &mut [ViewMut<'_>],
        (start, end): (usize, usize),
        regs: &mut [Vec<f32>],
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: this build only requires AVX2, detected just above.
                return unsafe { self.run_range_f32_avx2(exts, outs, (start, end), regs) };
            }
        }
        self.run_range_f32_impl(exts, outs, (start, end), regs)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_range_f32_avx2(
        &self,
        exts: &[View<'_>],
        outs: &mut [ViewMut<'_>],
        range: (usize, usize),
        regs: &mut [Vec<f32>],
    ) {
        self.run_range_f32_impl(exts, outs, range, regs)
    }

    /// The float32 tile loop, inlined into each build of [`Self::run_range_f32`].
    #[inline(always)]
    fn run_range_f32_impl(
        &self,
        exts: &[View<'_>],
        outs: &mut [ViewMut<'_>],
        (start, end): (usize, usize),
        regs: &mut [Vec<f32>],
    ) {
        let mut t = start;
        while t < end {
            let len = TILE.min(end - t);
            for (j, instr) in self.instrs.iter().enumerate() {
                match *instr {
                    Instr::Load { ext, dst } => {
                        let d = &mut regs[dst][..len];
                        match (&exts[ext], &self.exts[ext].access) {
                            (View::F32(src), Access::Strided(strides)) => {
                                gather_strided(src, &self.dims, strides, t, d, |v| v)
                            }
                            (View::F32(src), _) => d.copy_from_slice(&src[t..t + len]),
                            // A float32 program has only float32 externals.
                            _ => d.fill(f32::NAN),
                        }
                    }
                    Instr::Compute { op, dst, args, .. } => {
                        if let Some(ViewMut::F32(o)) = self.direct_output(j, outs) {
                            let at = t - start;
                            let arg = |s: Src| tile_arg(regs, exts, s, t, len);
                            compute(op, &args, arg, &mut o[at..at + len]);
                            continue;
                        }
                        let mut d = std::mem::take(&mut regs[dst]);
                        let arg = |s: Src| tile_arg(regs, exts, s, t, len);
                        compute(op, &args, arg, &mut d[..len]);
                        regs[dst] = d;
                    }
                    Instr::SinCos { arg, sin, cos, .. } => {
                        let mut s = std::mem::take(&mut regs[sin]);
                        let mut c = std::mem::take(&mut regs[cos]);
                        match tile_arg(regs, exts, arg, t, len) {
                            Arg::Slice(x) => lanes::sin_cos_f32(x, &mut s[..len], &mut c[..len]),
                            Arg::Scalar(v) => {
                                let v = f64::from(v);
                                s[..len].fill(unary_f64(UnaryOp::Sin, v) as f32);
                                c[..len].fill(unary_f64(UnaryOp::Cos, v) as f32);
                            }
                        }
                        regs[sin] = s;
                        regs[cos] = c;
                    }
                    Instr::Store { direct: true, .. } => {}
                    Instr::Store { src, out, .. } => {
                        if let ViewMut::F32(o) = &mut outs[out] {
                            let at = t - start;
                            o[at..at + len].copy_from_slice(&regs[src][..len]);
                        }
                    }
                }
            }
            t += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ExtSpec, Member, Operand, Scratch};
    use super::*;
    use quabla_ir::eval::{binary_f64, powi_f64, unary_f64};
    use quabla_ir::DType;

    const ROWS: usize = 257;
    const COLS: usize = 131;

    /// Float32 values mixing special ones (zeros, subnormals, the largest, infinities, NaN)
    /// with arbitrary bit patterns, so sums overflow, quotients divide by zero and square
    /// roots see negative numbers.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let specials = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.1,
            f32::MIN_POSITIVE,
            1e-45,
            -3e-39,
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            3e38,
            1e-20,
        ];
        let mut state = seed;
        (0..n)
            .map(|i| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let bits = (state >> 32) as u32;
                match i % 4 {
                    0 => specials[(bits as usize) % specials.len()],
                    1 => f32::from_bits(bits),
                    // Ordinary magnitudes, where most results stay finite.
                    _ => (bits as f32 / u32::MAX as f32 - 0.5) * 8.0,
                }
            })
            .collect()
    }

    fn ext(access: Access) -> ExtSpec {
        ExtSpec {
            slot: 0,
            dtype: DType::F32,
            access,
        }
    }

    fn member(op: EwOp, args: &[Operand], output: Option<usize>) -> Member {
        Member {
            op,
            args: args.to_vec(),
            dtype: DType::F32,
            output,
        }
    }

    /// `x·y`, `+ row`, `²`, `- c`, `/ x` (output 0), `sqrt`, `neg`, the identity, `+ c/y`
    /// (output 1): every op of the float32 loop, on tiles, a scalar, a broadcast row and a
    /// scalar first operand.
    fn chain() -> Vec<Member> {
        use Operand::{Ext, Member as M};
        vec![
            member(EwOp::Binary(BinaryOp::Mul), &[Ext(0), Ext(1)], None),
            member(EwOp::Binary(BinaryOp::Add), &[M(0), Ext(3)], None),
            member(EwOp::Powi(2), &[M(1)], None),
            member(EwOp::Binary(BinaryOp::Sub), &[M(2), Ext(2)], None),
            member(EwOp::Binary(BinaryOp::Div), &[M(3), Ext(0)], Some(0)),
            member(EwOp::Unary(UnaryOp::Sqrt), &[M(4)], None),
            member(EwOp::Unary(UnaryOp::Neg), &[M(5)], None),
            member(EwOp::Copy, &[M(6)], None),
            member(EwOp::Binary(BinaryOp::Div), &[Ext(2), Ext(1)], None),
            member(EwOp::Binary(BinaryOp::Add), &[M(7), M(8)], Some(1)),
        ]
    }

    fn externals() -> Vec<ExtSpec> {
        vec![
            ext(Access::Full),
            ext(Access::Full),
            ext(Access::Scalar),
            ext(Access::Strided(vec![0, 1])),
        ]
    }

    /// The chain evaluated node by node as numerics.md §1.5 defines it: each node in float64,
    /// its result rounded to float32.
    fn reference(x: f32, y: f32, c: f32, row: f32) -> [f32; 2] {
        let r = |v: f64| v as f32 as f64;
        let (x, y, c, row) = (x as f64, y as f64, c as f64, row as f64);
        let m0 = r(binary_f64(BinaryOp::Mul, x, y));
        let m1 = r(binary_f64(BinaryOp::Add, m0, row));
        let m2 = r(powi_f64(m1, 2));
        let m3 = r(binary_f64(BinaryOp::Sub, m2, c));
        let m4 = r(binary_f64(BinaryOp::Div, m3, x));
        let m5 = r(unary_f64(UnaryOp::Sqrt, m4));
        let m6 = unary_f64(UnaryOp::Neg, m5);
        let m8 = r(binary_f64(BinaryOp::Div, c, y));
        let m9 = r(binary_f64(BinaryOp::Add, m6, m8));
        [m4 as f32, m9 as f32]
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn float32_tiles_give_the_bits_of_the_node_by_node_reference() {
        let n = ROWS * COLS;
        let mut program = Program::build(
            vec![ROWS, COLS],
            externals(),
            &chain(),
            vec![(4, DType::F32), (5, DType::F32)],
        );
        assert!(program.in_f32);
        // Output 0 is read again (stored from its register), output 1 is not (computed
        // straight into the output).
        let stores: Vec<bool> = program
            .instrs
            .iter()
            .filter_map(|i| match *i {
                Instr::Store { direct, .. } => Some(direct),
                _ => None,
            })
            .collect();
        assert_eq!(stores, [false, true]);
        // Both ways of running it: on the calling thread, and split over two threads.
        program.spread_input = true;
        assert!(program.splits(2) && !program.splits(1));
        for seed in [1, 2, 3] {
            let (x, y, row) = (
                values(n, seed),
                values(n, seed + 100),
                values(COLS, seed + 200),
            );
            for c in [2.5f32, -0.0, f32::INFINITY, 1e-40] {
                let want: Vec<[f32; 2]> = (0..n)
                    .map(|i| reference(x[i], y[i], c, row[i % COLS]))
                    .collect();
                let cs = [c];
                for threads in [1, 2] {
                    let (mut o0, mut o1) = (vec![0.0f32; n], vec![0.0f32; n]);
                    program.run(
                        &[
                            View::F32(&x),
                            View::F32(&y),
                            View::F32(&cs),
                            View::F32(&row),
                        ],
                        &mut [ViewMut::F32(&mut o0), ViewMut::F32(&mut o1)],
                        threads,
                        &mut Scratch::default(),
                    );
                    for i in 0..n {
                        for (k, got) in [o0[i], o1[i]].into_iter().enumerate() {
                            assert!(
                                same(got, want[i][k]),
                                "output {k} at {i} on {threads} threads (x {:e}, y {:e}, \
                                 c {c:e}, row {:e}): {got:e}, the reference gives {:e}",
                                x[i],
                                y[i],
                                row[i % COLS],
                                want[i][k]
                            );
                        }
                    }
                }
            }
        }
    }

    /// `tanh(x + row)`, `exp`, `log` (output 0), `sin` and `cos` of one operand (paired into
    /// one instruction), `expm1` and `log1p` of their sum, `tanh` of the scalar (output 1).
    fn transcendental_chain() -> Vec<Member> {
        use Operand::{Ext, Member as M};
        let unary = |u, args: &[Operand], output| member(EwOp::Unary(u), args, output);
        vec![
            member(EwOp::Binary(BinaryOp::Add), &[Ext(0), Ext(3)], None),
            unary(UnaryOp::Tanh, &[M(0)], None),
            unary(UnaryOp::Exp, &[M(1)], None),
            unary(UnaryOp::Log, &[M(2)], Some(0)),
            unary(UnaryOp::Sin, &[Ext(1)], None),
            unary(UnaryOp::Cos, &[Ext(1)], None),
            member(EwOp::Binary(BinaryOp::Add), &[M(4), M(5)], None),
            unary(UnaryOp::Expm1, &[M(6)], None),
            unary(UnaryOp::Log1p, &[M(7)], None),
            unary(UnaryOp::Tanh, &[Ext(2)], None),
            member(EwOp::Binary(BinaryOp::Mul), &[M(8), M(9)], Some(1)),
        ]
    }

    fn transcendental_reference(x: f32, y: f32, c: f32, row: f32) -> [f32; 2] {
        let r = |v: f64| v as f32 as f64;
        let f = |u, v| r(unary_f64(u, v));
        let (x, y, c, row) = (x as f64, y as f64, c as f64, row as f64);
        let m0 = r(binary_f64(BinaryOp::Add, x, row));
        let m3 = f(UnaryOp::Log, f(UnaryOp::Exp, f(UnaryOp::Tanh, m0)));
        let m6 = r(binary_f64(
            BinaryOp::Add,
            f(UnaryOp::Sin, y),
            f(UnaryOp::Cos, y),
        ));
        let m8 = f(UnaryOp::Log1p, f(UnaryOp::Expm1, m6));
        let m10 = r(binary_f64(BinaryOp::Mul, m8, f(UnaryOp::Tanh, c)));
        [m3 as f32, m10 as f32]
    }

    #[test]
    fn float32_tiles_of_transcendental_functions_give_the_reference_bits() {
        let n = ROWS * COLS;
        let mut program = Program::build(
            vec![ROWS, COLS],
            externals(),
            &transcendental_chain(),
            vec![(4, DType::F32), (5, DType::F32)],
        );
        assert!(program.in_f32);
        assert!(program
            .instrs
            .iter()
            .any(|i| matches!(i, Instr::SinCos { .. })));
        program.spread_input = true;
        let (x, y, row) = (values(n, 7), values(n, 8), values(COLS, 9));
        for c in [0.75f32, -20.5, f32::NAN] {
            let cs = [c];
            for threads in [1, 2] {
                let (mut o0, mut o1) = (vec![0.0f32; n], vec![0.0f32; n]);
                program.run(
                    &[
                        View::F32(&x),
                        View::F32(&y),
                        View::F32(&cs),
                        View::F32(&row),
                    ],
                    &mut [ViewMut::F32(&mut o0), ViewMut::F32(&mut o1)],
                    threads,
                    &mut Scratch::default(),
                );
                for i in 0..n {
                    let want = transcendental_reference(x[i], y[i], c, row[i % COLS]);
                    for (k, got) in [o0[i], o1[i]].into_iter().enumerate() {
                        assert!(
                            same(got, want[k]),
                            "output {k} at {i} on {threads} threads (x {:e}, y {:e}, c {c:e}, \
                             row {:e}): {got:e}, the reference gives {:e}",
                            x[i],
                            y[i],
                            row[i % COLS],
                            want[k]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn only_float32_groups_of_exact_or_lane_ops_run_in_float32() {
        let outs = || vec![(4, DType::F32), (5, DType::F32)];
        let build = |members: &[Member], exts: Vec<ExtSpec>, outs| {
            Program::build(vec![ROWS, COLS], exts, members, outs).in_f32
        };
        assert!(build(&chain(), externals(), outs()));
        assert!(build(&transcendental_chain(), externals(), outs()));
        // A member neither exact in float32 nor with a lane form (`erf`, `x³`).
        for op in [EwOp::Unary(UnaryOp::Erf), EwOp::Powi(3)] {
            let mut members = chain();
            members[6].op = op;
            assert!(!build(&members, externals(), outs()), "{op:?}");
        }
        // A float64 member, external or output.
        let mut members = chain();
        members[2].dtype = DType::F64;
        assert!(!build(&members, externals(), outs()));
        let mut exts = externals();
        exts[1].dtype = DType::F64;
        assert!(!build(&chain(), exts, outs()));
        assert!(!build(
            &chain(),
            externals(),
            vec![(4, DType::F32), (5, DType::F64)]
        ));
    }
}
