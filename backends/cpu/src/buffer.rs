//! Typed storage of the executor: the values held between steps, typed views of them, and the
//! pool that recycles buffers once their last consumer has run.
//!
//! A value is host data bound from outside (plan inputs and constants, shared and never
//! written), a buffer the executor owns, or a borrowed view of a value of an enclosing frame
//! (how a region body reads its loop constants and the current slice of a scanned operand
//! without copying them). Owned buffers come from a [`Pool`]: when the schedule says a value is
//! dead, its buffer goes back to the pool and the next allocation of the same dtype reuses it
//! (smallest buffer that is large enough). Storage is physically typed: 8, 4 and 1 bytes per
//! element for f64, f32 and bool.
//!
//! Every buffer whose size comes from the plan is allocated fallibly ([`quabla_ir::alloc`]):
//! a request the machine cannot serve is an [`AllocError`] that the executor reports as
//! `BackendError::OutOfMemory`, with the pool and every value it already holds untouched.

use quabla_backend::BackendError;
use quabla_ir::alloc::{self, AllocError};
use quabla_ir::{DType, HostData};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// An element type of storage, with its conversions to and from the float64 working type.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    fn to_f64(self) -> f64;
    /// Rounds a float64 value to this type (numerics.md §1.4: nonzero and NaN are true).
    fn from_f64(v: f64) -> Self;
}

impl Elem for f64 {
    const ZERO: f64 = 0.0;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> f64 {
        v
    }
}

impl Elem for f32 {
    const ZERO: f32 = 0.0;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}

impl Elem for bool {
    const ZERO: bool = false;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    #[inline(always)]
    fn from_f64(v: f64) -> bool {
        v != 0.0
    }
}

/// A read-only typed view of a value's elements (row-major).
#[derive(Clone, Copy, Debug)]
pub(crate) enum View<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    Bool(&'a [bool]),
}

impl<'a> From<&'a HostData> for View<'a> {
    fn from(data: &'a HostData) -> View<'a> {
        match data {
            HostData::F32(v) => View::F32(v),
            HostData::F64(v) => View::F64(v),
            HostData::Bool(v) => View::Bool(v),
        }
    }
}

impl<'a> View<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            View::F32(v) => v.len(),
            View::F64(v) => v.len(),
            View::Bool(v) => v.len(),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            View::F32(_) => DType::F32,
            View::F64(_) => DType::F64,
            View::Bool(_) => DType::Bool,
        }
    }

    /// The address of the first element (for machine code that reads the elements).
    pub(crate) fn as_ptr(&self) -> *const u8 {
        match self {
            View::F32(v) => v.as_ptr().cast(),
            View::F64(v) => v.as_ptr().cast(),
            View::Bool(v) => v.as_ptr().cast(),
        }
    }

    /// Elements `start .. start + len` (`None` when out of range).
    pub(crate) fn slice(&self, start: usize, len: usize) -> Option<View<'a>> {
        let end = start.checked_add(len)?;
        Some(match *self {
            View::F32(v) => View::F32(v.get(start..end)?),
            View::F64(v) => View::F64(v.get(start..end)?),
            View::Bool(v) => View::Bool(v.get(start..end)?),
        })
    }

    /// Element `i` widened to f64.
    pub(crate) fn get_f64(&self, i: usize) -> f64 {
        match self {
            View::F32(v) => v[i].to_f64(),
            View::F64(v) => v[i],
            View::Bool(v) => v[i].to_f64(),
        }
    }

    /// Writes elements `start .. start + dst.len()` widened to f64 into `dst`.
    #[inline(always)]
    pub(crate) fn load_f64(&self, start: usize, dst: &mut [f64]) {
        let n = dst.len();
        match self {
            View::F64(v) => dst.copy_from_slice(&v[start..start + n]),
            View::F32(v) => widen(&v[start..start + n], dst),
            View::Bool(v) => widen(&v[start..start + n], dst),
        }
    }

    /// All elements widened to f64, or the slice itself when it already is f64; the widened
    /// copy is allocated fallibly.
    pub(crate) fn as_f64(&self) -> Result<Cow<'_, [f64]>, AllocError> {
        fn widened<T: Elem>(v: &[T]) -> Result<Vec<f64>, AllocError> {
            // Written in one pass (a zeroed vector filled afterwards writes everything twice).
            let mut out = alloc::try_vec_with_capacity(v.len())?;
            out.extend(v.iter().map(|&x| x.to_f64()));
            Ok(out)
        }
        Ok(match self {
            View::F64(v) => Cow::Borrowed(v),
            View::F32(v) => Cow::Owned(widened(v)?),
            View::Bool(v) => Cow::Owned(widened(v)?),
        })
    }
}

