//! The error type of the facade (`spec/errors.md` §1.2). Every fallible call returns
//! [`Result`]; messages follow the catalogue of `spec/errors.md`, so that the Python binding
//! can raise them unchanged.

use quabla_backend::BackendError;
use quabla_ir::{DType, IrError};
use std::fmt;
use thiserror::Error;

/// `Result<T, quabla::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of tracer misuse a [`Error::Tracer`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TracerErrorKind {
    ControlFlow,
    Concretization,
    RegionCapture,
    CustomRuleCapture,
    Leaked,
    RandomTraced,
}

/// Every error Quabla reports. Cloning is cheap (strings, and a shared source for
/// [`Error::User`]).
#[derive(Clone, Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// TR1..TR6.
    #[error("{message}")]
    Tracer {
        kind: TracerErrorKind,
        message: String,
    },
    /// DT1.
    #[error("tensor {op} operands have mismatched dtypes {lhs} and {rhs}; float32 and float64 never mix implicitly, convert one side with astype")]
    DtypeMismatch { op: String, lhs: DType, rhs: DType },
    /// DT2.
    #[error("{op} is not defined for bool tensors; convert with astype(quabla.float64) or astype(quabla.float32) first")]
    BoolOperand { op: String },
    /// DT3.
    #[error("{op} requires bool operands")]
    RequiresBool { op: String },
    /// SH1..SH13.
    #[error("{message}")]
    Shape { op: String, message: String },
    /// IX1..IX3.
    #[error("{message}")]
    Index { message: String },
    /// AR*.
    #[error("{message}")]
    InvalidArgument { message: String },
    /// TY*.
    #[error("{message}")]
    Type { message: String },
    /// TF1.
    #[error("{transform} requires a scalar output, got shape {shape:?}")]
    NonScalarOutput {
        transform: &'static str,
        shape: Vec<usize>,
        dtype: DType,
    },
    /// TF6..TF10.
    #[error("{message}")]
    Structure { message: String },
    /// UN1..UN7.
    #[error("{message}")]
    Unsupported {
        op: String,
        device: Option<String>,
        message: String,
    },
    /// LA1.
    #[error("{op}: matrix is singular")]
    Singular { op: String },
    /// RT1: an eager adaptive `odeint` did not reach `t1`: it used up its `max_steps`
    /// attempts (`attempts == max_steps`), or it stopped after `attempts` of them because the
    /// step size fell below the spacing of the floating-point numbers at `t`, so that no step
    /// could advance `t` any more (a solution blowing up there, say): docs/ode.md.
    #[error("{}", ode_stop_message(.method, *.t, *.max_steps, *.attempts))]
    OdeMaxSteps {
        method: String,
        t: f64,
        max_steps: u64,
        attempts: u64,
    },
    /// The non-finite check (`jit(f).check_nans(true)`, `qb::debug_nans(true)`) stopped a
    /// run at the first node that made a NaN or an infinity from finite operands; the message
    /// names the node, its operands' ranges, and the user's source line (for a derivative
    /// node, the rule and the primal line it differentiates). Python `FloatingPointError`.
    #[error("{message}")]
    NonFinite { message: String },
    /// An eager `while_loop(..).max_trips(n)` whose predicate still held after `n` trips
    /// (never under a transform, where `WhileInfo::success` reports it).
    #[error("while_loop: the predicate still holds after max_trips={max_trips} trips; raise max_trips or check the loop's stopping condition")]
    LoopMaxTrips { max_trips: u64 },
    /// RT2..RT4: an eager `cg`, `gmres` or `newton` did not converge (never under a
    /// transform, where `info.success` reports it). `iterations` counts iterations (Arnoldi
    /// steps for `gmres`); `tolerance` is the residual bound the test used (for `newton`, its
    /// step tolerance `tol`); `reason` is `newton`'s cause (`""` for the Krylov solvers).
    #[error("{}", not_converged(.solver, *.iterations, *.residual, *.tolerance, .reason))]
    NotConverged {
        solver: &'static str,
        iterations: u64,
        residual: f64,
        tolerance: f64,
        reason: &'static str,
    },
    /// IO1..IO4: a file that is not a valid quabla file (Python `ValueError`).
    #[error("{message}")]
    Format { message: String },
    /// An operating-system error reading or writing a file (Python `OSError`).
    #[error("{message}")]
    Io {
        path: Option<std::path::PathBuf>,
        message: String,
        kind: std::io::ErrorKind,
    },
    /// A buffer the allocator could not provide (Python `MemoryError`): nothing was allocated
    /// and every existing tensor is intact.
    #[error(
        "cannot allocate {bytes} bytes for {what}; the machine does not have that much memory"
    )]
    OutOfMemory { bytes: u128, what: String },
    /// The computation was stopped by a [`crate::CancelToken`] or by [`crate::interrupt`]
    /// (Python `KeyboardInterrupt`); every tensor the caller holds is intact.
    #[error("cancelled: the computation was interrupted")]
    Cancelled,
    /// A `Trainer` with a finiteness check met a non-finite loss at `step` (updates completed
    /// before it); its parameters and optimizer state are those of `kept_step`, the last check
    /// whose loss was finite (`None` when there was none: the update of `step` was not applied).
    #[error("training loss is {loss} at step {step}; {}", match kept_step {
        Some(k) => format!("the parameters of step {k}, the last finite check, were kept"),
        None => "no check had a finite loss yet; the update was not applied".to_string(),
    })]
    NonFiniteLoss {
        step: u64,
        loss: f64,
        kept_step: Option<u64>,
    },
    /// A failure inside a backend.
    #[error("{device}: {message}")]
    Device { device: String, message: String },
    /// A collective of `qb::distributed` could not complete on every rank (Python
    /// `RuntimeError`): a rank failed (its error is named), died or left, did not arrive in
    /// time, or the ranks disagree on what they call (each rank's call is named). `ranks` are
    /// the ranks at fault, when known.
    #[error("{message}")]
    Distributed { ranks: Vec<usize>, message: String },
    /// A tensor or buffer used after it was donated to a run (`donate_argnums`), whose storage
    /// that run may have reused, or after it was freed (Python `RuntimeError`, as JAX raises for
    /// a deleted array).
    #[error("{message}")]
    Deleted { message: String },
    /// A warning escalated by [`crate::warnings::Action::Error`] (boxed: a retrace warning
    /// carries four signatures, and every `Result` of the facade would pay for them).
    #[error("{0}")]
    Warning(Box<Warning>),
    /// An error of the caller's own code inside a transformed function (a loss that checks its
    /// data, a callback that reads a file), carried out of every transform unchanged. Build it
    /// with [`Error::user`], or with `?` on a `Box<dyn std::error::Error + Send + Sync>`; the
    /// original error is kept as the `source`.
    #[error("{message}")]
    User {
        message: String,
        source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// A broken internal invariant: a bug in Quabla, never the caller's fault.
    #[error("internal error (please report): {message}")]
    Internal { message: String },
}

