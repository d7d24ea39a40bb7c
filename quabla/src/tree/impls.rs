//! The [`Tree`] implementations of the containers and scalars a tree is built from: tensors,
//! leaves, numbers and bools, `()`, `Option`, `Vec`, arrays, maps with [`TreeKey`] keys,
//! tuples, and random keys.

use super::*;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

impl Tree for quabla_random::Key {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::Key(*self));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a key leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::Key(k) => Ok(k),
            other => Err(Error::Structure {
                message: format!("pytree structures differ: expected a Key leaf, got {other:?}"),
            }),
        }
    }
}

impl Tree for Tensor {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::Tensor(self.clone()));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a tensor leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::Tensor(t) => Ok(t),
            Leaf::F64(v) => Ok(Tensor::scalar_f64(v)),
            Leaf::Bool(v) => Ok(Tensor::scalar_bool(v)),
            Leaf::Int(v) => Ok(Tensor::scalar_f64(v as f64)),
            Leaf::Abstract(s) => Err(Error::Structure {
                message: format!("expected a tensor, got the abstract value {s:?}"),
            }),
            Leaf::Key(k) => Err(Error::Structure {
                message: format!("expected a tensor, got the random key {k}"),
            }),
        }
    }
}

/// A dynamic leaf: whatever leaf stands at this position (a tensor or a scalar).
impl Tree for Leaf {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(self.clone());
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a leaf", def));
        }
        next_leaf(leaves)
    }
}

impl Tree for f64 {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::F64(*self));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("an f64 leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::F64(v) => Ok(v),
            Leaf::Int(v) => Ok(v as f64),
            Leaf::Tensor(t) if t.ndim() == 0 => t.item(),
            other => Err(Error::Structure {
                message: format!("pytree structures differ: expected an f64 leaf, got {other:?}"),
            }),
        }
    }
}

impl Tree for bool {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        leaves.push(Leaf::Bool(*self));
        TreeDef::Leaf
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        if *def != TreeDef::Leaf {
            return Err(mismatch("a bool leaf", def));
        }
        match next_leaf(leaves)? {
            Leaf::Bool(v) => Ok(v),
            Leaf::Tensor(t) if t.ndim() == 0 => t.item_bool(),
            other => Err(Error::Structure {
                message: format!("pytree structures differ: expected a bool leaf, got {other:?}"),
            }),
        }
    }
}

macro_rules! int_leaf {
    ($($t:ty),*) => {$(
        impl Tree for $t {
            /// An integer leaf; an unsigned value beyond `i64::MAX` has no leaf form and
            /// flattens into the AR19 refusal (never a wrapped negative number).
            fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
                match i64::try_from(*self) {
                    Ok(v) => {
                        leaves.push(Leaf::Int(v));
                        TreeDef::Leaf
                    }
                    Err(_) => refused(RefusalError::Invalid(integer_range_error(self).to_string())),
                }
            }
            fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
                if *def != TreeDef::Leaf {
                    return Err(mismatch("an integer leaf", def));
                }
                match next_leaf(leaves)? {
                    Leaf::Int(v) => <$t>::try_from(v).map_err(|_| Error::invalid(format!(
                        "the integer {v} is out of range for {} (from {} to {})",
                        stringify!($t), <$t>::MIN, <$t>::MAX
                    ))),
                    other => Err(Error::Structure {
                        message: format!("pytree structures differ: expected an integer leaf, got {other:?}"),
                    }),
                }
            }
        }
    )*};
}

int_leaf!(i32, i64, usize, u32, u64);

impl Tree for () {
    fn flatten(&self, _: &mut Vec<Leaf>) -> TreeDef {
        TreeDef::None
    }
    fn unflatten(def: &TreeDef, _: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::None => Ok(()),
            other => Err(mismatch("None", other)),
        }
    }
}

impl<T: Tree> Tree for Option<T> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        match self {
            None => TreeDef::None,
            Some(v) => v.flatten(leaves),
        }
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::None => Ok(None),
            other => T::unflatten(other, leaves).map(Some),
        }
    }
}