#[inline(always)]
fn widen<T: Elem>(src: &[T], dst: &mut [f64]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s.to_f64();
    }
}

/// A mutable typed view of an output's elements.
#[derive(Debug)]
pub(crate) enum ViewMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    Bool(&'a mut [bool]),
}

impl<'a> ViewMut<'a> {
    /// The elements of host data for writing, in place when this is its only reference (a
    /// copy is made first otherwise, as `Arc::make_mut` does).
    pub(crate) fn of_host(data: &'a mut HostData) -> ViewMut<'a> {
        match data {
            HostData::F32(v) => ViewMut::F32(Arc::make_mut(v)),
            HostData::F64(v) => ViewMut::F64(Arc::make_mut(v)),
            HostData::Bool(v) => ViewMut::Bool(Arc::make_mut(v)),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            ViewMut::F32(v) => v.len(),
            ViewMut::F64(v) => v.len(),
            ViewMut::Bool(v) => v.len(),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            ViewMut::F32(_) => DType::F32,
            ViewMut::F64(_) => DType::F64,
            ViewMut::Bool(_) => DType::Bool,
        }
    }

    /// The address of the first element (for machine code that writes the elements).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            ViewMut::F32(v) => v.as_mut_ptr().cast(),
            ViewMut::F64(v) => v.as_mut_ptr().cast(),
            ViewMut::Bool(v) => v.as_mut_ptr().cast(),
        }
    }

    /// Splits into `[0, mid)` and `[mid, len)`.
    pub(crate) fn split_at(self, mid: usize) -> (ViewMut<'a>, ViewMut<'a>) {
        match self {
            ViewMut::F32(v) => {
                let (a, b) = v.split_at_mut(mid);
                (ViewMut::F32(a), ViewMut::F32(b))
            }
            ViewMut::F64(v) => {
                let (a, b) = v.split_at_mut(mid);
                (ViewMut::F64(a), ViewMut::F64(b))
            }
            ViewMut::Bool(v) => {
                let (a, b) = v.split_at_mut(mid);
                (ViewMut::Bool(a), ViewMut::Bool(b))
            }
        }
    }

    /// Copies `src` into elements `at .. at + src.len()`; `false` (nothing written) when the
    /// dtypes differ or the range does not fit.
    pub(crate) fn copy_from(&mut self, at: usize, src: View<'_>) -> bool {
        fn put<T: Copy>(dst: &mut [T], at: usize, src: &[T]) -> bool {
            match at
                .checked_add(src.len())
                .and_then(|end| dst.get_mut(at..end))
            {
                Some(d) => {
                    d.copy_from_slice(src);
                    true
                }
                None => false,
            }
        }
        match (self, src) {
            (ViewMut::F32(d), View::F32(s)) => put(d, at, s),
            (ViewMut::F64(d), View::F64(s)) => put(d, at, s),
            (ViewMut::Bool(d), View::Bool(s)) => put(d, at, s),
            _ => false,
        }
    }

    /// Rounds f64 values into elements `start .. start + src.len()`.
    #[inline(always)]
    pub(crate) fn store_f64(&mut self, start: usize, src: &[f64]) {
        let n = src.len();
        match self {
            ViewMut::F64(v) => v[start..start + n].copy_from_slice(src),
            ViewMut::F32(v) => narrow(src, &mut v[start..start + n]),
            ViewMut::Bool(v) => narrow(src, &mut v[start..start + n]),
        }
    }
}

