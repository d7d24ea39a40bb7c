//! The kernel cache on disk: compiled programs keyed by their source, the target
//! architecture and the NVRTC version, so a plan compiled once is not compiled again in a
//! later process.
//!
//! The folder is `$QUABLA_CUDA_CACHE`, else `$XDG_CACHE_HOME/quabla/cuda`, else
//! `~/.cache/quabla/cuda`; `QUABLA_CUDA_CACHE=off` turns the cache off. A file is named by a
//! hash of the key and holds the whole key (the source included) before the compiled image; an
//! entry is used only when its key equals the one asked for and its image is complete, so a
//! hash collision, a truncated write or a file from another version is a miss, never a wrong
//! kernel. Files are written to a temporary name and renamed into place, so concurrent
//! processes never read a half-written entry. A cache that cannot be read or written is a
//! miss: the cache only ever saves time.

use crate::codegen::fnv64;
use crate::nvrtc::{Nvrtc, Target};
use quabla_backend::BackendError;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The first line of every cache file.
const MAGIC: &[u8] = b"quabla-cuda-kernels 1\n";

/// Where compiled programs are kept (`None`: no cache).
#[derive(Clone, Debug)]
pub struct KernelCache {
    folder: Option<PathBuf>,
}

impl KernelCache {
    /// The cache of this process's environment (see the module docs).
    pub fn from_env() -> KernelCache {
        let folder = match std::env::var_os("QUABLA_CUDA_CACHE") {
            Some(v) if v == "off" => None,
            Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
            _ => std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .filter(|v| !v.is_empty())
                        .map(|h| PathBuf::from(h).join(".cache"))
                })
                .map(|base| base.join("quabla").join("cuda")),
        };
        KernelCache { folder }
    }

    /// A cache in `folder` (`None`: no cache).
    pub fn in_folder(folder: Option<PathBuf>) -> KernelCache {
        KernelCache { folder }
    }

    pub fn folder(&self) -> Option<&Path> {
        self.folder.as_deref()
    }

    /// The key of a compile: everything that decides its output.
    fn key(source: &str, target: Target, version: (i32, i32)) -> Vec<u8> {
        let mut key = format!(
            "target {}\nnvrtc {}.{}\noptions {}\nsource {}\n",
            target.tag(),
            version.0,
            version.1,
            crate::nvrtc::OPTIONS.join(" "),
            source.len()
        )
        .into_bytes();
        key.extend_from_slice(source.as_bytes());
        key
    }

    fn file(&self, key: &[u8]) -> Option<PathBuf> {
        let folder = self.folder.as_ref()?;
        Some(folder.join(format!("{:016x}.bin", fnv64(&[key]))))
    }

    /// The compiled image of `source` for `target`: from the cache, or compiled by `nvrtc` (and
    /// stored). Also says which, and how long compiling took.
    pub fn get_or_compile(
        &self,
        source: &str,
        target: Target,
        nvrtc: &Nvrtc,
    ) -> Result<(Vec<u8>, String), BackendError> {
        let key = Self::key(source, target, nvrtc.version());
        let file = self.file(&key);
        if let Some(image) = file.as_deref().and_then(|f| read_entry(f, &key)) {
            return Ok((image, format!("{target}, from the kernel cache")));
        }
        let started = Instant::now();
        let image = nvrtc
            .compile(source, target)
            .map_err(|e| BackendError::Device {
                device: crate::NAME.into(),
                message: e.to_string(),
            })?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        if let Some(f) = &file {
            write_entry(f, &key, &image);
        }
        Ok((image, format!("{target}, compiled by NVRTC in {ms:.0} ms")))
    }
}

/// The image of the entry in `file` when its key is `key` and the image is complete.
pub fn read_entry(file: &Path, key: &[u8]) -> Option<Vec<u8>> {
    let bytes = std::fs::read(file).ok()?;
    let rest = bytes.strip_prefix(MAGIC)?;
    let (len, rest) = read_u64(rest)?;
    let stored_key = rest.get(..len as usize)?;
    if stored_key != key {
        return None;
    }
    let rest = &rest[len as usize..];
    let (len, rest) = read_u64(rest)?;
    if rest.len() as u64 != len {
        return None;
    }
    Some(rest.to_vec())
}

fn read_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let head: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some((u64::from_le_bytes(head), &bytes[8..]))
}

/// Writes an entry (best effort: an error leaves no entry).
pub fn write_entry(file: &Path, key: &[u8], image: &[u8]) {
    let Some(folder) = file.parent() else {
        return;
    };
    if std::fs::create_dir_all(folder).is_err() {
        return;
    }
    let mut bytes = Vec::with_capacity(MAGIC.len() + 16 + key.len() + image.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(key.len() as u64).to_le_bytes());
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(&(image.len() as u64).to_le_bytes());
    bytes.extend_from_slice(image);
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, &bytes).is_ok() && std::fs::rename(&tmp, file).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_used_only_for_their_own_key_and_when_complete() {
        let dir = std::env::temp_dir().join(format!("quabla-cuda-cache-{}", std::process::id()));
        let file = dir.join("entry.bin");
        let key = KernelCache::key("source a", Target::Cubin(90), (12, 9));
        write_entry(&file, &key, b"image");
        assert_eq!(read_entry(&file, &key).as_deref(), Some(&b"image"[..]));
        // Another source, architecture or NVRTC version is a miss.
        for other in [
            KernelCache::key("source b", Target::Cubin(90), (12, 9)),
            KernelCache::key("source a", Target::Cubin(80), (12, 9)),
            KernelCache::key("source a", Target::Ptx(90), (12, 9)),
            KernelCache::key("source a", Target::Cubin(90), (13, 0)),
        ] {
            assert_eq!(read_entry(&file, &other), None);
        }
        // A truncated file is a miss.
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() - 2]).unwrap();
        assert_eq!(read_entry(&file, &key), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_cache_can_be_turned_off() {
        let cache = KernelCache::in_folder(None);
        assert!(cache.folder().is_none());
        assert!(cache.file(b"key").is_none());
    }
}
