//! Saving to and loading from paths. A save replaces the target atomically, so a failure at
//! any point leaves the previous file as it was.

use crate::error::IoError;
use crate::node::Node;
use crate::read::read_stream;
use crate::write::write;
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Saves `node` to `path` in file format v1 without ever exposing a partial file.
///
/// The file is written to a new temporary file in the same directory (a unique hidden name
/// next to the target), flushed and synced to disk, then renamed over `path`, and the
/// directory is synced where the platform allows it. On any error the temporary file is
/// removed and a previous file at `path` is left untouched. The new file takes the
/// permissions of the file it replaces, when there was one.
///
/// Errors: [`IoError::InvalidTree`] for a tree that cannot be saved, [`IoError::Io`] (with
/// the path) for operating-system errors.
pub fn save_path(path: impl AsRef<Path>, node: &Node) -> Result<(), IoError> {
    save_with(path.as_ref(), |file| {
        let mut writer = BufWriter::new(file);
        write(node, &mut writer)
    })
}

/// Loads a file of format v1 from `path`, read through a buffer as [`crate::read`] reads a
/// stream; the file's size lets a truncated file fail before its data is read.
///
/// Errors: [`IoError::Io`] (with the path) when the file cannot be opened or read,
/// [`IoError::Format`] when it is not a valid file.
pub fn load_path(path: impl AsRef<Path>) -> Result<Node, IoError> {
    let path = path.as_ref();
    let io = |e: std::io::Error| IoError::io(e).with_path(path);
    // The kind is checked before opening: opening a FIFO for reading blocks until a writer
    // comes, and a device can stream forever. A reader of such a file can be passed to
    // `read` instead.
    check_regular(&fs::metadata(path).map_err(io)?).map_err(io)?;
    let file = File::open(path).map_err(io)?;
    // What was opened is checked again (the path may have changed in between); its size
    // lets a truncated file be rejected before its data is read.
    let metadata = file.metadata().map_err(io)?;
    check_regular(&metadata).map_err(io)?;
    read_stream(&mut BufReader::new(file), Some(metadata.len())).map_err(|e| e.with_path(path))
}

/// An error unless `metadata` is that of a regular file (naming what it is instead).
fn check_regular(metadata: &fs::Metadata) -> std::io::Result<()> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else {
        special_kind(&kind)
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{what}, not a regular file; load reads files (open anything else yourself and pass the reader)"),
    ))
}

#[cfg(unix)]
fn special_kind(kind: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_char_device() {
        "a character device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &fs::FileType) -> &'static str {
    "a special file"
}

/// Makes temporary names unique within the process; the process id separates processes.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The atomic save: `fill` writes the file's bytes to the temporary file.
pub(crate) fn save_with(
    path: &Path,
    fill: impl FnOnce(&mut File) -> Result<(), IoError>,
) -> Result<(), IoError> {
    let Some(name) = path.file_name() else {
        return Err(IoError::io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path names no file",
        ))
        .with_path(path));
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (temp_path, mut file) = create_temp(&dir, name).map_err(|e| e.with_path(path))?;
    let result = (|| {
        if let Ok(meta) = fs::metadata(path) {
            // Best effort: a file system that refuses permissions still gets the data.
            let _ = file.set_permissions(meta.permissions());
        }
        fill(&mut file)?;
        file.sync_all().map_err(IoError::io)?;
        drop(file);
        fs::rename(&temp_path, path).map_err(IoError::io)
    })();
    match result {
        Ok(()) => {
            sync_dir(&dir);
            Ok(())
        }
        Err(e) => {
            // The temporary file is ours alone; the error that matters is the first one.
            let _ = fs::remove_file(&temp_path);
            Err(e.with_path(path))
        }
    }
}

/// Creates a new, uniquely named file in `dir` for the target `name`.
fn create_temp(dir: &Path, name: &std::ffi::OsStr) -> Result<(PathBuf, File), IoError> {
    let pid = std::process::id();
    let mut last_error = None;
    for _ in 0..64 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{pid}.{n}.tmp"));
        let temp_path = dir.join(temp_name);
        // create_new never opens an existing file, so a name taken by anyone else is skipped.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp_path)
        {
            Ok(file) => return Ok((temp_path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(IoError::io(e)),
        }
    }
    Err(IoError::io(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "no free temporary file name",
        )
    })))
}

