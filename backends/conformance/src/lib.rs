//! The backend conformance suite: every backend, linked or loaded as a plugin, against the CPU
//! reference.
//!
//! This crate owns three things:
//!
//! - the **cases** ([`CASES`], in `cases.rs`, the integer and indexed ones in `integers.rs`):
//!   one per op family, and one per transform as transforms land, each a few frozen plans with deterministic inputs; and the **buffer
//!   cases** ([`BUFFER_CASES`], in `buffers.rs`): the backend's own memory (round trips,
//!   `allocate` and `OutOfMemory`, runs on resident buffers, donation, freed buffers, failed
//!   runs, transfer counts);
//! - the **harness** ([`run_case`]): runs a case's plans on the reference (the linked CPU
//!   backend, node by node on one thread) and on a backend, and compares. The CPU backend, linked
//!   or as a plugin, must be bit-identical to the reference (NaN payloads aside); every other
//!   backend must agree within the tolerances of numerics.md §1.6 (float32:
//!   `|d - c| <= 1e-5 + 1e-5 |c|`; float64, on backends that claim it: `1e-12` relative), with
//!   identical dtypes, shapes, booleans and non-finite values. An op a backend rejects at
//!   compile time with UN2 is reported as unsupported, not as a failure: a case whose plans
//!   are all rejected is `unsupported`, one with some plans passing and the others rejected is
//!   `partial k/n` (k of its n plans pass); a reference error (a singular `solve`) must be met
//!   by the same typed error;
//! - the **matrix** ([`columns`], [`run_matrix`], [`Matrix`]): the backends this host has, one
//!   column each (`cpu`, `cpu-plugin`, `cuda`, `mlx`, ...), and the printed test × backend
//!   table that `cargo xtask test-backends` shows.
//!
//! The `#[test]` functions in `tests/suite.rs` instantiate every case per backend with
//! [`conformance_tests!`]; the `quabla-conformance` binary prints the matrix. [`plugins`]
//! builds the plugin libraries the tests load.

mod buffers;
mod cases;
mod integers;
pub mod plugins;

pub use buffers::{buffer_case, run_buffer_case, BufferCase, BUFFER_CASES};

// Linked for their registrations: their columns report why they are unavailable here.
use quabla_cuda as _;
use quabla_mlx as _;

pub use cases::{tensor, Rng, CASES};

use quabla_backend::registry::{Origin, PluginSearch, Registry, Status, KNOWN_BACKENDS};
use quabla_backend::{Backend, BackendError, HostTensor};
use quabla_cpu::{CpuBackend, CpuOptions};
use quabla_ir::{DType, HostData, Plan};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

/// One conformance case: a name and the plans it checks.
#[derive(Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    programs: fn() -> Vec<Program>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

impl Case {
    pub const fn new(name: &'static str, programs: fn() -> Vec<Program>) -> Case {
        Case { name, programs }
    }

    /// The plans of the case with their inputs.
    pub fn programs(&self) -> Vec<Program> {
        (self.programs)()
    }
}

/// The case named `name`.
pub fn case(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

/// A frozen plan and the inputs it runs on.
#[derive(Clone, Debug)]
pub struct Program {
    pub label: String,
    pub plan: Plan,
    pub inputs: Vec<HostTensor>,
}

/// How a backend's values must agree with the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// Bit for bit (any NaN matches any NaN).
    BitIdentical,
    /// Within the tolerances of numerics.md §1.6; `float64` says whether the backend claims
    /// float64 execution (otherwise float64 results are held to the float32 tolerance).
    Tolerance { float64: bool },
}

/// A backend under test.
#[derive(Clone, Debug)]
pub enum Subject {
    Ready {
        backend: Arc<dyn Backend>,
        agreement: Agreement,
    },
    /// Not testable here (unavailable, not built); the reason is printed.
    Skipped(String),
    /// Should be testable but is broken (a plugin that does not load); every case fails.
    Broken(String),
}

/// A column of the matrix: a label (`cpu`, `cpu-plugin`, `cuda`, ...) and its subject.
#[derive(Clone, Debug)]
pub struct Column {
    pub label: String,
    pub subject: Subject,
}

