//! Typed host data: the one representation of concrete element values shared by plan
//! constants, backend buffers and eager tensors.
//!
//! Storage is physically typed (8/4/1 bytes per element; integers in their own width), immutable and reference counted
//! (numerics.md §1.2). Equality and hashing compare bit patterns, so `-0.0` and `0.0` differ and
//! identical NaN payloads are equal — the rule constant deduplication needs (transforms.md §17).
//!
//! Storage whose size comes from user input is built with the fallible constructors
//! ([`HostData::try_zeroed`], [`HostData::try_filled`], [`HostData::try_from_f64`],
//! [`HostData::try_copy_of`]), which report [`IrError::OutOfMemory`] when the allocator
//! refuses (see [`crate::alloc`]); the infallible ones are for storage of a size the program
//! chose, where a refusal means the process is out of memory anyway.

use crate::alloc::{self, AllocError, Zeroable};
use crate::{DType, IrError, Result};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Immutable, shared, typed element storage in row-major order.
#[derive(Clone, Debug)]
pub enum HostData {
    F32(Arc<[f32]>),
    F64(Arc<[f64]>),
    Bool(Arc<[bool]>),
    I32(Arc<[i32]>),
    I64(Arc<[i64]>),
}

/// Applies `$body` to the storage of any variant, bound as `$v` (the element type differs per
/// arm, so the body must be generic in it), and wraps the result with the same variant.
macro_rules! same_variant {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            HostData::F32($v) => HostData::F32($body),
            HostData::F64($v) => HostData::F64($body),
            HostData::Bool($v) => HostData::Bool($body),
            HostData::I32($v) => HostData::I32($body),
            HostData::I64($v) => HostData::I64($body),
        }
    };
}