impl<T: Tree> Tree for Vec<T> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        flatten_container(|| TreeDef::List(self.iter().map(|v| v.flatten(leaves)).collect()))
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        match def {
            TreeDef::List(children) => children
                .iter()
                .enumerate()
                .map(|(i, d)| T::unflatten(d, leaves).map_err(within(i)))
                .collect(),
            other => Err(mismatch("a list", other)),
        }
    }
}

impl<T: Tree, const N: usize> Tree for [T; N] {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        flatten_container(|| TreeDef::List(self.iter().map(|v| v.flatten(leaves)).collect()))
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        let v: Vec<T> = Vec::unflatten(def, leaves)?;
        let n = v.len();
        v.try_into().map_err(|_| Error::Structure {
            message: format!("pytree structures differ: expected a list of {N}, got {n} entries"),
        })
    }
}

/// The Rust types that are keys of pytree dicts: `String` and `i64` (api.md §13).
pub trait TreeKey: Ord + Clone {
    fn to_key(&self) -> DictKey;
    fn from_key(key: &DictKey) -> Option<Self>;
}

impl TreeKey for String {
    fn to_key(&self) -> DictKey {
        DictKey::Str(self.clone())
    }
    fn from_key(key: &DictKey) -> Option<String> {
        match key {
            DictKey::Str(k) => Some(k.clone()),
            DictKey::Int(_) => None,
        }
    }
}

impl TreeKey for i64 {
    fn to_key(&self) -> DictKey {
        DictKey::Int(*self)
    }
    fn from_key(key: &DictKey) -> Option<i64> {
        match key {
            DictKey::Int(k) => Some(*k),
            DictKey::Str(_) => None,
        }
    }
}

/// The entries of a dict structure rebuilt as `(K, T)` pairs.
pub(super) fn dict_entries<K: TreeKey, T: Tree>(
    def: &TreeDef,
    leaves: &mut dyn Iterator<Item = Leaf>,
) -> Result<Vec<(K, T)>> {
    match def {
        TreeDef::Dict(children) => children
            .iter()
            .map(|(k, d)| {
                let key = K::from_key(k).ok_or_else(|| {
                    mismatch(
                        &format!("a dict keyed by {}", std::any::type_name::<K>()),
                        def,
                    )
                })?;
                Ok((key, T::unflatten(d, leaves).map_err(within(k))?))
            })
            .collect(),
        other => Err(mismatch("a dict", other)),
    }
}

impl<K: TreeKey, T: Tree> Tree for BTreeMap<K, T> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        flatten_container(|| {
            TreeDef::Dict(
                self.iter()
                    .map(|(k, v)| (k.to_key(), v.flatten(leaves)))
                    .collect(),
            )
        })
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        Ok(dict_entries(def, leaves)?.into_iter().collect())
    }
}

impl<K: TreeKey + Hash, T: Tree, S: std::hash::BuildHasher + Default> Tree for HashMap<K, T, S> {
    fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
        let mut keys: Vec<&K> = self.keys().collect();
        keys.sort();
        flatten_container(|| {
            TreeDef::Dict(
                keys.into_iter()
                    .map(|k| (k.to_key(), self[k].flatten(leaves)))
                    .collect(),
            )
        })
    }
    fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
        Ok(dict_entries(def, leaves)?.into_iter().collect())
    }
}

macro_rules! tuple_tree {
    ($(($($t:ident $i:tt),+))*) => {$(
        impl<$($t: Tree),+> Tree for ($($t,)+) {
            fn flatten(&self, leaves: &mut Vec<Leaf>) -> TreeDef {
                flatten_container(|| TreeDef::Tuple(vec![$(self.$i.flatten(leaves)),+]))
            }
            fn unflatten(def: &TreeDef, leaves: &mut dyn Iterator<Item = Leaf>) -> Result<Self> {
                const N: usize = [$($i),+].len();
                match def {
                    TreeDef::Tuple(c) if c.len() == N => Ok((
                        $($t::unflatten(&c[$i], leaves).map_err(within($i as usize))?,)+
                    )),
                    other => Err(mismatch(&format!("a tuple of {N}"), other)),
                }
            }
        }
    )*};
}

tuple_tree! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
    (A 0, B 1, C 2, D 3, E 4)
    (A 0, B 1, C 2, D 3, E 4, F 5)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6)
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7)
}