/// The result of one case on one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    /// Every plan of the case was rejected at compile time (UN2).
    Unsupported(String),
    /// Some plans passed and the others were rejected at compile time; `why` lists the
    /// rejected ones.
    Partial {
        passed: usize,
        total: usize,
        why: String,
    },
    Skipped(String),
}

impl Outcome {
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail(_) => "FAIL",
            Outcome::Unsupported(_) => "unsupported",
            Outcome::Partial { .. } => "partial",
            Outcome::Skipped(_) => "skipped",
        }
    }

    /// The cell of the matrix: [`Outcome::word`], with the count for a partial outcome
    /// (`partial 2/7`).
    pub fn cell(&self) -> String {
        match self {
            Outcome::Partial { passed, total, .. } => format!("partial {passed}/{total}"),
            other => other.word().to_string(),
        }
    }

    /// Panics with the reason unless the outcome is a pass, an unsupported op or a skip: what
    /// the `#[test]` instantiations call.
    pub fn assert_ok(&self, case: &str, column: &str) {
        match self {
            Outcome::Fail(why) => panic!("conformance {case} on {column}: {why}"),
            Outcome::Skipped(why) => eprintln!("conformance {case} on {column}: skipped: {why}"),
            Outcome::Unsupported(why) => {
                eprintln!("conformance {case} on {column}: unsupported: {why}")
            }
            Outcome::Partial { why, .. } => {
                eprintln!("conformance {case} on {column}: {}: {why}", self.cell())
            }
            Outcome::Pass => {}
        }
    }
}

/// The reference: the linked CPU backend, every node its own step, on one thread, every loop
/// interpreted (no machine code).
pub fn reference_backend() -> CpuBackend {
    CpuBackend::with_options(CpuOptions {
        fuse_elementwise: false,
        threads: 1,
        native_loops: false,
        native_always: false,
    })
}

/// Runs one case on a column.
pub fn run_case(case: &Case, column: &Column) -> Outcome {
    let (backend, agreement) = match &column.subject {
        Subject::Skipped(why) => return Outcome::Skipped(why.clone()),
        Subject::Broken(why) => return Outcome::Fail(why.clone()),
        Subject::Ready { backend, agreement } => (backend, *agreement),
    };
    let programs = match catch_unwind(|| case.programs()) {
        Ok(p) => p,
        Err(payload) => {
            return Outcome::Fail(format!(
                "building the case panicked: {}",
                quabla_backend::abi::panic_message(payload.as_ref())
            ))
        }
    };
    let reference = reference_backend();
    let mut unsupported = Vec::new();
    for program in &programs {
        match check_program(program, &reference, backend.as_ref(), agreement) {
            Ok(()) => {}
            Err(Check::Unsupported(why)) => unsupported.push(format!("{}: {why}", program.label)),
            Err(Check::Fail(why)) => return Outcome::Fail(format!("{}: {why}", program.label)),
        }
    }
    if unsupported.is_empty() {
        Outcome::Pass
    } else if unsupported.len() == programs.len() {
        Outcome::Unsupported(unsupported.join("; "))
    } else {
        Outcome::Partial {
            passed: programs.len() - unsupported.len(),
            total: programs.len(),
            why: unsupported.join("; "),
        }
    }
}

enum Check {
    Fail(String),
    Unsupported(String),
}

fn run_on(backend: &dyn Backend, program: &Program) -> Result<Vec<HostTensor>, BackendError> {
    let exe = backend.compile(&program.plan)?;
    exe.run(&program.inputs)
}

