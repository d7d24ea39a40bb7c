//! Sharing a device transport's unique id before it can connect: NCCL (and transports like
//! it) make a communicator from an opaque id that one rank creates and every other rank must
//! receive by some other channel. Two channels are offered: the process group itself (MPI
//! launches: the id goes from rank 0 to all), and a file on a filesystem every machine sees
//! (launches without MPI).
//!
//! This module moves bytes only; it must not know a device library.

use super::communicator::Fault;
use super::group::Group;
use crate::error::{Error, Result};
use std::path::Path;
use std::time::{Duration, Instant};

/// Rank 0 makes the id with `make` (`len` bytes, e.g. 128 for `ncclGetUniqueId`) and every rank
/// of `group` returns it. A failure of `make` on rank 0 is every rank's error (the others'
/// names it), never a hang.
pub fn share_unique_id(
    group: &Group,
    len: usize,
    make: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    let mine = if group.rank() == 0 {
        make().and_then(|id| checked_len(id, len))
    } else {
        Ok(vec![0; len])
    };
    let (status, mine) = match mine {
        Ok(id) => (Ok(()), id),
        Err(e) => (Err(e), Vec::new()),
    };
    let description = format!("share_unique_id({len} bytes)");
    group.collective("share_unique_id", &description, status, |comm, deadline| {
        // An id is small: every rank sends its bytes and keeps rank 0's.
        let mut all = comm.exchange(mine, deadline)?;
        if all.is_empty() || all[0].len() != len {
            return Err(Fault::Transport {
                message: "rank 0's unique id did not arrive whole".into(),
            });
        }
        Ok(all.swap_remove(0))
    })
}

fn checked_len(id: Vec<u8>, len: usize) -> Result<Vec<u8>> {
    if id.len() == len {
        Ok(id)
    } else {
        Err(Error::invalid(format!(
            "share_unique_id: the id has {} bytes, expected {len}",
            id.len()
        )))
    }
}

/// The magic first line of an id file.
const MAGIC: &str = "quabla-unique-id v1";

/// Shares an id through the file `path` on a filesystem every rank sees: rank 0 makes it with
/// `make` and writes it atomically, tagged with `run` (a string unique to this launch, such
/// as the job id, so that a file left by an earlier run is never taken for this one's); the
/// other ranks wait for a file with the same tag, at most `timeout`.
pub fn share_unique_id_through_file(
    path: &Path,
    rank: usize,
    run: &str,
    len: usize,
    timeout: Duration,
    make: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    if run.contains('\n') {
        return Err(Error::invalid(
            "share_unique_id_through_file: the run tag must be one line",
        ));
    }
    if rank == 0 {
        let id = make().and_then(|id| checked_len(id, len))?;
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{MAGIC}\n{run}\n{hex}\n");
        write_atomically(path, text.as_bytes())?;
        return Ok(id);
    }
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(id) = parse(&text, run, len) {
                return Ok(id);
            }
        }
        if started.elapsed() >= timeout {
            return Err(Error::Distributed {
                ranks: vec![0],
                message: format!(
                    "distributed share_unique_id_through_file on rank {rank}: rank 0 did not write the id of run {run:?} to {} within {:.1} s; check that rank 0 is running and that the path is on a filesystem every machine shares",
                    path.display(),
                    timeout.as_secs_f64()
                ),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// The id in an id file of run `run`, if the file is one.
fn parse(text: &str, run: &str, len: usize) -> Option<Vec<u8>> {
    let mut lines = text.lines();
    if lines.next()? != MAGIC || lines.next()? != run {
        return None;
    }
    let hex = lines.next()?;
    if hex.len() != 2 * len {
        return None;
    }
    (0..len)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`, so a reader
/// sees the old file or the whole new one.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let io_error = |e: std::io::Error| Error::Io {
        path: Some(path.to_path_buf()),
        message: format!("cannot write {}: {e}", path.display()),
        kind: e.kind(),
    };
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&temp, bytes).map_err(io_error)?;
    std::fs::rename(&temp, path).map_err(io_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_file_is_read_only_for_its_run() {
        let dir = std::env::temp_dir().join(format!("quabla-bootstrap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("id");
        let id: Vec<u8> = (0..128u32).map(|i| (i * 7 % 256) as u8).collect();
        let made =
            share_unique_id_through_file(&path, 0, "job-1", 128, Duration::ZERO, || Ok(id.clone()))
                .unwrap();
        assert_eq!(made, id);
        let read = share_unique_id_through_file(&path, 3, "job-1", 128, Duration::ZERO, || {
            unreachable!("only rank 0 makes the id")
        })
        .unwrap();
        assert_eq!(read, id);
        // A file of another run is not this run's id: a bounded wait, then a typed error.
        let started = Instant::now();
        let err = share_unique_id_through_file(
            &path,
            1,
            "job-2",
            128,
            Duration::from_millis(50),
            || unreachable!(),
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(matches!(err, Error::Distributed { .. }), "{err}");
        assert!(err.to_string().contains("job-2"), "{err}");
        // A wrong length from the maker is an error, and nothing is written.
        let other = dir.join("other");
        let err =
            share_unique_id_through_file(&other, 0, "r", 128, Duration::ZERO, || Ok(vec![1, 2, 3]))
                .unwrap_err();
        assert!(err.to_string().contains("expected 128"), "{err}");
        assert!(!other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