impl Error {
    /// An error of the caller's own code (see [`Error::User`]).
    ///
    /// ```
    /// use quabla as qb;
    /// let f = qb::jit(|x: qb::Tensor| {
    ///     if x.shape() != [3] {
    ///         return Err(qb::Error::user("expected three coordinates"));
    ///     }
    ///     Ok(x)
    /// });
    /// let err = f.call(&qb::zeros([2])?).unwrap_err();
    /// assert_eq!(err.to_string(), "expected three coordinates");
    /// # Ok::<(), qb::Error>(())
    /// ```
    pub fn user(message: impl Into<String>) -> Error {
        Error::User {
            message: message.into(),
            source: None,
        }
    }
}

impl From<Box<dyn std::error::Error + Send + Sync>> for Error {
    fn from(e: Box<dyn std::error::Error + Send + Sync>) -> Error {
        Error::User {
            message: e.to_string(),
            source: Some(std::sync::Arc::from(e)),
        }
    }
}

impl From<IrError> for Error {
    fn from(e: IrError) -> Error {
        match e {
            IrError::DtypeMismatch { op, lhs, rhs } => Error::DtypeMismatch { op, lhs, rhs },
            IrError::BoolOperand { op } => Error::BoolOperand { op },
            IrError::RequiresBool { op } => Error::RequiresBool { op },
            // A float-only op on integers in a raw graph, or an integer-only op on floats:
            // a TypeError, as JAX raises for bitwise functions of floats.
            e @ IrError::WrongDtypeKind { .. } => Error::Type {
                message: e.to_string(),
            },
            IrError::Shape { op, message } => Error::Shape { op, message },
            IrError::Index { message } => Error::Index { message },
            IrError::InvalidArgument { message } => Error::InvalidArgument { message },
            IrError::Unsupported { op, message } => Error::Unsupported {
                op,
                device: None,
                message,
            },
            IrError::OutOfMemory { bytes, what } => Error::OutOfMemory { bytes, what },
            other => Error::Internal {
                message: other.to_string(),
            },
        }
    }
}