impl HostData {
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::Bool(_) => DType::Bool,
            HostData::I32(_) => DType::I32,
            HostData::I64(_) => DType::I64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
            HostData::Bool(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as f64 (bool as 0/1); exact for every dtype except int64 values beyond
    /// 2^53, which round to nearest.
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            HostData::F32(v) => v[i] as f64,
            HostData::F64(v) => v[i],
            HostData::Bool(v) => {
                if v[i] {
                    1.0
                } else {
                    0.0
                }
            }
            HostData::I32(v) => v[i] as f64,
            HostData::I64(v) => v[i] as f64,
        }
    }

    /// All elements as f64 (see [`HostData::get_f64`]).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            HostData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::F64(v) => v.to_vec(),
            HostData::Bool(v) => v.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect(),
            HostData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// Element `i` as i64: integers exactly, bool as 0/1, floats converted like a cast to
    /// int64 (numerics.md §12: truncation, NaN and out of range give the minimum).
    pub fn get_i64(&self, i: usize) -> i64 {
        match self {
            HostData::F32(v) => DType::I64.float_to_int(v[i] as f64),
            HostData::F64(v) => DType::I64.float_to_int(v[i]),
            HostData::Bool(v) => v[i] as i64,
            HostData::I32(v) => v[i] as i64,
            HostData::I64(v) => v[i],
        }
    }

    /// All elements as i64 (see [`HostData::get_i64`]).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match self {
            HostData::I32(v) => v.iter().map(|&x| x as i64).collect(),
            HostData::I64(v) => v.to_vec(),
            HostData::Bool(v) => v.iter().map(|&b| b as i64).collect(),
            _ => (0..self.len()).map(|i| self.get_i64(i)).collect(),
        }
    }

    /// Builds storage of `dtype` from i64 values: integer dtypes wrap (two's complement),
    /// bool is `v != 0`, floats take the nearest value (one rounding, also for float32).
    pub fn from_i64(dtype: DType, values: impl IntoIterator<Item = i64>) -> HostData {
        let it = values.into_iter();
        match dtype {
            DType::F64 => HostData::F64(it.map(|x| x as f64).collect()),
            DType::F32 => HostData::F32(it.map(|x| x as f32).collect()),
            DType::Bool => HostData::Bool(it.map(|x| x != 0).collect()),
            DType::I32 => HostData::I32(it.map(|x| x as i32).collect()),
            DType::I64 => HostData::I64(it.collect()),
        }
    }

    /// This storage converted to `dtype` as `astype` converts (numerics.md §1.4, §12):
    /// integers to floats by nearest value, floats to integers by truncation (NaN and out of
    /// range give the minimum), integers to narrower integers by wrapping, anything to bool
    /// by `!= 0` (NaN is true). The storage itself when the dtype already matches.
    pub fn cast(&self, dtype: DType) -> HostData {
        if self.dtype() == dtype {
            return self.clone();
        }
        let from = self.dtype();
        if from.is_integer() || (from == DType::Bool && dtype.is_integer()) {
            HostData::from_i64(dtype, self.to_i64_vec())
        } else {
            HostData::from_f64(dtype, self.to_f64_vec())
        }
    }

    /// Builds storage of `dtype` from f64 values, rounding each one to the dtype
    /// (numerics.md §1.4: nonzero and NaN are true for bool; integers truncate, §12). The process aborts if the
    /// allocator refuses: for a size that comes from user input use
    /// [`HostData::try_from_f64`].
    pub fn from_f64(dtype: DType, values: impl IntoIterator<Item = f64>) -> HostData {
        let it = values.into_iter();
        match dtype {
            DType::F64 => HostData::F64(it.collect()),
            DType::F32 => HostData::F32(it.map(|x| x as f32).collect()),
            DType::Bool => HostData::Bool(it.map(|x| x != 0.0).collect()),
            DType::I32 => HostData::I32(it.map(|x| DType::I32.float_to_int(x) as i32).collect()),
            DType::I64 => HostData::I64(it.map(|x| DType::I64.float_to_int(x)).collect()),
        }
    }

    /// `n` copies of one value rounded to `dtype`. The process aborts if the allocator
    /// refuses: for a size that comes from user input use [`HostData::try_filled`].
    pub fn filled(dtype: DType, value: f64, n: usize) -> HostData {
        match dtype {
            DType::F64 => HostData::F64(shared_filled(value, n)),
            DType::F32 => HostData::F32(shared_filled(value as f32, n)),
            DType::Bool => HostData::Bool(shared_filled(value != 0.0, n)),
            DType::I32 => HostData::I32(shared_filled(DType::I32.float_to_int(value) as i32, n)),
            DType::I64 => HostData::I64(shared_filled(DType::I64.float_to_int(value), n)),
        }
    }

    /// `n` zeros of `dtype` (false for bool), from zeroed allocation: large buffers are fresh
    /// pages that the operating system zeroes on first write. [`IrError::OutOfMemory`] when
    /// the allocator refuses.
    pub fn try_zeroed(dtype: DType, n: usize) -> Result<HostData> {
        let oom = |e: AllocError| elements_out_of_memory(e, dtype, n);
        Ok(match dtype {
            DType::F64 => HostData::F64(alloc::try_shared_zeroed(n).map_err(oom)?),
            DType::F32 => HostData::F32(alloc::try_shared_zeroed(n).map_err(oom)?),
            DType::Bool => HostData::Bool(alloc::try_shared_zeroed(n).map_err(oom)?),
            DType::I32 => HostData::I32(alloc::try_shared_zeroed(n).map_err(oom)?),
            DType::I64 => HostData::I64(alloc::try_shared_zeroed(n).map_err(oom)?),
        })
    }

    /// `n` copies of one value rounded to `dtype`, like [`HostData::filled`];
    /// [`IrError::OutOfMemory`] when the allocator refuses.
    pub fn try_filled(dtype: DType, value: f64, n: usize) -> Result<HostData> {
        let oom = |e: AllocError| elements_out_of_memory(e, dtype, n);
        Ok(match dtype {
            DType::F64 => HostData::F64(alloc::try_shared_filled(value, n).map_err(oom)?),
            DType::F32 => HostData::F32(alloc::try_shared_filled(value as f32, n).map_err(oom)?),
            DType::Bool => HostData::Bool(alloc::try_shared_filled(value != 0.0, n).map_err(oom)?),
            DType::I32 => HostData::I32(
                alloc::try_shared_filled(DType::I32.float_to_int(value) as i32, n).map_err(oom)?,
            ),
            DType::I64 => HostData::I64(
                alloc::try_shared_filled(DType::I64.float_to_int(value), n).map_err(oom)?,
            ),
        })
    }

    /// Storage of `dtype` from exactly `n` f64 values, each rounded to the dtype like
    /// [`HostData::from_f64`], written straight into the shared storage (no intermediate
    /// vector, so a lazy iterator such as an `arange` needs no memory of its own).
    /// [`IrError::OutOfMemory`] when the allocator refuses; [`IrError::InvalidArgument`] when
    /// `values` does not yield exactly `n` values.
    pub fn try_from_f64(
        dtype: DType,
        values: impl IntoIterator<Item = f64>,
        n: usize,
    ) -> Result<HostData> {
        let oom = |e: AllocError| elements_out_of_memory(e, dtype, n);
        let it = values.into_iter();
        let data = match dtype {
            DType::F64 => alloc::try_shared_from_iter(it, n)
                .map_err(oom)?
                .map(HostData::F64),
            DType::F32 => alloc::try_shared_from_iter(it.map(|x| x as f32), n)
                .map_err(oom)?
                .map(HostData::F32),
            DType::Bool => alloc::try_shared_from_iter(it.map(|x| x != 0.0), n)
                .map_err(oom)?
                .map(HostData::Bool),
            DType::I32 => {
                alloc::try_shared_from_iter(it.map(|x| DType::I32.float_to_int(x) as i32), n)
                    .map_err(oom)?
                    .map(HostData::I32)
            }
            DType::I64 => alloc::try_shared_from_iter(it.map(|x| DType::I64.float_to_int(x)), n)
                .map_err(oom)?
                .map(HostData::I64),
        };
        data.ok_or_else(|| IrError::InvalidArgument {
            message: format!("host data of {n} elements was given a different number of values"),
        })
    }

    /// Storage of an integer `dtype` from exactly `n` i64 values, each wrapped to the dtype
    /// like [`HostData::from_i64`], written straight into the shared storage;
    /// [`IrError::OutOfMemory`] when the allocator refuses, [`IrError::InvalidArgument`] when
    /// `values` does not yield exactly `n` values. Other dtypes convert as `from_i64` does.
    pub fn try_from_i64(
        dtype: DType,
        values: impl IntoIterator<Item = i64>,
        n: usize,
    ) -> Result<HostData> {
        let oom = |e: AllocError| elements_out_of_memory(e, dtype, n);
        let it = values.into_iter();
        let data = match dtype {
            DType::I64 => alloc::try_shared_from_iter(it, n)
                .map_err(oom)?
                .map(HostData::I64),
            DType::I32 => alloc::try_shared_from_iter(it.map(|x| x as i32), n)
                .map_err(oom)?
                .map(HostData::I32),
            _ => Some(HostData::from_i64(dtype, it.take(n))).filter(|d| d.len() == n),
        };
        data.ok_or_else(|| IrError::InvalidArgument {
            message: format!("host data of {n} elements was given a different number of values"),
        })
    }

    /// A copy of this storage in fresh shared storage (a new allocation, not a new
    /// reference); [`IrError::OutOfMemory`] when the allocator refuses.
    pub fn try_copy_of(&self) -> Result<HostData> {
        let oom = |e: AllocError| elements_out_of_memory(e, self.dtype(), self.len());
        Ok(same_variant!(self, v => alloc::try_shared_from_slice(v).map_err(oom)?))
    }

    /// Whether every element is the same bit pattern as the first (a splat constant).
    pub fn is_splat(&self) -> bool {
        match self {
            HostData::F32(v) => v.iter().all(|x| x.to_bits() == v[0].to_bits()),
            HostData::F64(v) => v.iter().all(|x| x.to_bits() == v[0].to_bits()),
            HostData::Bool(v) => v.iter().all(|&x| x == v[0]),
            HostData::I32(v) => v.iter().all(|&x| x == v[0]),
            HostData::I64(v) => v.iter().all(|&x| x == v[0]),
        }
    }

    /// Element `i`'s bit pattern, zero-extended.
    fn bits_at(&self, i: usize) -> u64 {
        match self {
            HostData::F32(v) => v[i].to_bits() as u64,
            HostData::F64(v) => v[i].to_bits(),
            HostData::Bool(v) => v[i] as u64,
            HostData::I32(v) => v[i] as u32 as u64,
            HostData::I64(v) => v[i] as u64,
        }
    }

    fn bits(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|i| self.bits_at(i))
    }
}

