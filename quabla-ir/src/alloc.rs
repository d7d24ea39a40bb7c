//! Fallible allocation of element storage: the one place where Quabla asks the allocator for
//! memory whose size comes from user input (a shape), so that a request the machine cannot
//! serve is a value ([`AllocError`]) instead of the process abort of Rust's collections.
//!
//! This module owns the two ways element storage is allocated and nothing else:
//!
//! - **Vectors** ([`try_zeroed_vec`], [`try_vec_with_capacity`]) are truly fallible: the
//!   allocation itself reports failure, nothing is left allocated, and the caller's state is
//!   untouched. Zeroed vectors come from zeroed allocation, so large ones are fresh pages that
//!   the operating system zeroes on first write.
//! - **Shared slices** (`Arc<[T]>`, what [`crate::HostData`] holds: [`try_shared_zeroed`],
//!   [`try_shared_filled`], [`try_shared_from_slice`], [`try_shared_uninit`]) cannot be
//!   allocated fallibly on stable Rust (`Arc::try_new_zeroed_slice` is unstable). They are
//!   made fallible by checking the layout first (a size past `isize::MAX` is refused before
//!   `Arc` would panic on it) and, for large requests, by *probing*: the same number of bytes
//!   is requested from the global allocator, released, and only then is the `Arc` allocated.
//!   A probe that fails is reported; one that succeeds is followed at once by an allocation of
//!   the same size, which the allocator then serves. The remaining window (another thread
//!   taking the memory between the probe and the allocation) is the limit of stable Rust;
//!   with it, a request larger than the machine can hold is refused every time.
//!
//! What "the machine can hold" means depends on the operating system. On Linux with the
//! default heuristic overcommit (`vm.overcommit_memory = 0`) a single request larger than RAM
//! plus swap fails; with overcommit always on (`1`) only a request larger than the free
//! address space fails (about 128 TiB on x86-64), and smaller ones succeed lazily and fail
//! only when their pages are written. Tests that need a deterministic refusal therefore ask
//! for more than any address space (2^50 bytes and up) or for more than `isize::MAX`.
//!
//! This module must not allocate anything whose size is not known up front, and must not be
//! used for small bookkeeping (a failure there means every later allocation fails too).

use std::alloc::Layout;
use std::fmt;
use std::mem::{size_of, MaybeUninit};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// The allocator refused a request of `bytes` bytes (or the request was larger than any
/// allocation can be on this platform).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AllocError {
    pub bytes: u128,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot allocate {} bytes", self.bytes)
    }
}