impl From<BackendError> for Error {
    fn from(e: BackendError) -> Error {
        match e {
            BackendError::Singular { op } => Error::Singular { op },
            BackendError::Unsupported { op, device, reason } => Error::Unsupported {
                message: format!("{device} cannot lower {op}: {reason}"),
                op,
                device: Some(device),
            },
            BackendError::Device { device, message } => Error::Device { device, message },
            BackendError::OutOfMemory { bytes, what } => Error::OutOfMemory { bytes, what },
            BackendError::Cancelled => Error::Cancelled,
            BackendError::NonFinite { message } => Error::NonFinite { message },
            BackendError::InvalidBuffer { message } => Error::Deleted { message },
            other => Error::Internal {
                message: other.to_string(),
            },
        }
    }
}

impl From<quabla_random::RandomError> for Error {
    fn from(e: quabla_random::RandomError) -> Error {
        use quabla_random::{ErrorKind, RandomError};
        let message = e.to_string();
        match (&e, e.kind()) {
            (RandomError::OutOfMemory { bytes, shape }, _) => Error::OutOfMemory {
                bytes: *bytes as u128,
                what: format!("random samples of shape {shape:?}"),
            },
            (_, ErrorKind::Type) => Error::Type { message },
            (_, ErrorKind::Shape) => Error::Shape {
                op: "random".into(),
                message,
            },
            _ => Error::InvalidArgument { message },
        }
    }
}

impl From<quabla_io::IoError> for Error {
    fn from(e: quabla_io::IoError) -> Error {
        use quabla_io::IoError;
        match e {
            IoError::Format { message, .. } => Error::Format { message },
            IoError::Io { path, source } if source.kind() == std::io::ErrorKind::OutOfMemory => {
                Error::OutOfMemory {
                    bytes: 0,
                    what: match path {
                        Some(p) => format!("reading {}", p.display()),
                        None => "reading a quabla file".into(),
                    },
                }
            }
            e @ IoError::Io { .. } => {
                let message = e.to_string();
                let (path, kind) = match e {
                    IoError::Io { path, source } => (path, source.kind()),
                    _ => (None, std::io::ErrorKind::Other),
                };
                Error::Io {
                    path,
                    message,
                    kind,
                }
            }
            e @ IoError::UnsupportedLeaf { .. } => Error::Type {
                message: e.to_string(),
            },
            other => Error::InvalidArgument {
                message: other.to_string(),
            },
        }
    }
}

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidArgument {
            message: message.into(),
        }
    }

    pub(crate) fn out_of_memory(bytes: u128, what: impl Into<String>) -> Error {
        Error::OutOfMemory {
            bytes,
            what: what.into(),
        }
    }

    pub(crate) fn shape(op: &str, message: impl Into<String>) -> Error {
        Error::Shape {
            op: op.into(),
            message: message.into(),
        }
    }
}