fn check_program(
    program: &Program,
    reference: &CpuBackend,
    backend: &dyn Backend,
    agreement: Agreement,
) -> Result<(), Check> {
    let expected = run_on(reference, program);
    let got = match catch_unwind(AssertUnwindSafe(|| run_on(backend, program))) {
        Ok(r) => r,
        Err(payload) => {
            return Err(Check::Fail(format!(
                "the backend panicked: {}",
                quabla_backend::abi::panic_message(payload.as_ref())
            )))
        }
    };
    match (expected, got) {
        (_, Err(BackendError::Unsupported { op, device, reason })) => Err(Check::Unsupported(
            format!("{device} cannot lower {op}: {reason}"),
        )),
        (Err(e), Err(g)) => {
            if std::mem::discriminant(&e) == std::mem::discriminant(&g) {
                Ok(())
            } else {
                Err(Check::Fail(format!(
                    "the reference fails with `{e}`, the backend with `{g}`"
                )))
            }
        }
        (Err(e), Ok(_)) => Err(Check::Fail(format!(
            "the reference fails with `{e}`, the backend returns values"
        ))),
        (Ok(_), Err(g)) => Err(Check::Fail(format!("the backend fails: {g}"))),
        (Ok(e), Ok(g)) => compare_outputs(&e, &g, agreement).map_err(Check::Fail),
    }
}

/// Compares a backend's outputs with the reference's.
pub fn compare_outputs(
    expected: &[HostTensor],
    got: &[HostTensor],
    agreement: Agreement,
) -> Result<(), String> {
    if expected.len() != got.len() {
        return Err(format!(
            "{} outputs, expected {}",
            got.len(),
            expected.len()
        ));
    }
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        if e.dtype() != g.dtype() || e.shape != g.shape {
            return Err(format!(
                "output {i} is {}{}, expected {}{}",
                g.dtype().name(),
                g.shape,
                e.dtype().name(),
                e.shape
            ));
        }
        for j in 0..e.data.len() {
            if !agrees(&e.data, &g.data, j, agreement) {
                return Err(format!(
                    "output {i} element {j}: got {}, expected {} ({agreement:?})",
                    element(&g.data, j),
                    element(&e.data, j)
                ));
            }
        }
    }
    Ok(())
}

/// Element `j` for a message: integers exactly, floats in scientific notation.
fn element(data: &HostData, j: usize) -> String {
    if data.dtype().is_integer() {
        data.get_i64(j).to_string()
    } else {
        format!("{:e}", data.get_f64(j))
    }
}

fn agrees(e: &HostData, g: &HostData, j: usize, agreement: Agreement) -> bool {
    match (e, g) {
        (HostData::Bool(a), HostData::Bool(b)) => a[j] == b[j],
        // Integers are exact on every backend (numerics.md §12).
        (HostData::I32(a), HostData::I32(b)) => a[j] == b[j],
        (HostData::I64(a), HostData::I64(b)) => a[j] == b[j],
        (HostData::F32(a), HostData::F32(b)) => {
            close(a[j] as f64, b[j] as f64, DType::F32, agreement, || {
                a[j].to_bits() == b[j].to_bits()
            })
        }
        (HostData::F64(a), HostData::F64(b)) => close(a[j], b[j], DType::F64, agreement, || {
            a[j].to_bits() == b[j].to_bits()
        }),
        _ => false,
    }
}

fn close(c: f64, d: f64, dtype: DType, agreement: Agreement, same_bits: impl Fn() -> bool) -> bool {
    if c.is_nan() || d.is_nan() {
        return c.is_nan() && d.is_nan();
    }
    match agreement {
        Agreement::BitIdentical => same_bits(),
        Agreement::Tolerance { float64 } => {
            if !c.is_finite() || !d.is_finite() {
                return c == d;
            }
            if dtype == DType::F64 && float64 {
                (d - c).abs() <= 1e-12 * c.abs().max(f64::MIN_POSITIVE)
            } else {
                (d - c).abs() <= 1e-5 + 1e-5 * c.abs()
            }
        }
    }
}

/// The agreement a backend is held to: bit identity for the CPU, tolerances for the others.
pub fn agreement_for(name: &str, backend: &dyn Backend) -> Agreement {
    if name == "cpu" {
        Agreement::BitIdentical
    } else {
        Agreement::Tolerance {
            float64: backend.capabilities().float64,
        }
    }
}