#[inline(always)]
fn narrow<T: Elem>(src: &[f64], dst: &mut [T]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = T::from_f64(s);
    }
}

/// The physical storage of an owned buffer: a pooled vector, whose length is its capacity in
/// elements (the buffer's logical length may be shorter), or, for a plan output, fresh shared
/// host data written in place and handed to the caller without a copy.
#[derive(Debug)]
pub(crate) enum TypedVec {
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Shared(HostData),
}

impl TypedVec {
    fn capacity(&self) -> usize {
        match self {
            TypedVec::F32(v) => v.len(),
            TypedVec::F64(v) => v.len(),
            TypedVec::Bool(v) => v.len(),
            TypedVec::Shared(d) => d.len(),
        }
    }

    fn dtype(&self) -> DType {
        match self {
            TypedVec::F32(_) => DType::F32,
            TypedVec::F64(_) => DType::F64,
            TypedVec::Bool(_) => DType::Bool,
            TypedVec::Shared(d) => d.dtype(),
        }
    }
}

/// An owned buffer of `len` elements taken from a [`Pool`].
#[derive(Debug)]
pub(crate) struct Buffer {
    data: TypedVec,
    len: usize,
}

impl Buffer {
    pub(crate) fn view(&self) -> View<'_> {
        match &self.data {
            TypedVec::F32(v) => View::F32(&v[..self.len]),
            TypedVec::F64(v) => View::F64(&v[..self.len]),
            TypedVec::Bool(v) => View::Bool(&v[..self.len]),
            TypedVec::Shared(HostData::F32(v)) => View::F32(&v[..self.len]),
            TypedVec::Shared(HostData::F64(v)) => View::F64(&v[..self.len]),
            TypedVec::Shared(HostData::Bool(v)) => View::Bool(&v[..self.len]),
        }
    }

    /// Whether the buffer is pooled storage of `len` elements of `dtype`.
    #[inline]
    pub(crate) fn holds(&self, dtype: DType, len: usize) -> bool {
        self.len == len
            && match &self.data {
                TypedVec::F32(_) => dtype == DType::F32,
                TypedVec::F64(_) => dtype == DType::F64,
                TypedVec::Bool(_) => dtype == DType::Bool,
                TypedVec::Shared(_) => false,
            }
    }

    /// The same storage resized to `len` elements of `dtype`, when it has that dtype, enough
    /// capacity and is pooled (shared storage belongs to a plan output); else the buffer back.
    pub(crate) fn refit(mut self, dtype: DType, len: usize) -> Result<Buffer, Buffer> {
        if !matches!(self.data, TypedVec::Shared(_))
            && self.data.dtype() == dtype
            && self.data.capacity() >= len
        {
            self.len = len;
            Ok(self)
        } else {
            Err(self)
        }
    }

    /// The elements for writing. Shared storage is written in place: the buffer holds its only
    /// reference until the run returns it (`make_mut` would copy otherwise, never fail).
    pub(crate) fn view_mut(&mut self) -> ViewMut<'_> {
        match &mut self.data {
            TypedVec::F32(v) => ViewMut::F32(&mut v[..self.len]),
            TypedVec::F64(v) => ViewMut::F64(&mut v[..self.len]),
            TypedVec::Bool(v) => ViewMut::Bool(&mut v[..self.len]),
            TypedVec::Shared(data) => ViewMut::of_host(data).split_at(self.len).0,
        }
    }
}

/// A value held in a slot of the executor; `'a` bounds the values of enclosing frames it may
/// borrow.
#[derive(Debug)]
pub(crate) enum Storage<'a> {
    /// Bound from outside (an input or a constant); shared, never written.
    Host(HostData),
    /// Produced by a step; returned to the pool when dead.
    Owned(Buffer),
    /// A value (or a slice of one) of an enclosing frame, read in place; never written.
    Borrowed(View<'a>),
}

