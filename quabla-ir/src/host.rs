//! Typed host data: the one representation of concrete element values shared by plan
//! constants, backend buffers and eager tensors.
//!
//! Storage is physically typed (8/4/1 bytes per element), immutable and reference counted
//! (numerics.md §1.2). Equality and hashing compare bit patterns, so `-0.0` and `0.0` differ and
//! identical NaN payloads are equal — the rule constant deduplication needs (transforms.md §17).

use crate::DType;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Immutable, shared, typed element storage in row-major order.
#[derive(Clone, Debug)]
pub enum HostData {
    F32(Arc<[f32]>),
    F64(Arc<[f64]>),
    Bool(Arc<[bool]>),
}

impl HostData {
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::Bool(_) => DType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
            HostData::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` widened to f64 (bool as 0/1); exact for every dtype.
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
        }
    }

    /// All elements widened to f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            HostData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            HostData::F64(v) => v.to_vec(),
            HostData::Bool(v) => v.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect(),
        }
    }

    /// Builds storage of `dtype` from f64 values, rounding each one to the dtype
    /// (numerics.md §1.4: nonzero and NaN are true for bool).
    pub fn from_f64(dtype: DType, values: impl IntoIterator<Item = f64>) -> HostData {
        let it = values.into_iter();
        match dtype {
            DType::F64 => HostData::F64(it.collect()),
            DType::F32 => HostData::F32(it.map(|x| x as f32).collect()),
            DType::Bool => HostData::Bool(it.map(|x| x != 0.0).collect()),
        }
    }

    /// `n` copies of one value rounded to `dtype`.
    pub fn filled(dtype: DType, value: f64, n: usize) -> HostData {
        match dtype {
            DType::F64 => HostData::F64(shared_filled(value, n)),
            DType::F32 => HostData::F32(shared_filled(value as f32, n)),
            DType::Bool => HostData::Bool(shared_filled(value != 0.0, n)),
        }
    }

    /// Whether every element is the same bit pattern as the first (a splat constant).
    pub fn is_splat(&self) -> bool {
        match self {
            HostData::F32(v) => v.iter().all(|x| x.to_bits() == v[0].to_bits()),
            HostData::F64(v) => v.iter().all(|x| x.to_bits() == v[0].to_bits()),
            HostData::Bool(v) => v.iter().all(|&x| x == v[0]),
        }
    }

    fn bits(&self) -> impl Iterator<Item = u64> + '_ {
        let (a, b, c) = match self {
            HostData::F32(v) => (Some(v.iter().map(|x| x.to_bits() as u64)), None, None),
            HostData::F64(v) => (None, Some(v.iter().map(|x| x.to_bits())), None),
            HostData::Bool(v) => (None, None, Some(v.iter().map(|&x| x as u64))),
        };
        a.into_iter()
            .flatten()
            .chain(b.into_iter().flatten())
            .chain(c.into_iter().flatten())
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

/// Element types whose all-zero bit pattern is a valid value.
trait Zeroable {
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
}