/// The columns of this host: every linked backend (the CPU first), then every plugin found in
/// `plugin_folders` (labelled `<name>-plugin`), then a skipped column for each known backend
/// that is neither.
pub fn columns(plugin_folders: &[PathBuf]) -> Vec<Column> {
    let registry = Registry::discover(&PluginSearch::folders(plugin_folders.iter().cloned()));
    columns_of(&registry)
}

/// The columns of a registry (see [`columns`]).
pub fn columns_of(registry: &Registry) -> Vec<Column> {
    let mut out = Vec::new();
    let mut entries: Vec<quabla_backend::registry::Entry> = registry.entries();
    // The known backends in their order, linked before plugins, then the others by name.
    entries.sort_by_key(|e| {
        let rank = KNOWN_BACKENDS
            .iter()
            .position(|k| *k == e.name)
            .unwrap_or(KNOWN_BACKENDS.len());
        (rank, e.name.clone(), e.origin != Origin::Linked)
    });
    let mut labels: Vec<String> = Vec::new();
    for entry in entries {
        let base = match entry.origin {
            Origin::Linked => entry.name.clone(),
            _ => format!("{}-plugin", entry.name),
        };
        // Two plugin files of one name (from two folders) get two columns: number the later.
        let mut label = base.clone();
        let mut n = 1;
        while labels.contains(&label) {
            n += 1;
            label = format!("{base}-{n}");
        }
        labels.push(label.clone());
        let subject = match &entry.status {
            Status::Available(backend) => Subject::Ready {
                agreement: agreement_for(&entry.name, backend.as_ref()),
                backend: backend.clone(),
            },
            Status::Unavailable(u) => Subject::Skipped(format!("unavailable ({u})")),
            Status::LoadFailed(e) => Subject::Broken(format!("the plugin does not load: {e}")),
        };
        out.push(Column { label, subject });
    }
    for info in registry.devices() {
        if info.origin == Origin::NotFound {
            out.push(Column {
                label: info.name.clone(),
                subject: Subject::Skipped(format!(
                    "unavailable ({})",
                    info.reason.unwrap_or_default()
                )),
            });
        }
    }
    out
}

/// The column named `label` among [`columns`]'s.
pub fn column(label: &str, plugin_folders: &[PathBuf]) -> Option<Column> {
    columns(plugin_folders)
        .into_iter()
        .find(|c| c.label == label)
}

/// The outcomes of every case on every column.
#[derive(Clone, Debug)]
pub struct Matrix {
    pub columns: Vec<Column>,
    /// `rows[case][column]`.
    pub rows: Vec<(&'static str, Vec<Outcome>)>,
}

/// Runs one buffer case on a column.
pub fn run_buffer_case_on(case: &BufferCase, column: &Column) -> Outcome {
    match &column.subject {
        Subject::Skipped(why) => Outcome::Skipped(why.clone()),
        Subject::Broken(why) => Outcome::Fail(why.clone()),
        Subject::Ready { backend, agreement } => {
            run_buffer_case(case, backend.as_ref(), *agreement)
        }
    }
}

/// Runs every case and every buffer case on every column.
pub fn run_matrix(columns: Vec<Column>) -> Matrix {
    let plans = CASES.iter().map(|case| {
        (
            case.name,
            columns.iter().map(|c| run_case(case, c)).collect(),
        )
    });
    let buffers = BUFFER_CASES.iter().map(|case| {
        (
            case.name,
            columns
                .iter()
                .map(|c| run_buffer_case_on(case, c))
                .collect(),
        )
    });
    let rows = plans.chain(buffers).collect();
    Matrix { columns, rows }
}

impl Matrix {
    pub fn failures(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }

    fn count(&self, pred: impl Fn(&Outcome) -> bool) -> usize {
        self.rows
            .iter()
            .flat_map(|(_, row)| row.iter())
            .filter(|o| pred(o))
            .count()
    }
}

impl fmt::Display for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name_width = self
            .rows
            .iter()
            .map(|(n, _)| n.len())
            .chain(std::iter::once("test".len()))
            .max()
            .unwrap_or(4);
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.rows
                    .iter()
                    .filter_map(|(_, row)| row.get(i).map(|o| o.cell().len()))
                    .chain([c.label.len(), "unsupported".len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        write!(f, "{:name_width$}", "test")?;
        for (c, w) in self.columns.iter().zip(&widths) {
            write!(f, "  {:w$}", c.label)?;
        }
        writeln!(f)?;
        for (name, row) in &self.rows {
            write!(f, "{name:name_width$}")?;
            for (o, w) in row.iter().zip(&widths) {
                write!(f, "  {:w$}", o.cell())?;
            }
            writeln!(f)?;
        }
        // Reasons: once per column for skips, once per cell for the rest.
        for (i, column) in self.columns.iter().enumerate() {
            match &column.subject {
                Subject::Skipped(why) => {
                    writeln!(f, "{}: skipped: {why}", column.label)?;
                    continue;
                }
                Subject::Broken(why) => {
                    writeln!(f, "{}: FAIL: {why}", column.label)?;
                    continue;
                }
                Subject::Ready { .. } => {}
            }
            for (name, row) in &self.rows {
                match &row[i] {
                    Outcome::Fail(why) => writeln!(f, "{} / {name}: FAIL: {why}", column.label)?,
                    Outcome::Unsupported(why) => {
                        writeln!(f, "{} / {name}: unsupported: {why}", column.label)?
                    }
                    o @ Outcome::Partial { why, .. } => {
                        writeln!(f, "{} / {name}: {}: {why}", column.label, o.cell())?
                    }
                    Outcome::Skipped(why) => {
                        writeln!(f, "{} / {name}: skipped: {why}", column.label)?
                    }
                    Outcome::Pass => {}
                }
            }
        }
        // The partial count is shown only when there is one, so the summary of a matrix
        // without partial cells reads as it always has.
        let partial = self.count(|o| matches!(o, Outcome::Partial { .. }));
        write!(f, "{} passed, ", self.count(|o| *o == Outcome::Pass))?;
        if partial > 0 {
            write!(f, "{partial} partial, ")?;
        }
        write!(
            f,
            "{} failed, {} unsupported, {} skipped",
            self.failures(),
            self.count(|o| matches!(o, Outcome::Unsupported(_))),
            self.count(|o| matches!(o, Outcome::Skipped(_))),
        )
    }
}

/// Instantiates every case of [`CASES`] as a `#[test]` for one backend column:
/// `conformance_tests!(cpu_plugin, || some_column());` generates a module `cpu_plugin` with one
/// test per case, named after it. The expression is a closure returning a [`Column`].
#[macro_export]
macro_rules! conformance_tests {
    ($module:ident, $column:expr $(,)?) => {
        $crate::__conformance_tests!(
            $module,
            $column;
            cast,
            unary_f64,
            unary_f32,
            powi,
            binary_f64,
            binary_f32,
            binary_broadcast,
            compare,
            where_,
            stop_gradient,
            sum_mean,
            axis_reductions,
            cumsum,
            reshape_transpose,
            broadcast,
            concat,
            slice_pad_slice,
            gather_scatter_add,
            matmul,
            solve,
            triangular_solve,
            cholesky,
            decompositions,
            fused_chain,
            large_reduction,
            non_finite_constants,
            outputs_and_passthrough,
            integer_arithmetic,
            integer_casts,
            integer_reductions,
            integer_layout,
            indexed;
            buffer_round_trip,
            buffer_allocate,
            buffer_resident_run,
            buffer_donation,
            buffer_freed_use,
            buffer_failed_run_keeps_donated,
            buffer_transfers_counted
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($module:ident, $column:expr; $($case:ident),* ; $($buffer_case:ident),* $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            fn column() -> $crate::Column {
                ($column)()
            }

            #[test]
            fn every_case_is_instantiated() {
                let listed: Vec<&str> = vec![$(stringify!($case)),*];
                let cases: Vec<&str> = $crate::CASES.iter().map(|c| c.name).collect();
                assert_eq!(listed, cases, "conformance_tests! must list every case of CASES");
            }

            #[test]
            fn every_buffer_case_is_instantiated() {
                let listed: Vec<&str> = vec![$(stringify!($buffer_case)),*];
                let cases: Vec<&str> = $crate::BUFFER_CASES.iter().map(|c| c.name).collect();
                assert_eq!(
                    listed, cases,
                    "conformance_tests! must list every case of BUFFER_CASES"
                );
            }

            $(
                #[test]
                fn $case() {
                    let case = $crate::case(stringify!($case))
                        .expect(concat!("no conformance case named ", stringify!($case)));
                    let column = column();
                    $crate::run_case(case, &column).assert_ok(case.name, &column.label);
                }
            )*

            $(
                #[test]
                fn $buffer_case() {
                    let case = $crate::buffer_case(stringify!($buffer_case)).expect(concat!(
                        "no buffer case named ",
                        stringify!($buffer_case)
                    ));
                    let column = column();
                    $crate::run_buffer_case_on(case, &column).assert_ok(case.name, &column.label);
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(values: &[f32]) -> HostTensor {
        HostTensor::new(
            quabla_ir::Shape::new(vec![values.len()]).unwrap(),
            HostData::F32(values.into()),
        )
    }

    fn f64s(values: &[f64]) -> HostTensor {
        HostTensor::new(
            quabla_ir::Shape::new(vec![values.len()]).unwrap(),
            HostData::F64(values.into()),
        )
    }

    fn check(expected: &HostTensor, got: &HostTensor, agreement: Agreement) -> Result<(), String> {
        compare_outputs(
            std::slice::from_ref(expected),
            std::slice::from_ref(got),
            agreement,
        )
    }

    const F32_TOL: Agreement = Agreement::Tolerance { float64: false };
    const F64_TOL: Agreement = Agreement::Tolerance { float64: true };

    #[test]
    fn integers_agree_only_when_equal_at_every_agreement() {
        let shape = quabla_ir::Shape::new(vec![2]).unwrap();
        let ints = |v: [i64; 2]| HostTensor::new(shape.clone(), HostData::I64(v.into()));
        let (a, b) = (ints([i64::MAX, -1]), ints([i64::MAX - 1, -1]));
        for agreement in [Agreement::BitIdentical, F32_TOL, F64_TOL] {
            assert!(check(&a, &a, agreement).is_ok());
            let why = check(&a, &b, agreement).unwrap_err();
            assert!(
                why.contains("got 9223372036854775806, expected 9223372036854775807"),
                "{why}"
            );
        }
        let i32s = HostTensor::new(shape.clone(), HostData::I32([7, -7].into()));
        assert!(check(&i32s, &i32s, F32_TOL).is_ok());
        assert!(check(&a, &i32s, F32_TOL).is_err());
    }

    #[test]
    fn bit_identity_allows_only_nan_payload_differences() {
        let a = f64s(&[1.0, -0.0, f64::NAN]);
        let b = f64s(&[1.0, -0.0, f64::from_bits(0x7ff8_0000_0000_0001)]);
        assert!(check(&a, &b, Agreement::BitIdentical).is_ok());
        let c = f64s(&[1.0, 0.0, f64::NAN]);
        assert!(check(&a, &c, Agreement::BitIdentical).is_err());
        // A signed zero is within any tolerance.
        assert!(check(&a, &c, F64_TOL).is_ok());
    }

    #[test]
    fn float32_tolerance_is_absolute_plus_relative() {
        let c = f32s(&[1000.0, 0.0]);
        // 1e-5 + 1e-5 * 1000 = 0.01001 allowed at 1000; 1e-5 at 0.
        assert!(check(&c, &f32s(&[1000.01, 9e-6]), F32_TOL).is_ok());
        assert!(check(&c, &f32s(&[1000.02, 0.0]), F32_TOL).is_err());
        assert!(check(&c, &f32s(&[1000.0, 2e-5]), F32_TOL).is_err());
    }

    #[test]
    fn float64_tolerance_depends_on_the_claim() {
        let c = f64s(&[1.0]);
        let near = f64s(&[1.0 + 5e-13]);
        let far = f64s(&[1.0 + 5e-6]);
        assert!(check(&c, &near, F64_TOL).is_ok());
        assert!(check(&c, &far, F64_TOL).is_err());
        // Without float64, float64 results are held to the float32 tolerance.
        assert!(check(&c, &far, F32_TOL).is_ok());
    }

    #[test]
    fn non_finite_values_dtypes_and_shapes_must_match() {
        let inf = f64s(&[f64::INFINITY]);
        assert!(check(&inf, &f64s(&[f64::MAX]), F32_TOL).is_err());
        assert!(check(&inf, &f64s(&[f64::NAN]), F32_TOL).is_err());
        assert!(check(&inf, &f32s(&[f32::INFINITY]), F32_TOL).is_err());
        assert!(check(&inf, &f64s(&[1.0, 2.0]), F32_TOL).is_err());
        assert!(compare_outputs(std::slice::from_ref(&inf), &[], F32_TOL).is_err());
    }

    #[test]
    fn every_case_builds_valid_plans_with_matching_inputs() {
        for case in CASES {
            for program in case.programs() {
                quabla_backend::check_inputs(&program.plan, &program.inputs)
                    .unwrap_or_else(|e| panic!("{} / {}: {e}", case.name, program.label));
            }
        }
    }

    #[test]
    fn a_tolerance_backend_passes_when_it_agrees_and_fails_when_it_does_not() {
        #[derive(Debug)]
        struct Off;
        #[derive(Debug)]
        struct OffExecutable(Arc<dyn quabla_backend::Executable>);
        impl Backend for Off {
            fn name(&self) -> &str {
                "off"
            }
            fn capabilities(&self) -> quabla_backend::Capabilities {
                quabla_backend::Capabilities {
                    float64: true,
                    device_count: 1,
                }
            }
            fn compile(
                &self,
                plan: &Plan,
            ) -> quabla_backend::Result<Arc<dyn quabla_backend::Executable>> {
                Ok(Arc::new(OffExecutable(
                    CpuBackend::default().compile(plan)?,
                )))
            }
        }
        impl quabla_backend::Executable for OffExecutable {
            fn run(&self, inputs: &[HostTensor]) -> quabla_backend::Result<Vec<HostTensor>> {
                // Every float output is nudged by one part in 1e9.
                Ok(self
                    .0
                    .run(inputs)?
                    .into_iter()
                    .map(|t| match &t.data {
                        HostData::F64(v) => HostTensor::new(
                            t.shape.clone(),
                            HostData::F64(v.iter().map(|x| x * (1.0 + 1e-9)).collect()),
                        ),
                        _ => t,
                    })
                    .collect())
            }
        }
        let case = case("matmul").unwrap();
        let column = |agreement| Column {
            label: "off".into(),
            subject: Subject::Ready {
                backend: Arc::new(Off),
                agreement,
            },
        };
        // Within the float32 tolerance, beyond the float64 one.
        assert_eq!(run_case(case, &column(F32_TOL)), Outcome::Pass);
        assert!(matches!(run_case(case, &column(F64_TOL)), Outcome::Fail(_)));
    }

    #[test]
    fn the_matrix_prints_every_cell_and_the_reasons() {
        let columns = vec![
            Column {
                label: "cpu".into(),
                subject: Subject::Ready {
                    backend: Arc::new(CpuBackend::default()),
                    agreement: Agreement::BitIdentical,
                },
            },
            Column {
                label: "dev".into(),
                subject: Subject::Skipped("unavailable (no device)".into()),
            },
        ];
        let matrix = run_matrix(columns);
        let text = matrix.to_string();
        assert_eq!(matrix.failures(), 0);
        assert!(text.starts_with("test"), "{text}");
        assert!(
            text.contains("dev: skipped: unavailable (no device)"),
            "{text}"
        );
        assert!(text.contains("buffer_donation"), "{text}");
        assert!(text.ends_with(&format!(
            "{n} passed, 0 failed, 0 unsupported, {n} skipped",
            n = CASES.len() + BUFFER_CASES.len()
        )));
    }
}