impl<'a> Storage<'a> {
    pub(crate) fn view(&self) -> View<'_> {
        match self {
            Storage::Host(data) => View::from(data),
            Storage::Owned(b) => b.view(),
            Storage::Borrowed(v) => *v,
        }
    }

    /// The value without any borrow: host data and owned buffers as they are, a borrowed view
    /// copied into a buffer from `pool`. On an allocation failure the value is dropped (a view
    /// or nothing the caller still needs) and the pool is unchanged.
    pub(crate) fn into_owned(self, pool: &mut Pool) -> Result<Storage<'static>, BackendError> {
        Ok(match self {
            Storage::Host(d) => Storage::Host(d),
            Storage::Owned(b) => Storage::Owned(b),
            Storage::Borrowed(v) => Storage::Owned(pool.alloc_copy(v).map_err(copy_oom(v))?),
        })
    }

    /// A second handle on the value for a frame that keeps the first: host data and views are
    /// shared, an owned buffer is copied.
    pub(crate) fn share(&self, pool: &mut Pool) -> Result<Storage<'a>, BackendError> {
        Ok(match self {
            Storage::Host(d) => Storage::Host(d.clone()),
            Storage::Borrowed(v) => Storage::Borrowed(*v),
            Storage::Owned(b) => {
                Storage::Owned(pool.alloc_copy(b.view()).map_err(copy_oom(b.view()))?)
            }
        })
    }

    /// The value as shared host data: a new reference for host and shared storage, a copy
    /// of a pooled buffer.
    pub(crate) fn to_host_data(&self) -> Result<HostData, BackendError> {
        match self {
            Storage::Host(d) => Ok(d.clone()),
            Storage::Owned(Buffer {
                data: TypedVec::Shared(d),
                len,
            }) if *len == d.len() => Ok(d.clone()),
            Storage::Owned(b) => view_to_host(b.view()),
            Storage::Borrowed(v) => view_to_host(*v),
        }
    }
}

fn view_to_host(v: View<'_>) -> Result<HostData, BackendError> {
    let copied = match v {
        View::F32(s) => alloc::try_shared_from_slice(s).map(HostData::F32),
        View::F64(s) => alloc::try_shared_from_slice(s).map(HostData::F64),
        View::Bool(s) => alloc::try_shared_from_slice(s).map(HostData::Bool),
    };
    copied.map_err(copy_oom(v))
}

/// The error for a copy of `v` that the allocator refused.
fn copy_oom(v: View<'_>) -> impl FnOnce(AllocError) -> BackendError {
    let (len, dtype) = (v.len(), v.dtype());
    move |e| {
        BackendError::out_of_memory(
            e.bytes,
            format!("a copy of a tensor of {len} {} elements", dtype.name()),
        )
    }
}

/// Recycled buffers, plus counters for tests and diagnostics. The free buffers are kept in
/// stacks keyed by dtype and capacity, so that the best fit and the smallest buffer are found
/// in logarithmic time: a loop body allocates and recycles a few buffers per step, every
/// iteration.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    free: BTreeMap<(u8, usize), Vec<TypedVec>>,
    /// Buffers in `free`.
    free_count: usize,
    /// Buffers allocated fresh (not reused) over the pool's lifetime.
    pub(crate) allocations: usize,
    /// Buffers handed out (fresh or reused) over the pool's lifetime.
    pub(crate) acquisitions: usize,
    /// The storage of inputs donated to earlier runs that nobody else holds, kept for the
    /// outputs of the next run ([`Pool::alloc_shared`]): a training step's new state is written
    /// into the buffers of the state it replaced a step before, so a loop of steps allocates
    /// nothing for its state.
    donated: BTreeMap<(u8, usize), Vec<HostData>>,
}

/// The most free buffers a pool keeps; beyond it the smallest are dropped.
const MAX_FREE: usize = 64;

const DTYPES: [DType; 3] = [DType::F32, DType::F64, DType::Bool];

/// The order of the free buffers: dtype, then capacity.
fn pool_key(dtype: DType, capacity: usize) -> (u8, usize) {
    let rank = match dtype {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::Bool => 2,
    };
    (rank, capacity)
}