/// Makes the rename durable where directories can be synced (Unix). Failures are ignored:
/// the new file is already in place, and some file systems cannot sync directories.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{Array, Key};
    use quabla_ir::HostData;
    use std::io::Write;
    use std::sync::Arc;

    /// A writer that accepts `left` bytes, then fails.
    struct FailAfter<'a> {
        inner: &'a mut File,
        left: usize,
    }

    impl Write for FailAfter<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::Error::other("disk full (simulated)"));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            self.inner.write(&buf[..n])
        }

        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "quabla-io-{name}-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn tree(n: usize) -> Node {
        let data: Arc<[f64]> = (0..n).map(|i| i as f64).collect();
        Node::Dict(vec![
            (
                Key::from("w"),
                Node::Array(Array::new(vec![n], HostData::F64(data)).unwrap()),
            ),
            (Key::from("step"), Node::Int(n as i64)),
        ])
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn save_and_load() {
        let dir = scratch_dir("roundtrip");
        let path = dir.join("ckpt.qb");
        save_path(&path, &tree(3)).unwrap();
        assert_eq!(load_path(&path).unwrap(), tree(3));
        save_path(&path, &tree(5)).unwrap();
        assert_eq!(load_path(&path).unwrap(), tree(5));
        assert_eq!(entries(&dir), ["ckpt.qb"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_file_fails_as_its_bytes_do() {
        let dir = scratch_dir("truncated");
        let path = dir.join("ckpt.qb");
        save_path(&path, &tree(1000)).unwrap();
        let bytes = fs::read(&path).unwrap();
        let cut_path = dir.join("cut.qb");
        for cut in [0, 10, 40, 200, bytes.len() / 2, bytes.len() - 1] {
            fs::write(&cut_path, &bytes[..cut]).unwrap();
            let from_file = load_path(&cut_path).unwrap_err();
            let from_bytes = crate::read_bytes(&bytes[..cut]).unwrap_err();
            assert_eq!(
                from_file.to_string(),
                from_bytes.to_string(),
                "cut at {cut}"
            );
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = scratch_dir("fail");
        let path = dir.join("ckpt.qb");
        save_path(&path, &tree(4)).unwrap();
        let before = fs::read(&path).unwrap();
        // Fail at several points: in the preamble, in the header, in the data.
        for fail_at in [0, 5, 20, 60, 200, 2000] {
            let err = save_with(&path, |file| {
                let mut w = FailAfter {
                    inner: file,
                    left: fail_at,
                };
                write(&tree(1000), &mut w)
            })
            .unwrap_err();
            match &err {
                IoError::Io { path: p, source } => {
                    assert_eq!(p.as_deref(), Some(path.as_path()));
                    assert!(source.to_string().contains("simulated"), "{source}");
                }
                other => panic!("unexpected error {other:?}"),
            }
            assert_eq!(
                fs::read(&path).unwrap(),
                before,
                "failing after {fail_at} bytes"
            );
            assert_eq!(
                entries(&dir),
                ["ckpt.qb"],
                "a temporary file was left behind"
            );
        }
        assert_eq!(load_path(&path).unwrap(), tree(4));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_invalid_tree_keeps_the_old_file() {
        let dir = scratch_dir("invalid");
        let path = dir.join("ckpt.qb");
        save_path(&path, &tree(2)).unwrap();
        let before = fs::read(&path).unwrap();
        let dup = Node::Dict(vec![(Key::Int(1), Node::None), (Key::Int(1), Node::None)]);
        let err = save_path(&path, &dup).unwrap_err();
        assert!(matches!(err, IoError::InvalidTree { .. }), "{err:?}");
        assert_eq!(fs::read(&path).unwrap(), before);
        assert_eq!(entries(&dir), ["ckpt.qb"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn operating_system_errors_name_the_path() {
        let dir = scratch_dir("missing");
        let missing = dir.join("no-such-dir").join("ckpt.qb");
        let err = save_path(&missing, &Node::None).unwrap_err();
        match &err {
            IoError::Io { path, source } => {
                assert_eq!(path.as_deref(), Some(missing.as_path()));
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(err.to_string().starts_with(&missing.display().to_string()));
        let err = load_path(dir.join("absent.qb")).unwrap_err();
        assert!(
            matches!(&err, IoError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_relative_file_name_saves_in_the_current_directory_form() {
        // `Path::parent` of a bare name is empty; the temporary goes to ".".
        let err = save_with(Path::new(""), |_| Ok(())).unwrap_err();
        assert!(matches!(err, IoError::Io { .. }));
    }
}