/// The messages of RT2..RT4.
fn not_converged(
    solver: &str,
    iterations: u64,
    residual: f64,
    tolerance: f64,
    reason: &str,
) -> String {
    let (r, tol) = (scientific(residual), scientific(tolerance));
    match solver {
        "gmres" => format!(
            "gmres did not converge after {iterations} Arnoldi steps (residual norm {r} > tolerance {tol}); increase maxiter or restart, or add a preconditioner M"
        ),
        "newton" => format!(
            "newton did not converge after {iterations} iterations (residual norm {r}); {reason}"
        ),
        _ => format!(
            "{solver} did not converge after {iterations} iterations (residual norm {r} > tolerance {tol}); increase maxiter, add a preconditioner M, or check that the operator is symmetric positive definite"
        ),
    }
}

/// `x` as Python's `{:.3e}` writes it (`1.235e-05`, `inf`, `nan`), so that the message matches
/// the catalogue's pattern exactly.
fn scientific(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let s = format!("{x:.3e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// The message of RT1: the spec's when the solve used up its attempts, and one that says why
/// raising `max_steps` will not help when the step size stalled first.
fn ode_stop_message(method: &str, t: f64, max_steps: u64, attempts: u64) -> String {
    if attempts >= max_steps {
        format!("{method} stopped at t={t:?} before t1 after max_steps={max_steps} step attempts; raise max_steps or relax rtol/atol")
    } else {
        format!("{method} stopped at t={t:?} before t1 after {attempts} of max_steps={max_steps} step attempts: the step size fell below the spacing of floating-point numbers at t, so no step can advance t (the solution may blow up there); raising max_steps will not help: check the right-hand side near t, or relax rtol/atol")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_converged_messages_follow_the_catalogue() {
        let e = Error::NotConverged {
            solver: "cg",
            iterations: 80,
            residual: 1.23456e-3,
            tolerance: 2.0e-10,
            reason: "",
        };
        assert_eq!(
            e.to_string(),
            "cg did not converge after 80 iterations (residual norm 1.235e-03 > tolerance 2.000e-10); increase maxiter, add a preconditioner M, or check that the operator is symmetric positive definite"
        );
        let e = Error::NotConverged {
            solver: "newton",
            iterations: 3,
            residual: f64::NAN,
            tolerance: 1e-8,
            reason: "the Jacobian is singular",
        };
        assert_eq!(
            e.to_string(),
            "newton did not converge after 3 iterations (residual norm nan); the Jacobian is singular"
        );
        assert_eq!(scientific(123456.0), "1.235e+05");
        assert_eq!(scientific(0.0), "0.000e+00");
    }
}

// ---------------------------------------------------------------------------------------------
// Warnings: the values (their policy and handler are `crate::warnings`)

/// A warning.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Warning {
    /// WR1: a trace cache evicted its least recently used entry.
    Retrace {
        transform: &'static str,
        function: String,
        max_traces: usize,
        evicted: String,
        new: String,
        changed: String,
    },
    /// WR2: a float64 program runs as float32 on a device.
    Float64AsFloat32 { backend: String },
}

/// The kinds of warning a policy is set for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WarningKind {
    Retrace,
    Float64AsFloat32,
}

impl Warning {
    pub fn kind(&self) -> WarningKind {
        match self {
            Warning::Retrace { .. } => WarningKind::Retrace,
            Warning::Float64AsFloat32 { .. } => WarningKind::Float64AsFloat32,
        }
    }
}

/// The fixed advice line of WR1 (transforms.md §2.2).
pub const RETRACE_ADVICE: &str =
    "to stop retracing, pass changing scalars as quabla.array(value, dtype=...) or raise max_traces";

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Retrace {
                transform,
                function,
                max_traces,
                evicted,
                new,
                changed,
            } => write!(
                f,
                "{transform}({function}) exceeded max_traces={max_traces}; evicted the least recently used trace:\n  {evicted}\nnew signature:\n  {new}\nchanged: {changed}\n{RETRACE_ADVICE}"
            ),
            Warning::Float64AsFloat32 { backend } => {
                write!(f, "{backend} runs float64 programs in float32")
            }
        }
    }
}