impl Pool {
    /// A buffer of `len` elements of `dtype` with unspecified contents: the smallest free
    /// buffer that fits, else a fresh one (zeroed allocation, fallible; on a failure the pool
    /// keeps every free buffer it had).
    pub(crate) fn alloc(&mut self, dtype: DType, len: usize) -> Result<Buffer, AllocError> {
        // A plan asks for the same few sizes on every run, so a buffer of exactly `len` (the
        // smallest that fits) is usually free; look for a larger one only when it is not.
        let exact = self.take(pool_key(dtype, len));
        let data = match exact.or_else(|| self.smallest_larger(dtype, len)) {
            Some(data) => data,
            None => {
                let data = match dtype {
                    DType::F32 => TypedVec::F32(alloc::try_zeroed_vec(len)?),
                    DType::F64 => TypedVec::F64(alloc::try_zeroed_vec(len)?),
                    DType::Bool => TypedVec::Bool(alloc::try_zeroed_vec(len)?),
                };
                self.allocations += 1;
                data
            }
        };
        self.acquisitions += 1;
        Ok(Buffer { data, len })
    }

    /// Takes the smallest free buffer of `dtype` with room for more than `len` elements.
    fn smallest_larger(&mut self, dtype: DType, len: usize) -> Option<TypedVec> {
        let (rank, _) = pool_key(dtype, 0);
        let fit = self
            .free
            .range(pool_key(dtype, len)..=(rank, usize::MAX))
            .find(|(_, stack)| !stack.is_empty())
            .map(|(k, _)| *k)?;
        self.take(fit)
    }

    /// Takes one free buffer of `key`. An emptied stack stays in the map: a plan frees and
    /// takes buffers of the same few sizes on every run, and removing and re-inserting their
    /// stacks cost a heap allocation each time.
    fn take(&mut self, key: (u8, usize)) -> Option<TypedVec> {
        let data = self.free.get_mut(&key)?.pop();
        if data.is_some() {
            self.free_count -= 1;
        }
        data
    }

    /// Bytes of the free buffers the pool holds (after a run: every buffer its steps used
    /// besides the outputs, which the caller took).
    pub(crate) fn free_bytes(&self) -> usize {
        self.free
            .values()
            .flatten()
            .map(|v| v.capacity() * v.dtype().itemsize())
            .sum()
    }

    /// A pooled buffer holding a copy of `v`.
    pub(crate) fn alloc_copy(&mut self, v: View<'_>) -> Result<Buffer, AllocError> {
        let mut b = self.alloc(v.dtype(), v.len())?;
        // Same dtype and length by construction, so the copy always applies.
        b.view_mut().copy_from(0, v);
        Ok(b)
    }

    /// Shared storage for a plan output (not pooled: it is handed to the caller) with
    /// unspecified contents: a buffer an earlier output released ([`quabla_ir::recycle`]),
    /// else fresh zeroed allocation (fallible).
    pub(crate) fn alloc_shared(&mut self, dtype: DType, len: usize) -> Result<Buffer, AllocError> {
        if let Some(data) = self
            .donated
            .get_mut(&pool_key(dtype, len))
            .and_then(Vec::pop)
        {
            return Ok(Buffer {
                data: TypedVec::Shared(data),
                len,
            });
        }
        if let Some(data) = quabla_ir::recycle::take(dtype, len) {
            return Ok(Buffer {
                data: TypedVec::Shared(data),
                len,
            });
        }
        let data = match dtype {
            DType::F32 => HostData::F32(alloc::try_shared_zeroed(len)?),
            DType::F64 => HostData::F64(alloc::try_shared_zeroed(len)?),
            DType::Bool => HostData::Bool(alloc::try_shared_zeroed(len)?),
        };
        Ok(Buffer {
            data: TypedVec::Shared(data),
            len,
        })
    }

