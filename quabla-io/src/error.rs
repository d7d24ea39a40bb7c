//! The errors of saving and loading, with the messages of `spec/errors.md` §2.11.

use std::fmt;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Which rule of the file format a [`IoError::Format`] breaks (errors.md IO1-IO4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FormatErrorKind {
    /// IO1: the first 8 bytes are not the magic bytes.
    BadMagic,
    /// IO2: the file ends inside the magic bytes, the length field, the header or an array.
    /// An array whose bytes would end past the end of the file is reported so too, whatever
    /// its offset: a cut file and a forged offset look the same.
    Truncated,
    /// IO3: `version` is not 1 or `format` is not `"quabla"`.
    UnsupportedVersion,
    /// IO4: anything else that is not a valid file: invalid JSON, a bad node, `nbytes`
    /// inconsistent with the shape, overlapping arrays, a bool byte other than 0 or 1, a
    /// duplicate dict key, trailing bytes.
    Malformed,
}

/// An error of [`crate::write`], [`crate::read`] and the path functions.
///
/// The facade maps the variants as [`IoError::kind`] says: `Format` to `Error::Format`
/// (Python `ValueError`), `Io` to `Error::Io` with the `std::io::Error` passed through
/// unchanged (Python `OSError`), `InvalidTree` and `IntOutOfRange` to `Error::InvalidArgument`
/// (`ValueError`), `UnsupportedLeaf` to `Error::Type` (`TypeError`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IoError {
    /// A file that is not a valid file of format v1. `message` is the full text:
    /// `not a quabla file (bad magic bytes)`, `truncated quabla file: {detail}`,
    /// `unsupported quabla file version {v}` or `malformed quabla header: {detail}`, where the
    /// detail says what is wrong and where (a byte offset, a header path such as
    /// `tree.items[0][1].shape`, or both).
    #[error("{message}")]
    Format {
        kind: FormatErrorKind,
        message: String,
    },
    /// An operating-system error opening, reading, writing or renaming a file, or a buffer
    /// the allocator could not provide (`std::io::ErrorKind::OutOfMemory`).
    #[error("{}", io_message(.path.as_deref(), .source))]
    Io {
        path: Option<PathBuf>,
        #[source]
        source: std::io::Error,
    },
    /// A tree the writer cannot save: an array whose data does not match its shape, a shape
    /// with a zero extent or too many axes, a duplicate dict key, nesting deeper than
    /// [`crate::MAX_DEPTH`] containers. `message` names the tree path.
    #[error("{message}")]
    InvalidTree { message: String },
    /// TY9, for the facade's conversion of its own trees: a leaf of a kind files cannot hold.
    #[error(
        "cannot save {type_name}: allowed leaves are quabla arrays, None, bool, int, float and str"
    )]
    UnsupportedLeaf { type_name: String },
    /// AR19, for the facade's conversion of its own trees: an integer outside `i64`.
    #[error("{value} is outside the signed 64-bit range")]
    IntOutOfRange { value: String },
}

/// The kind of facade error an [`IoError`] becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `Error::Format` (Python `ValueError`).
    Format,
    /// `Error::Io` (Python `OSError`).
    Io,
    /// `Error::InvalidArgument` (Python `ValueError`).
    InvalidArgument,
    /// `Error::Type` (Python `TypeError`).
    Type,
}

impl IoError {
    /// The facade error kind this error maps to.
    pub fn kind(&self) -> ErrorKind {
        match self {
            IoError::Format { .. } => ErrorKind::Format,
            IoError::Io { .. } => ErrorKind::Io,
            IoError::InvalidTree { .. } | IoError::IntOutOfRange { .. } => {
                ErrorKind::InvalidArgument
            }
            IoError::UnsupportedLeaf { .. } => ErrorKind::Type,
        }
    }

    /// The format rule broken, for [`IoError::Format`].
    pub fn format_kind(&self) -> Option<FormatErrorKind> {
        match self {
            IoError::Format { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// TY9: `type_name` cannot be saved.
    pub fn unsupported_leaf(type_name: impl Into<String>) -> IoError {
        IoError::UnsupportedLeaf {
            type_name: type_name.into(),
        }
    }

    /// AR19: `value` does not fit in a signed 64-bit integer.
    pub fn int_out_of_range(value: impl fmt::Display) -> IoError {
        IoError::IntOutOfRange {
            value: value.to_string(),
        }
    }

    pub(crate) fn bad_magic() -> IoError {
        IoError::Format {
            kind: FormatErrorKind::BadMagic,
            message: "not a quabla file (bad magic bytes)".into(),
        }
    }

    pub(crate) fn truncated(detail: impl fmt::Display) -> IoError {
        IoError::Format {
            kind: FormatErrorKind::Truncated,
            message: format!("truncated quabla file: {detail}"),
        }
    }

    pub(crate) fn version(detail: impl fmt::Display) -> IoError {
        IoError::Format {
            kind: FormatErrorKind::UnsupportedVersion,
            message: format!("unsupported quabla file version {detail}"),
        }
    }

    pub(crate) fn malformed(detail: impl fmt::Display) -> IoError {
        IoError::Format {
            kind: FormatErrorKind::Malformed,
            message: format!("malformed quabla header: {detail}"),
        }
    }

    pub(crate) fn invalid_tree(message: impl Into<String>) -> IoError {
        IoError::InvalidTree {
            message: message.into(),
        }
    }

    pub(crate) fn io(source: std::io::Error) -> IoError {
        IoError::Io { path: None, source }
    }

    /// A buffer of `bytes` bytes the allocator refused.
    pub(crate) fn out_of_memory(bytes: usize) -> IoError {
        IoError::io(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("cannot allocate {bytes} bytes"),
        ))
    }

    /// Attaches `path` to an operating-system error that has none.
    pub(crate) fn with_path(self, path: &Path) -> IoError {
        match self {
            IoError::Io { path: None, source } => IoError::Io {
                path: Some(path.to_path_buf()),
                source,
            },
            other => other,
        }
    }
}

fn io_message(path: Option<&Path>, source: &std::io::Error) -> String {
    match path {
        Some(path) => format!("{}: {source}", path.display()),
        None => source.to_string(),
    }
}

/// An operating-system error of a caller's own stream (no path).
impl From<std::io::Error> for IoError {
    fn from(source: std::io::Error) -> IoError {
        IoError::io(source)
    }
}
