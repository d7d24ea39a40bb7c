//! A small process-wide cache of large element buffers that their owners released, so that a
//! chain of eager operations writes each output into memory an earlier output left behind
//! instead of asking the operating system for fresh pages on every call.
//!
//! Why: an output of a few MiB is allocated with `mmap` and returned with `munmap` by the
//! system allocator (glibc also trims the top of its heap once more than a few MiB are free),
//! so every eager call paid a page fault per 4 KiB of its output. On `sin(x)**2 + cos(x)` over
//! 10^6 float32 values that was 1900 page faults per evaluation and about half its time.
//!
//! This module owns the cache and its bounds, and nothing else. Only buffers of at least
//! [`MIN_BYTES`] that nobody else references enter it (an `Arc` with other holders is simply
//! dropped by its owner as before); it keeps at most [`MAX_BUFFERS`] buffers and [`MAX_BYTES`]
//! bytes, evicting the oldest first. A buffer taken from it has the contents its last owner
//! left: callers must overwrite every element (in debug builds the contents are scrambled on
//! the way out, so a caller that relied on zeros fails its tests).

use crate::{DType, HostData};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Buffers smaller than this are left to the system allocator, which serves them from its
/// heap without page faults.
pub const MIN_BYTES: usize = 256 * 1024;
/// The most bytes the cache keeps.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// The most buffers the cache keeps.
pub const MAX_BUFFERS: usize = 8;

#[derive(Default)]
struct Cache {
    buffers: VecDeque<HostData>,
    bytes: usize,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    buffers: VecDeque::new(),
    bytes: 0,
});

fn bytes_of(data: &HostData) -> usize {
    data.len() * data.dtype().itemsize()
}

/// Whether `data` may enter the cache: large enough, and its storage referenced by `data`
/// alone.
pub fn wanted(data: &HostData) -> bool {
    let unique = match data {
        HostData::F32(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
        HostData::F64(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
        HostData::Bool(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
        HostData::I32(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
        HostData::I64(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
    };
    unique && bytes_of(data) >= MIN_BYTES && bytes_of(data) <= MAX_BYTES
}

/// Keeps `data` for a later [`take`] if it is [`wanted`]; drops it otherwise. The buffers the
/// bounds evict are freed after the cache is unlocked.
pub fn release(data: HostData) {
    if !wanted(&data) {
        return;
    }
    let mut evicted = Vec::new();
    {
        let Ok(mut cache) = CACHE.lock() else {
            return;
        };
        cache.bytes += bytes_of(&data);
        cache.buffers.push_back(data);
        while cache.buffers.len() > MAX_BUFFERS || cache.bytes > MAX_BYTES {
            let Some(old) = cache.buffers.pop_front() else {
                break;
            };
            cache.bytes -= bytes_of(&old);
            evicted.push(old);
        }
    }
    drop(evicted);
}

/// A released buffer of exactly `len` elements of `dtype`, most recently released first, with
/// unspecified contents; `None` when the cache holds none.
pub fn take(dtype: DType, len: usize) -> Option<HostData> {
    // Every plan output asks: a small one never takes the lock of a cache that holds none.
    if len * dtype.itemsize() < MIN_BYTES {
        return None;
    }
    let taken = {
        let mut cache = CACHE.lock().ok()?;
        let at = cache
            .buffers
            .iter()
            .rposition(|d| d.dtype() == dtype && d.len() == len)?;
        let data = cache.buffers.remove(at)?;
        cache.bytes -= bytes_of(&data);
        data
    };
    #[cfg(debug_assertions)]
    let taken = scrambled(taken);
    Some(taken)
}

/// Bytes the cache holds now.
pub fn cached_bytes() -> usize {
    CACHE.lock().map(|c| c.bytes).unwrap_or(0)
}

/// Frees every buffer the cache holds.
pub fn clear() {
    let buffers = match CACHE.lock() {
        Ok(mut cache) => {
            cache.bytes = 0;
            std::mem::take(&mut cache.buffers)
        }
        Err(_) => return,
    };
    drop(buffers);
}

/// The buffer with every element overwritten by a value no kernel writes by accident (a NaN
/// with a recognisable payload, or `true`), so that debug builds catch a caller that read a
/// recycled buffer before writing it.
#[cfg(debug_assertions)]
fn scrambled(mut data: HostData) -> HostData {
    match &mut data {
        HostData::F32(v) => {
            if let Some(s) = Arc::get_mut(v) {
                s.fill(f32::from_bits(0x7fc0_dead));
            }
        }
        HostData::F64(v) => {
            if let Some(s) = Arc::get_mut(v) {
                s.fill(f64::from_bits(0x7ff8_0000_dead_beef));
            }
        }
        HostData::Bool(v) => {
            if let Some(s) = Arc::get_mut(v) {
                s.fill(true);
            }
        }
        HostData::I32(v) => {
            if let Some(s) = Arc::get_mut(v) {
                s.fill(0x7ead_beef);
            }
        }
        HostData::I64(v) => {
            if let Some(s) = Arc::get_mut(v) {
                s.fill(0x7ead_beef_dead_beef);
            }
        }
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test touches the process-wide cache, so that parallel tests do not race on it.
    #[test]
    fn the_cache_keeps_large_unique_buffers_within_its_bounds() {
        clear();
        let n = MIN_BYTES / 8;
        // Small, or referenced elsewhere: not kept.
        release(HostData::F64(vec![1.0; 8].into()));
        let shared: Arc<[f64]> = vec![1.0; n].into();
        let other = shared.clone();
        release(HostData::F64(shared));
        assert_eq!(cached_bytes(), 0);
        drop(other);

        // Large and unique: kept, and taken back by exact dtype and length only.
        release(HostData::F64(vec![2.0; n].into()));
        assert_eq!(cached_bytes(), n * 8);
        assert!(take(DType::F64, n + 1).is_none());
        assert!(take(DType::F32, n).is_none());
        let back = take(DType::F64, n).expect("a cached buffer");
        assert_eq!(back.len(), n);
        assert_eq!(cached_bytes(), 0);

        // Bounds: the oldest buffers go first.
        for i in 0..MAX_BUFFERS + 3 {
            release(HostData::F64(vec![i as f64; n + i].into()));
        }
        let c = CACHE.lock().unwrap();
        assert_eq!(c.buffers.len(), MAX_BUFFERS);
        assert_eq!(c.buffers[0].len(), n + 3);
        assert_eq!(
            c.bytes,
            c.buffers.iter().map(|d| d.len() * 8).sum::<usize>()
        );
        drop(c);
        clear();
        assert_eq!(cached_bytes(), 0);
    }
}