impl PartialEq for HostData {
    fn eq(&self, other: &Self) -> bool {
        self.dtype() == other.dtype() && self.len() == other.len() && self.bits().eq(other.bits())
    }
}

impl Eq for HostData {}

impl Hash for HostData {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.dtype().hash(state);
        self.len().hash(state);
        for b in self.bits() {
            b.hash(state);
        }
    }
}

/// `n` copies of `value` in fresh shared storage.
///
/// Zeros (every backend output starts as zeros) come from zeroed allocation: for large
/// buffers the allocator hands out fresh pages that the operating system zeroes when they are
/// first written, so the kernel that writes the output pays for its pages once, on the
/// threads that write them, instead of after a separate single-threaded fill. Other values
/// are written in one pass (`collect` would write element by element through an iterator).
fn shared_filled<T: Copy + Zeroable>(value: T, n: usize) -> Arc<[T]> {
    if value.is_zero_bits() {
        // SAFETY: the all-zero bit pattern is a valid `T` (`Zeroable`).
        return unsafe { Arc::<[T]>::new_zeroed_slice(n).assume_init() };
    }
    let mut data = Arc::<[T]>::new_uninit_slice(n);
    match Arc::get_mut(&mut data) {
        Some(slots) => {
            for slot in slots.iter_mut() {
                slot.write(value);
            }
            // SAFETY: every element was written just above.
            unsafe { data.assume_init() }
        }
        // A fresh `Arc` has no other reference, so this is never taken.
        None => std::iter::repeat_n(value, n).collect(),
    }
}