impl std::error::Error for AllocError {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for bool {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for u8 {}
}

/// Element types whose all-zero bit pattern is a valid value: the storage types of Quabla
/// (`f32`, `f64`, `bool`, `i32`, `i64`) and bytes. Sealed: zeroed allocation of any other type could create
/// invalid values.
pub trait Zeroable: Copy + sealed::Sealed {
    /// Whether this value's bits are all zero.
    fn is_zero_bits(&self) -> bool;
}

impl Zeroable for f32 {
    fn is_zero_bits(&self) -> bool {
        self.to_bits() == 0
    }
}

impl Zeroable for f64 {
    fn is_zero_bits(&self) -> bool {
        self.to_bits() == 0
    }
}

impl Zeroable for bool {
    fn is_zero_bits(&self) -> bool {
        !*self
    }
}

impl Zeroable for i32 {
    fn is_zero_bits(&self) -> bool {
        *self == 0
    }
}

impl Zeroable for i64 {
    fn is_zero_bits(&self) -> bool {
        *self == 0
    }
}

impl Zeroable for u8 {
    fn is_zero_bits(&self) -> bool {
        *self == 0
    }
}

/// The bytes `n` elements of `T` take, exactly (no overflow).
fn request_bytes<T>(n: usize) -> u128 {
    n as u128 * size_of::<T>() as u128
}

/// Requests below this many bytes are not probed: the allocator serves them from memory it
/// already holds, and if even such a request fails the process is out of memory everywhere
/// (the next small allocation of any kind would abort), so a probe would buy nothing.
const PROBE_MIN_BYTES: usize = 64 << 10;

/// Checks that a block of `layout` can be allocated now: asks the global allocator for it
/// and gives it back at once (see the module documentation).
fn probe(layout: Layout, bytes: u128) -> Result<(), AllocError> {
    if layout.size() < PROBE_MIN_BYTES {
        return Ok(());
    }
    // SAFETY: the layout has a nonzero size (at least `PROBE_MIN_BYTES`).
    let block = unsafe { std::alloc::alloc(layout) };
    if block.is_null() {
        return Err(AllocError { bytes });
    }
    // The compiler may remove an allocation that is freed unused, as if it had succeeded; a
    // volatile write makes this one observable, so it is really asked for (and touches one
    // page, nothing next to the request it checks).
    // SAFETY: `block` points to at least one writable byte of the block just allocated.
    unsafe { block.write_volatile(0) };
    // SAFETY: `block` was allocated just above by the global allocator with `layout`.
    unsafe { std::alloc::dealloc(block, layout) };
    Ok(())
}

/// The layout `Arc<[T]>` allocates for `n` elements: two reference counts, then the
/// elements. `None` when it exceeds `isize::MAX` bytes (where `Arc` itself would panic).
fn shared_layout<T>(n: usize) -> Option<Layout> {
    let counts = Layout::new::<[AtomicUsize; 2]>();
    let (layout, _) = counts.extend(Layout::array::<T>(n).ok()?).ok()?;
    Some(layout.pad_to_align())
}

/// Checks (and probes) a shared allocation of `n` elements of `T` before it is made.
fn check_shared<T>(n: usize) -> Result<(), AllocError> {
    let bytes = request_bytes::<T>(n);
    let layout = shared_layout::<T>(n).ok_or(AllocError { bytes })?;
    probe(layout, bytes)
}

/// Allocations of at least this many bytes ask for transparent huge pages.
const HUGE_PAGES_MIN_BYTES: usize = 32 << 20;

/// Asks Linux to back the pages of a fresh allocation of `bytes` bytes at `ptr` with
/// transparent huge pages, for an allocation of at least [`HUGE_PAGES_MIN_BYTES`]; other
/// systems and smaller allocations are left alone. A pass over such an array with 4 KiB
/// pages misses the TLB about once per page: reading 80 MB (`sum` over 10^7 float64 values)
/// went about 10% faster with huge pages. Only these large allocations are advised: huge
/// pages for every allocation (glibc's `hugetlb` tunable) slowed the products and the
/// eager chains, whose buffers of a few MiB are allocated and freed call after call. The
/// call is advice: on a kernel with huge pages off, or a failed call, nothing changes. (Where
/// the kernel compacts memory for advised regions on a fault, the default `defrag` setting,
/// the first touch of such an array may wait for that on a fragmented machine.)
fn advise_huge_pages(ptr: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_PAGES_MIN_BYTES {
        // SAFETY: `sysconf` reads a constant of the system.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => return,
        };
        let start = (ptr as usize).next_multiple_of(page);
        let end = (ptr as usize + bytes) / page * page;
        if end > start {
            // SAFETY: the pages `start..end` lie inside the caller's allocation, and
            // `MADV_HUGEPAGE` changes how they are backed, never their contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// `n` zeros in a vector of length `n`, from zeroed allocation.
pub fn try_zeroed_vec<T: Zeroable>(n: usize) -> Result<Vec<T>, AllocError> {
    let bytes = request_bytes::<T>(n);
    let layout = Layout::array::<T>(n).map_err(|_| AllocError { bytes })?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a nonzero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(AllocError { bytes });
    }
    advise_huge_pages(ptr.cast(), layout.size());
    // SAFETY: `ptr` comes from the global allocator with the layout of `n` elements of `T`
    // (the layout `Vec` uses for capacity `n`, with `T`'s alignment), and all of its bytes are
    // zero, which is a valid `T` (`Zeroable`), so all `n` elements are initialized.
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

/// An empty vector with room for exactly `n` elements.
pub fn try_vec_with_capacity<T>(n: usize) -> Result<Vec<T>, AllocError> {
    let mut v: Vec<T> = Vec::new();
    v.try_reserve_exact(n).map_err(|_| AllocError {
        bytes: request_bytes::<T>(n),
    })?;
    advise_huge_pages(v.as_ptr().cast(), n * std::mem::size_of::<T>());
    Ok(v)
}

/// `n` zeros in fresh shared storage, from zeroed allocation (large buffers are fresh pages
/// that the operating system zeroes when they are first written, so the kernel that writes
/// an output pays for its pages once, on the threads that write them).
pub fn try_shared_zeroed<T: Zeroable>(n: usize) -> Result<Arc<[T]>, AllocError> {
    check_shared::<T>(n)?;
    let data = Arc::<[T]>::new_zeroed_slice(n);
    advise_huge_pages(data.as_ptr().cast(), n * std::mem::size_of::<T>());
    // SAFETY: the all-zero bit pattern is a valid `T` (`Zeroable`).
    Ok(unsafe { data.assume_init() })
}

/// Fresh shared storage for `n` elements, uninitialized.
pub fn try_shared_uninit<T>(n: usize) -> Result<Arc<[MaybeUninit<T>]>, AllocError> {
    check_shared::<T>(n)?;
    let data = Arc::<[T]>::new_uninit_slice(n);
    advise_huge_pages(data.as_ptr().cast(), n * std::mem::size_of::<T>());
    Ok(data)
}

/// `n` copies of `value` in fresh shared storage; zeros come from zeroed allocation, other
/// values are written in one pass.
pub fn try_shared_filled<T: Zeroable>(value: T, n: usize) -> Result<Arc<[T]>, AllocError> {
    if value.is_zero_bits() {
        return try_shared_zeroed(n);
    }
    let mut data = try_shared_uninit::<T>(n)?;
    let slots = Arc::get_mut(&mut data).ok_or(AllocError {
        bytes: request_bytes::<T>(n),
    })?;
    for slot in slots.iter_mut() {
        slot.write(value);
    }
    // SAFETY: every element was written just above.
    Ok(unsafe { data.assume_init() })
}

/// A copy of `values` in fresh shared storage.
pub fn try_shared_from_slice<T: Copy>(values: &[T]) -> Result<Arc<[T]>, AllocError> {
    let mut data = try_shared_uninit::<T>(values.len())?;
    let slots = Arc::get_mut(&mut data).ok_or(AllocError {
        bytes: request_bytes::<T>(values.len()),
    })?;
    for (slot, &v) in slots.iter_mut().zip(values) {
        slot.write(v);
    }
    // SAFETY: `slots` has `values.len()` elements and every one was written just above.
    Ok(unsafe { data.assume_init() })
}

/// Fresh shared storage of `n` elements written from `values`; `Ok(None)` (and nothing kept)
/// when `values` does not yield exactly `n` items.
pub fn try_shared_from_iter<T: Copy>(
    values: impl IntoIterator<Item = T>,
    n: usize,
) -> Result<Option<Arc<[T]>>, AllocError> {
    let mut data = try_shared_uninit::<T>(n)?;
    let slots = Arc::get_mut(&mut data).ok_or(AllocError {
        bytes: request_bytes::<T>(n),
    })?;
    let mut values = values.into_iter();
    for slot in slots.iter_mut() {
        match values.next() {
            Some(v) => {
                slot.write(v);
            }
            None => return Ok(None),
        }
    }
    if values.next().is_some() {
        return Ok(None);
    }
    // SAFETY: all `n` elements were written by the loop above (it returns early otherwise).
    Ok(Some(unsafe { data.assume_init() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` line of the mapping of this process that holds `address`.
    #[cfg(target_os = "linux")]
    fn vm_flags_at(address: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((start, end)) = range.split_once('-') {
                    if let (Ok(start), Ok(end)) = (
                        usize::from_str_radix(start, 16),
                        usize::from_str_radix(end, 16),
                    ) {
                        inside = (start..end).contains(&address);
                        continue;
                    }
                }
            }
            if inside && line.starts_with("VmFlags:") {
                return line.to_string();
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    /// Large allocations (and only those) are advised to use huge pages: their mapping
    /// carries the `hg` flag (`MADV_HUGEPAGE`) whether or not the kernel has huge pages on.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_allocations_ask_for_huge_pages() {
        // A kernel built without transparent huge pages refuses the advice.
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            return;
        }
        let n = (HUGE_PAGES_MIN_BYTES + (4 << 20)) / 8;
        let advised = |address: usize| vm_flags_at(address).split(' ').any(|f| f == "hg");
        let zeroed = try_zeroed_vec::<f64>(n).unwrap();
        assert!(advised(zeroed.as_ptr() as usize + n * 4));
        let shared = try_shared_uninit::<f64>(n).unwrap();
        assert!(advised(shared.as_ptr() as usize + n * 4));
        let small = try_shared_uninit::<f64>(1 << 17).unwrap();
        assert!(!advised(small.as_ptr() as usize + (1 << 19)));
    }

    /// More than any address space (x86-64 and aarch64 user space are at most 2^57 bytes) but
    /// less than `isize::MAX`: refused by the allocator itself, whatever the overcommit policy.
    const BEYOND_ADDRESS_SPACE: usize = 1 << 60;

    #[test]
    fn small_requests_succeed_with_the_right_contents() {
        assert_eq!(try_zeroed_vec::<f64>(3).unwrap(), vec![0.0; 3]);
        assert!(try_zeroed_vec::<f32>(0).unwrap().is_empty());
        assert_eq!(try_vec_with_capacity::<f64>(5).unwrap().capacity(), 5);
        assert_eq!(&*try_shared_zeroed::<bool>(2).unwrap(), &[false, false]);
        assert_eq!(&*try_shared_filled(1.5f32, 3).unwrap(), &[1.5, 1.5, 1.5]);
        assert_eq!(&*try_shared_from_slice(&[1u8, 2]).unwrap(), &[1, 2]);
        assert_eq!(
            try_shared_from_iter([1.0, 2.0], 2).unwrap().as_deref(),
            Some(&[1.0, 2.0][..])
        );
        assert_eq!(try_shared_from_iter([1.0, 2.0], 3).unwrap(), None);
        assert_eq!(try_shared_from_iter([1.0, 2.0], 1).unwrap(), None);
    }

    #[test]
    fn large_probed_requests_succeed() {
        let n = 1 << 20;
        let v = try_shared_filled(2.0f64, n).unwrap();
        assert_eq!(v.len(), n);
        assert!(v.iter().all(|&x| x == 2.0));
        assert!(try_shared_zeroed::<f64>(n)
            .unwrap()
            .iter()
            .all(|&x| x == 0.0));
    }

    #[test]
    fn requests_past_isize_max_are_refused_without_panicking() {
        let bytes = usize::MAX as u128 * 8;
        assert_eq!(
            try_zeroed_vec::<f64>(usize::MAX).unwrap_err(),
            AllocError { bytes }
        );
        assert_eq!(
            try_vec_with_capacity::<f64>(usize::MAX).unwrap_err(),
            AllocError { bytes }
        );
        assert_eq!(
            try_shared_zeroed::<f64>(usize::MAX).unwrap_err(),
            AllocError { bytes }
        );
        assert!(try_shared_filled(1.0f64, usize::MAX).is_err());
    }

    #[test]
    fn requests_beyond_the_address_space_are_refused() {
        let n = BEYOND_ADDRESS_SPACE / 8;
        let bytes = BEYOND_ADDRESS_SPACE as u128;
        assert_eq!(try_zeroed_vec::<f64>(n).unwrap_err(), AllocError { bytes });
        assert_eq!(
            try_vec_with_capacity::<f64>(n).unwrap_err(),
            AllocError { bytes }
        );
        assert_eq!(
            try_shared_zeroed::<f64>(n).unwrap_err(),
            AllocError { bytes }
        );
        assert_eq!(
            try_shared_filled(1.0f64, n).unwrap_err(),
            AllocError { bytes }
        );
        assert_eq!(
            try_shared_uninit::<f64>(n).unwrap_err(),
            AllocError { bytes }
        );
        // The process is intact: ordinary allocation still works.
        assert_eq!(try_zeroed_vec::<f64>(4).unwrap().len(), 4);
    }

    #[test]
    fn the_error_says_how_many_bytes() {
        assert_eq!(
            AllocError { bytes: 1 << 43 }.to_string(),
            "cannot allocate 8796093022208 bytes"
        );
    }
}