    /// Keeps the storage of a donated input for the outputs of a later run when nobody else
    /// holds it and fewer than `wanted` buffers of its dtype and length are kept already (the
    /// number of the plan's outputs of that type); drops it otherwise. So what a plan keeps
    /// between runs is at most the size of its outputs.
    pub(crate) fn keep_donated(&mut self, data: HostData, wanted: impl Fn(DType, usize) -> usize) {
        let unique = match &data {
            HostData::F32(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
            HostData::F64(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
            HostData::Bool(v) => Arc::strong_count(v) == 1 && Arc::weak_count(v) == 0,
        };
        if !unique {
            return;
        }
        let (dtype, len) = (data.dtype(), data.len());
        let kept = self.donated.entry(pool_key(dtype, len)).or_default();
        if kept.len() < wanted(dtype, len) {
            kept.push(data);
        }
    }

    /// Returns a dead value's storage (host and shared data are simply dropped).
    pub(crate) fn recycle(&mut self, storage: Storage<'_>) {
        if let Storage::Owned(b) = storage {
            if matches!(b.data, TypedVec::Shared(_)) {
                return;
            }
            let key = pool_key(b.data.dtype(), b.data.capacity());
            self.free.entry(key).or_default().push(b.data);
            self.free_count += 1;
            if self.free_count > MAX_FREE {
                // The smallest buffer is the first of its dtype.
                let smallest = DTYPES
                    .into_iter()
                    .filter_map(|d| {
                        let (rank, _) = pool_key(d, 0);
                        self.free
                            .range(pool_key(d, 0)..=(rank, usize::MAX))
                            .find(|(_, stack)| !stack.is_empty())
                            .map(|(k, _)| *k)
                    })
                    .min_by_key(|&(_, capacity)| capacity);
                if let Some(k) = smallest {
                    self.take(k);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_the_smallest_fitting_buffer() {
        let mut pool = Pool::default();
        let a = pool.alloc(DType::F64, 10).unwrap();
        let b = pool.alloc(DType::F64, 100).unwrap();
        assert_eq!(pool.allocations, 2);
        pool.recycle(Storage::Owned(a));
        pool.recycle(Storage::Owned(b));
        let c = pool.alloc(DType::F64, 5).unwrap();
        assert_eq!(c.view().len(), 5);
        assert_eq!(pool.allocations, 2);
        let d = pool.alloc(DType::F32, 5).unwrap();
        assert_eq!(pool.allocations, 3);
        assert_eq!(d.view().len(), 5);
        // The stack of 10-element buffers is empty now: the next request skips it and takes
        // the 100-element buffer, and one more is fresh.
        let e = pool.alloc(DType::F64, 5).unwrap();
        assert_eq!(pool.allocations, 3);
        assert_eq!(pool.free_bytes(), 0);
        let f = pool.alloc(DType::F64, 5).unwrap();
        assert_eq!(pool.allocations, 4);
        // Recycled again, the emptied stacks fill as before.
        for buffer in [c, e, f] {
            pool.recycle(Storage::Owned(buffer));
        }
        assert_eq!(pool.free_bytes(), (10 + 100 + 5) * 8);
        let g = pool.alloc(DType::F64, 6).unwrap();
        assert_eq!(g.view().len(), 6);
        assert_eq!(pool.free_bytes(), (100 + 5) * 8);
    }

    #[test]
    fn a_refused_allocation_leaves_the_pool_as_it_was() {
        let mut pool = Pool::default();
        let a = pool.alloc(DType::F64, 10).unwrap();
        pool.recycle(Storage::Owned(a));
        // 2^50 bytes: more than any address space, refused whatever the overcommit policy.
        let huge = 1usize << 47;
        assert_eq!(
            pool.alloc(DType::F64, huge).unwrap_err(),
            AllocError { bytes: 1 << 50 }
        );
        assert!(pool.alloc_shared(DType::F64, huge).is_err());
        assert!(pool.alloc(DType::F64, usize::MAX).is_err());
        assert_eq!((pool.allocations, pool.acquisitions), (1, 1));
        // The free buffer is still there and is reused.
        let b = pool.alloc(DType::F64, 8).unwrap();
        assert_eq!(b.view().len(), 8);
        assert_eq!(pool.allocations, 1);
    }

    #[test]
    fn bool_rounding_treats_nan_as_true() {
        assert!(bool::from_f64(f64::NAN));
        assert!(!bool::from_f64(-0.0));
        assert_eq!(f32::from_f64(0.1), 0.1f32);
    }
}