/// The error for storage of `n` elements of `dtype` that the allocator refused.
fn elements_out_of_memory(e: AllocError, dtype: DType, n: usize) -> IrError {
    IrError::out_of_memory(
        e.bytes,
        format!("a tensor of {n} {} elements", dtype.name()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitwise_equality() {
        let z = HostData::F64(Arc::from([0.0]));
        let nz = HostData::F64(Arc::from([-0.0]));
        assert_ne!(z, nz);
        let n1 = HostData::F64(Arc::from([f64::NAN]));
        let n2 = HostData::F64(Arc::from([f64::NAN]));
        assert_eq!(n1, n2);
        assert_ne!(
            HostData::F32(Arc::from([1.0f32])),
            HostData::F64(Arc::from([1.0]))
        );
    }

    #[test]
    fn conversion_rounds() {
        let d = HostData::from_f64(DType::F32, [0.1]);
        assert_eq!(d.get_f64(0), 0.10000000149011612);
        let b = HostData::from_f64(DType::Bool, [f64::NAN, 0.0, -0.0, 2.0]);
        assert_eq!(b.to_f64_vec(), vec![1.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn integer_storage_converts_like_astype() {
        let i = HostData::from_i64(DType::I32, [1 << 31, -1, 7]);
        assert_eq!(i, HostData::I32(Arc::from([i32::MIN, -1, 7])));
        assert_eq!(
            i.cast(DType::I64),
            HostData::I64(Arc::from([-(1 << 31), -1, 7]))
        );
        assert_eq!(
            HostData::I64(Arc::from([(1 << 53) + 1])).cast(DType::F64),
            HostData::F64(Arc::from([9007199254740992.0]))
        );
        // int64 to float32 rounds once, not through float64.
        let big = (1i64 << 60) + (1 << 36) + 1;
        assert_eq!(
            HostData::I64(Arc::from([big])).cast(DType::F32),
            HostData::F32(Arc::from([big as f32]))
        );
        assert_eq!(
            HostData::F64(Arc::from([-2.5, f64::NAN, 3e9])).cast(DType::I32),
            HostData::I32(Arc::from([-2, i32::MIN, i32::MIN]))
        );
        assert_eq!(
            HostData::I64(Arc::from([0, 5])).cast(DType::Bool),
            HostData::Bool(Arc::from([false, true]))
        );
        assert_eq!(
            HostData::Bool(Arc::from([true, false])).cast(DType::I32),
            HostData::I32(Arc::from([1, 0]))
        );
        // Equal values of different dtypes differ; identical integers are equal.
        assert_ne!(HostData::I32(Arc::from([1])), HostData::I64(Arc::from([1])));
        assert_eq!(
            HostData::I64(Arc::from([-1])),
            HostData::from_i64(DType::I64, [-1])
        );
    }

    #[test]
    fn filled_storage_rounds_like_a_conversion() {
        assert_eq!(
            HostData::filled(DType::F32, 0.1, 3),
            HostData::from_f64(DType::F32, [0.1; 3])
        );
        assert_eq!(
            HostData::filled(DType::F64, -0.0, 2),
            HostData::F64(Arc::from([-0.0, -0.0]))
        );
        assert_eq!(
            HostData::filled(DType::Bool, f64::NAN, 2).to_f64_vec(),
            vec![1.0, 1.0]
        );
        assert!(HostData::filled(DType::F64, 1.0, 0).is_empty());
    }

    #[test]
    fn fallible_constructors_match_the_infallible_ones() {
        for dtype in [DType::F32, DType::F64, DType::Bool, DType::I32, DType::I64] {
            for value in [0.0, -0.0, 0.1, f64::NAN] {
                assert_eq!(
                    HostData::try_filled(dtype, value, 5).unwrap(),
                    HostData::filled(dtype, value, 5)
                );
            }
            assert_eq!(
                HostData::try_zeroed(dtype, 3).unwrap(),
                HostData::filled(dtype, 0.0, 3)
            );
            let values = [0.1, -2.0, f64::NAN, 0.0];
            let data = HostData::try_from_f64(dtype, values, 4).unwrap();
            assert_eq!(data, HostData::from_f64(dtype, values));
            assert_eq!(data.try_copy_of().unwrap(), data);
        }
        let err = HostData::try_from_f64(DType::F64, [1.0, 2.0], 3).unwrap_err();
        assert!(matches!(err, IrError::InvalidArgument { .. }));
    }

    #[test]
    fn storage_the_machine_cannot_hold_is_a_typed_error() {
        // 2^50 bytes: more than any address space, so refused whatever the overcommit policy.
        let n = 1usize << 47;
        for make in [
            HostData::try_zeroed(DType::F64, n),
            HostData::try_filled(DType::F64, 1.0, n),
            HostData::try_from_f64(DType::F64, std::iter::repeat_n(1.0, n), n),
        ] {
            let err = make.unwrap_err();
            assert_eq!(
                err,
                IrError::OutOfMemory {
                    bytes: 1 << 50,
                    what: "a tensor of 140737488355328 float64 elements".into()
                }
            );
            assert_eq!(
                err.to_string(),
                "cannot allocate 1125899906842624 bytes for a tensor of 140737488355328 \
                 float64 elements; the machine does not have that much memory"
            );
        }
        // Past isize::MAX: refused before the allocator is asked, without a panic.
        assert!(HostData::try_filled(DType::F64, 1.0, usize::MAX).is_err());
        assert!(HostData::try_zeroed(DType::Bool, usize::MAX).is_err());
    }
}
